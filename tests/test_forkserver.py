"""The local pool's fork server (race_cli/pool/forkserver.py) with the real engine on the embedded tiny-s:
a forked job is the job a fresh interpreter runs, it stops and dies as one would, and the pool falls
back to fresh interpreters when the server fails."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from race_cli.pool import forkserver
from race_cli.pool.local import LocalPool, child_env, cpu_slots, default_job_command

GRID = ["grid=none", "model=tiny-s", "grpo.group_size=2,4", "grpo.prompts_per_iter=4", "budget.flops=1e10",
        "eval.every=4", "checkpoint.every=2", "task.num_eval=40"]


def _plan(sweep: Path, *overrides: str) -> list[str]:
    res = subprocess.run([sys.executable, "-m", "race_cli", "plan", *(overrides or GRID), "-o", str(sweep)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return sorted(p.name for p in (sweep / "jobs").iterdir())


def _metrics(job_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


def _pool(sweep: Path, jobs: list[str]) -> LocalPool:
    return LocalPool(sweep, jobs, cpu_slots(2, 2), job_command=default_job_command)


def test_forked_jobs_equal_fresh_interpreters(tiny_s, tmp_path, monkeypatch):
    forked, fresh = tmp_path / "forked", tmp_path / "fresh"
    jobs = _plan(forked)
    assert _plan(fresh) == jobs == ["G2", "G4"]
    pool = _pool(forked, jobs)
    assert pool.run() == {"G2": "done", "G4": "done"}
    assert isinstance(pool._server, forkserver.ForkServer) and pool._use_server  # the jobs were forked
    assert pool._server.proc.poll() is not None  # and the server ended with the run
    monkeypatch.setenv("RACE_FORKSERVER", "0")
    pool = _pool(fresh, jobs)
    assert pool.run() == {"G2": "done", "G4": "done"}
    assert pool._server is None
    for job in jobs:
        assert _metrics(forked / "jobs" / job) == _metrics(fresh / "jobs" / job)
        log = (forked / "jobs" / job / "log.txt").read_text()
        assert "===== race run: attempt 1" in log and "done (budget)" in log  # the header, then the job's own output


def _start_long_job(tmp_path: Path) -> tuple[forkserver.ForkServer, forkserver.ForkedJob, Path]:
    sweep = tmp_path / "long"
    job = _plan(sweep, "grid=none", "model=tiny-s", "budget.flops=1e13", "checkpoint.every=2", "task.num_eval=8")[0]
    job_dir = sweep / "jobs" / job
    server = forkserver.ForkServer(child_env(cpu_slots(1, 1)[0].env))
    proc = server.spawn(job_dir, job_dir / "log.txt", child_env(cpu_slots(1, 1)[0].env))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (job_dir / "checkpoint" / "state.json").exists():
        assert proc.poll() is None, (job_dir / "log.txt").read_text()[-2000:]
        time.sleep(0.1)
    assert (job_dir / "checkpoint" / "state.json").exists(), "the job reached no checkpoint"
    return server, proc, job_dir


def test_sigterm_stops_a_forked_job_as_it_stops_a_fresh_one(tiny_s, tmp_path):
    server, proc, job_dir = _start_long_job(tmp_path)
    os.killpg(proc.pid, signal.SIGTERM)  # what the pool's terminate() sends first
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM  # race train's exit code for a stop by SIGTERM
    assert "stopped" in (job_dir / "log.txt").read_text().lower()
    server.close()
    assert server.proc.returncode == 0


def test_a_forked_job_dies_with_its_server(tiny_s, tmp_path):
    server, proc, job_dir = _start_long_job(tmp_path)
    server.proc.kill()  # as when race run is killed: the server's parent-death signal
    assert proc.wait(timeout=30) == -signal.SIGKILL
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(proc.pid):
        time.sleep(0.05)
    assert not _running(proc.pid), "the job outlived its server"
    server.close()  # reaps the killed server and closes its pipes


def _running(pid: int) -> bool:
    """Whether `pid` still runs (a zombie waiting for init to reap it does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_the_pool_falls_back_to_fresh_interpreters_when_the_server_fails(tiny_s, tmp_path, monkeypatch):
    def broken(self, job_dir, log_path, env):
        raise OSError("the fork server did not start")

    monkeypatch.setattr(forkserver.ForkServer, "spawn", broken)
    sweep = tmp_path / "fallback"
    jobs = _plan(sweep)
    pool = _pool(sweep, jobs)
    assert pool.run() == {"G2": "done", "G4": "done"}
    assert not pool._use_server  # asked once, then never again
    logs = [(sweep / "jobs" / j / "log.txt").read_text() for j in jobs]
    assert sum("(fork server: the fork server did not start; a fresh interpreter)" in log for log in logs) == 1
