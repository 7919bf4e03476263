"""What an RL run writes to its output folder, as dice's C++ examples do
(include/dice/rl/outputs.hpp), shared by every node of a process:
metrics.jsonl (one JSON line per event), the live progress line on stderr,
the evaluation history with eval_return.png (gnuplot), checkpoints that
torch.load reads (state_dicts), and at the end summary.json and a printed
summary. As one node of a cluster (dice.launch) a process writes
metrics-ID.jsonl and summary-ID.json instead; the evaluator's writes the plot.

    out = RunOutputs("runs/x", title="DQN CartPole-v1", stop_value=475)
    def main():                 # dice.run calls it once per node
        out.open()              # the first call creates OUT
        ...
    try:
        rc = dice.run(main)
    finally:
        out.finish(failed=rc != 0)
"""

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import threading
import time
from collections import namedtuple

from ..framework import task

class EvalPoint(namedtuple("EvalPoint",
                           "env_step seconds train_iter mean min max")):
    """One evaluation: counters, seconds since start, returns."""

    __slots__ = ()

    def fields(self):
        """The evaluation as fields of a metrics line."""
        return dict(train_iter=self.train_iter, env_step=self.env_step,
                    eval_return_mean=self.mean, eval_return_min=self.min,
                    eval_return_max=self.max)


def node_info():
    """(node id, nodes in the cluster, distributed) of the node whose main()
    or middleware runs on this thread."""
    return task.router.node_id, task.workers, task.distributed


def number(x):
    """x as JSON takes it: NaN and infinities become None."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _plain(x):
    # json.dumps's default: numpy scalars and 0-d tensors as Python numbers.
    if hasattr(x, "item"):
        return number(x.item())
    raise TypeError(f"{type(x).__name__} is not JSON serializable")


def fixed(x, digits=1):
    """x with `digits` decimals, '-' for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:.{digits}f}"


def write_json(path, obj):
    """Writes obj as one JSON line via a temporary file and a rename."""
    tmp = f"{path}.tmp{threading.get_ident()}"
    with open(tmp, "w") as f:
        f.write(json.dumps(obj, default=_plain) + "\n")
    os.replace(tmp, path)


