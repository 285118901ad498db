"""`race run --launcher slurm` against a REAL single-node SLURM (start it with .ci/slurm_up.sh).

    .ci/slurm_up.sh && SLURM_CONF=/tmp/race-slurm/etc/slurm.conf python -m pytest tests/test_slurm.py

Skips, with the reason, where no cluster answers: no SLURM_CONF / slurm.conf (SLURM would look its
controller up through DNS and stall), no sinfo, or a node that is not idle. Jobs are
tests/fake_job.py, so every figure checked follows from the fixture's config.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from race_cli.io import read_json
from race_cli.pool.run import RunOptions, run_main
from race_cli.pool.slurm import SUBMITIT_DIR, SUBMITTED

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_job import command, make_sweep

pytestmark = pytest.mark.slurm


def _cluster_problem() -> str | None:
    conf = os.environ.get("SLURM_CONF")
    if not conf:
        default = Path(os.environ.get("RACE_SLURM_DIR", "/tmp/race-slurm")) / "etc" / "slurm.conf"
        if default.is_file():
            os.environ["SLURM_CONF"] = conf = str(default)
        elif not Path("/etc/slurm/slurm.conf").is_file():
            return "no SLURM_CONF and no /etc/slurm/slurm.conf (start one with .ci/slurm_up.sh)"
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return "sinfo/sbatch not on PATH (start a cluster with .ci/slurm_up.sh)"
    deadline = time.monotonic() + 30  # a node still 'completing' an earlier job becomes idle in seconds
    while True:
        try:
            out = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=15)
        except subprocess.TimeoutExpired:
            return "sinfo did not answer within 15 s"
        if out.returncode == 0 and any(s in ("idle", "mixed") for s in out.stdout.split()):
            return None
        if time.monotonic() > deadline:
            return f"no idle SLURM node (sinfo: {out.stdout.strip() or out.stderr.strip()})"
        time.sleep(1)


PROBLEM = _cluster_problem()
if PROBLEM:  # the prefix is one tests/skip_guard.py allows: CI could not start the cluster
    pytestmark = [pytest.mark.slurm, pytest.mark.skip(reason=f"SLURM cluster unavailable: {PROBLEM}")]


def run(sweep: Path, job_command=command, **kw) -> int:
    kw = {"launcher": "slurm", "gpus_per_job": 0, "partition": "debug", "time_min": 5, "report": False, **kw}
    return run_main(RunOptions(sweep_dir=sweep, **kw), job_command=job_command)


def state(sweep: Path, job: str) -> dict:
    return read_json(sweep / "jobs" / job / "status.json")


def squeue_state(slurm_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", slurm_id, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def wait_until(cond, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def test_two_job_grid_finishes_on_slurm(tmp_path, capsys):
    sweep = make_sweep(tmp_path / "s", {"a": {"seconds": 0.5}, "b": {"seconds": 0.5, "iterations": 2}})
    assert run(sweep) == 0
    out = capsys.readouterr().out
    assert "submitted 2 job(s) as SLURM array" in out
    ids = read_json(sweep / SUBMITIT_DIR / SUBMITTED)
    for j in ("a", "b"):
        s = state(sweep, j)
        assert s["state"] == "done" and s["attempts"] == 1 and s["exit_code"] == 0 and s["device"] == "cpu"
        assert s["slurm_job_id"] == ids[j]
        assert "fake job %s: done" % j in (sweep / "jobs" / j / "log.txt").read_text()
    # again on the same sweep: nothing is resubmitted
    assert run(sweep) == 0
    assert "nothing to submit" in capsys.readouterr().out


def test_usr2_requeues_and_resumes_from_checkpoint(tmp_path):
    """scancel --signal=USR2 on a RUNNING task: checkpoint() stops the job, submitit requeues it,
    and the second attempt resumes from checkpoint/ to the end."""
    sweep = make_sweep(tmp_path / "s", {"long": {"seconds": 8.0, "iterations": 8}})
    assert run(sweep, wait=False) == 0
    slurm_id = read_json(sweep / SUBMITIT_DIR / SUBMITTED)["long"]
    ckpt = sweep / "jobs" / "long" / "checkpoint" / "state.json"
    wait_until(lambda: squeue_state(slurm_id) == "RUNNING" and ckpt.exists(), 60, "the task to run and checkpoint")
    subprocess.run(["scancel", "--signal=USR2", slurm_id], check=True)
    wait_until(lambda: state(sweep, "long")["state"] == "interrupted" or state(sweep, "long")["attempts"] >= 2,
               30, "the checkpoint hook to mark the job interrupted")
    assert run(sweep) == 0  # waits for the requeued task (still queued/running: not resubmitted)
    s = state(sweep, "long")
    assert s["state"] == "done" and s["attempts"] == 2, s
    log = (sweep / "jobs" / "long" / "log.txt").read_text()
    assert "resuming from checkpoint at iteration" in log
    assert len(read_json(sweep / SUBMITIT_DIR / SUBMITTED)) == 1 and \
        read_json(sweep / SUBMITIT_DIR / SUBMITTED)["long"] == slurm_id  # the same task, requeued


def test_cancelled_task_is_interrupted_and_the_rerun_completes_it(tmp_path):
    sweep = make_sweep(tmp_path / "s", {"short": {"seconds": 0.5}, "victim": {"seconds": 8.0, "iterations": 8}})
    assert run(sweep, wait=False) == 0
    ids = read_json(sweep / SUBMITIT_DIR / SUBMITTED)
    ckpt = sweep / "jobs" / "victim" / "checkpoint" / "state.json"
    wait_until(lambda: squeue_state(ids["victim"]) == "RUNNING" and ckpt.exists(), 60, "victim running")
    subprocess.run(["scancel", ids["victim"]], check=True)
    # the task's own wrapper sees its child die of SLURM's SIGTERM and records the interruption
    wait_until(lambda: state(sweep, "victim")["state"] == "interrupted", 30, "victim marked interrupted")
    assert state(sweep, "victim")["exit_code"] == -15
    assert run(sweep) == 0  # waits out the cancel, resubmits only the victim, follows both to the end
    assert state(sweep, "short")["state"] == "done" and state(sweep, "short")["attempts"] == 1
    ids2 = read_json(sweep / SUBMITIT_DIR / SUBMITTED)
    assert ids2["short"] == ids["short"] and ids2["victim"] != ids["victim"]
    s = state(sweep, "victim")
    assert s["state"] == "done" and s["attempts"] == 2
    assert "resuming from checkpoint" in (sweep / "jobs" / "victim" / "log.txt").read_text()


def test_raced_sweep_runs_look_by_look_on_slurm(tmp_path, capsys):
    """A race on SLURM: one job array per look, the next look's jobs written after the first array ends,
    and the same jobs and decisions as the same race on local CPU workers (tests/test_race_run.py's truth)."""
    from test_race_run import outcome, race, truth_sweep

    local = truth_sweep(tmp_path / "local")
    assert race(local) == 0
    sweep = truth_sweep(tmp_path / "slurm", seconds=0.3)
    assert run(sweep) == 0
    out = capsys.readouterr().out
    want, got = outcome(local), outcome(sweep)
    assert out.count("as SLURM array") == 1 + max(s["look"] for s in want["states"]) == 4  # one array per look
    assert got["listed"] == want["listed"] and got["folders"] == want["folders"]
    assert got["states"] == want["states"] and got["metrics"] == want["metrics"]
    assert set(read_json(sweep / SUBMITIT_DIR / SUBMITTED)) == set(got["listed"])
    for j in got["listed"]:
        assert state(sweep, j)["state"] == "done"
