"""Python nodes as processes: under dice.launch, stopped by Ctrl-C, and in
one cluster with C++ nodes (each reads the other's models and context)."""

import os
import re
import signal
import time
import unittest

from dice_testing import BIN, HERE, PYTHON, Process, SecretFile, env, free_base

NODE_PY = [PYTHON, os.path.join(HERE, "interop_node.py")]
NODE_CPP = [os.path.join(BIN, "dice_interop_node")]
START = 60  # seconds a cluster may take to start and run on a loaded CI


def cluster(kinds, iterations, secret, cpp_args=(), py_args=()):
    """Starts nodes of `kinds` ("py"/"cpp", node 0 first) by hand, the way
    srun would: node 0 listens, the others attach to it (star)."""
    workers = len(kinds)
    nodes = []

    def start(i, attach):
        program = (NODE_PY + list(py_args) if kinds[i] == "py"
                   else NODE_CPP + list(cpp_args))
        args = program + [f"--iterations={iterations}",
                          f"--dice.node-id={i}", f"--dice.workers={workers}",
                          "--dice.topology=star", "--dice.host=127.0.0.1",
                          secret.arg]
        if attach:
            args.append(f"--dice.attach-to={attach}")
        return Process(args)

    nodes.append(start(0, None))
    m = nodes[0].wait_for(r"listening on port (\d+)", START)
    if m is None:
        for n in nodes:
            n.kill()
        raise AssertionError("node 0 did not listen:\n" + nodes[0].text())
    for i in range(1, workers):
        nodes.append(start(i, f"127.0.0.1:{m.group(1)}"))
    return nodes


def learner_counts(text):
    """(python items, cpp items) the learner reported, summed."""
    py = cpp = 0
    for m in re.finditer(r"learner got \d+ items \(python (\d+), cpp (\d+)\)",
                         text):
        py += int(m.group(1))
        cpp += int(m.group(2))
    return py, cpp


def biases(text, role):
    return [float(x) for x in re.findall(role + r" bias (-?[0-9.e+-]+)", text)]


