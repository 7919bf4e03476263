"""DI-engine's distributed middleware (``ding.framework.middleware``) as
dice's C++ exchangers. Each call makes one instance for the node main() is
building; ``task.use`` it once.
"""

import math

from .. import _core


def ContextExchanger(skip_n_iter=1, storage_loader=None, *, max_in_flight=32,
                     timeout=60.0):
    """Exchanges env_step, env_episode, train_iter, trajectories, episodes and
    trajectory_end_idx between nodes (docs/exchangers.md).

    dice deviations (its fixes): delivery is exactly-once with backpressure
    (a collector keeps at most ``max_in_flight`` unacknowledged deltas, 32
    as in C++, and resends them; 0 gives DI-engine's fire-and-forget), a
    learner waits at most ``timeout`` seconds per iteration instead of
    forever, and finish ends every wait.
    """
    return _core.context_exchanger(int(skip_n_iter), storage_loader,
                                   int(max_in_flight), float(timeout))


def ModelExchanger(model, model_loader=None, *, timeout=60.0):
    """Learners send ``model``'s state_dict after every iteration; other nodes
    wait up to ``timeout`` seconds for a newer one before each iteration but
    the first and load it.

    dice deviations: a snapshot older than the loaded one, or one that does
    not fit the model (names, shapes, dtypes), is dropped with a log line and
    leaves the model untouched.
    """
    return _core.model_exchanger(model, model_loader, float(timeout))


def PeriodicalModelExchanger(model, mode, period=1, delay_toleration=math.inf,
                             stale_toleration=1, event_name="model_exchanger",
                             model_loader=None, *, timeout=60.0):
    """DI-engine's PeriodicalModelExchanger: ``mode`` "send" sends every
    ``period`` iterations, "receive" loads models at most ``delay_toleration``
    seconds old and uses one for at most ``stale_toleration`` iterations.

    dice deviations: a bad ``mode`` raises ValueError here (DI-engine on the
    first call); a cached model that is not newer or too old is dropped instead
    of retried forever; a stored model keeps its id and time.
    """
    return _core.periodical_model_exchanger(
        model, str(mode), int(period), float(delay_toleration),
        int(stale_toleration), str(event_name), model_loader, float(timeout))


__all__ = ["ContextExchanger", "ModelExchanger", "PeriodicalModelExchanger"]
