"""DI-engine's contexts (``ding.framework.context``) over dice's context.

env_step, env_episode, train_iter, total_step, last_eval_iter,
last_eval_value, eval_value, wandb_url, trajectories, episodes and
trajectory_end_idx are the node's dice context, which the C++ exchangers read
and write; any other attribute is a plain Python attribute. After every
iteration dice renews the context: DI-engine's kept fields (env_step,
env_episode, train_iter, last_eval_iter, last_eval_value, wandb_url) and
what ``keep()`` names stay, everything else is reset.

dice deviations: trajectories and episodes hold dice values (see
``dice.codec``), decoded when first read; a list changed in place is packed
again only if its length changed, so assign a new list
(``ctx.trajectories = [...]``) after editing items in place.
"""

import copy

from .. import _core


class Context(_core.ContextBase):
    """DI-engine's Context: attributes reset by every renew unless kept."""

    _defaults = {}

    def __init__(self, **kwargs):
        super().__init__()
        self.__dict__["_kept_keys"] = set()
        for key, value in kwargs.items():
            setattr(self, key, value)

    def keep(self, *keys):
        """Keeps the named Python attributes across renew()."""
        self._kept_keys.update(keys)

    def renew(self):
        """Starts the next iteration of a context that belongs to no node
        (a node's context is renewed by dice)."""
        self._renew_fields()
        self._on_renew()

    def _on_renew(self):
        kept_keys = self.__dict__.get("_kept_keys", set())
        kept = {k: v for k, v in self.__dict__.items() if k in kept_keys}
        self.__dict__.clear()
        self.__dict__.update(kept)
        self.__dict__["_kept_keys"] = kept_keys

    def __getattr__(self, name):
        # Only called when normal lookup fails: DI-engine's defaulted fields.
        defaults = type(self)._defaults
        if not name.startswith("_") and name in defaults:
            value = copy.copy(defaults[name])
            self.__dict__[name] = value
            return value
        raise AttributeError(
            f"'{type(self).__name__}' object has no attribute '{name}'")


class OnlineRLContext(Context):
    """DI-engine's OnlineRLContext."""

    _defaults = {
        "train_data": None,
        "train_output": None,
        "collect_kwargs": {},
        "obs": None,
        "action": None,
        "inference_output": None,
        "eval_output": None,
    }


__all__ = ["Context", "OnlineRLContext"]
