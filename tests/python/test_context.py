"""dice.framework.context: DI-engine's context and its renew rule."""

import unittest

import numpy as np

from dice.framework.context import OnlineRLContext


class ContextTest(unittest.TestCase):
    def test_renew_keeps_what_di_engine_keeps(self):
        ctx = OnlineRLContext()
        ctx.env_step, ctx.env_episode, ctx.train_iter = 10, 2, 3
        ctx.last_eval_iter, ctx.last_eval_value = 3, 99.5
        ctx.wandb_url = "http://tracker"
        ctx.eval_value = 50.0
        ctx.trajectories = [{"obs": np.zeros(2)}]
        ctx.trajectory_end_idx = [0]
        ctx.train_output = {"loss": 1.0}
        ctx.mine = "scratch"
        ctx.kept = "across"
        ctx.keep("kept")
        ctx.renew()
        self.assertEqual(ctx.total_step, 1)
        self.assertEqual((ctx.env_step, ctx.env_episode, ctx.train_iter),
                         (10, 2, 3))
        self.assertEqual((ctx.last_eval_iter, ctx.last_eval_value), (3, 99.5))
        self.assertEqual(ctx.wandb_url, "http://tracker")
        self.assertEqual(ctx.eval_value, float("-inf"))
        self.assertIsNone(ctx.trajectories)
        self.assertIsNone(ctx.trajectory_end_idx)
        self.assertIsNone(ctx.train_output)  # DI-engine's default again
        self.assertFalse(hasattr(ctx, "mine"))
        self.assertEqual(ctx.kept, "across")

    def test_defaults_are_fresh_objects(self):
        a, b = OnlineRLContext(), OnlineRLContext()
        a.collect_kwargs["eps"] = 0.1
        self.assertEqual(b.collect_kwargs, {})
        self.assertIsNone(a.obs)
        with self.assertRaises(AttributeError):
            a.no_such_field

    def test_trajectories_hold_dice_values(self):
        ctx = OnlineRLContext()
        items = [{"obs": np.arange(3, dtype=np.float32), "done": False}] * 2
        ctx.trajectories = items
        self.assertIs(ctx.trajectories, items)  # what was assigned, as is
        ctx.trajectories.append({"obs": np.ones(3, np.float32), "done": True})
        with self.assertRaises(TypeError) as cm:
            ctx.trajectories = [{"ok": 1}, {"obs": object()}]
        self.assertIn("trajectories[1]['obs']", str(cm.exception))
        with self.assertRaises(TypeError):
            ctx.episodes = "not a list"
        ctx.trajectories = None
        self.assertIsNone(ctx.trajectories)

    def test_kwargs_set_fields(self):
        ctx = OnlineRLContext(env_step=5, obs=[1])
        self.assertEqual(ctx.env_step, 5)
        self.assertEqual(ctx.obs, [1])


if __name__ == "__main__":
    unittest.main()
