"""A fork server for CPU workers: import torch and transformers once, fork every job from there.

A job started as `python -m race_cli train` spends seconds importing torch, transformers and peft
before its first iteration; the embedded default's jobs train for tens of seconds, so on two cores
that is a visible share of a pilot (docs/measurements/code.md).
The local pool therefore starts one server process per run (`python -m
race_cli.pool.forkserver_main`), which imports those modules and waits; each job is a `fork()`
of it that then runs `race train --job-dir DIR` exactly as the fresh process would:

- its own session (the pool stops it with killpg, Ctrl-C on the terminal does not reach it) and
  a parent-death signal (the server dies with `race run`, the job with the server);
- stdout and stderr appended to the job's log.txt, stdin from /dev/null, the slot's environment,
  the pool's working directory;
- exit status reported back to the pool (`ForkedJob` offers the part of `subprocess.Popen` the
  pool uses: pid, poll, wait, returncode).

Only CPU slots use it: forking a process that has initialised CUDA is unsafe, and the thread
count (OMP_NUM_THREADS) is read when torch loads, so every job of a server gets the server's.
Nothing here runs data from a sweep folder: a request names a job folder, and the forked child
does what `race train` does with it. RACE_FORKSERVER=0 turns the server off (a fresh interpreter
per job, as before).

Not multiprocessing's forkserver (set_forkserver_preload): it runs picklable callables in pooled workers and
offers no new session per job, no parent-death signal, no log redirection and no Popen-like handle the pool
can killpg, all of which a job needs here.

Protocol: JSON lines. Pool -> server: {"job_dir", "log", "env", "cwd"}. Server -> pool: {"ready"},
{"started": pid}, {"exited": pid, "rc": Popen-style return code (-N: killed by signal N)}.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

READY_TIMEOUT_S = 120.0


def enabled() -> bool:
    return os.environ.get("RACE_FORKSERVER", "1") != "0"


# --- the pool's side: the server process and the jobs forked from it ---------------------------

class ForkServer:
    """One server process and the jobs forked from it (see the module docstring)."""

    def __init__(self, env: dict[str, str], preexec_fn=None):
        self.proc = subprocess.Popen([sys.executable, "-m", "race_cli.pool.forkserver_main"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True, cwd=os.getcwd(), preexec_fn=preexec_fn)
        self.exits: dict[int, int] = {}
        self._buf = b""
        self._ready = False
        self._started: list[int] = []

    def _read(self, timeout: float) -> bool:
        """Read what the server said within `timeout`; False when it has gone."""
        fd = self.proc.stdout.fileno()
        readable, _, _ = select.select([fd], [], [], timeout)
        if not readable:
            return self.proc.poll() is None
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            return False
        self._buf += chunk
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            msg = json.loads(line)
            if "ready" in msg:
                self._ready = True
            elif "started" in msg:
                self._started.append(int(msg["started"]))
            elif "exited" in msg:
                self.exits[int(msg["exited"])] = int(msg["rc"])
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> bool:
        deadline = time.monotonic() + timeout
        while not self._ready and time.monotonic() < deadline:
            if not self._read(min(0.5, max(0.0, deadline - time.monotonic()))):
                return False
        return self._ready

    def spawn(self, job_dir: Path, log_path: Path, env: dict[str, str]) -> "ForkedJob":
        """Fork one job; OSError when the server cannot (it has gone, or did not start)."""
        if not self.wait_ready():
            raise OSError("the fork server did not start")
        req = {"job_dir": str(job_dir), "log": str(log_path), "env": env, "cwd": os.getcwd()}
        try:
            self.proc.stdin.write((json.dumps(req) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as exc:
            raise OSError(f"the fork server has gone: {exc}") from exc
        deadline = time.monotonic() + 30.0
        while not self._started:
            if time.monotonic() > deadline or not self._read(0.5):
                raise OSError("the fork server did not fork the job")
        return ForkedJob(self, self._started.pop(0))

    def drain(self) -> None:
        """Collect what the server has said, without waiting."""
        fd = self.proc.stdout.fileno()
        while select.select([fd], [], [], 0)[0] and self._read(0.0):
            pass

    def close(self) -> None:
        """End the server (after the run: no job of it is running)."""
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class ForkedJob:
    """A job forked by the server: the part of `subprocess.Popen` the pool uses."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None
        self.args = ["race", "train"]

    def poll(self) -> int | None:
        if self.returncode is None:
            self.server.drain()
            if self.pid in self.server.exits:
                self.returncode = self.server.exits.pop(self.pid)
            elif not self.server.alive():
                self.server.drain()  # its last reports
                self.returncode = self.server.exits.pop(self.pid, -int(signal.SIGKILL))  # gone with the server
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.02)
        return self.returncode


