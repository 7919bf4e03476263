"""The Python twin of dice_interop_node (tests/support/programs/
interop_node.cpp): same model (torch.nn.Linear(4, 2)), same context items
({"obs": float32[4], "src": str}), same log lines, so Python and C++ nodes
of one cluster can stand in for each other.

    interop_node.py [--iterations=N] [dice options]   (N = 0: until stopped)
"""

import argparse
import sys

import numpy as np
import torch

import dice
from dice.framework import task
from dice.framework.middleware import ContextExchanger, ModelExchanger


def main(iterations):
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    node = task.router.node_id
    with task.start():
        task.use(ContextExchanger())
        task.use(ModelExchanger(net))
        if task.has_role(task.role.LEARNER):
            def learn(ctx):
                items = ctx.trajectories or []
                src = [x["src"] for x in items]
                for x in items:
                    assert x["obs"].dtype == np.float32 and x["obs"].shape == (4,)
                print(f"[node {node}] learner got {len(items)} items (python "
                      f"{src.count('python')}, cpp {src.count('cpp')})",
                      flush=True)
                with torch.no_grad():
                    net.bias.add_(1.0)
                ctx.train_iter += 1
            task.use(learn)
            if iterations > 0:
                task.run(max_step=iterations)
        elif task.has_role(task.role.EVALUATOR):
            task.use(lambda ctx: print(
                f"[node {node}] evaluator bias {float(net.bias[0])} "
                f"train_iter {ctx.train_iter}", flush=True))
        else:
            def collect(ctx):
                print(f"[node {node}] collector bias {float(net.bias[0])}",
                      flush=True)
                ctx.trajectories = [{"obs": np.full(4, node, np.float32),
                                     "src": "python"}]
                ctx.env_step += 1
            task.use(collect)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--iterations", type=int, default=5)
    args, rest = parser.parse_known_args()
    sys.exit(dice.run(lambda: main(args.iterations), rest))
