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
from race_cli.pool.lock import boot_id, process_start

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
    from race_cli.pool.command import run_main

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
    from race_cli.pool.command import run_main

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
    from race_cli.compose import compose

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
