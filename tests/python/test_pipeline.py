"""DI-engine's pipeline rules through dice's Python API, in one process
(the nodes are role actors of this process; docs/exchangers.md)."""

import os
import tempfile
import threading
import time
import unittest

import numpy as np
import torch

import dice
from dice.data import FileModelLoader, FileStorageLoader
from dice.framework import task
from dice.framework.context import OnlineRLContext
from dice.framework.middleware import (ContextExchanger, ModelExchanger,
                                       PeriodicalModelExchanger)


def run(main, collectors=2, *extra):
    return dice.run(main, [f"--collectors={collectors}", *extra])


class PipelineTest(unittest.TestCase):
    def test_before_parts_run_in_order_after_parts_in_reverse(self):
        order = []

        def main():
            with task.start(ctx=OnlineRLContext()):
                if not task.has_role(task.role.LEARNER):
                    return

                def outer(ctx):
                    order.append(("outer before", ctx.total_step))
                    yield
                    order.append(("outer after", ctx.total_step))

                class Inner:
                    def __call__(self, ctx):
                        order.append(("inner before", ctx.total_step))
                        yield
                        order.append(("inner after", ctx.total_step))

                def plain(ctx):
                    order.append(("plain", ctx.total_step))

                task.use(outer).use(Inner()).use(task.void()).use(plain)
                task.run(max_step=2)

        self.assertEqual(run(main, 1), 0)
        expected = []
        for step in range(2):
            expected += [("outer before", step), ("inner before", step),
                         ("plain", step), ("inner after", step),
                         ("outer after", step)]
        self.assertEqual(order, expected)

    def test_learner_gets_every_collectors_trajectories_once(self):
        got = {"items": 0, "env_step": [], "ends_ok": True, "from": set()}
        sent = {}
        # Until every collector's trajectories arrived: a collector whose
        # thread starts late (5 nodes share the GIL) may not have sent
        # anything by the 60th item. The deadline only bounds a failure.
        deadline = time.monotonic() + 60

        def main():
            with task.start(ctx=OnlineRLContext()):
                task.use(ContextExchanger(skip_n_iter=1))
                if task.has_role(task.role.LEARNER):
                    def train(ctx):
                        items = ctx.trajectories or []
                        got["items"] += len(items)
                        got["env_step"].append((ctx.env_step, got["items"]))
                        got["from"].update(int(x["obs"][0]) for x in items)
                        for end in ctx.trajectory_end_idx or []:
                            got["ends_ok"] &= items[end]["last"]
                        ctx.train_iter += 1
                        if (got["items"] >= 60 and len(got["from"]) == 3) \
                                or time.monotonic() > deadline:
                            task.finish = True
                    task.use(train)
                elif task.has_role(task.role.COLLECTOR):
                    node = task.router.node_id

                    def collect(ctx):
                        n = 1 + ctx.total_step % 3
                        ctx.trajectories = [
                            {"obs": np.full(4, node, np.float32),
                             "last": i == n - 1} for i in range(n)]
                        ctx.trajectory_end_idx = [n - 1]
                        ctx.env_step += n
                        sent[node] = sent.get(node, 0) + n
                    task.use(collect)
                task.run()

        self.assertEqual(run(main, 3), 0)
        self.assertGreaterEqual(got["items"], 60)
        # Each transition is one env step: the summed env_step the learner
        # sees is exactly what it has received (no loss, no duplicate).
        for env_step, items in got["env_step"]:
            self.assertEqual(env_step, items)
        self.assertTrue(got["ends_ok"], "trajectory_end_idx not offset")
        self.assertEqual(len(sent), 3)
        self.assertEqual(got["from"], set(sent), "a collector's trajectories never arrived")

    def test_context_and_models_travel_through_file_loaders(self):
        got = {"items": 0, "weights": []}
        with tempfile.TemporaryDirectory() as tmp:
            def main():
                model = torch.nn.Linear(3, 1)
                with task.start():
                    task.use(ContextExchanger(
                        storage_loader=FileStorageLoader(tmp + "/ctx")))
                    task.use(ModelExchanger(
                        model, model_loader=FileModelLoader(model, tmp + "/m")))
                    if task.has_role(task.role.LEARNER):
                        def train(ctx):
                            got["items"] += len(ctx.trajectories or [])
                            got["files"] = max(got.get("files", 0), len(
                                os.listdir(tmp + "/ctx")))
                            with torch.no_grad():
                                model.bias.fill_(7.0)
                            if got["items"] >= 10:
                                task.finish = True
                        task.use(train)
                    elif task.has_role(task.role.COLLECTOR):
                        def collect(ctx):
                            got["weights"].append(float(model.bias[0]))
                            # 80 kB: above the loader's inline_below (64
                            # KiB), so context still goes through files.
                            ctx.trajectories = [{"x": np.ones(10000)}]
                        task.use(collect)

            self.assertEqual(run(main, 2), 0)
            self.assertTrue(os.path.isdir(tmp + "/ctx"))
            self.assertTrue(os.path.isdir(tmp + "/m"))
        self.assertGreaterEqual(got["items"], 10)
        self.assertGreater(got["files"], 0)  # context went through files
        self.assertIn(7.0, got["weights"])  # loaded from the model loader

    def test_collectors_load_the_learners_model(self):
        seen = {}

        def main():
            torch.manual_seed(task.router.node_id)  # different weights
            model = torch.nn.Linear(4, 2)
            with task.start():
                task.use(ModelExchanger(model))
                if task.has_role(task.role.LEARNER):
                    def train(ctx):
                        with torch.no_grad():
                            model.weight.fill_(ctx.total_step)
                        # Until every other node loaded two models (the
                        # learner does not wait for them: under load they
                        # may start after it ran a few iterations).
                        if all(sum(v >= 0 for v, _ in seen.get(n, [])) >= 2
                               for n in (1, 2, 3)):
                            task.finish = True
                    task.use(train)
                else:
                    node = task.router.node_id

                    def act(ctx):
                        seen.setdefault(node, []).append(
                            (ctx.model_version, float(model.weight[0, 0])))
                    task.use(act)

        self.assertEqual(run(main, 2), 0)
        self.assertEqual(sorted(seen), [1, 2, 3])
        for node, xs in seen.items():
            loaded = [(v, w) for v, w in xs if v >= 0]
            self.assertTrue(loaded, f"node {node} never loaded a model")
            for version, weight in loaded:
                # The learner filled weight with its step, then sent it as
                # version step + 1: each load is exactly the learner's.
                self.assertEqual(weight, version - 1, (node, xs))
            versions = [v for v, _ in loaded]
            self.assertEqual(versions, sorted(versions))

    def test_periodical_model_exchanger_sends_every_period(self):
        seen = []

        def main():
            model = torch.nn.Linear(2, 1)
            with task.start():
                if task.has_role(task.role.LEARNER):
                    def train(ctx):
                        with torch.no_grad():
                            model.bias.fill_(ctx.total_step)
                        if len(seen) >= 5:
                            task.finish = True
                    task.use(train)
                    task.use(PeriodicalModelExchanger(model, mode="send",
                                                      period=2))
                elif task.has_role(task.role.COLLECTOR):
                    task.use(PeriodicalModelExchanger(
                        model, mode="receive", period=2, stale_toleration=100))

                    def act(ctx):
                        seen.append(float(model.bias[0]))
                    task.use(act)

        self.assertEqual(run(main, 1), 0)
        loaded = [b for b in seen if b == int(b) and b >= 0]
        self.assertGreaterEqual(len(loaded), 5, seen)
        self.assertTrue(all(int(b) % 2 == 0 for b in loaded), seen)

    def test_bad_exchanger_settings_raise_at_once(self):
        def main():
            PeriodicalModelExchanger(torch.nn.Linear(1, 1), mode="sideways")

        with self.assertRaises(ValueError) as cm:
            run(main, 1)
        self.assertIn("'send' or 'receive'", str(cm.exception))

    def test_events_carry_values_between_nodes(self):
        got = []

        def main():
            with task.start():
                task.use(ContextExchanger())
                if task.has_role(task.role.LEARNER):
                    def train(ctx):
                        task.emit("stats", {"iter": ctx.total_step,
                                            "w": np.arange(3.0)}, "tag",
                                  only_remote=True)
                        if len(got) >= 2:
                            task.finish = True
                    task.use(train)
                elif task.has_role(task.role.EVALUATOR):
                    task.on("stats", lambda s, tag: got.append((s, tag)))

        self.assertEqual(run(main, 1), 0)
        self.assertTrue(got)
        stats, tag = got[-1]
        self.assertEqual(tag, "tag")
        np.testing.assert_array_equal(stats["w"], np.arange(3.0))
        self.assertIsInstance(stats["iter"], int)

    def test_an_event_dice_cannot_carry_fails_the_node_with_its_path(self):
        def main():
            if task.has_role(task.role.LEARNER):
                task.use(lambda ctx: task.emit("bad", {"f": print}))

        with self.assertRaises(TypeError) as cm:
            run(main, 1)
        self.assertIn("argument[0]['f']", str(cm.exception))

    def test_an_exception_in_an_event_handler_ends_the_run_and_is_raised(self):
        def main():
            with task.start():
                task.use(ContextExchanger())
                if task.has_role(task.role.LEARNER):
                    task.use(lambda ctx: task.emit("tick", ctx.total_step,
                                                   only_remote=True))
                elif task.has_role(task.role.EVALUATOR):
                    def on_tick(step):
                        if step >= 3:
                            raise KeyError("handler broke")
                    task.on("tick", on_tick)

        with self.assertRaises(KeyError):
            run(main, 1)

    def test_an_uncaught_exception_ends_the_run_and_is_raised(self):
        def main():
            with task.start():
                task.use(ContextExchanger())
                if task.has_role(task.role.COLLECTOR):
                    def collect(ctx):
                        if ctx.total_step == 2:
                            raise ZeroDivisionError("collector broke")
                    task.use(collect)

        try:
            run(main, 1)
        except ZeroDivisionError as e:
            self.assertIn("collector broke", str(e))
            names = []
            tb = e.__traceback__
            while tb is not None:
                names.append(tb.tb_frame.f_code.co_name)
                tb = tb.tb_next
            self.assertIn("collect", names)  # the middleware's own frame
        else:
            self.fail("no exception")

    def test_a_failed_node_is_restarted_under_max_restarts(self):
        builds = []

        def main():
            builds.append((task.router.node_id, task._node().restarts))
            with task.start():
                task.use(ContextExchanger())
                if task.has_role(task.role.COLLECTOR):
                    restarts = task._node().restarts

                    def collect(ctx):
                        if restarts == 0 and ctx.total_step == 1:
                            raise RuntimeError("first incarnation dies")
                        ctx.env_step += 1
                    task.use(collect)
                elif task.has_role(task.role.LEARNER):
                    def train(ctx):
                        if ctx.env_step >= 5:
                            task.finish = True
                    task.use(train)

        self.assertEqual(run(main, 1, "--dice.max-restarts=1"), 0)
        self.assertIn((2, 0), builds)
        self.assertIn((2, 1), builds)

    def test_waits_release_the_gil(self):
        # The learner waits (GIL released) for a Python thread that must
        # count to a million first: if dice.run or a wait held the GIL, the
        # thread could not run and the wait would time out.
        counted = threading.Event()

        def count():
            n = 0
            while n < 1_000_000:
                n += 1
            counted.set()

        waited = []

        def main():
            with task.start():
                task.use(ContextExchanger())
                if task.has_role(task.role.LEARNER):
                    def train(ctx):
                        waited.append(counted.wait(timeout=60))
                        task.finish = True
                    task.use(train)

        thread = threading.Thread(target=count)
        thread.start()
        try:
            self.assertEqual(run(main, 1), 0)
        finally:
            thread.join()
        self.assertEqual(waited, [True])

    def test_task_outside_a_node_and_foreign_roles_are_refused(self):
        with self.assertRaises(RuntimeError):
            task.use(lambda ctx: None)

        def main():
            if task.router.node_id == 2:
                task.add_role(task.role.LEARNER)

        with self.assertRaises(ValueError) as cm:
            run(main, 1)
        self.assertIn("dice assigns roles", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
