"""DI-engine's ``task`` and ``Parallel`` (``ding.framework``) on dice.

``dice.run(main)`` (or ``Parallel.runner(...)(main)``) calls ``main()`` once
for every node this process runs, with ``task`` standing for that node; inside
a middleware, ``task`` stands for the node running it. The nodes are dice
nodes: role actors of this process (the default), or one node of a cluster
started by ``python3 -m dice.launch``, ``srun`` or ``--dice.*`` options.

dice deviations:
- ``task.run(max_step)`` returns at once: dice runs the pipeline after main()
  returns (main builds, dice runs). Code after ``task.run`` runs before the
  first iteration.
- Roles come from dice's options (node 0 learner, node 1 evaluator, then
  collectors; ``--learners``, dice-launch); ``task.add_role`` accepts the
  role the node has and refuses another.
- ``task.emit`` sends what ``dice.codec`` can carry, never a pickle;
  ``task.on`` is called while main() builds the node. ``once``, ``off`` and
  ``wait_for`` are not offered: wait inside middleware with dice's
  exchangers.
- Async mode (``async_mode``, ``n_async_workers``) is accepted and ignored:
  every node's pipeline runs on its own actor already.
"""

import enum
import contextlib
import sys

from .. import _core


class Role(str, enum.Enum):
    """DI-engine's task.role."""

    LEARNER = "learner"
    COLLECTOR = "collector"
    EVALUATOR = "evaluator"
    FETCHER = "fetcher"


class _Router:
    """What DI-engine's middleware asks of task.router."""

    def __init__(self, node):
        self._node = node

    @property
    def node_id(self):
        return self._node.id

    @property
    def is_active(self):
        return True


class _Void:
    """task.void(): a middleware task.use skips."""


_VOID = _Void()


def _name_of(fn):
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return str(name)


class Task:
    """DI-engine's task for the node main() builds or a middleware runs on."""

    role = Role

    def __init__(self):
        self._local = {}

    def _node(self):
        node = _core.current()
        if node is None:
            raise RuntimeError(
                "dice's task stands for a node: use it inside main() (called "
                "by dice.run or Parallel.runner) or inside a middleware")
        return node

    @contextlib.contextmanager
    def start(self, async_mode=False, n_async_workers=3, ctx=None,
              labels=None):
        """Sets the node's context (``ctx``, by default an OnlineRLContext)."""
        node = self._node()
        if ctx is not None:
            node.set_ctx(ctx)
        yield self

    def use(self, fn, lock=False):
        """Appends a middleware: a dice exchanger, a function of ctx, or a
        generator function of ctx (before its yield in order, after it in
        reverse)."""
        node = self._node()
        if fn is _VOID:
            return self
        if isinstance(fn, _core.Middleware):
            node.use_cpp(fn)
        elif callable(fn):
            node.use_python(fn, _name_of(fn))
        else:
            raise TypeError(f"task.use takes a middleware, not {fn!r}")
        return self

    def run(self, max_step=sys.maxsize):
        """Sets the node's iterations (dice runs them after main returns)."""
        self._node().set_max_step(0 if max_step >= 2**62 else int(max_step))

    def void(self):
        """A middleware task.use skips (DI-engine's task.void())."""
        return _VOID

    def has_role(self, role):
        return self._node().has_role(Role(role).value)

    def add_role(self, role):
        """Accepts the role dice gave this node; refuses another."""
        node = self._node()
        role = Role(role)
        if not node.has_role(role.value):
            raise ValueError(
                f"node {node.id} is a {'/'.join(node.roles)}: dice assigns "
                f"roles by its options (node 0 learner, node 1 evaluator, "
                f"then collectors; --learners), not by add_role({role.name})")

    @property
    def roles(self):
        return {Role(r) for r in self._node().roles}

    @property
    def router(self):
        return _Router(self._node())

    @property
    def workers(self):
        """Nodes in the cluster (dice's; DI-engine has no such field)."""
        return self._node().workers

    @property
    def distributed(self):
        """This process is one node of a multi-process cluster."""
        return self._node().distributed

    @property
    def restarts(self):
        """Restarts of this node so far (its process and its role actor)."""
        return self._node().restarts

    @property
    def ctx(self):
        return self._node().ctx

    @property
    def finish(self):
        """True once the cluster finishes (or this node asked to)."""
        return self._node().finished

    @finish.setter
    def finish(self, value):
        """True ends the run after this iteration; a str does too and is the
        reason the nodes' reports give (dice's addition)."""
        if value:
            self._node().request_finish(
                value if isinstance(value, str) else "task.finish")

    def emit(self, event, *args, only_remote=False, only_local=False):
        """Sends args (dice values) to the other nodes' handlers of event
        and, unless only_remote, to this node's own."""
        node = self._node()
        if not only_local:
            node.emit_remote(event, tuple(args))
        if not only_remote:
            for fn in self._local.get((node.id, node.restarts, event), []):
                fn(*args)

    def on(self, event, fn):
        """Calls fn(*args) for every emit of event (call while building)."""
        node = self._node()
        node.on(event, fn)
        self._local.setdefault((node.id, node.restarts, event), []).append(fn)


task = Task()


def run(main, argv=None):
    """Runs main() once per node with dice's options ``argv`` (default:
    ``sys.argv[1:]``: --collectors, --learners, --dice.*); returns the exit
    code, or raises the first exception of a node that failed."""
    args = sys.argv[1:] if argv is None else list(argv)
    program = sys.argv[0] if sys.argv and sys.argv[0] else "python"
    return _core.run(main, [program] + [str(a) for a in args])


class Parallel:
    """DI-engine's Parallel.runner on dice."""

    @staticmethod
    def runner(n_parallel_workers=1, mq_type="nng", attach_to=None,
               protocol="ipc", address=None, ports=None, topology="mesh",
               labels=None, node_ids=None, auto_recover=False,
               max_retries=float("inf"), redis_host=None, redis_port=None,
               startup_interval=1, argv=None):
        """Returns a function that runs main() on dice.

        Under dice.launch or srun the process is one node and the options
        come from the launcher. Otherwise the nodes run in this process: 1
        learner, 1 evaluator and n_parallel_workers - 2 collectors (at least
        1). auto_recover restarts a failed node up to max_retries times (3
        when infinite). mq_type, protocol, address, ports, topology,
        labels, node_ids, redis_* and startup_interval are DI-engine's
        transport settings; dice's are its --dice.* options, taken from
        ``argv`` (default ``sys.argv[1:]``; a script with options of its own
        passes what its parser left).
        """
        options = list(sys.argv[1:] if argv is None else argv)

        def _runner(main, *args, **kwargs):
            argv = list(options)
            if not any(a.startswith("--dice.node-id") for a in argv):
                argv.append(f"--collectors={max(n_parallel_workers - 2, 1)}")
            if auto_recover:
                retries = 3 if max_retries == float("inf") else int(max_retries)
                argv.append(f"--dice.max-restarts={retries}")
            return run(lambda: main(*args, **kwargs), argv)

        return _runner
