"""Helpers of dice's Python tests: the build's programs, child processes
whose output is read as it comes (waits are deadlines, never sleeps), node
reports and cluster secrets."""

import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

BUILD = os.environ.get("DICE_BUILD") or os.path.join(
    os.path.dirname(__file__), "..", "..", "build")
BIN = os.path.join(BUILD, "bin")
PYTHON = sys.executable
HERE = os.path.dirname(os.path.abspath(__file__))


def env():
    """The environment of a child: this package on its PYTHONPATH."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join(
        [os.path.join(BUILD, "python"), HERE] + [p for p in sys.path if p])
    return e


class Process:
    """A child whose stdout and stderr lines are collected as they come."""

    def __init__(self, args, **kwargs):
        self.args = [str(a) for a in args]
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=kwargs.pop("env", env()),
            text=True, bufsize=1, start_new_session=True, **kwargs)
        self.lines = []
        self._cond = threading.Condition()
        self._done = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            with self._cond:
                self.lines.append(line.rstrip("\n"))
                self._cond.notify_all()
        self.proc.stdout.close()
        with self._cond:
            self._done = True
            self._cond.notify_all()

    def wait_for(self, pattern, timeout):
        """The first match of regex `pattern` in a line, or None once
        `timeout` seconds passed or the output ended."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        seen = 0
        with self._cond:
            while True:
                for line in self.lines[seen:]:
                    m = rx.search(line)
                    if m:
                        return m
                seen = len(self.lines)
                left = deadline - time.monotonic()
                if self._done or left <= 0:
                    return None
                self._cond.wait(left)

    def wait(self, timeout):
        """The exit code, or None if the child still runs after `timeout`."""
        try:
            rc = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        self._reader.join(timeout)
        return rc

    def signal(self, sig):
        self.proc.send_signal(sig)

    def kill(self):
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def text(self):
        with self._cond:
            return "\n".join(self.lines)

    def reports(self):
        """The nodes' final JSON reports, by node id."""
        return reports(list(self.lines))


def reports(lines):
    """The nodes' final JSON reports in `lines` (a list, or one text), by
    node id."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    result = {}
    for line in lines:
        start = line.find('{"node":')
        if start >= 0:
            # Other output may follow on the line (stdout and stderr share
            # the pipe): the report is the first JSON object.
            rep, _ = json.JSONDecoder().raw_decode(line[start:])
            result[rep["node"]] = rep
    return result


def free_base(n):
    """A base port whose next n ports are free now (srun gives task k base +
    its local index). Below Linux's ephemeral range (32768-60999), so
    another test's ephemeral ports do not take them meanwhile."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - n)
        socks = []
        try:
            for p in range(base, base + n):
                s = socket.socket()
                socks.append(s)
                s.bind(("", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


class SecretFile:
    """A cluster secret in a private temporary directory."""

    def __init__(self, secret="0123456789abcdef0123456789abcdef"):
        self.dir = tempfile.TemporaryDirectory(prefix="dice-secret-")
        self.path = os.path.join(self.dir.name, "secret")
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secret + "\n")

    @property
    def arg(self):
        return "--dice.secret-file=" + self.path

    def close(self):
        self.dir.cleanup()
