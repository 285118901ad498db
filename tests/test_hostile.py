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
import pickle
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
    with pytest.raises(Exception) as err:  # noqa: B017 - the type is checked below, after the marker
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
    from race_cli.pool.run import run_main

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
        run_main([], sweep_dir=sweep, workers=1, report=False, live=False, job_command=fake_command, say=lambda m: None)
    assert snapshot(tmp_path) == before


def test_job_folder_that_is_a_symlink_is_refused(tmp_path):
    from race_cli.pool.run import run_main

    sweep = make_sweep(tmp_path / "runs" / "s", {"ok-job": {"iterations": 1, "seconds": 0.0}})
    outside = tmp_path / "outside"
    (sweep / "jobs" / "ok-job").rename(outside)
    (sweep / "jobs" / "ok-job").symlink_to(outside)
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="symbolic link"):
        run_main([], sweep_dir=sweep, workers=1, report=False, live=False, job_command=fake_command, say=lambda m: None)
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
    ("huge-int", ["plan", "grid=none", "grpo.group_size=99999999999999999999999"], 2, "is too large"),
    ("unbounded-group", ["plan", "grid=none", "grpo.group_size=5000"], 2, "grpo.group_size=5000 is out of range: expected at most 4096"),
    ("unbounded-tokens", ["flops", "rollout.max_new_tokens=10000000"], 2, "rollout.max_new_tokens=10000000 is out of range"),
    ("huge-flops-group", ["flops", "grpo.group_size=100000000000000"], 2, "is too large"),
    ("sweep-key-twice", ["plan", "grid=none", "grpo.group_size=4,8", "grpo.group_size=16,32"], 2,
     "grpo.group_size is already set by 'grpo.group_size=4,8'"),
    ("fixed-key-twice", ["flops", "seed=1", "seed=2"], 2, "seed is already set by 'seed=1'"),
    ("grid-path", ["plan", "grid=../../outside/evil"], 2, "Unknown grid option '../"),
    ("model-path", ["plan", "grid=none", "model=../../outside/m"], 2, "model= takes the name of an option in conf/model/"),
    ("reward-path", ["flops", "reward=/etc/passwd"], 2, "reward= takes the name of an option in conf/reward/"),
    ("hydra-override", ["flops", "hydra.searchpath=[file:///tmp]"], 2, "hydra.searchpath"),
    ("max-jobs-0", ["plan", "grid=none", "--max-jobs", "0"], 2, "--max-jobs 0: expected at least 1"),
    ("flops-no-iteration", ["flops", "budget.flops=1"], 2, "buys no iteration"),
    ("plan-no-iteration", ["plan", "grid=none", "budget.flops=1"], 2, "smaller than one iteration"),
    ("audit-batch-0", ["flops", "--audit", "--batch", "0"], 2, "--batch 0: expected 1 to 1024"),
    ("workers-huge", ["run", "grid=none", "--workers", "100000000000"], 2, "--workers 100000000000: expected 1 to 1024"),
    ("time-min-0", ["run", "grid=none", "--time-min", "0"], 2, "--time-min 0"),
    ("bootstrap-huge", ["report", "nowhere", "--bootstrap", "1000000000000"], 2, "--bootstrap 1000000000000: at most"),
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
    from race_cli.pool.run import run_main

    sweep = make_sweep(tmp_path / "s", {"a": {"iterations": 1}})
    rows = json.loads((sweep / "plan.json").read_text())
    (sweep / "plan.json").write_text(json.dumps(rows + rows))
    before = snapshot(tmp_path)
    with pytest.raises(RaceError, match="lists job 'a' twice"):
        run_main([], sweep_dir=sweep, workers=1, report=False, live=False, job_command=fake_command, say=lambda m: None)
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
