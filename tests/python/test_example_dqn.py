"""examples/python/dqn_cartpole.py and the dice.rl parts it is made of: the
numpy CartPole-v1 (Gymnasium's dynamics, seeding, termination, the 500-step
limit), n-step transitions, and the example solving CartPole in one process
and as a dice.launch cluster.

    PYTHONPATH=build/python /usr/bin/python3 -m unittest -v \\
        tests/python/test_example_dqn.py
"""

import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
BUILD = os.environ.get("DICE_BUILD") or os.path.join(ROOT, "build")
EXAMPLE = os.path.join(ROOT, "examples", "python", "dqn_cartpole.py")

sys.path.insert(0, os.path.join(BUILD, "python"))

from dice.rl import envs  # noqa: E402
from dice.rl.envs import CartPoleEnv, CartPoleVecEnv  # noqa: E402
from dice.rl.replay import NStep, ReplayBuffer  # noqa: E402

try:
    import torch
except ImportError:  # pragma: no cover
    torch = None


def gym_step(state, action):
    """Gymnasium's CartPoleEnv.step (v1, euler), transcribed literally."""
    x, x_dot, theta, theta_dot = state
    gravity, masscart, masspole, length = 9.8, 1.0, 0.1, 0.5
    total_mass = masspole + masscart
    polemass_length = masspole * length
    force = 10.0 if action == 1 else -10.0
    costheta, sintheta = math.cos(theta), math.sin(theta)
    temp = (force + polemass_length * theta_dot**2 * sintheta) / total_mass
    thetaacc = (gravity * sintheta - costheta * temp) / (
        length * (4.0 / 3.0 - masspole * costheta**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * costheta / total_mass
    x = x + 0.02 * x_dot
    x_dot = x_dot + 0.02 * xacc
    theta = theta + 0.02 * theta_dot
    theta_dot = theta_dot + 0.02 * thetaacc
    terminated = (x < -2.4 or x > 2.4 or theta < -12 * 2 * math.pi / 360
                  or theta > 12 * 2 * math.pi / 360)
    return (x, x_dot, theta, theta_dot), terminated


def balance(obs):
    """A controller that keeps the pole up for 500 steps."""
    x, x_dot, theta, theta_dot = obs
    return int(theta + 0.5 * theta_dot + 0.01 * x + 0.1 * x_dot > 0)


class CartPoleTest(unittest.TestCase):
    def test_steps_like_gymnasium(self):
        env = CartPoleEnv()
        env.reset(seed=3)
        ref = tuple(env.state)
        rng = np.random.default_rng(0)
        for _ in range(200):
            a = int(rng.integers(0, 2))
            obs, reward, terminated, truncated, _ = env.step(a)
            ref, ref_terminated = gym_step(ref, a)
            np.testing.assert_allclose(env.state, ref, rtol=1e-12, atol=1e-12)
            np.testing.assert_array_equal(obs, np.float32(ref))
            self.assertEqual(obs.dtype, np.float32)
            self.assertEqual(reward, 1.0)
            self.assertEqual(terminated, ref_terminated)
            if terminated:
                break
        self.assertTrue(terminated, "random actions end an episode")

    def test_same_seed_same_episodes_other_seed_others(self):
        def episode(seed):
            env = CartPoleEnv()
            obs, _ = env.reset(seed=seed)
            rng = np.random.default_rng(1)
            trace = [obs]
            done = False
            while not done:
                obs, _, term, trunc, _ = env.step(int(rng.integers(0, 2)))
                trace.append(obs)
                done = term or trunc
            return np.stack(trace)

        a, b, c = episode(7), episode(7), episode(8)
        np.testing.assert_array_equal(a, b)
        self.assertFalse(a.shape == c.shape and np.array_equal(a, c))
        first, _ = CartPoleEnv().reset(seed=7)
        self.assertTrue(np.all(np.abs(first) <= 0.05))
        v1, v2 = CartPoleVecEnv(4, seed=5), CartPoleVecEnv(4, seed=5)
        np.testing.assert_array_equal(v1.obs, v2.obs)
        for _ in range(300):
            acts = np.array([balance(o) for o in v1.obs])
            r1, r2 = v1.step(acts), v2.step(acts)
            for x, y in zip(r1[:4], r2[:4]):
                np.testing.assert_array_equal(x, y)

    def test_terminates_outside_the_bounds(self):
        env = CartPoleEnv()
        obs, _ = env.reset(seed=0)
        steps = 0
        while True:  # always push right: the pole falls left
            prev = env.state.copy()
            obs, reward, terminated, truncated, _ = env.step(1)
            steps += 1
            if terminated:
                break
            self.assertFalse(truncated)
        self.assertLess(steps, 100)
        self.assertEqual(reward, 1.0)
        self.assertFalse(truncated)
        self.assertTrue(abs(env.state[0]) > 2.4
                        or abs(env.state[2]) > envs.THETA_THRESHOLD)
        self.assertTrue(abs(prev[0]) <= 2.4
                        and abs(prev[2]) <= envs.THETA_THRESHOLD)
        self.assertAlmostEqual(envs.THETA_THRESHOLD, math.radians(12))
        self.assertTrue(envs.cartpole_terminated([2.41, 0, 0, 0]))
        self.assertTrue(envs.cartpole_terminated([0, 0, -0.21, 0]))
        self.assertFalse(envs.cartpole_terminated([2.39, 9, 0.2, 9]))

    def test_truncates_after_500_steps(self):
        env = CartPoleEnv()
        obs, _ = env.reset(seed=1)
        for t in range(1, 501):
            obs, _, terminated, truncated, _ = env.step(balance(obs))
            self.assertFalse(terminated)
            self.assertEqual(truncated, t == 500)

    def test_vector_env_resets_ended_episodes(self):
        v = CartPoleVecEnv(3, seed=2)
        ended = []
        for t in range(1, 501):
            # Env 0 balances; envs 1 and 2 always push right.
            acts = np.array([balance(v.obs[0]), 1, 1])
            obs, reward, term, trunc, info = v.step(acts)
            np.testing.assert_array_equal(reward, np.ones(3, np.float32))
            done = term | trunc
            self.assertEqual(len(info["episode_return"]), int(done.sum()))
            for i in np.flatnonzero(done):
                # A new episode starts; final_obs is where the old one ended.
                self.assertTrue(np.all(np.abs(obs[i]) <= 0.05))
                if term[i]:
                    self.assertTrue(envs.cartpole_terminated(
                        info["final_obs"][i].astype(np.float64)))
            np.testing.assert_array_equal(obs[~done], info["final_obs"][~done])
            ended += info["episode_length"].tolist()
            self.assertEqual(bool(trunc[0]), t == 500)
            self.assertFalse(term[0])
        self.assertFalse(trunc[1:].any())
        self.assertIn(500, ended)
        self.assertGreater(len(ended), 10)


class NStepTest(unittest.TestCase):
    def test_sums_rewards_and_bootstraps_only_without_termination(self):
        acc = NStep(1, n=3, gamma=0.5)
        o = [np.full(2, i, np.float32) for i in range(6)]
        f = np.array([False])
        for i in range(4):  # steps 0..3, the episode terminates at step 3
            acc.add([o[i]], [i % 2], [1.0], [o[i + 1]], np.array([i == 3]), f)
        b = acc.take()
        np.testing.assert_array_equal(b["obs"][:, 0], [0, 1, 2, 3])
        np.testing.assert_array_equal(b["action"], [0, 1, 0, 1])
        np.testing.assert_allclose(b["reward"], [1.75, 1.75, 1.5, 1.0])
        np.testing.assert_allclose(b["discount"], [0.125, 0, 0, 0])
        np.testing.assert_array_equal(b["next_obs"][:, 0], [3, 4, 4, 4])
        self.assertEqual(len(acc.take()["action"]), 0)
        acc.add([o[0]], [0], [1.0], [o[1]], np.array([False]),
                np.array([True]))  # truncated: bootstraps from the final obs
        b = acc.take()
        np.testing.assert_allclose(b["discount"], [0.5])

    @unittest.skipIf(torch is None, "needs torch")
    def test_replay_buffer_wraps_around(self):
        buf = ReplayBuffer(capacity=5, seed=0, fields=("obs", "action"))
        buf.add({"obs": np.arange(4, dtype=np.float32)[:, None],
                 "action": np.arange(4)})
        buf.add({"obs": np.arange(4, 7, dtype=np.float32)[:, None],
                 "action": np.arange(4, 7)})
        self.assertEqual(len(buf), 5)
        self.assertEqual(sorted(buf._data["action"].tolist()), [2, 3, 4, 5, 6])
        s = buf.sample(64)
        self.assertEqual(tuple(s["obs"].shape), (64, 1))
        self.assertTrue(torch.equal(s["obs"][:, 0].long(), s["action"]))


def child_env():
    """The environment of the example's process: this build's package."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(BUILD, "python")]
        + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run(args, timeout):
    """Runs args; returns (exit code, output), failing at the deadline."""
    try:
        done = subprocess.run(args, env=child_env(), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise AssertionError(f"{args} ran past {timeout} s:\n"
                             f"{(e.output or '')[-4000:]}") from None
    return done.returncode, done.stdout


def jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


@unittest.skipIf(torch is None, "needs torch")
class ExampleTest(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="dice-dqn-")
        self.addCleanup(shutil.rmtree, self.out, ignore_errors=True)

    def test_solves_cartpole_in_one_process(self):
        rc, output = run([sys.executable, EXAMPLE, f"--out={self.out}",
                          "--seed=1", "--no-progress"], timeout=300)
        self.assertEqual(rc, 0, output[-4000:])
        with open(os.path.join(self.out, "summary.json")) as f:
            summary = json.load(f)
        self.assertTrue(summary["solved"], summary)
        self.assertGreaterEqual(summary["best_eval"], 475)
        self.assertEqual(summary["stop_reason"], "stop_value (node 1)")
        self.assertGreater(summary["train_iters"], 0)
        self.assertIn("== DQN CartPole-v1 (Python) summary ==", output)
        lines = jsonl(os.path.join(self.out, "metrics.jsonl"))
        evals = [x for x in lines if x["role"] == "evaluator"]
        self.assertGreater(len(evals), 1)
        self.assertGreaterEqual(max(x["eval_return_mean"] for x in evals), 475)
        self.assertEqual({x["role"] for x in lines},
                         {"learner", "evaluator", "collector"})
        collectors = {x["node"] for x in lines if x["role"] == "collector"}
        self.assertEqual(collectors, {2, 3, 4})
        from dice.rl import CartPoleVecEnv, play_greedy
        self._load("latest.pt")
        # best.pt is the net that scored best: greedy, it balances well.
        returns = play_greedy(self._load("best.pt"), CartPoleVecEnv, 10,
                              seed=12345)
        self.assertGreater(np.mean(returns), 200)
        self.assertTrue(os.path.exists(
            os.path.join(self.out, "eval_return.dat")))
        if shutil.which("gnuplot"):
            self.assertTrue(os.path.exists(
                os.path.join(self.out, "eval_return.png")))

    def _load(self, name):
        """OUT/name (a state_dict) loaded into the example's network."""
        from dice.rl import q_network
        net = q_network(4, 2, (64, 64))
        net.load_state_dict(torch.load(os.path.join(self.out, name)))
        return net

    def test_runs_as_a_dice_launch_cluster(self):
        launch = [sys.executable, "-m", "dice.launch"]
        rc, _ = run(launch + ["--help"], timeout=60)
        if rc != 0:
            self.skipTest("no dice-launch in this build")
        # A low stop value keeps it short: the outputs are what is tested.
        rc, output = run(launch + ["--workers", "4", "--", sys.executable,
                                   EXAMPLE, f"--out={self.out}",
                                   "--stop-value=60", "--max-env-steps=60000",
                                   "--no-progress", "--no-plot"], timeout=300)
        self.assertEqual(rc, 0, output[-4000:])
        for node in range(4):
            self.assertTrue(os.path.exists(
                os.path.join(self.out, f"metrics-{node}.jsonl")), node)
        with open(os.path.join(self.out, "summary-1.json")) as f:
            evaluator = json.load(f)
        self.assertTrue(evaluator["solved"], evaluator)
        self.assertEqual(evaluator["roles"], "evaluator")
        with open(os.path.join(self.out, "summary-0.json")) as f:
            self.assertEqual(json.load(f)["roles"], "learner")
        roles = {x["role"] for x in jsonl(
            os.path.join(self.out, "metrics-3.jsonl"))}
        self.assertEqual(roles, {"collector"})
        for name in ("best.pt", "latest.pt"):
            self._load(name)


if __name__ == "__main__":
    unittest.main()
