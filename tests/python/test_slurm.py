"""dice under a real Slurm (issue 26): a one-machine Slurm cluster of the
test's own (munged, slurmctld and slurmd with their own key, sockets,
config, state and ports in a temporary directory; no system service is
used), and dqn_cartpole run through it with `srun`, `sbatch`
(examples/slurm/dqn_cartpole.sbatch) and stopped with `scancel`.

Needs root (slurmd starts the tasks as the submitting user through
slurmstepd) and Debian's slurm-wlm and munge (scripts/install-deps). Without
them the test is skipped with the reason, except under CI=true, where
install-deps put them there and a skip would hide a broken test.

    DICE_BUILD=build /usr/bin/python3 -m unittest -v tests/python/test_slurm.py
"""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from dice_testing import BIN, Process, SecretFile, free_base, reports  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
SBATCH_SCRIPT = os.path.join(ROOT, "examples", "slurm", "dqn_cartpole.sbatch")
DQN = os.path.join(BIN, "dqn_cartpole")
TASKS = 5  # learner, evaluator, 3 collectors (dice's default roles by id)
# Daemons live in sbin, which a CTest environment may not have on PATH.
SEARCH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
PROGRAMS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel",
            "scontrol", "sinfo", "squeue")


def which(name):
    return shutil.which(name, path=SEARCH)


def why_not():
    """Why Slurm cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root: slurmd starts tasks through slurmstepd as root"
    missing = [p for p in PROGRAMS if which(p) is None]
    if missing:
        return ("Slurm/munge not installed (missing " + ", ".join(missing)
                + "; scripts/install-deps installs slurm-wlm and munge)")
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def node_name():
    """Slurm's name of this machine: the host name when it resolves (as on
    a real cluster, where SLURM_NODELIST names hosts dice dials), else
    localhost."""
    host = socket.gethostname().split(".")[0]
    try:
        socket.gethostbyname(host)
        return host
    except OSError:
        return "localhost"


class Cluster:
    """munged, slurmctld and slurmd of this test, in `self.dir`."""

    def __init__(self):
        # munged wants its socket's directory searchable by all.
        self.dir = tempfile.mkdtemp(prefix="dice-slurm-")
        os.chmod(self.dir, 0o755)
        self.conf = os.path.join(self.dir, "slurm.conf")
        self.node = node_name()
        self.daemons = []
        self.logs = {}
        # Every Slurm command of the test talks to this cluster only: no
        # SLURM_* of an outer job (a CI runner inside Slurm) leaks in.
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = self.conf
        self.env["PATH"] = SEARCH

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def _daemon(self, name, args):
        log = open(self.path(name + ".out"), "w")
        self.logs[name] = log.name
        p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log,
                             stderr=subprocess.STDOUT, env=self.env,
                             start_new_session=True)
        log.close()
        self.daemons.append(p)
        return p

    def log_tail(self):
        out = []
        for name, path in self.logs.items():
            with open(path, errors="replace") as f:
                out.append(f"--- {name}:\n" + "".join(f.readlines()[-15:]))
        return "\n".join(out)

    def start(self):
        # A key of its own: /etc/munge/munge.key belongs to the munge user
        # and munged refuses a key its own user does not own.
        key = self.path("munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        self.munge_socket = self.path("munge.socket")
        munged = self._daemon("munged", [
            which("munged"), "--foreground", "--socket=" + self.munge_socket,
            "--key-file=" + key, "--pid-file=" + self.path("munged.pid"),
            "--log-file=" + self.path("munged.log"),
            "--seed-file=" + self.path("munged.seed")])
        self._until(lambda: os.path.exists(self.munge_socket), 15,
                    "munged's socket", munged)
        for d in ("state", "spool"):
            os.mkdir(self.path(d))
        ctld_port, slurmd_port = free_port(), free_port()
        host = socket.gethostname().split(".")[0]
        with open(self.conf, "w") as f:
            f.write(f"""\