class ProcessTest(unittest.TestCase):
    def setUp(self):
        self.secret = SecretFile()
        self.nodes = []

    def tearDown(self):
        for n in self.nodes:
            n.kill()
        self.secret.close()

    def finish(self, nodes):
        self.nodes = nodes
        codes = [n.wait(START) for n in nodes]
        text = "\n".join(n.text() for n in nodes)
        self.assertEqual(codes, [0] * len(nodes), text)
        return text

    def test_cpp_learner_takes_python_collectors_context_and_they_its_model(self):
        # The C++ learner runs until the Python evaluator holds a model it
        # trained 4 times (with a fixed count of 6 iterations the run once
        # ended before the evaluator, started last, iterated at all).
        text = self.finish(cluster(["cpp", "py", "py", "py"], 0, self.secret,
                                   py_args=["--finish-when-trained=4"]))
        py, cpp = learner_counts(text)
        self.assertGreater(py, 0, text)
        self.assertEqual(cpp, 0, text)
        # The C++ learner adds 1 to its bias each iteration; Python nodes
        # that loaded its model see biases beyond the initial one.
        initial = biases(text, "collector")[0]
        self.assertGreater(max(biases(text, "collector")), initial + 0.5, text)
        self.assertGreater(max(biases(text, "evaluator")), initial + 0.5, text)

    def test_python_learner_takes_cpp_collectors_context_and_they_its_model(self):
        # The learner waits for both kinds of collector (the Python one
        # started last was once too late for 6 iterations of C++ deltas).
        text = self.finish(cluster(["py", "cpp", "cpp", "py"], 6, self.secret,
                                   py_args=["--need-sources=python,cpp"]))
        py, cpp = learner_counts(text)
        self.assertGreater(cpp, 0, text)
        self.assertGreater(py, 0, text)
        initial = biases(text, "collector")[0]
        self.assertGreater(max(biases(text, "collector")), initial + 0.5, text)

    def test_python_nodes_refuse_what_a_hostile_peer_sends_and_run_on(self):
        # A C++ collector sends Boost archives as trajectories and garbage
        # as an event: the Python learner refuses, counts and logs both, and
        # runs to the end (before: ValueError, and the run ended).
        nodes = cluster(["py", "py", "cpp"], 6, self.secret, ["--hostile"])
        text = self.finish(nodes)
        learner = nodes[0].text()
        self.assertRegex(learner, r"refused 3 item\(s\) from node 2")  # context
        self.assertRegex(learner, r"refused an event of 1 item\(s\) from node 2")
        self.assertNotIn(" tick ", learner)
        self.assertIn("learner got 0 items", text)
        self.assertEqual(nodes[0].reports()[0]["train_iter"], 6, text)

    def test_dice_launch_runs_python_nodes(self):
        launch = Process([PYTHON, "-m", "dice.launch", "--workers", "4", "--"]
                         + NODE_PY + ["--iterations=5"])
        self.nodes = [launch]
        self.assertEqual(launch.wait(START), 0, launch.text())
        reports = launch.reports()
        self.assertEqual(sorted(reports), [0, 1, 2, 3], launch.text())
        self.assertEqual(reports[0]["role"], "learner")
        self.assertEqual(reports[0]["train_iter"], 5)
        collected = sum(r["env_step"] for r in reports.values()
                        if r["role"] == "collector")
        self.assertEqual(reports[0]["env_step"], collected, launch.text())

    def test_ctrl_c_stops_a_python_run_within_a_second(self):
        run = Process(NODE_PY + ["--iterations=0", "--collectors=2"])
        self.nodes = [run]
        self.assertIsNotNone(run.wait_for("learner got", START), run.text())
        t0 = time.monotonic()
        os.killpg(run.proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        rc = run.wait(10)
        took = time.monotonic() - t0
        print(f"Ctrl-C to exit: {took:.3f} s")
        self.assertEqual(rc, 0, run.text())
        reports = run.reports()
        self.assertEqual(len(reports), 4, run.text())
        self.assertTrue(all("SIGINT" in r["stop_reason"]
                            for r in reports.values()), run.text())
        self.assertLess(took, 3.0)  # 1 s on a quiet machine; CI is loaded

    def test_sigterm_to_dice_launch_stops_python_nodes_gracefully(self):
        # dice-launch's default stop timeout (10 s). A collector whose last
        # delta reached a learner that had already exited once waited out
        # its drain (also 10 s) for the ack and raced that timeout (exit
        # 137); it now stops once every learner it knew is gone (issue 24;
        # StopSignal.CollectorsWhoseLearnerIsGoneStopWithoutWaitingOutTheir-
        # Drain forces that order).
        launch = Process([PYTHON, "-m", "dice.launch", "--workers", "3", "--"]
                         + NODE_PY + ["--iterations=0"])
        self.nodes = [launch]
        self.assertIsNotNone(launch.wait_for("learner got", START),
                             launch.text())
        t0 = time.monotonic()
        launch.signal(signal.SIGTERM)
        self.assertEqual(launch.wait(45), 0, launch.text())
        print(f"SIGTERM to exit: {time.monotonic() - t0:.3f} s")
        self.assertEqual(len(launch.reports()), 3, launch.text())
        self.assertNotIn("killing it", launch.text())

    def test_a_python_node_that_raised_is_restarted_under_max_restarts(self):
        # --dice.max-restarts restarts the node's role actor (main() builds
        # it again); dice-launch --max-restarts restarts processes that die.
        launch = Process([PYTHON, "-m", "dice.launch", "--workers", "3", "--"]
                         + NODE_PY + ["--iterations=30", "--fail-once",
                                      "--dice.max-restarts=1"])
        self.nodes = [launch]
        self.assertEqual(launch.wait(START), 0, launch.text())
        text = launch.text()
        self.assertIn("RuntimeError: node 2 fails once", text)  # traceback
        self.assertRegex(text, r"node 2 .*restart")
        self.assertEqual(launch.reports()[0]["train_iter"], 30, text)

    def test_srun_environment_forms_a_cluster_of_python_nodes(self):
        base = free_base(3)
        tasks = []
        for i in range(3):
            env_i = env()
            env_i.update(SLURM_PROCID=str(i), SLURM_LOCALID=str(i),
                         SLURM_NTASKS="3", SLURM_NNODES="1", SLURM_NODEID="0",
                         SLURM_NODELIST="localhost",
                         SLURM_JOB_NODELIST="localhost",
                         SLURM_TASKS_PER_NODE="3")
            tasks.append(Process(NODE_PY + ["--iterations=5",
                                            f"--dice.port={base}",
                                            self.secret.arg], env=env_i))
        text = self.finish(tasks)
        self.assertIn(f"listening on port {base + 2}", tasks[2].text())
        self.assertEqual(tasks[0].reports()[0]["role"], "learner", text)
        self.assertEqual(tasks[2].reports()[2]["role"], "collector", text)
        self.assertGreater(learner_counts(text)[0], 0, text)


if __name__ == "__main__":
    unittest.main()
