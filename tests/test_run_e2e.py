"""race run end to end with the real GRPO engine on the embedded tiny-s: kill the orchestrator mid-sweep,
rerun, and the sweep ends exactly as an uninterrupted one (same metrics, same adapter weights)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from sweep_outcome import job_outcomes

GRID = ["grid=none", "model=tiny-s", "grpo.group_size=2,4", "grpo.prompts_per_iter=4", "budget.flops=1e10",
        "eval.every=8", "checkpoint.every=2", "task.num_eval=40"]


def _run(sweep: Path, *extra: str, wait: bool = True, env: dict | None = None):
    cmd = [sys.executable, "-m", "race_cli", "run", *GRID, "--sweep-dir", str(sweep), "--workers", "1", *extra]
    env = {**os.environ, "COLUMNS": "200", **(env or {})}
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)


@pytest.mark.slow
def test_orchestrator_killed_mid_sweep_then_rerun_equals_uninterrupted(tiny_s, tmp_path):
    straight = tmp_path / "straight"
    # a cache of its own (the zoo linked in), so the rates this run measures are kept there (plan/learned.py)
    cache = tmp_path / "cache"
    cache.mkdir()
    (cache / "zoo").symlink_to(tiny_s.parent, target_is_directory=True)
    res = _run(straight, env={"RACE_CACHE": str(cache), "RACE_CPU_PROBE": "cached"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "top of the ranking" in res.stdout and (straight / "report" / "summary.md").is_file()
    assert res.stdout.splitlines()[-1] == ("The next race plan on this machine prices tiny-s at the rates this "
                                           "sweep measured with 1 worker(s) (race plan --reprobe forgets them).")
    (kept,) = json.loads((cache / "cpu-rates.json").read_text())["machines"].values()
    assert (kept["tiny-s"]["workers"], kept["tiny-s"]["jobs"]) == (1, 2)
    assert kept["tiny-s"]["sweep"] == str(straight.resolve())

    broken = tmp_path / "broken"
    proc = _run(broken, wait=False)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not list(broken.glob("jobs/*/checkpoint/state.json")):
        time.sleep(0.2)
    assert list(broken.glob("jobs/*/checkpoint/state.json")), "no job reached its first checkpoint"
    os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator and its job, mid-sweep
    proc.wait()
    states = {p.parent.name: json.loads(p.read_text())["state"] for p in broken.glob("jobs/*/status.json")}
    assert list(states.values()).count("done") < 2, f"the kill came after the sweep ended: {states}"

    res = _run(broken)  # the same command again: takes the stale lock over and resumes
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    a, b = job_outcomes(straight), job_outcomes(broken)
    assert set(a) == set(b) == {"G2", "G4"}
    for job in a:
        assert b[job][2] == "done"
        assert b[job][0] == a[job][0], f"{job}: metrics differ after the kill and rerun"
        assert b[job][1] == a[job][1], f"{job}: adapter weights differ after the kill and rerun"


RACE = ["grid=none", "model=tiny-s", "grpo.group_size=2,4", "grpo.prompts_per_iter=4", "budget.flops=6e9",
        "eval.at=[0,1]", "checkpoint.every=2", "task.num_eval=40", "seed=0,1", "--max-seeds", "3"]


def _race(sweep: Path, wait: bool = True):
    """The raced `race run` of RACE (seed=0,1 raced to 3 seeds) on 2 workers."""
    cmd = [sys.executable, "-m", "race_cli", "run", *RACE, "--sweep-dir", str(sweep), "--workers", "2"]
    env = {**os.environ, "COLUMNS": "200"}
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)


def _race_outcome(sweep: Path) -> dict:
    """A race's end: the jobs plan.json lists and the folders there, every job's outcome, every state record."""
    from race_cli.pool.race_loop import decide, sweep_schedule

    listed = sorted(r["job_id"] for r in json.loads((sweep / "plan.json").read_text())["jobs"])
    # the decisions, without the wall seconds per job reported beside them (`job_seconds`, and `take`, the
    # quickest of an equivalence): a killed and resumed job's seconds are not an uninterrupted one's
    states = [{k: v for k, v in s.to_json().items() if k not in ("job_seconds", "take")}
              for s in decide(sweep, sweep_schedule(sweep)).states]
    return {"listed": listed, "folders": sorted(p.name for p in (sweep / "jobs").iterdir()),
            "jobs": job_outcomes(sweep), "states": states}


@pytest.mark.slow
def test_race_killed_mid_look_then_rerun_equals_uninterrupted(tiny_s, tmp_path):
    """The raced `race run` killed with SIGKILL mid-look, at the last look the uninterrupted race reached, and
    rerun: the same jobs, outcomes (metrics, adapter weights) and race states."""
    straight = tmp_path / "straight"
    res = _race(straight)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "race (seeds per regime 2 -> 3" in res.stdout
    want = _race_outcome(straight)
    assert set(want["listed"]) >= {"G2_s0", "G2_s1", "G4_s0", "G4_s1"} and want["listed"] == want["folders"]
    assert all(s["state"] != "continue" for s in want["states"])
    last = "jobs/*_s2/checkpoint/state.json" if {"G2_s2", "G4_s2"} & set(want["listed"]) \
        else "jobs/*/checkpoint/state.json"

    broken = tmp_path / "broken"
    proc = _race(broken, wait=False)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not list(broken.glob(last)) and proc.poll() is None:
        time.sleep(0.2)
    assert list(broken.glob(last)), f"no job reached a checkpoint of the look matching {last}"
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    res = _race(broken)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert _race_outcome(broken) == want
