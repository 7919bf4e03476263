"""``ding.framework`` for dice: task, Parallel and the contexts."""

from .context import Context, OnlineRLContext
from .task import Parallel, Role, Task, run, task

__all__ = ["task", "Task", "Role", "Parallel", "run", "Context",
           "OnlineRLContext"]
