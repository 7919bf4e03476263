"""The Python twin of dice_interop_node (tests/support/programs/
interop_node.cpp): same model (torch.nn.Linear(4, 2)), same context items
({"obs": float32[4], "src": str}), same log lines, so Python and C++ nodes
of one cluster can stand in for each other.

    interop_node.py [--iterations=N] [dice options]   (N = 0: until stopped)

bench/run times it (--quiet --hidden=K: model rounds against the C++ twin;
--items=B --no-model: transitions/s of DI-engine-shaped context).
"""

import argparse
import json
import sys
import time

import numpy as np
import torch

import dice
from dice.framework import task
from dice.framework.middleware import ContextExchanger, ModelExchanger


WARMUP = 2  # learner iterations before the clock starts (--quiet)


def transitions(node, n, obs):
    """n transitions as DI-engine's collectors send them: one dict each."""
    shape, dtype = {"cartpole": ((4,), np.float32),
                    "atari": ((4, 84, 84), np.uint8)}[obs]
    o = np.full(shape, node % 200, dtype)
    return [{"obs": o, "next_obs": o, "action": np.int64(1),
             "reward": np.float32(1.0), "done": False, "src": "python"}
            for _ in range(n)]


def main(args):
    torch.manual_seed(0)
    net = (torch.nn.Linear(args.hidden, args.hidden) if args.hidden
           else torch.nn.Linear(4, 2))
    node = task.router.node_id
    say = (lambda *a, **k: None) if args.quiet else print
    with task.start():
        task.use(ContextExchanger())
        if not args.no_model:
            task.use(ModelExchanger(net))
        if task.has_role(task.role.LEARNER):
            clock = {"items": 0}
            # --need-sources: the run goes on past --iterations until items
            # of every named source arrived (a late collector's first delta
            # must not depend on how fast the others' deltas are).
            need = set(args.need_sources.split(",")) if args.need_sources else set()
            seen = set()
            task.on("tick", lambda *a: print(f"[node {node}] tick {a}",
                                             flush=True))

            def learn(ctx):
                items = ctx.trajectories or []
                if ctx.total_step == WARMUP:
                    clock["t0"] = time.perf_counter()
                elif ctx.total_step > WARMUP:
                    clock["items"] += len(items)
                if not args.quiet:
                    src = [x["src"] for x in items]
                    for x in items:
                        assert x["obs"].dtype == np.float32
                        assert x["obs"].shape == (4,)
                    print(f"[node {node}] learner got {len(items)} items "
                          f"(python {src.count('python')}, cpp "
                          f"{src.count('cpp')})", flush=True)
                seen.update(x["src"] for x in items)
                with torch.no_grad():
                    net.bias.add_(1.0)
                ctx.train_iter += 1
                if need and ctx.total_step + 1 >= args.iterations and need <= seen:
                    task.finish = "max_step"
                if args.quiet and ctx.total_step == args.iterations - 1:
                    seconds = time.perf_counter() - clock["t0"]
                    print(json.dumps({"bench": "learner",
                                      "rounds": args.iterations - 1 - WARMUP,
                                      "seconds": seconds,
                                      "items": clock["items"]}), flush=True)
            task.use(learn)
            if args.iterations > 0:
                task.run(max_step=sys.maxsize if need else args.iterations)
        elif task.has_role(task.role.EVALUATOR):
            initial = float(net.bias[0])

            def watch(ctx):
                # As the C++ twin: --quiet reads no bias unless it must.
                if args.quiet and not args.finish_when_trained:
                    return
                bias = float(net.bias[0])
                say(f"[node {node}] evaluator bias {bias} "
                    f"train_iter {ctx.train_iter}", flush=True)
                # --finish-when-trained: this node ends the run once it
                # holds a model the learner trained N times, so the run
                # cannot end before a slow-starting evaluator iterated.
                if args.finish_when_trained and bias > initial + args.finish_when_trained - 0.5:
                    task.finish = "evaluated"
            task.use(watch)
        else:
            def collect(ctx):
                if not args.quiet:
                    print(f"[node {node}] collector bias {float(net.bias[0])}",
                          flush=True)
                if args.fail_once and task.restarts == 0 and ctx.total_step == 1:
                    raise RuntimeError(f"node {node} fails once")
                if args.items:
                    ctx.trajectories = transitions(node, args.items, args.obs)
                else:
                    ctx.trajectories = [{"obs": np.full(4, node, np.float32),
                                         "src": "python"}]
                ctx.env_step += len(ctx.trajectories)
            task.use(collect)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=0,
                        help="model: Linear(hidden, hidden) (0: Linear(4, 2))")
    parser.add_argument("--items", type=int, default=0,
                        help="collectors send this many transitions each")
    parser.add_argument("--obs", choices=["cartpole", "atari"],
                        default="cartpole")
    parser.add_argument("--no-model", action="store_true",
                        help="no ModelExchanger (context only)")
    parser.add_argument("--finish-when-trained", type=int, default=0,
                        help="evaluator: finish the run once the model was "
                             "trained this many times (0: never)")
    parser.add_argument("--need-sources", default="",
                        help="learner: go on past --iterations until items "
                             "from each of these sources (e.g. python,cpp)")
    parser.add_argument("--fail-once", action="store_true",
                        help="collectors raise in their first incarnation")
    parser.add_argument("--quiet", action="store_true",
                        help="no line per iteration; the learner prints its "
                             "timing as JSON at the end")
    args, rest = parser.parse_known_args()
    sys.exit(dice.run(lambda: main(args), rest))
