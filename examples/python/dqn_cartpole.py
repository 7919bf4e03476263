"""dqn_cartpole.py: distributed DQN on CartPole-v1 with dice as a DI-engine
pipeline (learner node 0, evaluator node 1, collectors), the C++ twin of
examples/dqn_cartpole. Writes OUT/metrics.jsonl, summary.json,
eval_return.png, latest.pt and best.pt (per node as a cluster); --help.

  python3 examples/python/dqn_cartpole.py [--seed=3 --collectors=4 ...]
  python3 -m dice.launch --workers 5 -- python3 examples/python/dqn_cartpole.py
"""

import argparse
import sys
import time

import numpy as np
import torch

import dice
from dice.framework import task
from dice.framework.context import OnlineRLContext
from dice.framework.middleware import ContextExchanger, ModelExchanger
from dice.rl import (CartPoleVecEnv, DQNLearner, NStep, RunOutputs, Window,
                     add_dqn_options, add_run_options, epsilon_greedy, fixed,
                     hidden_sizes, linear_epsilon, node_info, play_greedy,
                     q_network)


def parse(argv):
    """This example's options; the rest goes to dice (--collectors, ...)."""
    p = argparse.ArgumentParser(
        description="DQN on CartPole-v1 with dice", allow_abbrev=False,
        epilog="Other options go to dice: --collectors=N (3), --dice.*.")
    add_run_options(p, out="runs/python_dqn_cartpole", stop_value=475,
                    max_env_steps=500000)
    add_dqn_options(p)
    return p.parse_known_args(argv)


def learner(model, node):
    """Replay intake, gradient steps, metrics, progress and checkpoints."""
    dqn = DQNLearner.from_options(model, args, seed=args.seed * 31 + 17)
    lag, lag_total = Window(), Window()
    s = {"owed": 0.0, "loss": float("nan"), "t": 0.0, "env": 0, "it": 0,
         "saved": time.monotonic(), "ctx": None}

    def save():
        out.checkpoint(model, "latest", **s["ctx"], replay=len(dqn.buffer))

    def train(ctx):
        fresh = 0
        # One dict of stacked arrays per collector iteration.
        for batch in ctx.trajectories or []:
            behind = max(ctx.model_version, 0) - max(batch["model_version"], 0)
            lag.add(behind)
            lag_total.add(behind)
            fresh += dqn.add(batch)
        if dqn.ready():
            s["owed"] += fresh * args.updates_per_step
            n = int(s["owed"])
            s["owed"] -= n
            with out.cpu("learner"):
                for _ in range(n):
                    loss = dqn.update()
            if n:
                s["loss"] = loss.item()
            ctx.train_iter += n
        out.count(node, "learner", ctx)
        s["ctx"] = dict(env_step=ctx.env_step, train_iter=ctx.train_iter,
                        env_episode=ctx.env_episode)
        now, dt = out.seconds(), out.seconds() - s["t"]
        if dt >= 1.0:
            env_rate, it_rate = ((ctx.env_step - s["env"]) / dt,
                                 (ctx.train_iter - s["it"]) / dt)
            s.update(t=now, env=ctx.env_step, it=ctx.train_iter)
            out.metrics(node, "learner", train_iter=ctx.train_iter,
                        env_step=ctx.env_step, env_steps_per_s=env_rate,
                        train_iters_per_s=it_rate, loss=s["loss"],
                        buffer=len(dqn.buffer),
                        model_version=ctx.model_version, **lag.fields("lag"))
            out.progress(node, f"[dqn {now:.0f}s] iter {ctx.train_iter} | "
                         f"env {ctx.env_step} | {env_rate:.0f} env/s | "
                         f"{it_rate:.0f} it/s | eval {fixed(out.last_eval())}"
                         f" | lag {lag.text()}")
            lag.reset()
        if time.monotonic() - s["saved"] >= args.checkpoint_every:
            s["saved"] = time.monotonic()
            save()
        if args.max_env_steps and ctx.env_step >= args.max_env_steps:
            out.stop(node, "max_env_steps")
        elif args.max_seconds and now >= args.max_seconds:
            out.stop(node, "max_seconds")

    def at_exit():
        if s["ctx"] is not None:
            save()
        out.summarize(node, f"learner:           {dqn.updates} gradient "
                      f"steps, replay {len(dqn.buffer)}\npolicy lag:        "
                      f"{lag_total.text(2)} (min/mean/max model versions)\n",
                      **lag_total.fields("lag"))
    out.at_exit(node, at_exit)
    return train


