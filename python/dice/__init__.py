"""dice for Python: DI-engine's distributed middleware on dice's C++ core.

A DI-engine pipeline ports by changing its imports (docs/python.md)::

    from dice.framework import task, Parallel
    from dice.framework.context import OnlineRLContext
    from dice.framework.middleware import ContextExchanger, ModelExchanger

Nothing is pickled: trajectories, episodes and events travel in dice's value
codec (``dice.codec``), models as state_dict snapshots.
"""

from . import codec
from .framework import OnlineRLContext, Parallel, Role, run, task

__all__ = ["codec", "task", "Parallel", "Role", "OnlineRLContext", "run"]