ClusterName=dicetest
# slurmctld checks that it runs on SlurmctldHost; it is reached on loopback.
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={self.path("state")}
SlurmdSpoolDir={self.path("spool")}
SlurmctldPidFile={self.path("slurmctld.pid")}
SlurmdPidFile={self.path("slurmd.pid")}
# No cgroups: the test may run in a container without a writable hierarchy.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
# scancel: SIGTERM, then SIGKILL after KillWait s; dice's graceful stop
# needs well under a second, 15 s leave room on a loaded machine.
KillWait=15
# 5 tasks on a 2-core CI machine: slurmd takes the configured CPUs
# instead of refusing a node with fewer real ones.
SlurmdParameters=config_overrides
NodeName={self.node} NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
""")
        self._daemon("slurmctld",
                     [which("slurmctld"), "-D", "-i", "-f", self.conf])
        self._daemon("slurmd",
                     [which("slurmd"), "-D", "-N", self.node, "-f", self.conf])
        self.wait_idle(60)

    def wait_idle(self, timeout):
        """Until the node is idle: up, or done with the last job. A job
        submitted while the node still completes one waits for the
        scheduler's next pass, up to 60 s (sched_interval)."""
        def idle():
            for d in self.daemons:
                if d.poll() is not None:
                    raise AssertionError(f"{d.args[0]} exited with "
                                         f"{d.returncode}\n{self.log_tail()}")
            r = self.run(["sinfo", "-h", "-o", "%t", "-n", self.node], 10)
            return r.returncode == 0 and r.stdout.strip() == "idle"

        self._until(idle, timeout, f"node {self.node} idle")

    def _until(self, pred, timeout, what, proc=None):
        deadline = time.monotonic() + timeout
        while not pred():
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"{what}: {proc.args[0]} exited with "
                                     f"{proc.returncode}\n{self.log_tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {what} after {timeout} s\n"
                                     + self.log_tail())
            time.sleep(0.1)  # polling with a deadline

    def run(self, args, timeout, cwd=None):
        return subprocess.run([which(args[0])] + list(args[1:]),
                              env=self.env, cwd=cwd, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=timeout)

    def job_ids(self, name=None):
        args = ["squeue", "-h", "-o", "%i"] + (["-n", name] if name else [])
        return self.run(args, 10).stdout.split()

    def job(self, job_id):
        """`scontrol show job` as a dict (the job record stays MinJobAge,
        300 s, after the end; sacct would need slurmdbd)."""
        r = self.run(["scontrol", "-o", "show", "job", str(job_id)], 10)
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def ours(self):
        """Pids of processes started through this cluster: slurmstepd and
        the tasks inherit SLURM_CONF naming our config."""
        tag = ("SLURM_CONF=" + self.conf).encode()
        pids = []
        for pid in os.listdir("/proc"):
            if not pid.isdigit() or int(pid) == os.getpid():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if tag in f.read().split(b"\0"):
                        pids.append(int(pid))
            except OSError:
                pass
        return pids

    def stop(self):
        """Cancels what runs, ends the daemons and removes the directory;
        also after a failure, so nothing of the test outlives it."""
        try:
            if len(self.daemons) > 1 and self.daemons[1].poll() is None:
                self.run(["scancel", "--full", "--user=root"], 10)
                deadline = time.monotonic() + 20
                while self.job_ids() and time.monotonic() < deadline:
                    time.sleep(0.1)
        except (subprocess.SubprocessError, OSError):
            pass
        for d in reversed(self.daemons):  # slurmd, slurmctld, munged
            if d.poll() is None:
                d.terminate()
                try:
                    d.wait(10)
                except subprocess.TimeoutExpired:
                    d.kill()
                    d.wait()
        # What is left (a step slurmd could not end): by pid, after the
        # daemons, whose helpers (slurmscriptd) carry the same variable.
        for pid in self.ours():
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


