"""The local pool of `race run` on CPU with fake jobs (tests/fake_job.py): scheduling, status records,
failures, --retry-failed, the sweep lock, Ctrl-C, and SIGKILL of a worker and of the orchestrator.

Every job here is tests/fake_job.py, whose outputs are a pure function of its config, so "the
results equal those of an uninterrupted sweep" is checked byte for byte.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from race_cli.errors import RaceError
from race_cli.io import read_json, read_jsonl
from race_cli import status as st
from race_cli.plan.build import prepare_sweep
from race_cli.pool.run import RunOptions, run_main
from race_cli.status import select_jobs
from race_cli.machine import visible_gpus
from race_cli.pool.local import LocalPool, cpu_slots, gpu_slots, longest_first, make_slots
from race_cli.lock import LOCK_NAME, SweepLock, boot_id, owner_record, process_start

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_job import command, make_sweep

ROOT = Path(__file__).resolve().parent.parent
# a `race run` in its own process, running the fake jobs (the job command is injected, never an env hook)
FAKE_IMPORT = (f"import sys; sys.path.insert(0, {str(Path(__file__).resolve().parent)!r}); from pathlib import Path; "
               "from race_cli.pool.run import RunOptions, run_main; from fake_job import command; ")
OUTPUTS = ("metrics.jsonl", "summary.json", "ledger.json", "checkpoint/state.json")


def run(sweep: Path, job_command=command, say=print, **kw) -> int:
    """`race run --sweep-dir SWEEP --workers 2` here, running the fake jobs (RunOptions from `kw`)."""
    return run_main(RunOptions(sweep_dir=sweep, **{"workers": 2, "report": False, "live": False, **kw}),
                    job_command=job_command, say=say)


def state(sweep: Path, job: str) -> dict:
    return read_json(sweep / "jobs" / job / "status.json")


def wait_until(cond, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def orchestrator(sweep: Path, *extra: str) -> subprocess.Popen:
    """`race run --sweep-dir SWEEP --workers 2` in its own process (run_main, no report)."""
    code = (FAKE_IMPORT + "sys.exit(run_main(RunOptions(sweep_dir=Path(sys.argv[1]), workers=2, report=False, "
            "live=False" + "".join(f", {e}" for e in extra) + "), job_command=command))")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, "-c", code, str(sweep)], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def assert_intact(sweep: Path, jobs: dict[str, dict]) -> None:
    """No file is corrupt: every JSON parses, metrics.jsonl holds iterations 1..N once each."""
    read_json(sweep / "plan.json")
    for job, spec in jobs.items():
        d = sweep / "jobs" / job
        for name in ("status.json", "summary.json", "ledger.json"):
            read_json(d / name)
        rows = read_jsonl(d / "metrics.jsonl")
        assert [r["iteration"] for r in rows] == list(range(1, spec.get("iterations", 3) + 1))
        assert not list(d.glob("**/.*.tmp")), "a temp file was left behind"


def same_results(a: Path, b: Path, jobs) -> None:
    for job in jobs:
        for name in OUTPUTS:
            assert (a / "jobs" / job / name).read_bytes() == (b / "jobs" / job / name).read_bytes(), (job, name)


# --- pure pieces ---------------------------------------------------------------------------------

def test_slots_threads_and_gpu_visibility(monkeypatch):
    # 5 GPUs, 2 per job: groups 0,1 and 2,3; GPU 4 alone cannot hold a job
    assert [s.name for s in gpu_slots(["0", "1", "2", "3", "4"], 2)] == ["cuda:0,1", "cuda:2,3"]
    assert gpu_slots(["0", "1"], 1)[1].env["CUDA_VISIBLE_DEVICES"] == "1"
    # 16 cores among 3 workers: 16 // 3 = 5 threads each
    slots = cpu_slots(3, 16)
    assert len(slots) == 3 and slots[0].env["OMP_NUM_THREADS"] == "5" and slots[0].env["CUDA_VISIBLE_DEVICES"] == ""
    assert len(make_slots(gpus=[], gpus_per_job=1, workers=None, n_jobs=3, cores=8)) == 3  # no more workers than jobs
    with pytest.raises(RaceError, match="more than the 2 GPUs"):
        make_slots(gpus=["0", "1"], gpus_per_job=4, workers=None, n_jobs=1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert visible_gpus() == ["3", "5"]
    for none in ("", "-1"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", none)
        assert visible_gpus() == []


def test_gpu_slots_give_each_vllm_engine_its_own_port(monkeypatch):
    """A shared VLLM_PORT makes every engine starting at once probe, then bind, the same port (vLLM
    test-binds before its TCPStore binds): each slot gets its own, 100 apart; unset, none is set."""
    assert all("VLLM_PORT" not in s.env for s in gpu_slots(["0", "1"], 1))
    assert [s.env["VLLM_PORT"] for s in gpu_slots(["0", "1", "2", "3"], 1, "29600")] == ["29600", "29700", "29800",
                                                                                        "29900"]
    monkeypatch.setenv("VLLM_PORT", "29600")
    slots = make_slots(gpus=["0", "1"], gpus_per_job=1, workers=None, n_jobs=2)
    assert [s.env["VLLM_PORT"] for s in slots] == ["29600", "29700"]


def test_longest_planned_job_first():
    rows = {"a": {"planned_flops_total": 1.0}, "b": {"planned_flops_total": 5.0},
            "c": {"planned_seconds": 9.0, "planned_flops_total": 0.1}, "d": {}}
    assert longest_first(["a", "b", "c", "d"], rows) == ["c", "b", "a", "d"]
    # budget-matched jobs tie on FLOPs: the one with more iterations (more fixed per-iteration cost) goes first
    tied = {"x": {"planned_flops_total": 8e11, "iterations": 424}, "y": {"planned_flops_total": 8e11, "iterations": 1563},
            "z": {"planned_flops_total": 8e11, "iterations": 424}}
    assert longest_first(["x", "y", "z"], tied) == ["y", "x", "z"]


def test_select_jobs_policy():
    states = {"a": "done", "b": "failed", "c": "interrupted", "d": "pending", "e": "running"}
    assert select_jobs(states, retry_failed=False) == ["c", "d", "e"]
    assert select_jobs(states, retry_failed=True) == ["b", "c", "d", "e"]


def test_end_attempt_decides_the_final_state(tmp_path):
    d = tmp_path / "j"
    d.mkdir()
    (d / "log.txt").write_text("line 1\nMemoryError: out of memory\n")
    st.write_status(d, {"job_id": "j", "state": "running", "attempts": 1})
    s = st.end_attempt(d, -9, stopped=False)
    assert s["state"] == "failed" and s["exit_code"] == -9 and "SIGKILL (out of memory" in s["error"]
    assert s["log_tail"].endswith("MemoryError: out of memory")
    st.write_status(d, {"job_id": "j", "state": "running", "attempts": 1})
    assert st.end_attempt(d, 0, stopped=False)["state"] == "failed"  # exit 0 but never wrote done
    st.write_status(d, {"job_id": "j", "state": "running", "attempts": 1})
    assert st.end_attempt(d, -15, stopped=True)["state"] == "interrupted"
    st.write_status(d, {"job_id": "j", "state": "done", "attempts": 1})
    assert st.end_attempt(d, 0, stopped=True)["state"] == "done"  # finished just before the stop


# --- running sweeps ------------------------------------------------------------------------------

def test_gpu_groups_each_job_sees_only_its_gpus(tmp_path):
    sweep = make_sweep(tmp_path / "s", {f"j{i}": {"seconds": 0.2, "iterations": 2} for i in range(4)})
    slots = make_slots(gpus=["0", "1", "2", "3"], gpus_per_job=2, workers=None, n_jobs=4)
    results = LocalPool(sweep, [f"j{i}" for i in range(4)], slots, job_command=command).run()
    assert results == {f"j{i}": "done" for i in range(4)}
    for i in range(4):
        s = state(sweep, f"j{i}")
        assert s["device"] in ("cuda:0,1", "cuda:2,3") and s["attempts"] == 1 and s["host"] == socket.gethostname()
        log = (sweep / "jobs" / f"j{i}" / "log.txt").read_text()
        assert f"CUDA_VISIBLE_DEVICES={s['device'][5:]}," in log  # printed by the fake job itself


def test_failed_job_reported_exit_1_and_retry_failed_reruns_it(tmp_path, capsys):
    jobs = {"ok1": {}, "boom": {"crash_at": 2}, "ok2": {"iterations": 2}}
    sweep = make_sweep(tmp_path / "s", jobs)
    assert run(sweep) == 1
    out = capsys.readouterr().out
    assert "1 job(s) failed" in out and "boom: exit code 1: RuntimeError: fake crash at iteration 2" in out
    s = state(sweep, "boom")
    assert s["state"] == "failed" and s["exit_code"] == 1 and "fake crash" in s["log_tail"] and s["attempts"] == 1
    assert state(sweep, "ok1")["state"] == state(sweep, "ok2")["state"] == "done"

    assert run(sweep) == 1  # failed jobs are left alone without --retry-failed
    assert state(sweep, "boom")["attempts"] == 1 and state(sweep, "ok1")["attempts"] == 1
    assert "nothing to run: 2 done, 1 failed (--retry-failed reruns them)" in capsys.readouterr().out

    assert run(sweep, retry_failed=True) == 0
    s = state(sweep, "boom")
    assert s["state"] == "done" and s["attempts"] == 2 and s["exit_code"] == 0
    assert "resuming from checkpoint at iteration 1" in (sweep / "jobs" / "boom" / "log.txt").read_text()
    assert state(sweep, "ok1")["attempts"] == 1  # done jobs are never rerun


def test_missing_command_fails_that_job_only(tmp_path):
    sweep = make_sweep(tmp_path / "s", {"a": {}, "b": {}})
    cmd = lambda d: ["/nonexistent/race-train", str(d)] if d.name == "a" else command(d)
    assert run(sweep, job_command=cmd) == 1
    assert state(sweep, "a")["state"] == "failed" and "could not start" in state(sweep, "a")["error"]
    assert state(sweep, "b")["state"] == "done"


def test_rich_display_on_a_terminal(tmp_path):
    import io

    from rich.console import Console

    from race_cli.pool.display import Progress, make_display

    sweep = make_sweep(tmp_path / "s", {"a": {"seconds": 0.6}, "b": {"seconds": 0.3}})
    buf = io.StringIO()
    progress = Progress(sweep, planned={"a": 3e9, "b": 3e9}, states={"a": "pending", "b": "pending"})
    display = make_display(progress, live=True, console=Console(file=buf, force_terminal=True, width=100))
    LocalPool(sweep, ["a", "b"], cpu_slots(2, 2), job_command=command, display=display).run()
    display.close()
    text = buf.getvalue()
    assert "2 done" in text and "6G / 6G" in text  # 2 jobs x 3 iterations x 1e9 FLOPs, all spent
    assert progress.total_spent() == 6e9 and progress.eta() == 0.0


# --- the lock ------------------------------------------------------------------------------------

def test_lock_held_by_a_live_process_refuses(tmp_path):
    sweep = make_sweep(tmp_path / "s", {"a": {}})
    with SweepLock(sweep):
        with pytest.raises(RaceError, match="Another race run .* is running this sweep"):
            SweepLock(sweep).acquire()
        assert run_main.__name__  # the command refuses the same way:
        with pytest.raises(RaceError, match="Another race run"):
            run(sweep)
    assert not (sweep / LOCK_NAME).exists()  # released
    assert state(sweep, "a")["state"] == "pending"


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


@pytest.mark.parametrize("why", ["dead pid", "rebooted", "pid reused"])
def test_stale_lock_is_taken_over(tmp_path, why, capsys):
    sweep = make_sweep(tmp_path / "s", {"a": {"iterations": 1}})
    rec = owner_record()
    if why == "dead pid":
        rec.update(pid=_dead_pid(), process_start="")
    elif why == "rebooted":
        rec.update(pid=1, boot_id="not-" + boot_id())
    else:  # pid 1 is alive, but it started at another time than the lock says
        rec.update(pid=1, process_start=str(int(process_start(1)) + 12345))
    (sweep / LOCK_NAME).write_text(json.dumps(rec))
    assert run(sweep) == 0
    assert "Taking over the lock of a race run that is gone" in capsys.readouterr().out
    assert state(sweep, "a")["state"] == "done" and not (sweep / LOCK_NAME).exists()


def test_lock_from_another_host_is_not_guessed(tmp_path):
    sweep = make_sweep(tmp_path / "s", {"a": {}})
    (sweep / LOCK_NAME).write_text(json.dumps({**owner_record(), "host": "some-other-node", "pid": _dead_pid()}))
    with pytest.raises(RaceError, match="delete .*race.lock"):
        SweepLock(sweep).acquire()


# --- signals and crashes -------------------------------------------------------------------------

SLOW = {"s1": {"seconds": 2.0, "iterations": 4}, "s2": {"seconds": 2.0, "iterations": 4},
        "f1": {"seconds": 0.4, "iterations": 2}}


def test_ctrl_c_marks_interrupted_and_rerun_resumes(tmp_path):
    sweep = make_sweep(tmp_path / "s", SLOW)
    orch = orchestrator(sweep)
    wait_until(lambda: (sweep / "jobs" / "s1" / "checkpoint" / "state.json").exists(), what="s1 mid-job")
    orch.send_signal(signal.SIGINT)
    out, _ = orch.communicate(timeout=30)
    assert orch.returncode == 130, out
    assert "Stopped by SIGINT" in out
    for j in ("s1", "s2"):  # longest first: both slow jobs were running
        s = state(sweep, j)
        assert s["state"] == "interrupted" and s["exit_code"] == -signal.SIGTERM, s
    assert not (sweep / LOCK_NAME).exists()
    assert run(sweep) == 0
    assert all(state(sweep, j)["state"] == "done" for j in SLOW)
    assert state(sweep, "s1")["attempts"] == 2
    assert "resuming from checkpoint" in (sweep / "jobs" / "s1" / "log.txt").read_text()
    ref = make_sweep(tmp_path / "ref", SLOW)
    assert run(ref) == 0
    same_results(sweep, ref, SLOW)
    assert_intact(sweep, SLOW)


def test_sigkill_worker_and_orchestrator_then_rerun_equals_uninterrupted(tmp_path):
    sweep = make_sweep(tmp_path / "s", SLOW)
    orch = orchestrator(sweep)
    ckpt = sweep / "jobs" / "s2" / "checkpoint" / "state.json"
    wait_until(lambda: ckpt.exists(), what="s2 mid-job")
    # SIGKILL a worker mid-job: its job is failed (killed), the others go on
    worker = state(sweep, "s2")["pid"]
    os.kill(worker, signal.SIGKILL)
    wait_until(lambda: state(sweep, "s2")["state"] == "failed", what="s2 marked failed")
    s = state(sweep, "s2")
    assert s["exit_code"] == -signal.SIGKILL and "SIGKILL" in s["error"]
    # SIGKILL the orchestrator mid-sweep: its children die with it (parent-death signal)
    wait_until(lambda: state(sweep, "s1")["state"] == "running" and
               (sweep / "jobs" / "s1" / "metrics.jsonl").exists(), what="s1 mid-job")
    children = [state(sweep, j).get("pid") for j in SLOW if state(sweep, j)["state"] == "running"]
    orch.kill()
    orch.communicate(timeout=10)
    wait_until(lambda: not any(_alive(p) for p in children), timeout=5, what="children to die with the orchestrator")
    assert (sweep / LOCK_NAME).exists()  # left behind by the dead orchestrator

    rc = subprocess.run([sys.executable, "-c", FAKE_IMPORT +
                         "sys.exit(run_main(RunOptions(sweep_dir=Path(sys.argv[1]), workers=2, retry_failed=True, "
                         "report=False, live=False), job_command=command))", str(sweep)],
                        env={**os.environ, "PYTHONPATH": str(ROOT)},
                        cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert rc.returncode == 0, rc.stdout + rc.stderr
    assert "Taking over the lock" in rc.stdout and "left running by a race run that is gone" in rc.stdout
    assert all(state(sweep, j)["state"] == "done" for j in SLOW)
    assert state(sweep, "s2")["attempts"] == 2
    ref = make_sweep(tmp_path / "ref", SLOW)
    assert run(ref) == 0
    same_results(sweep, ref, SLOW)
    assert_intact(sweep, SLOW)


def _alive(pid) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except OSError:
        return False


# --- the sweep folder from overrides -------------------------------------------------------------

def test_same_overrides_same_folder_and_a_different_plan_is_refused(tmp_path):
    over = ["grid=none", "model=tiny-s", "grpo.group_size=4,8"]
    first = prepare_sweep(over, None, yes=False, max_jobs=512, runs_root=tmp_path, say=lambda s: None)
    assert first.parent == tmp_path and first.name.startswith("none-")
    assert sorted(p.name for p in (first / "jobs").iterdir()) == sorted(r["job_id"] for r in read_json(first / "plan.json"))
    assert all(read_json(p / "status.json")["state"] == "pending" for p in (first / "jobs").iterdir())
    again = prepare_sweep(over, None, yes=False, max_jobs=512, runs_root=tmp_path, say=lambda s: None)
    assert again == first
    other = prepare_sweep(["grid=none", "model=tiny-s", "grpo.group_size=4,16"], None, yes=False, max_jobs=512,
                          runs_root=tmp_path, say=lambda s: None)
    assert other != first
    with pytest.raises(RaceError, match="different plan"):
        prepare_sweep(["grid=none", "model=tiny-s", "grpo.group_size=2"], first, yes=False, max_jobs=512,
                      say=lambda s: None)


def test_bad_arguments_are_reported_together(tmp_path):
    with pytest.raises(RaceError) as e:
        run_main(RunOptions(sweep_dir=tmp_path, workers=0, gpus_per_job=-1, launcher="k8s", time_min=0))
    assert len(e.value.problems) == 4
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_rerun_waits_for_a_worker_an_earlier_run_left_training(tmp_path):
    """SIGKILL of `race run` orphans its workers; the next run must not train a job beside one."""
    import subprocess
    import sys

    from race_cli.lock import JOB_LOCK_NAME
    from race_cli.pool.run import wait_for_live_trainers

    job = tmp_path / "jobs" / "G2"
    job.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from race_cli.lock import JobLock; lock = JobLock(sys.argv[1], say=lambda m: None).acquire(); "
        "print('held', flush=True); time.sleep(1.5); lock.release()"), str(job)], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    said: list[str] = []
    assert wait_for_live_trainers(tmp_path, ["G2", "G4"], said.append, poll_s=0.05) == ["G2"]
    assert holder.poll() is not None or not (job / JOB_LOCK_NAME).exists()  # returned only once the lock was free
    assert not (job / JOB_LOCK_NAME).exists() and "G2: pid" in said[0] and "waiting" in said[0]
    holder.wait(timeout=10)
    holder.stdout.close()
    assert wait_for_live_trainers(tmp_path, ["G2"], said.append) == []  # nothing held: no wait, no message


def test_the_end_line_checks_the_planned_wall_time(tmp_path):
    from race_cli.pool.run import wall_check_line

    # planned 60, 60 and 30 s on 2 slots, longest first: 60 | 60 + 30 -> the grid takes 90 s
    assert wall_check_line([60.0, 60.0, 30.0], 99.0, 2, "2 CPU worker(s)") == (
        "wall time 1m39s for 3 job(s) on 2 CPU worker(s); planned 1m30s (actual / planned 1.10).")
    assert "no planned seconds" in wall_check_line([60.0, None], 5.0, 2, "2 CPU worker(s)")

    sweep = make_sweep(tmp_path / "s", {"a": {"seconds": 0.2}, "b": {"seconds": 0.2}, "c": {"seconds": 0.2}})
    rows = read_json(sweep / "plan.json")
    for r in rows:
        r["planned_seconds"] = 2.0
    (sweep / "plan.json").write_text(json.dumps(rows))
    said: list[str] = []
    assert run(sweep, say=said.append) == 0
    assert said[-1].startswith("wall time ") and "for 3 job(s) on 2 CPU worker(s)" in said[-1], said
    assert "; planned 4s (actual / planned " in said[-1]  # 2 s | 2 s + 2 s on two workers