def evaluator(model, node):
    """Greedy episodes every eval_every train_iters; best.pt; the stop."""
    evals = [0]

    def evaluate(ctx):
        out.count(node, "evaluator", ctx)
        if ctx.last_eval_iter >= 0 and \
                ctx.train_iter - ctx.last_eval_iter < args.eval_every:
            return
        evals[0] += 1
        with out.cpu("evaluator"):
            returns = play_greedy(model, CartPoleVecEnv, args.eval_episodes,
                                  seed=args.seed * 7 + 1000003 * evals[0])
        # Only a model the learner trained may solve the run.
        solved = np.mean(returns) >= args.stop_value and ctx.model_version > 0
        pt, best = out.record_eval(returns, ctx.env_step, ctx.train_iter,
                                   solved)
        ctx.last_eval_iter, ctx.last_eval_value = ctx.train_iter, pt.mean
        ctx.eval_value = pt.mean
        out.metrics(node, "evaluator", **pt.fields(),
                    model_version=ctx.model_version)
        if best:
            out.checkpoint(model, "best", eval_return=pt.mean,
                           env_step=pt.env_step, train_iter=pt.train_iter)
        if out.distributed:  # no learner here to show the evals
            out.progress(node, f"[dqn {pt.seconds:.0f}s] eval {pt.mean:.1f} "
                         f"at iter {pt.train_iter}, env {pt.env_step}")
        if solved:
            out.stop(node, "stop_value")
    return evaluate


def collector(model, node, collectors):
    """Epsilon-greedy steps of a batch of envs; n-step transitions."""
    envs = CartPoleVecEnv(args.envs_per_collector,
                          seed=args.seed * 7919 + node)
    nstep = NStep(envs.num_envs, args.nstep, args.gamma)
    rng = np.random.default_rng(args.seed * 104729 + node)
    epsilon = linear_epsilon(1.0, 0.05, args.epsilon_decay)
    s = {"returns": [], "t": -1.0}

    def collect(ctx):
        # Exploration follows the global env step: the others step alike.
        eps = epsilon(ctx.env_step * collectors)
        for _ in range(args.steps_per_collect):
            obs = envs.obs
            with out.cpu("inference"):
                actions = epsilon_greedy(model, obs, eps, rng)
            with out.cpu("env"):
                _, reward, term, trunc, info = envs.step(actions)
            nstep.add(obs, actions, reward, info["final_obs"], term, trunc)
            s["returns"] += info["episode_return"].tolist()
            ctx.env_episode += len(info["episode_return"])
        batch = nstep.take()
        batch["model_version"] = ctx.model_version
        ctx.trajectories = [batch]
        ctx.env_step += args.steps_per_collect * envs.num_envs
        out.count(node, "collector", ctx)
        if out.seconds() - s["t"] >= 1.0:
            s["t"] = out.seconds()
            out.metrics(node, "collector", env_step=ctx.env_step,
                        env_episode=ctx.env_episode,
                        train_return_mean=np.mean(s["returns"] or [np.nan]),
                        epsilon=eps, model_version=ctx.model_version,
                        train_iter=ctx.train_iter)
            s["returns"] = []
    return collect


def main():
    """One node: dice.run calls it for every node of this process."""
    node, workers, _ = node_info()
    out.open()
    # Same seed, same weights on every node.
    model = q_network(4, 2, hidden_sizes(args), seed=args.seed)
    with task.start(ctx=OnlineRLContext()):
        task.use(ContextExchanger(skip_n_iter=1))
        task.use(ModelExchanger(model))
        if task.has_role(task.role.LEARNER):
            task.use(learner(model, node))
        elif task.has_role(task.role.EVALUATOR):
            task.use(evaluator(model, node))
        else:
            task.use(collector(model, node, max(workers - 2, 1)))
        task.run()


if __name__ == "__main__":
    args, dice_args = parse(sys.argv[1:])
    torch.set_num_threads(1)  # tiny networks; the nodes are the parallelism
    out = RunOutputs.from_options(args, title="DQN CartPole-v1 (Python)")
    rc = 1
    try:
        rc = dice.run(main, dice_args)
    finally:
        out.finish(failed=rc != 0)
    sys.exit(rc)
