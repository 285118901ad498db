"""Hostile but fair use of every command: planted files, bad values, broken disks, two processes.

The threat model is docs/security.md: a sweep folder may come from someone else (nothing in it
is executed or unpickled, no path built from it leaves it), configs and the zoo cache are the
user's. Each case asserts the exit code, the message, and that nothing outside the expected
folder changed (`snapshot` before and after). Most cases fail before any model loads, so the
module stays fast; commands run as real subprocesses (`python -m race_cli ...`) where the exit
code and the absence of a traceback are the point.
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
from race_cli.lock import boot_id, process_start

ROOT = Path(__file__).resolve().parent.parent
JOB_LOCK_NAME = ".job.lock"  # docs/files.md
sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_job import command as fake_command  # noqa: E402
from fake_job import make_sweep  # noqa: E402


# --- helpers -------------------------------------------------------------------------------------

def snapshot(root: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under `root` with its mode and (for files) its bytes."""
    out: dict[str, tuple[int, bytes | None]] = {}
    for p in sorted(Path(root).rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(root))] = (st.st_mode, p.read_bytes() if p.is_file() and not p.is_symlink() else None)
    return out


def race(*args: str, cwd: Path, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m race_cli ARGS` in `cwd` with this checkout on PYTHONPATH."""
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "race_cli", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def assert_clean_error(res: subprocess.CompletedProcess, code: int, *fragments: str) -> None:
    """Exit `code`, every fragment in the output, and no traceback."""
    text = res.stdout + res.stderr
    assert res.returncode == code, (res.returncode, text[-3000:])
    assert "Traceback" not in text, text[-3000:]
    for f in fragments:
        assert f in text, (f, text[-3000:])


class Planted:
    """An object whose unpickling writes `marker`: what a hostile checkpoint would carry."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').write('pwned')",))


def tiny_trainable(tmp_path: Path):
    """A real torch model, optimizer and scheduler (no zoo) and a complete checkpoint of them."""
    import torch
    from safetensors.torch import save_file

    from race_cli.engine import checkpoint as ckpt_io

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda it: 1.0)
    model(torch.randn(4, 3)).sum().backward()
    opt.step()
    sched.step()
    folder = tmp_path / "job" / "checkpoint"
    folder.mkdir(parents=True)
    save_file({n: p.detach().clone() for n, p in model.named_parameters()}, str(folder / "trainable.safetensors"))
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, folder / "optim.pt")
    torch.save(ckpt_io.rng_state(), folder / "rng.pt")
    (folder / "state.json").write_text(json.dumps({"iteration": 2, "ledger": {}}))
    return model, opt, sched, folder


# --- 1. nothing in a sweep folder is unpickled ----------------------------------------------------

@pytest.mark.parametrize("name", ["optim.pt", "rng.pt"])
def test_planted_pickle_in_a_checkpoint_is_never_run(tmp_path, name):
    import torch

    from race_cli.engine import checkpoint as ckpt_io

    model, opt, sched, folder = tiny_trainable(tmp_path)
    marker = tmp_path / "pwned"
    torch.save({"optimizer": Planted(marker), "scheduler": Planted(marker)}, folder / name)
    found = ckpt_io.find(tmp_path / "job")
    with pytest.raises(Exception) as err:  # the type is checked below, after the marker
        ckpt_io.restore(found, model=model, optimizer=opt, scheduler=sched)
    assert not marker.exists(), "unpickling the checkpoint ran planted code"
    assert isinstance(err.value, ckpt_io.CorruptCheckpoint)
    msg = str(err.value)
    assert str(folder / name) in msg and f"Remove the folder {folder}" in msg and "never unpickled" in msg


def test_checkpoint_rng_states_round_trip_without_pickle(tmp_path):
    """What save writes loads under weights_only=True and restores every RNG exactly."""
    import random

    import numpy as np
    import torch

    from race_cli.engine import checkpoint as ckpt_io

    model, opt, sched, folder = tiny_trainable(tmp_path)
    random.random(), np.random.rand(), torch.rand(1)
    torch.save(ckpt_io.rng_state(), folder / "rng.pt")
    expected = (random.random(), float(np.random.rand()), float(torch.rand(1)))
    random.seed(9), np.random.seed(9), torch.manual_seed(9)
    ckpt_io.restore(ckpt_io.find(tmp_path / "job"), model=model, optimizer=opt, scheduler=sched)
    assert (random.random(), float(np.random.rand()), float(torch.rand(1))) == expected
    assert sched.last_epoch == 1 and opt.state_dict()["state"][0]["step"].item() == 1.0


@pytest.mark.parametrize("damage", ["truncated", "garbage", "state"])
def test_corrupt_checkpoint_says_which_folder_to_remove(tmp_path, damage):
    from race_cli.engine import checkpoint as ckpt_io

    model, opt, sched, folder = tiny_trainable(tmp_path)
    if damage == "truncated":
        data = (folder / "optim.pt").read_bytes()
        (folder / "optim.pt").write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        (folder / "trainable.safetensors").write_bytes(b"\x00" * 64)
    else:
        (folder / "state.json").write_text('{"iteration": "x"')
    with pytest.raises(ckpt_io.CorruptCheckpoint, match=f"Remove the folder {folder}"):
        ckpt_io.restore(ckpt_io.find(tmp_path / "job"), model=model, optimizer=opt, scheduler=sched)


# --- 2. job ids from files stay inside the sweep --------------------------------------------------

@pytest.mark.parametrize("bad_id", ["../../escaped", "..", "/tmp/abs", ".hidden", "a/b", 7, "x\n"])
def test_job_id_from_plan_json_cannot_leave_the_sweep(tmp_path, bad_id):
    from race_cli.pool.run import RunOptions, run_main

    sweep = make_sweep(tmp_path / "runs" / "s", {"ok-job": {"iterations": 1, "seconds": 0.0}})
    rows = json.loads((sweep / "plan.json").read_text())
    rows.append(dict(rows[0], job_id=bad_id))
    (sweep / "plan.json").write_text(json.dumps(rows))
    if isinstance(bad_id, str) and not bad_id.startswith("/") and "\n" not in bad_id:
        # the folder the id points at is planted too, so only the id check stops the run
        target = sweep / "jobs" / bad_id
        (target / ".hydra").mkdir(parents=True, exist_ok=True)
        (target / ".hydra" / "config.yaml").write_bytes((sweep / "jobs" / "ok-job" / ".hydra" / "config.yaml").read_bytes())
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="is not one race writes"):
        run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), job_command=fake_command,
                 say=lambda m: None)
    assert snapshot(tmp_path) == before


def test_job_folder_that_is_a_symlink_is_refused(tmp_path):
    from race_cli.pool.run import RunOptions, run_main

    sweep = make_sweep(tmp_path / "runs" / "s", {"ok-job": {"iterations": 1, "seconds": 0.0}})
    outside = tmp_path / "outside"
    (sweep / "jobs" / "ok-job").rename(outside)
    (sweep / "jobs" / "ok-job").symlink_to(outside)
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="symbolic link"):
        run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), job_command=fake_command,
                 say=lambda m: None)
    assert snapshot(tmp_path) == before


# --- 3. one process trains a job at a time; the report notices when two did -----------------------

@pytest.fixture
def live_holder():
    """A live process (not us) whose lock record looks like a race train's."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    time.sleep(0.05)
    record = {"pid": proc.pid, "host": socket.gethostname(), "boot_id": boot_id(),
              "process_start": process_start(proc.pid), "started": "2026-11-30T00:00:00+0000"}
    yield record
    proc.kill()
    proc.wait()


def _job_config():
    from race_cli.config.compose import compose

    return compose(["grid=none"])


def test_a_second_trainer_of_one_job_is_refused_before_it_writes(tmp_path, live_holder, monkeypatch):
    from race_cli.engine.job import Job

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / JOB_LOCK_NAME).write_text(json.dumps(live_holder))
    (job_dir / "status.json").write_text(json.dumps({"job_id": "job", "state": "running", "attempts": 1,
                                                     "pid": live_holder["pid"]}))
    (job_dir / "metrics.jsonl").write_text('{"iteration": 0}\n{"iteration": 1}\n')
    monkeypatch.setattr(Job, "setup", lambda self: pytest.fail("the second trainer started training"))
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="is training this job"):
        Job(_job_config(), job_dir, []).run()
    assert snapshot(tmp_path) == before


def test_the_job_lock_is_released_and_a_stale_one_taken_over(tmp_path, live_holder, monkeypatch):
    from race_cli.engine.job import Job

    job_dir = tmp_path / "job"
    job_dir.mkdir()
    gone = dict(live_holder, pid=2**22 + 17, process_start="1")  # no such process
    (job_dir / JOB_LOCK_NAME).write_text(json.dumps(gone))
    seen = {}

    def setup(self):
        seen["lock"] = json.loads((job_dir / JOB_LOCK_NAME).read_text())
        raise RaceError("stop here")

    monkeypatch.setattr(Job, "setup", setup)
    logs: list[str] = []
    with pytest.raises(RaceError, match="stop here"):
        Job(_job_config(), job_dir, [], log=logs.append).run()
    assert seen["lock"]["pid"] == os.getpid()  # held while training
    assert not (job_dir / JOB_LOCK_NAME).exists()  # and released after
    assert any("Taking over the lock of a race train that is gone" in m for m in logs)


def test_report_flags_a_job_whose_metrics_are_out_of_order(tmp_path):
    from report_fixtures import build_sweep

    from race_cli.report.table import read_sweeps

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    jobs = sorted(p for p in (sweep / "jobs").iterdir())
    victim = jobs[0]
    rows = [json.loads(x) for x in (victim / "metrics.jsonl").read_text().splitlines()]
    mixed = [rows[0], rows[1], rows[0], rows[2], rows[1]] + rows[3:]  # two writers interleaved: 0,1,0,2,1,...
    (victim / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in mixed))
    data = read_sweeps([sweep])
    row = data.jobs.set_index("job_id").loc[victim.name]
    assert not row["readable"] and "metrics.jsonl out of order (iteration 0 follows iteration 1 on line 3)" in row["problem"]
    assert data.jobs["readable"].sum() == len(jobs) - 1  # the others are still ranked


def test_the_same_sweep_twice_in_race_report_is_refused(tmp_path, capsys, monkeypatch):
    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), str(tmp_path / "." / "s"), "--no-plots")
    assert code == 2 and "the same folder as" in text and "counted twice" in text
    assert snapshot(tmp_path) == before


def test_two_copies_of_a_sweep_in_race_report_are_refused(tmp_path, capsys, monkeypatch):
    import shutil

    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "a" / "s", seeds=(0, 1), n_items=40)
    shutil.copytree(sweep, tmp_path / "b" / "s")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), str(tmp_path / "b" / "s"), "--no-plots")
    assert code == 2 and "a second sweep named like" in text and "rename one folder" in text
    assert snapshot(tmp_path) == before


# --- every command: one message, exit 2 (usage) or 1 (runtime), nothing outside changed -----------

def cli(monkeypatch, capsys, cwd: Path, *args: str) -> tuple[int, str]:
    """`race ARGS` in this process through race_cli.cli.main (its error handling included)."""
    from race_cli.cli import main

    monkeypatch.chdir(cwd)
    monkeypatch.setattr(sys, "argv", ["race", *args])
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main()
    out = capsys.readouterr()
    code = exit_.value.code if isinstance(exit_.value.code, int) else (0 if exit_.value.code is None else 1)
    return code, " ".join((out.out + out.err).split())  # rich wraps long lines: compare unwrapped


CASES = [  # (id, args, exit code, message fragment)
    ("inf-budget", ["plan", "grid=none", "budget.flops=inf"], 2, "budget.flops=inf is not a finite number"),
    ("nan-budget", ["plan", "grid=none", "budget.flops=nan"], 2, "budget.flops=nan"),
    ("overflow-budget", ["plan", "grid=none", "budget.flops=1e400"], 2, "is not a finite number"),
    ("inf-lr", ["plan", "grid=none", "grpo.lr=inf"], 2, "grpo.lr=inf is not a finite number"),
    ("huge-int", ["plan", "grid=none", "grpo.group_size=99999999999999999999999"], 2, "grpo.group_size=99999999999999999999999 is out of range: expected at most 4096"),
    ("unbounded-group", ["plan", "grid=none", "grpo.group_size=5000"], 2, "grpo.group_size=5000 is out of range: expected at most 4096"),
    ("unbounded-tokens", ["flops", "rollout.max_new_tokens=10000000"], 2, "rollout.max_new_tokens=10000000 is out of range"),
    ("huge-flops-group", ["flops", "grpo.group_size=100000000000000"], 2, "is out of range: expected at most 4096"),
    ("sweep-key-twice", ["plan", "grid=none", "grpo.group_size=4,8", "grpo.group_size=16,32"], 2,
     "grpo.group_size is already set by 'grpo.group_size=4,8'"),
    ("fixed-key-twice", ["flops", "seed=1", "seed=2"], 2, "seed is already set by 'seed=1'"),
    ("grid-path", ["plan", "grid=../../outside/evil"], 2, "Unknown grid option '../"),
    ("model-path", ["plan", "grid=none", "model=../../outside/m"], 2, "model= takes the name of an option in conf/model/"),
    ("reward-path", ["flops", "reward=/etc/passwd"], 2, "reward= takes the name of an option in conf/reward/"),
    ("hydra-override", ["flops", "hydra.searchpath=[file:///tmp]"], 2, "hydra.searchpath"),
    ("max-jobs-0", ["plan", "grid=none", "--max-jobs", "0"], 2, "invalid value for '--max-jobs'"),
    ("flops-no-iteration", ["flops", "budget.flops=1"], 2, "buys no iteration"),
    ("plan-no-iteration", ["plan", "grid=none", "budget.flops=1"], 2, "smaller than one iteration"),
    ("audit-batch-0", ["flops", "--audit", "--batch", "0"], 2, "invalid value for '--batch'"),
    ("workers-huge", ["run", "grid=none", "--workers", "100000000000"], 2, "invalid value for '--workers'"),
    ("time-min-0", ["run", "grid=none", "--time-min", "0"], 2, "invalid value for '--time-min'"),
    ("bootstrap-huge", ["report", "nowhere", "--bootstrap", "1000000000000"], 2, "invalid value for '--bootstrap'"),
    ("report-missing", ["report", "nowhere"], 2, "nowhere: no such folder"),
    ("report-a-file", ["report", "afile"], 2, "afile: no such folder"),
    ("plan-out-under-a-file", ["plan", "grid=none", "--out", "afile/sub"], 2, "a file is in the way"),
    ("plan-out-is-a-file", ["plan", "grid=none", "--out", "afile"], 2, "afile exists and is not a race sweep"),
    ("train-out-is-a-file", ["train", "grid=none", "--out", "afile"], 2, "a file is in the way"),
    ("train-both-folders", ["train", "--out", "x", "--job-dir", "y"], 2, "exactly one of --out DIR"),
    ("train-sweep", ["train", "grid=none", "grpo.group_size=4,8", "--out", "x"], 2, "is a sweep, but this command runs ONE job"),
    ("train-no-job", ["train", "--job-dir", "nojob"], 2, "No job config at nojob/.hydra/config.yaml"),
    ("run-sweep-dir-is-a-file", ["run", "grid=none", "--sweep-dir", "afile"], 2, "afile exists and is not a race sweep"),
    ("zoo-unknown", ["zoo", "nosuch"], 2, "zoo entry 'nosuch' is unknown"),
]


@pytest.mark.parametrize("args,code,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_gets_one_message_and_changes_nothing(tmp_path, capsys, monkeypatch, args, code, fragment):
    work = tmp_path / "work"
    work.mkdir()
    (work / "afile").write_text("a file, not a folder\n")
    outside = tmp_path / "outside"  # what the path overrides point at: never read or written
    outside.mkdir()
    (outside / "evil.yaml").write_text("name: evil\naxes: {}\nfixed: {}\n")
    (outside / "m.yaml").write_text("name: evil\n")
    args = [a.replace("../../outside", os.path.relpath(outside, ROOT / "conf" / "grid")) for a in args]
    before = snapshot(tmp_path)
    got, text = cli(monkeypatch, capsys, work, *args)
    assert got == code, text
    assert fragment.lower() in text.lower(), text
    assert "Traceback" not in text
    assert snapshot(tmp_path) == before


def test_full_disk_while_planning_exits_1_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import errno

    from race_cli.plan import build as plan

    def full(path, rows):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(plan, "_write_csv", full)
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "plan", "grid=none", "--out", "runs/x")
    assert code == 1 and "No space left on device" in text and "Free some space" in text
    assert snapshot(tmp_path) == dict(before, runs=snapshot_entry(tmp_path / "runs"))  # only the empty parent
    assert not any((tmp_path / "runs").iterdir())


def snapshot_entry(path: Path) -> tuple[int, None]:
    return (path.lstat().st_mode, None)


def test_read_only_output_exits_2_with_a_message(tmp_path, capsys, monkeypatch):
    import errno
    import tempfile

    def read_only(*a, **k):
        raise OSError(errno.EROFS, "Read-only file system", str(tmp_path / "ro"))

    (tmp_path / "ro").mkdir()
    monkeypatch.setattr(tempfile, "mkdtemp", read_only)  # as root, chmod cannot make a folder read-only
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "plan", "grid=none", "--out", "ro/x")
    assert code == 2 and "Read-only file system" in text and "Choose a folder you can write" in text
    assert snapshot(tmp_path) == before


def test_report_output_under_a_file_exits_2(tmp_path, capsys, monkeypatch):
    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    (tmp_path / "afile").write_text("x")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots", "--out", "afile/report")
    assert code == 2 and "A file is in the way" in text
    assert snapshot(tmp_path) == before


def test_damaged_zoo_entry_is_named_not_a_traceback(tmp_path, capsys, monkeypatch):
    from race_cli.zoo import entry_dir

    monkeypatch.setenv("RACE_CACHE", str(tmp_path / "cache"))
    entry = entry_dir("tiny-s")
    entry.mkdir(parents=True)
    (entry / "recipe.json").write_text('{"name": "tiny-s", "ha')
    (entry / "config.json").write_text("{}")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "zoo", "tiny-s")
    assert code == 0 and "is damaged (recipe.json is unreadable" in text and "race zoo --build tiny-s" in text
    assert snapshot(tmp_path) == before


# --- job folders: plan.json damage, status.json garbage, a corrected race train --------------------

def test_plan_json_listing_a_job_twice_is_refused(tmp_path):
    from race_cli.pool.run import RunOptions, run_main

    sweep = make_sweep(tmp_path / "s", {"a": {"iterations": 1}})
    rows = json.loads((sweep / "plan.json").read_text())
    (sweep / "plan.json").write_text(json.dumps(rows + rows))
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="lists job 'a' twice"):
        run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), job_command=fake_command,
                 say=lambda m: None)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("garbage", ['{"state": "runn', '[1, 2]', '{"state": "done", "attempts": "many"}'])
def test_garbage_status_json_keeps_the_attempt_count(tmp_path, garbage):
    from race_cli import status as st

    job = tmp_path / "job"
    job.mkdir()
    (job / "log.txt").write_text("\n===== race run: attempt 1 on h (cpu) at t: x\nboom\n"
                                 "\n===== race run: attempt 2 on h (cpu) at t: x\nboom\n")
    (job / "status.json").write_text(garbage)
    s = st.read_status(job)
    assert s["state"] == "pending" and s["attempts"] == 2 and "status.json was unreadable" in s["error"]
    assert st.begin_attempt(job, device="cpu")["attempts"] == 3


def _write_job(folder: Path, overrides: list[str]) -> None:
    from race_cli.config.compose import compose
    from race_cli.engine.train import _write_job_config

    _write_job_config(folder, compose(overrides), overrides)


def test_a_failed_race_train_folder_accepts_the_corrected_command(tmp_path, monkeypatch):
    from race_cli.engine import train as train_cmd
    from race_cli.engine.job import Job

    job = tmp_path / "j"
    _write_job(job, ["grid=none", "budget.flops=1"])  # what the failed first try left
    (job / "status.json").write_text(json.dumps({"job_id": "j", "state": "failed", "attempts": 1,
                                                 "error": "budget.flops=1 is smaller than one iteration"}))
    ran = {}
    monkeypatch.setattr(Job, "run", lambda self: ran.setdefault("budget", self.cfg.budget.flops) and 0)
    assert train_cmd.train_main(["grid=none", "budget.flops=1e12"], out=job) == 0
    assert ran["budget"] == 1e12
    assert "budget.flops=1e12" in (job / ".hydra" / "overrides.yaml").read_text()


def test_a_trained_folder_still_refuses_other_overrides(tmp_path):
    from race_cli.engine import train as train_cmd

    job = tmp_path / "j"
    _write_job(job, ["grid=none", "seed=1"])
    (job / "checkpoint").mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="already holds a job with overrides"):
        train_cmd.train_main(["grid=none", "seed=2"], out=job)
    assert snapshot(tmp_path) == before


def test_garbage_overrides_yaml_is_a_message(tmp_path):
    from race_cli.engine import train as train_cmd

    job = tmp_path / "j"
    _write_job(job, ["grid=none"])
    (job / ".hydra" / "overrides.yaml").write_text("- [unclosed\n")
    with pytest.raises(RaceError, match="Cannot read .*overrides.yaml"):
        train_cmd.train_main([], job_dir=job)


# --- files follow the user's umask ----------------------------------------------------------------

@pytest.mark.parametrize("umask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750)])
def test_sweep_files_follow_the_umask(tmp_path, capsys, monkeypatch, umask, file_mode, dir_mode):
    old = os.umask(umask)
    try:
        code, text = cli(monkeypatch, capsys, tmp_path, "plan", "grid=none", "--out", "runs/x")
    finally:
        os.umask(old)
    assert code == 0, text
    sweep = tmp_path / "runs" / "x"
    for p in [sweep, *sweep.rglob("*")]:
        want = dir_mode if p.is_dir() else file_mode
        assert p.stat().st_mode & 0o777 == want, (p, oct(p.stat().st_mode & 0o777))


# --- real processes: a second race train, SIGTERM -------------------------------------------------

def test_race_train_beside_a_live_trainer_exits_2(tmp_path, live_holder):
    job = tmp_path / "j"
    _write_job(job, ["grid=none"])
    (job / JOB_LOCK_NAME).write_text(json.dumps(live_holder))
    (job / "metrics.jsonl").write_text('{"iteration": 0}\n')
    before = snapshot(tmp_path)
    res = race("train", "--job-dir", str(job), cwd=tmp_path)
    assert_clean_error(res, 2, "is training this job", f"delete {job / JOB_LOCK_NAME}")
    assert snapshot(tmp_path) == before


def test_sigterm_ends_race_train_as_interrupted(tmp_path, capsys, monkeypatch):
    """race train (cli.main, this process) gets SIGTERM mid-job: status interrupted, exit 143, lock freed.

    In-process so that torch is imported once for the module; the signal is real (os.kill)."""
    from race_cli.engine.job import Job

    job = tmp_path / "j"
    _write_job(job, ["grid=none"])

    def setup(self):  # stands for a long model load: the signal arrives while the job is running
        assert json.loads((job / "status.json").read_text())["state"] == "running"
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
        pytest.fail("SIGTERM did not stop the job")

    monkeypatch.setattr(Job, "setup", setup)
    previous = signal.getsignal(signal.SIGTERM)
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    status = json.loads((job / "status.json").read_text())
    assert code == 128 + signal.SIGTERM and "stopped by SIGTERM" in text and "Traceback" not in text
    assert status["state"] == "interrupted" and status["stop_reason"] == "signal" and "resume" in status["error"]
    assert not (job / JOB_LOCK_NAME).exists()
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is put back


# === round two (issue 26): secrets, links, checkpoints that lie, counterfeit seeds, unbounded input ===

SECRET = "s3cr3t-value-26"


def _all_bytes(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(Path(root).rglob("*")) if p.is_file() and not p.is_symlink())


def _plant(config: Path, key: str, value: str) -> None:
    import yaml

    cfg = yaml.safe_load(config.read_text())
    node = cfg
    *parents, leaf = key.split(".")
    for k in parents:
        node = node[k]
    node[leaf] = value
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))


@pytest.mark.parametrize("key", ["model.path", "logger"])
def test_an_interpolation_in_a_job_config_never_reads_the_environment(tmp_path, key):
    """race train --job-dir: `${oc.env:SECRET}` is refused, not resolved; the value is printed and stored nowhere."""
    job = tmp_path / "j"
    _write_job(job, ["grid=none"])
    _plant(job / ".hydra" / "config.yaml", key, "${oc.env:RACE_TEST_SECRET}")
    before = snapshot(tmp_path)
    res = race("train", "--job-dir", str(job), cwd=tmp_path, env={"RACE_TEST_SECRET": SECRET})
    assert_clean_error(res, 2, f"{key} holds an interpolation", "race does not evaluate interpolations")
    assert SECRET not in res.stdout + res.stderr
    assert SECRET.encode() not in _all_bytes(tmp_path)
    after = snapshot(tmp_path)  # race train marks nothing: the config is refused before the job starts
    assert after == before


def test_an_interpolation_in_a_sweep_job_fails_that_job_without_the_secret(tmp_path, capsys, monkeypatch):
    """race run --sweep-dir with the real job command: the job fails (status, log) and neither holds the value."""
    from race_cli.pool.run import RunOptions, run_main

    code, text = cli(monkeypatch, capsys, tmp_path, "plan", "grid=none", "--out", "S")
    assert code == 0, text
    sweep = tmp_path / "S"
    (job,) = [p for p in (sweep / "jobs").iterdir()]
    _plant(job / ".hydra" / "config.yaml", "model.path", "${oc.env:RACE_TEST_SECRET}")
    monkeypatch.setenv("RACE_TEST_SECRET", SECRET)
    monkeypatch.setenv("RACE_FORKSERVER", "0")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    said: list[str] = []
    assert run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), say=said.append) == 1
    status = json.loads((job / "status.json").read_text())
    assert status["state"] == "failed" and "model.path holds an interpolation" in status["error"]
    assert "interpolation" in (job / "log.txt").read_text()
    assert SECRET.encode() not in _all_bytes(tmp_path) and not any(SECRET in m for m in said)


def test_report_does_not_write_through_a_linked_report_folder(tmp_path, capsys, monkeypatch):
    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    outside = tmp_path / "outside"
    outside.mkdir()
    (sweep / "report").symlink_to(outside)
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 2 and "is a symbolic link" in text and "never through a link" in text and "--out DIR" in text
    assert snapshot(tmp_path) == before and not any(outside.iterdir())


@pytest.mark.parametrize("name", ["log.txt", "metrics.jsonl", "checkpoint"])
def test_run_does_not_append_through_a_link_in_a_job_folder(tmp_path, name):
    from race_cli.pool.run import RunOptions, run_main

    sweep = make_sweep(tmp_path / "runs" / "s", {"a": {"iterations": 1, "seconds": 0.0}})
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("precious\n")
    (sweep / "jobs" / "a" / name).symlink_to(outside / "victim")
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match=f"jobs/a/{name} is a symbolic link: race writes job folders itself"):
        run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), job_command=fake_command,
                 say=lambda m: None)
    assert snapshot(tmp_path) == before
    assert (outside / "victim").read_text() == "precious\n"


def test_appends_and_atomic_writes_never_follow_a_link(tmp_path):
    """The last line of defence under every caller: io's appends open with O_NOFOLLOW, an atomic
    write refuses a linked parent folder (and replaces a linked file instead of writing through it)."""
    from race_cli import io

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("precious\n")
    job = tmp_path / "job"
    job.mkdir()
    (job / "metrics.jsonl").symlink_to(outside / "f")
    (job / "sub").symlink_to(outside)
    (job / "ledger.json").symlink_to(outside / "f")
    with pytest.raises(io.LinkRefused):
        io.append_jsonl(job / "metrics.jsonl", [{"iteration": 1}])
    with pytest.raises(io.LinkRefused):
        io.atomic_write_text(job / "sub" / "x.json", "{}")
    io.atomic_write_text(job / "ledger.json", "{}")  # replaces the link itself
    assert (outside / "f").read_text() == "precious\n" and sorted(p.name for p in outside.iterdir()) == ["f"]
    assert not (job / "ledger.json").is_symlink() and (job / "ledger.json").read_text() == "{}"
    with pytest.raises(io.LinkRefused):
        io.inside(job / "sub" / "deeper" / "y", job)


def test_a_job_file_linked_to_dev_zero_is_unreadable_not_a_hang(tmp_path):
    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    victim = sorted((sweep / "jobs").iterdir())[0]
    (victim / "metrics.jsonl").unlink()
    (victim / "metrics.jsonl").symlink_to("/dev/zero")
    res = race("report", str(sweep), "--no-plots", "--out", str(tmp_path / "rep"), cwd=tmp_path, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    runs = (tmp_path / "rep" / "runs.csv").read_text()
    line = next(x for x in runs.splitlines() if victim.name in x)
    assert "metrics.jsonl corrupt (LinkRefused" in line


@pytest.mark.parametrize("bomb", ["deep", "digits", "nan-ledger"])
def test_one_bad_job_file_is_listed_and_the_others_ranked(tmp_path, bomb):
    from report_fixtures import build_sweep

    from race_cli.report.table import read_sweeps

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    jobs = sorted((sweep / "jobs").iterdir())
    victim = jobs[0]
    if bomb == "deep":
        (victim / "summary.json").write_text("[" * 200_000 + "]" * 200_000)
        expected = "summary.json corrupt (ValueError"
    elif bomb == "digits":
        (victim / "ledger.json").write_text('{"budget_flops": ' + "9" * 5000 + "}")
        expected = "ledger.json corrupt (ValueError"
    else:
        led = json.loads((victim / "ledger.json").read_text())
        led["actual"]["flops"]["update"] = float("nan")
        (victim / "ledger.json").write_text(json.dumps(led))
        expected = "ledger.json malformed (actual flops update = nan is not a finite number >= 0)"
    data = read_sweeps([sweep])
    row = data.jobs.set_index("job_id").loc[victim.name]
    assert not row["readable"] and expected in row["problem"], row["problem"]
    assert data.jobs["readable"].sum() == len(jobs) - 1


# --- checkpoints that lie: validated before anything is cut -----------------------------------------

@pytest.fixture(scope="module")
def resumable(tmp_path_factory):
    """A real tiny job stopped after 2 of 30 iterations (checkpoint at 2, metrics lines 0..2)."""
    import yaml

    from test_job import build_model, overrides

    from race_cli.engine.train import train_main

    root = tmp_path_factory.mktemp("resumable")
    model = build_model(root / "model")
    job = root / "job"
    assert train_main(overrides(model, **{"budget.max_iterations": 2, "checkpoint.every": 1}), out=job) == 0
    cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
    cfg["budget"]["max_iterations"] = 30  # as if it had been stopped at iteration 2 of 30
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    (job / "summary.json").unlink()
    return job


def _state(job: Path, change) -> None:
    path = job / "checkpoint" / "state.json"
    state = json.loads(path.read_text())
    change(state)
    path.write_text(json.dumps(state))


def _tensors(job: Path, change) -> None:
    from safetensors.torch import load_file, save_file

    path = job / "checkpoint" / "trainable.safetensors"
    weights = load_file(str(path))
    change(weights)
    save_file(weights, str(path))


def _zero_ledger_and_metrics(job: Path) -> None:
    _state(job, lambda s: [v.update(model=0.0, executed=0.0) for v in s["ledger"]["flops"].values()])
    rows = [json.loads(x) for x in (job / "metrics.jsonl").read_text().splitlines()]
    rows = [{k: (0.0 if k.startswith("flops/") else v) for k, v in r.items()} for r in rows]
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _first(w: dict) -> str:
    return sorted(w)[0]


LIES = [  # (id, damage, message fragment)
    ("negative-iteration", lambda j: _state(j, lambda s: s.update(iteration=-5)), "iteration -5 is negative"),
    ("float-iteration", lambda j: _state(j, lambda s: s.update(iteration=2.0)), "iteration 2.0 is not an integer"),
    ("iteration-past-metrics", lambda j: _state(j, lambda s: s.update(iteration=7)),
     "iteration 7 has no line in metrics.jsonl (its last iteration is 2)"),
    ("iteration-past-cap", lambda j: _state(j, lambda s: s.update(iteration=50)), "past budget.max_iterations = 30"),
    ("negative-ledger", lambda j: _state(j, lambda s: s["ledger"]["flops"]["update"].update(model=-1e15)),
     "ledger.flops.update.model = -1000000000000000.0 is not a finite number >= 0"),
    ("zero-ledger", lambda j: _state(j, lambda s: [v.update(model=0.0) for v in s["ledger"]["flops"].values()]),
     "its ledger's total FLOPs (0) differ from flops/total"),
    ("nan-ledger", lambda j: _state(j, lambda s: s["ledger"]["flops"]["update"].update(model=float("nan"))),
     "ledger.flops.update.model = nan is not a finite number >= 0"),
    ("zero-ledger-and-metrics", _zero_ledger_and_metrics, "its ledger has spent 0 FLOPs, less than 4 prompts"),
    ("over-budget", lambda j: _state(j, lambda s: s["ledger"]["flops"]["update"].update(model=2e12)),
     "more than budget.flops = 1e+12"),
    ("wrong-shape", lambda j: _tensors(j, lambda w: w.update({_first(w): w[_first(w)][:1]})), "of shape"),
    ("wrong-names", lambda j: _tensors(j, lambda w: w.update(bogus=w.pop(_first(w)))),
     "does not match the model's trainable parameters"),
    ("nan-weights", lambda j: _tensors(j, lambda w: w[_first(w)].view(-1).__setitem__(0, float("nan"))),
     "holds non-finite values (NaN or inf)"),
]


@pytest.mark.parametrize("damage,fragment", [c[1:] for c in LIES], ids=[c[0] for c in LIES])
def test_a_lying_checkpoint_is_refused_before_metrics_are_cut(resumable, tmp_path, capsys, monkeypatch, damage, fragment):
    import shutil

    job = tmp_path / "job"
    shutil.copytree(resumable, job)
    damage(job)
    metrics = (job / "metrics.jsonl").read_bytes()
    kept = {p: (job / p).read_bytes() for p in ("metrics.jsonl", "ledger.json", "checkpoint/state.json",
                                                 "checkpoint/trainable.safetensors")}
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 2, text
    assert fragment in text and f"Remove the folder {job / 'checkpoint'}" in text and "Traceback" not in text, text
    assert metrics.count(b"\n") == 3 and (job / "metrics.jsonl").read_bytes() == metrics  # never shortened
    assert {p: (job / p).read_bytes() for p in kept} == kept
    status = json.loads((job / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 2 and fragment in status["error"]


def test_a_checkpoint_that_is_a_file_claims_no_intact_checkpoint(resumable, tmp_path, capsys, monkeypatch):
    import shutil

    job = tmp_path / "job"
    shutil.copytree(resumable, job)
    shutil.rmtree(job / "checkpoint")
    (job / "checkpoint").write_text("not a folder\n")
    metrics = (job / "metrics.jsonl").read_bytes()
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 2 and "is not a checkpoint folder (a file is in its place)" in text, text
    assert "intact" not in text and "Traceback" not in text
    assert (job / "metrics.jsonl").read_bytes() == metrics and (job / "checkpoint").read_text() == "not a folder\n"


def test_the_untouched_checkpoint_still_resumes(resumable, tmp_path, capsys, monkeypatch):
    """The checks refuse lies, not real checkpoints: the same folder resumes and finishes within its cap."""
    import shutil

    job = tmp_path / "job"
    shutil.copytree(resumable, job)
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 0, text
    assert "resumed from checkpoint at iteration 2 (0 metric lines dropped)" in text
    ledger = json.loads((job / "ledger.json").read_text())
    assert ledger["actual"]["iterations"] == 30 and ledger["actual"]["flops"]["total"] <= 1e12


def test_a_full_disk_mid_checkpoint_is_a_message(resumable, tmp_path, capsys, monkeypatch):
    """safetensors reports ENOSPC as SafetensorError('... os error 28'): the job says the disk is full."""
    import shutil

    import safetensors.torch
    from safetensors import SafetensorError

    job = tmp_path / "job"
    shutil.copytree(resumable, job)
    before = (job / "checkpoint" / "state.json").read_bytes()

    def full(*a, **k):
        raise SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                              'message: "No space left on device" })')

    monkeypatch.setattr(safetensors.torch, "save_file", full)
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 1, text
    assert "the disk is full (No space left on device)" in text and "Free some space, then rerun" in text, text
    assert "including the last complete checkpoint, are intact" in text and "Traceback" not in text
    assert (job / "checkpoint" / "state.json").read_bytes() == before  # the old checkpoint is the one kept
    assert not list(job.glob(".checkpoint.tmp-*"))


# --- counterfeit seeds ------------------------------------------------------------------------------

def _with_configs(sweep: Path) -> Path:
    """Give each fixture job the .hydra/config.yaml a real one has (its condition, knobs and seed)."""
    import yaml

    for jd in (sweep / "jobs").iterdir():
        s = json.loads((jd / "summary.json").read_text())
        (jd / ".hydra").mkdir(exist_ok=True)
        (jd / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": s["seed"], "condition": s["condition"],
                                                                   "knobs": s["knobs"]}))
    return sweep


def test_a_renamed_copy_of_a_sweep_is_refused_by_its_jobs(tmp_path, capsys, monkeypatch):
    import shutil

    from report_fixtures import build_sweep

    sweep = _with_configs(build_sweep(tmp_path / "a", seeds=(0, 1), n_items=40))
    shutil.copytree(sweep, tmp_path / "b")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), str(tmp_path / "b"), "--no-plots")
    assert code == 2 and "hold the same job (the same config and seed)" in text and "leave out the copy" in text, text
    assert snapshot(tmp_path) == before


def test_a_copied_job_folder_inside_one_sweep_is_refused(tmp_path, capsys, monkeypatch):
    import shutil

    from report_fixtures import build_sweep

    sweep = _with_configs(build_sweep(tmp_path / "a", seeds=(0, 1), n_items=40))
    first = sorted((sweep / "jobs").iterdir())[0]
    shutil.copytree(first, sweep / "jobs" / (first.name + "-again"))
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 2 and "hold the same job" in text, text


def test_provenance_replaced_by_a_folder_is_said(tmp_path, capsys, monkeypatch):
    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "a", seeds=(0, 1), n_items=40)
    (sweep / "provenance.json").mkdir()
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 0 and "validation comparison skipped" in text and "provenance.json is not a plain file (a folder)" in text


def test_not_a_sweep_names_the_folder(tmp_path, capsys, monkeypatch):
    (tmp_path / "empty").mkdir()
    code, text = cli(monkeypatch, capsys, tmp_path, "report", "empty")
    assert code == 2 and "race plan --out empty" in text and "{d}" not in text


CASES_26 = [  # (id, args, exit code, message fragment)
    ("seed-0-00", ["plan", "grid=none", "seed=0,00"], 2, "'seed=0,00': 0 and 00 are the same seed"),
    ("seed-1-1", ["plan", "grid=none", "seed=1,1", "--out", "S"], 2, "'seed=1,1': 1 and 1 are the same seed"),
    ("group-4-04", ["plan", "grid=none", "grpo.group_size=4,04"], 2, "4 and 04 are the same value"),
    ("range-1e9", ["plan", "grid=none", "seed=range(0,1000000000)"], 2,
     "expands to 1000000000 values, more than the maximum of 512 jobs (counted, not expanded)"),
    ("range-1e9-yes", ["plan", "grid=none", "seed=range(0,1000000000)", "--yes"], 2,
     "more than the maximum of 100000 jobs"),
    ("train-grid", ["train", "grid=tiny", "--out", "D"], 2, "'grid=tiny' selects a grid (a sweep of jobs)"),
    ("train-empty-out", ["train", "grid=none", "--out", ""], 2, "--out '' is empty"),
    ("train-empty-job-dir", ["train", "--job-dir", ""], 2, "--job-dir '' is empty"),
    ("train-out-foreign", ["train", "grid=none", "--out", "."], 2, "is not a job folder (no .hydra/config.yaml)"),
    ("gpu-mem-inf", ["plan", "grid=none", "--gpu-mem", "1e400GB"], 2, "--gpu-mem '1e400GB' is out of range"),
    ("mem-gpu-mem-inf", ["mem", "--gpu-mem", "1e400GB"], 2, "--gpu-mem '1e400GB' is out of range"),
    ("gpu-mem-zero", ["plan", "grid=none", "--gpu-mem", "0GB"], 2, "--gpu-mem '0GB' is out of range"),
    ("validate-scale-huge", ["validate", "nowhere", "--scale", "1e300"], 2,
     "invalid value for '--scale'"),
    ("validate-seeds-huge", ["validate", "nowhere", "--seeds", "100000"], 2,
     "invalid value for '--seeds'"),
]


@pytest.mark.parametrize("args,code,fragment", [c[1:] for c in CASES_26], ids=[c[0] for c in CASES_26])
def test_round_two_bad_input_gets_one_message_and_changes_nothing(tmp_path, capsys, monkeypatch, args, code, fragment):
    work = tmp_path / "work"
    work.mkdir()
    (work / "afile").write_text("a file, not a folder\n")
    before = snapshot(tmp_path)
    got, text = cli(monkeypatch, capsys, work, *args)
    assert got == code, text
    assert fragment.lower() in text.lower(), text
    assert "Traceback" not in text and "--yes" not in (text if args[0] == "validate" else "")
    assert "A file is in the way" not in text
    assert snapshot(tmp_path) == before


def test_a_job_config_linked_to_dev_zero_does_not_hang_race_run(tmp_path):
    """race run --sweep-dir looks at every job's config before running (zoo, model sizes): a config
    linked to /dev/zero is refused with the link named, not read forever."""
    from race_cli.pool.run import RunOptions, run_main

    sweep = make_sweep(tmp_path / "runs" / "s", {"a": {"iterations": 1, "seconds": 0.0}})
    config = sweep / "jobs" / "a" / ".hydra" / "config.yaml"
    config.unlink()
    config.symlink_to("/dev/zero")
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="config.yaml is a symbolic link"):
        run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), job_command=fake_command,
                 say=lambda m: None)
    assert snapshot(tmp_path) == before


# --- a full disk on every write path: one message (issue 36) --------------------------------------

SAFETENSORS_FULL = ('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                    'message: "No space left on device" })')  # what safetensors (and peft through it) raises


def _job_message(exc: OSError, job_dir: Path) -> str:
    """What a job prints for `exc` (Job._os_error, without building a job)."""
    from race_cli.engine.job import Job

    fake = Job.__new__(Job)
    fake.job_dir = job_dir
    return Job._os_error(fake, exc)


def _need_dev_full() -> None:
    """/dev/full (every write fails with ENOSPC) as a character device; opened for writing only, never
    renamed over (an atomic write onto it would replace the device with a file)."""
    import stat

    if not (os.path.exists("/dev/full") and stat.S_ISCHR(os.stat("/dev/full").st_mode)):
        pytest.skip("no /dev/full character device on this machine")


class _LoraLike:
    """A model whose save_pretrained fails as peft's (adapter) or transformers' (full weights) does on a full disk."""

    def __init__(self):
        import torch

        self.w = torch.nn.Parameter(torch.zeros(2))

    def save_pretrained(self, path):
        from safetensors import SafetensorError

        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "adapter_config.json").write_text("{}")  # half a folder, as a real save leaves it
        raise SafetensorError(SAFETENSORS_FULL)

    def named_parameters(self):
        return [("w", self.w)]


def test_every_checkpoint_write_path_ends_in_the_disk_full_message(tmp_path, monkeypatch):
    """adapter / full weights (save_pretrained through safetensors), trainable weights (safetensors),
    optimizer and RNG (torch.save): each full disk leaves as OSError(ENOSPC), nothing half-written,
    and the job's message is the one message."""
    import errno

    import torch

    from race_cli.engine import checkpoint as ckpt_io

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(2))], lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: 1.0)
    cases = {}
    # 1. adapter (LoRA) and 2. full weights: the same call, model.save_pretrained
    with pytest.raises(OSError) as err:
        ckpt_io.save(tmp_path / "a", model=_LoraLike(), optimizer=opt, scheduler=sched, state={"iteration": 1})
    cases["adapter"] = err.value
    # 3. trainable weights through safetensors' save_file
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save_file", lambda *a, **k: (_ for _ in ()).throw(
        __import__("safetensors").SafetensorError(SAFETENSORS_FULL)))
    with pytest.raises(OSError) as err:
        ckpt_io._save_safetensors({"w": torch.zeros(2)}, tmp_path / "t.safetensors")
    cases["trainable"] = err.value
    # 4. optimizer state through torch.save: /dev/full is a real full disk (given a path, torch said RuntimeError)
    _need_dev_full()
    with pytest.raises(OSError) as err:
        ckpt_io._save_torch({"optimizer": opt.state_dict()}, Path("/dev/full"))
    cases["optimizer"] = err.value
    for name, exc in cases.items():
        assert exc.errno == errno.ENOSPC, (name, exc)
        msg = _job_message(exc, tmp_path / "a")
        assert msg.startswith("the disk is full (No space left on device) while writing "), (name, msg)
        assert "Free some space, then rerun the same command: the job resumes from its last checkpoint." in msg
    assert not list((tmp_path / "a").glob(".checkpoint*")) and not (tmp_path / "a" / "checkpoint").exists()


def test_metrics_and_report_files_on_a_full_disk_end_in_the_same_message(tmp_path, capsys, monkeypatch):
    """metrics.jsonl appends (a real ENOSPC from /dev/full) and report files (atomic writes): one message."""
    import errno

    import race_cli.io as io_mod
    from race_cli.cli import _os_error_message

    _need_dev_full()
    monkeypatch.setattr(io_mod, "open_append", lambda path, mode=None: open("/dev/full", "ab"))
    with pytest.raises(OSError) as err:
        io_mod.append_jsonl(tmp_path / "metrics.jsonl", [{"iteration": 0}])
    assert err.value.errno == errno.ENOSPC
    assert _job_message(err.value, tmp_path).startswith("the disk is full (No space left on device) while writing")
    monkeypatch.undo()

    from report_fixtures import build_sweep

    sweep = build_sweep(tmp_path / "runs" / "s", seeds=(0, 1), n_items=40, iterations=4)

    def full(path, *a, **k):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    import race_cli.report.command as report_cmd

    monkeypatch.setattr(report_cmd, "atomic_write_text", full)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots", "--out", "rep")
    assert code == 1, text
    msg, exit_code = _os_error_message(OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "X"))
    assert exit_code == 1 and msg == "the disk is full (No space left on device) while writing X. Free some space, " \
                                     "then rerun the same command."
    assert "the disk is full (No space left on device) while writing" in text and "Free some space" in text, text
    assert "Traceback" not in text


def test_a_lora_job_whose_disk_fills_at_a_checkpoint_says_so_and_resumes_exactly(tmp_path, capsys, monkeypatch):
    """peft's save_pretrained raising SafetensorError(os error 28) at the second checkpoint: exit 1, the
    disk-full message, no traceback; with space again, the same command resumes, and metrics and ledger
    equal an uninterrupted run's."""
    import peft

    from test_job import build_model, overrides

    model = build_model(tmp_path / "model")
    ov = overrides(model, **{"checkpoint.every": 1, "budget.max_iterations": 3})
    assert "lora.enabled=false" not in ov  # the default: LoRA
    code, text = cli(monkeypatch, capsys, tmp_path, "train", *ov, "--out", "whole")
    assert code == 0, text

    real = peft.PeftModel.save_pretrained
    calls = {"n": 0}

    def fills(self, *a, **k):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint: the first one stays complete
            from safetensors import SafetensorError

            raise SafetensorError(SAFETENSORS_FULL)
        return real(self, *a, **k)

    monkeypatch.setattr(peft.PeftModel, "save_pretrained", fills)
    code, text = cli(monkeypatch, capsys, tmp_path, "train", *ov, "--out", "cut")
    assert code == 1, text
    assert "the disk is full (No space left on device)" in text and "Free some space, then rerun" in text, text
    assert "Traceback" not in text and "SafetensorError" not in text
    assert not list((tmp_path / "cut").glob(".checkpoint.tmp-*"))
    monkeypatch.setattr(peft.PeftModel, "save_pretrained", real)
    code, text = cli(monkeypatch, capsys, tmp_path, "train", *ov, "--out", "cut")
    assert code == 0, text

    def metrics(job):
        rows = [json.loads(line) for line in (tmp_path / job / "metrics.jsonl").read_text().splitlines()]
        return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]

    def ledger(job):
        doc = json.loads((tmp_path / job / "ledger.json").read_text())
        return {k: v for k, v in doc["actual"].items() if k not in ("seconds",)}

    assert metrics("cut") == metrics("whole")
    assert ledger("cut")["flops"] == ledger("whole")["flops"] and ledger("cut")["tokens"] == ledger("whole")["tokens"]