class SlurmTest(unittest.TestCase):
    cluster = None

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(DQN):
            raise unittest.SkipTest("dqn_cartpole not built")
        reason = why_not()
        if reason:
            if os.environ.get("CI") == "true":
                raise AssertionError("CI must run the Slurm test: " + reason)
            raise unittest.SkipTest(reason)
        cls.cluster = Cluster()
        try:
            cls.cluster.start()
        except BaseException:
            cls.cluster.stop()
            raise

    @classmethod
    def tearDownClass(cls):
        if cls.cluster:
            cls.cluster.stop()

    def setUp(self):
        self.secret = SecretFile()
        self.addCleanup(self.secret.close)
        self.out = tempfile.mkdtemp(prefix="dice-slurm-out-")
        self.addCleanup(shutil.rmtree, self.out, ignore_errors=True)
        self.base = free_base(TASKS)
        self.cluster.wait_idle(60)
        t0 = time.monotonic()
        self.addCleanup(lambda: print(
            f"{self.id()}: {time.monotonic() - t0:.1f} s", file=sys.stderr))

    def srun(self, name, *options):
        """`srun -n 5 dqn_cartpole ...` as a Process of the test; a test
        that fails leaves neither srun nor its job (the tasks are
        slurmstepd's children, not srun's) running into the next one."""
        proc = Process([which("srun"), "-J", name, "-n", str(TASKS), DQN,
                        self.secret.arg, f"--dice.port={self.base}",
                        f"--out={self.out}", "--seed=1", "--quiet",
                        "--no-plot"] + list(options), env=self.cluster.env)
        self.addCleanup(proc.kill)
        self.addCleanup(self.cluster.run, ["scancel", "--name", name], 10)
        return proc

    def finish(self, proc, timeout):
        rc = proc.wait(timeout)
        if rc is None:
            proc.kill()
            self.fail(f"srun ran past {timeout} s\n{proc.text()[-6000:]}")
        return rc

    def summary(self, node):
        with open(os.path.join(self.out, f"summary-{node}.json")) as f:
            return json.load(f)

    def check_cluster(self, text):
        """Task i is node i on port base + i (one host: local index = i),
        the learner found the other four by the node name, and every node
        reached the learner. (Not "every node found all four": a run solved
        within 0.3 s once ended before one collector's last mesh link was
        up, so that collector never logged its start; the run was right.)"""
        for i in range(TASKS):
            self.assertIn(f"dice-node {i} listening on port {self.base + i}",
                          text)
            if i == 0:
                self.assertRegex(text, r"\[node 0\] 4 peer\(s\) connected")
            else:
                self.assertRegex(text, rf"\[node {i}\] connected to peer node 0 ")

    def test_srun_five_tasks_solve_cartpole(self):
        # A stop value of 100 (not CartPole's 475) keeps it a few seconds:
        # what is tested is that srun's tasks form one dice cluster.
        proc = self.srun("dice-srun", "--stop-value=100",
                         "--max-env-steps=100000", "--max-seconds=60")
        rc = self.finish(proc, 120)
        text = proc.text()
        self.assertEqual(rc, 0, text[-6000:])
        self.check_cluster(text)
        reps = reports(text)
        self.assertEqual(sorted(reps), list(range(TASKS)), text[-6000:])
        self.assertFalse(any(r["failed"] for r in reps.values()), reps)
        evaluator = self.summary(1)
        self.assertEqual(evaluator["roles"], "evaluator")
        self.assertTrue(evaluator["solved"], evaluator)
        self.assertGreaterEqual(evaluator["best_eval"], 100)
        self.assertEqual(evaluator["stop_reason"], "stop_value")
        self.assertEqual(self.summary(0)["roles"], "learner")
        for node in (2, 3, 4):
            self.assertEqual(self.summary(node)["roles"], "collector")
        for name in ("latest.pt", "best.pt", "eval_return.dat"):
            self.assertTrue(os.path.exists(os.path.join(self.out, name)),
                            name)

    def test_sbatch_example_script_runs_to_the_end(self):
        # As a user would: sbatch the example with options for the program;
        # only --chdir (for its output file) and the program's path differ.
        work = os.path.join(self.out, "work")
        os.mkdir(work)
        secret = os.path.join(work, "secret")  # the script makes it
        env = dict(self.cluster.env, DQN=DQN, DICE_SECRET_FILE=secret)
        r = subprocess.run(
            [which("sbatch"), "--parsable", f"--chdir={work}", SBATCH_SCRIPT,
             f"--dice.port={self.base}", f"--out={self.out}", "--seed=1",
             "--stop-value=100", "--max-env-steps=100000",
             "--max-seconds=60", "--no-plot"],
            env=env, capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 0, r.stderr)
        job_id = r.stdout.strip().split(";")[0]
        deadline = time.monotonic() + 120
        while True:
            job = self.cluster.job(job_id)
            if job.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED",
                                       "TIMEOUT", "NODE_FAIL",
                                       "OUT_OF_MEMORY"):
                break
            if time.monotonic() > deadline:
                self.cluster.run(["scancel", job_id], 10)
                self.fail(f"job {job_id} not done after 120 s: {job}")
            time.sleep(0.2)  # polling with a deadline
        log_path = os.path.join(work, f"dqn_cartpole-{job_id}.out")
        with open(log_path, errors="replace") as f:
            text = f.read()
        self.assertEqual((job["JobState"], job["ExitCode"]),
                         ("COMPLETED", "0:0"), text[-6000:])
        self.assertEqual(os.stat(secret).st_mode & 0o777, 0o600)
        self.check_cluster(text)
        self.assertEqual(sorted(reports(text)), list(range(TASKS)))
        self.assertTrue(self.summary(1)["solved"], self.summary(1))
        for name in ("latest.pt", "best.pt"):
            self.assertTrue(os.path.exists(os.path.join(self.out, name)),
                            name)

    def start_long_run(self, name):
        """A run that would go on for 60 s, once every node started."""
        proc = self.srun(name, "--stop-value=1000", "--max-env-steps=0",
                         "--max-seconds=60")
        for i in range(TASKS):
            self.assertTrue(proc.wait_for(
                rf"\[node {i}\] 4 peer\(s\) connected", 60), proc.text())
        ids = []
        deadline = time.monotonic() + 10
        while not ids and time.monotonic() < deadline:
            ids = self.cluster.job_ids(name)
        self.assertEqual(len(ids), 1, ids)
        return proc, ids[0]

    def test_scancel_stops_every_task_gracefully(self):
        proc, job_id = self.start_long_run("dice-scancel")
        # The learner has trained (a checkpoint is worth writing).
        self.assertTrue(proc.wait_for(r"\[node 0\] learner iterating", 30))
        r = self.cluster.run(["scancel", job_id], 10)
        self.assertEqual(r.returncode, 0, r.stderr)
        rc = self.finish(proc, 60)
        text = proc.text()
        # scancel: slurmstepd sends SIGTERM to every task (then SIGKILL
        # after KillWait); each node stops gracefully and exits 0, so srun
        # does too.
        self.assertRegex(text, rf"STEP {job_id}\.0 ON \S+ CANCELLED")
        self.assertEqual(rc, 0, text[-6000:])
        self.assertIn("received SIGTERM: stopping the run", text)
        reps = reports(text)
        self.assertEqual(sorted(reps), list(range(TASKS)), text[-6000:])
        for rep in reps.values():
            self.assertFalse(rep["failed"], rep)
            self.assertIn("SIGTERM", rep["stop_reason"])
        # Nothing in flight is lost: the learner counted every env step the
        # collectors made, and checkpointed them.
        collected = sum(self.summary(n)["env_steps"] for n in (2, 3, 4))
        self.assertGreater(collected, 0)
        self.assertEqual(reps[0]["env_step"], collected)
        self.assertRegex(text, rf"\[node 0\] checkpoint at env_step "
                               rf"{collected},")
        with open(os.path.join(self.out, "latest.json")) as f:
            self.assertEqual(json.load(f)["env_step"], collected)
        self.assertTrue(os.path.exists(os.path.join(self.out, "latest.pt")))

    def test_a_killed_task_is_a_lost_peer_and_the_rest_stop_by_scancel(self):
        proc, job_id = self.start_long_run("dice-kill")
        # slurmd's record of the step's tasks: pid and global task id.
        r = self.cluster.run(["scontrol", "listpids", job_id], 10)
        pids = {int(cols[4]): int(cols[0]) for cols in
                (line.split() for line in r.stdout.splitlines()[1:])
                if len(cols) == 5 and cols[4].isdigit()}
        self.assertEqual(sorted(pids), list(range(TASKS)), r.stdout)
        os.kill(pids[4], signal.SIGKILL)  # collector node 4
        for i in range(4):
            self.assertTrue(proc.wait_for(
                rf"\[node {i}\] lost peer node 4 \(collector\)", 30),
                proc.text()[-6000:])
        # srun restarts nothing (dice-launch --max-restarts would): the
        # others go on with one collector less until they are cancelled.
        self.assertIsNone(proc.proc.poll(), proc.text()[-6000:])
        self.cluster.run(["scancel", job_id], 10)
        rc = self.finish(proc, 60)
        text = proc.text()
        # srun exits with the worst task's status: 128 + SIGKILL.
        self.assertEqual(rc, 128 + signal.SIGKILL, text[-6000:])
        self.assertRegex(text, r"task 4: Killed")
        reps = reports(text)
        self.assertEqual(sorted(reps), [0, 1, 2, 3], text[-6000:])
        for rep in reps.values():
            self.assertFalse(rep["failed"], rep)
            self.assertIn("SIGTERM", rep["stop_reason"])
        self.assertTrue(os.path.exists(os.path.join(self.out, "latest.pt")))


if __name__ == "__main__":
    unittest.main()