def read_json(path):
    """The JSON object in path ({} when missing or not an object)."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, ValueError):
        return {}
    return obj if isinstance(obj, dict) else {}


def save_state_dict(module, path):
    """Writes module's state_dict where torch.load reads it, via a
    temporary file and a rename."""
    import torch
    tmp = f"{path}.tmp{threading.get_ident()}"
    torch.save({k: v.detach().clone() for k, v in module.state_dict().items()},
               tmp)
    os.replace(tmp, path)


def write_eval_plot(out, evals, title, stop_value=math.inf, png=True):
    """Writes OUT/eval_return.dat and, with gnuplot, OUT/eval_return.png
    (mean and min-max band over env steps and wall time); returns the png's
    path, or None with a note on stderr when there is no plot."""
    dat = os.path.join(out, "eval_return.dat")
    with open(dat, "w") as f:
        f.write("# env_step seconds train_iter mean min max\n")
        for e in evals:
            f.write(f"{e.env_step} {e.seconds} {e.train_iter} {e.mean} "
                    f"{e.min} {e.max}\n")
    if not png or not evals:
        return None
    if shutil.which("gnuplot") is None:
        print(f"gnuplot not found: skipped eval_return.png (data in {dat})",
              file=sys.stderr)
        return None
    png_path = os.path.join(out, "eval_return.png")

    def q(s):
        return "'" + str(s).replace("'", "''") + "'"

    s = ("if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) "
         "{ set terminal pngcairo size 1200,450 } "
         "else { set terminal png size 1200,450 }\n"
         f"set output {q(png_path)}\n"
         f"set multiplot layout 1,2 title "
         f"{q(title + ': greedy eval return (mean, min-max)')}\n"
         "set grid\nset key bottom right\n")
    for column, label in ((1, "env steps"), (2, "wall time (s)")):
        s += (f"set xlabel '{label}'\nset ylabel 'return'\n"
              + ("set format x '%.0s%c'\n" if column == 1
                 else "set format x '%g'\n")
              + f"plot {q(dat)} using {column}:5:6 with filledcurves "
              f"lc rgb '#cce0ff' title 'min-max', '' using {column}:4 with "
              "linespoints pt 7 ps 0.5 title 'mean'")
        if math.isfinite(stop_value) and abs(stop_value) < 1e15:
            s += f", {stop_value} dt 2 lc rgb 'red' title 'stop value'"
        s += "\n"
    s += "unset multiplot\n"
    done = subprocess.run(["gnuplot"], input=s, text=True,
                          capture_output=True)
    if done.returncode != 0:
        print(f"gnuplot failed ({done.stderr.strip()}): no {png_path}",
              file=sys.stderr)
        return None
    return png_path


class Window:
    """Min, mean and max of the values added since the last reset."""

    def __init__(self):
        self.reset()

    def reset(self):
        """Forgets the values."""
        self.count, self.sum, self.min, self.max = 0, 0.0, math.inf, -math.inf

    def add(self, x):
        """Adds one value."""
        self.count += 1
        self.sum += x
        self.min = min(self.min, x)
        self.max = max(self.max, x)

    def fields(self, prefix):
        """{prefix_min, prefix_mean, prefix_max} (None when empty)."""
        empty = self.count == 0
        return {f"{prefix}_min": None if empty else self.min,
                f"{prefix}_mean": None if empty else self.sum / self.count,
                f"{prefix}_max": None if empty else self.max}

    def text(self, digits=1):
        """'min/mean/max' ('-' when empty)."""
        f = self.fields("x")
        return "/".join(fixed(f[k], d) for k, d in
                        (("x_min", 0), ("x_mean", digits), ("x_max", 0)))


class ProgressLine:
    """The live progress line on stderr: redrawn in place on a terminal, a
    line per update otherwise; each node updates at most once per
    `interval` seconds (and the nodes of a process share the line)."""

    def __init__(self, enabled=True, interval=1.0, stream=None):
        self.enabled = enabled
        self.interval = interval
        self.stream = stream or sys.stderr
        self.tty = enabled and self.stream.isatty()
        self._last = {}
        self._shown = False
        self._lock = threading.Lock()

    def show(self, node, text, force=False):
        """Shows node's text unless that node showed one less than
        `interval` seconds ago (or force); returns whether it did."""
        if not self.enabled:
            return False
        now = time.monotonic()
        with self._lock:
            if not force and now - self._last.get(node, -math.inf) < \
                    self.interval:
                return False
            self._last[node] = now
            self.stream.write(f"\r\033[K{text}" if self.tty else text + "\n")
            self.stream.flush()
            self._shown = True
        return True

    def close(self):
        """Ends the line on a terminal (dice's last log lines and the
        summary start below it) and shows nothing more."""
        with self._lock:
            if self.tty and self._shown:
                self.stream.write("\n")
                self.stream.flush()
            self._shown = False
            self.enabled = False


def add_run_options(parser, out, stop_value=math.inf, max_env_steps=0):
    """Adds the options every RL example has (as dice's C++ run_config):
    --out, --seed, --stop-value, --max-env-steps, --max-seconds,
    --envs-per-collector, --steps-per-collect, --eval-every,
    --eval-episodes, --checkpoint-every, --no-progress, --no-plot;
    returns the parser."""
    a = parser.add_argument
    a("--out", default=out, help="output folder (%(default)s)")
    a("--seed", type=int, default=0, help="seeds nets, envs and sampling")
    a("--stop-value", type=float, default=stop_value,
      help="greedy eval mean that solves the run (%(default)s)")
    a("--max-env-steps", type=int, default=max_env_steps,
      help="the learner ends the run after these env steps (0: never)")
    a("--max-seconds", type=float, default=0,
      help="the learner ends the run after these seconds (0: never)")
    a("--envs-per-collector", type=int, default=8,
      help="envs each collector steps as one batch")
    a("--steps-per-collect", type=int, default=16,
      help="steps of every env per collector iteration")
    a("--eval-every", type=int, default=100,
      help="train_iters between evaluations")
    a("--eval-episodes", type=int, default=10,
      help="greedy episodes per evaluation")
    a("--checkpoint-every", type=float, default=10,
      help="seconds between the learner's checkpoints (latest.pt)")
    a("--no-progress", action="store_true", help="no progress line")
    a("--no-plot", action="store_true", help="no eval_return.png")
    return parser


class RunOutputs:
    """A process's outputs (see the module's doc): open() in every main(),
    metrics, progress and evaluations from the middleware, finish() after
    dice.run returns."""

    def __init__(self, out, title="dice", stop_value=math.inf, progress=True,
                 plot=True):
        self.out = out
        self.title = title
        self.stop_value = float(stop_value)
        self.plot = plot
        self.progress_line = ProgressLine(progress)
        self.node = None
        self.distributed = False
        self._start = time.monotonic()
        self._cpu_start = time.process_time()
        self._lock = threading.RLock()
        self._metrics = None
        self._evals = []
        self._best = -math.inf
        self._solve = None
        self._counters = {}
        self._extra = {}
        self._cpu = {}
        self._exit = {}
        self._stop_reason = None

    @classmethod
    def from_options(cls, opts, title):
        """The outputs add_run_options' settings (argparse namespace) ask."""
        return cls(opts.out, title=title, stop_value=opts.stop_value,
                   progress=not opts.no_progress, plot=not opts.no_plot)

    def open(self):
        """Creates OUT and the metrics file on the first call of any node
        of this process (call it in main()); returns self."""
        from .. import _core
        node, _, distributed = node_info()
        with self._lock:
            if self._metrics is not None:
                return self
            os.makedirs(self.out, exist_ok=True)
            self.node, self.distributed = node, distributed
            name = f"metrics-{node}.jsonl" if distributed else "metrics.jsonl"
            # A node dice-launch started again appends to its metrics.
            again = distributed and task.restarts > 0
            self._metrics = open(self.path(name), "a" if again else "w")
            self._start = time.monotonic()
            self._cpu_start = time.process_time()
        return self

    def path(self, name):
        """OUT/name."""
        return os.path.join(self.out, name)

    def checkpoint(self, model, name, **fields):
        """OUT/name.pt (model's state_dict, torch.load reads it) and
        OUT/name.json (fields): a resumable point or the best model."""
        save_state_dict(model, self.path(name + ".pt"))
        write_json(self.path(name + ".json"), fields)

    def seconds(self):
        """Seconds since open() (about the start of the run)."""
        return time.monotonic() - self._start

    def metrics(self, node, role, **fields):
        """Appends one line {time, node, role, **fields} to the metrics."""
        line = {"time": self.seconds(), "node": node, "role": role}
        line.update({k: number(_plain(v) if hasattr(v, "item") else v)
                     for k, v in fields.items()})
        text = json.dumps(line, default=_plain) + "\n"
        with self._lock:
            if self._metrics is not None:
                self._metrics.write(text)
                self._metrics.flush()

    def progress(self, node, text, force=False):
        """Shows text as the progress line (throttled per node)."""
        return self.progress_line.show(node, text, force)

    def count(self, node, role, ctx):
        """Notes a node's counters (env_step, train_iter, env_episode,
        iterations) for the summary; call it every iteration."""
        with self._lock:
            self._counters[node] = {
                "role": role, "env_step": ctx.env_step,
                "train_iter": ctx.train_iter, "env_episode": ctx.env_episode,
                "iterations": ctx.total_step + 1}

    def record_eval(self, returns, env_step, train_iter, solved):
        """Records an evaluation's returns; returns (EvalPoint, new best)."""
        returns = [float(r) for r in returns]
        pt = EvalPoint(env_step, self.seconds(), train_iter,
                       sum(returns) / max(len(returns), 1),
                       min(returns, default=math.nan),
                       max(returns, default=math.nan))
        with self._lock:
            self._evals.append(pt)
            best = pt.mean > self._best
            if best:
                self._best = pt.mean
            if solved and self._solve is None:
                self._solve = pt
        return pt, best

    def last_eval(self):
        """The last evaluation's mean (NaN before the first)."""
        with self._lock:
            return self._evals[-1].mean if self._evals else math.nan

    def evals(self):
        """Every evaluation so far (EvalPoints)."""
        with self._lock:
            return list(self._evals)

    def summarize(self, node, text="", **fields):
        """Adds what node knows to the summary: JSON fields and lines of
        the printed summary."""
        with self._lock:
            fs, txt = self._extra.get(node, ({}, ""))
            fs.update(fields)
            self._extra[node] = (fs, txt + text)

    @contextlib.contextmanager
    def cpu(self, component):
        """Adds the thread CPU time of the with-block to component ("env",
        "inference", "learner", "evaluator") for the summary."""
        t = time.thread_time()
        try:
            yield
        finally:
            dt = time.thread_time() - t
            with self._lock:
                self._cpu[component] = self._cpu.get(component, 0.0) + dt

    def at_exit(self, key, fn):
        """finish() calls fn() first (one per key: a restarted node's
        replaces the one before), e.g. a learner's last checkpoint."""
        with self._lock:
            self._exit[key] = fn

    def stop(self, node, reason):
        """Ends the run (task.finish on this node's middleware) and notes
        the reason for the summary, unless the run is ending already."""
        with self._lock:
            if self._stop_reason is None:
                self._stop_reason = f"{reason} (node {node})"
        self.progress_line.close()
        task.finish = reason  # the nodes' reports give it too

    def summary(self, failed=False):
        """The summary finish() writes, as a dict."""
        from .. import _core
        with self._lock:
            reps = self._counters
            main = next((n for n, c in sorted(reps.items())
                         if c["role"] == "learner"), min(reps, default=None))
            rep = reps.get(main, {"role": "", "env_step": 0, "train_iter": 0,
                                  "iterations": 0})
            secs = max(self.seconds(), 1e-9)
            reason = self._stop_reason
            if reason is None:
                sig = _core.stop_signal()
                reason = (f"signal {sig}" if sig else "failed" if failed
                          else "finish from another node")
            j = {}
            if self.distributed:
                j.update(node=main, roles=rep["role"])
            j.update(
                solved=self._solve is not None,
                solve_seconds=self._solve.seconds if self._solve else -1,
                solve_env_steps=self._solve.env_step if self._solve else -1,
                best_eval=number(self._best),
                last_eval=number(self._evals[-1].mean if self._evals
                                 else math.nan),
                evaluations=len(self._evals),
                env_steps=rep["env_step"], train_iters=rep["train_iter"],
                learner_iterations=(rep["iterations"]
                                    if rep["role"] == "learner" else 0),
                seconds=secs,
                env_steps_per_s=rep["env_step"] / secs,
                train_iters_per_s=rep["train_iter"] / secs)
            for fields, _ in self._extra.values():
                j.update(fields)
            cores = os.cpu_count() or 1
            process = time.process_time() - self._cpu_start
            c = dict(self._cpu)
            c["dice_and_rest"] = max(0.0, process - sum(c.values()))
            c.update(process=process, idle=max(0.0, secs * cores - process),
                     cores=cores)
            j.update(cpu_seconds=c, stop_reason=reason, failed=bool(failed))
            return j

    def finish(self, failed=False):
        """After dice.run returned: runs the at_exit functions, writes the
        plot and summary.json (summary-ID.json), prints the summary and
        returns it."""
        if self._metrics is None:
            return None
        with self._lock:
            exits = list(self._exit.values())
            self._exit.clear()
        for fn in exits:
            fn()
        self.progress_line.close()
        j = self.summary(failed)
        evals = self.evals()
        if evals or not self.distributed:
            write_eval_plot(self.out, evals, self.title, self.stop_value,
                            self.plot)
        write_json(self.path(f"summary-{self.node}.json" if self.distributed
                             else "summary.json"), j)
        with self._lock:
            self._metrics.close()
            self._metrics = None
            texts = "".join(t for _, t in self._extra.values())
        lines = [f"== {self.title} summary"
                 + (f", node {j['node']} ({j['roles']})"
                    if self.distributed else "") + " =="]
        if evals or not self.distributed:
            solved = (f"yes, after {j['solve_seconds']:.2f} s and "
                      f"{j['solve_env_steps']} env steps" if j["solved"]
                      else "no")
            lines += [f"solved:            {solved}",
                      f"best / last eval:  {fixed(j['best_eval'])} / "
                      f"{fixed(j['last_eval'])} ({j['evaluations']} "
                      "evaluations)"]
        lines += [f"stop reason:       {j['stop_reason']}",
                  f"env steps:         {j['env_steps']} "
                  f"({j['env_steps_per_s']:.0f}/s)"]
        c = j["cpu_seconds"]
        total = j["seconds"] * c["cores"]
        shares = ", ".join(
            f"{'dice' if k == 'dice_and_rest' else k} "
            f"{100 * c[k] / total:.0f}%"
            for k in ("env", "inference", "learner", "evaluator",
                      "dice_and_rest", "idle") if k in c)
        print("\n".join(lines) + "\n" + texts
              + f"cpu:               {c['cores']} cores x "
              f"{j['seconds']:.1f} s: {shares}\n"
              f"wall time:         {j['seconds']:.2f} s\n"
              f"outputs in {self.out}", flush=True)
        return j


__all__ = ["RunOutputs", "add_run_options", "ProgressLine", "Window",
           "EvalPoint", "node_info", "number", "fixed", "write_json",
           "read_json", "save_state_dict", "write_eval_plot"]
