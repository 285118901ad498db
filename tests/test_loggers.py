"""race_cli/engine/loggers.py: which values a logger mirrors, and the W&B run's settings (a stand-in
wandb module records the calls; the real TensorBoard files are read back in test_eval_targets.py)."""

from __future__ import annotations

import sys
import types

import pytest

from race_cli.engine.loggers import NullLogger, make_logger, scalars
from race_cli.errors import RaceError


def test_scalars_keep_finite_numbers_only():
    line = {"iteration": 3, "train/kl": None, "train/loss": -0.5, "tokens/prompt": 12, "flag": True,
            "eval/gsm8k/accuracy": 0.25, "bad": float("nan"), "note": "x"}
    assert scalars(line) == {"train/loss": -0.5, "tokens/prompt": 12.0, "eval/gsm8k/accuracy": 0.25}


def test_none_logger_and_unknown_kind(tmp_path):
    assert isinstance(make_logger("none", tmp_path, {}), NullLogger)
    with pytest.raises(RaceError, match="expected one of none, tensorboard, wandb"):
        make_logger("mlflow", tmp_path, {})


def test_wandb_offline_run_named_after_the_job(tmp_path, monkeypatch):
    calls = {}

    class Run:
        def log(self, values, step):
            calls.setdefault("log", []).append((values, step))

        def finish(self):
            calls["finished"] = True

    def init(**kw):
        calls["init"] = kw
        return Run()

    monkeypatch.setitem(sys.modules, "wandb", types.SimpleNamespace(init=init))
    monkeypatch.delenv("WANDB_MODE", raising=False)
    logger = make_logger("wandb", tmp_path, {"seed": 0}, job_id="tiny-s_G4")
    logger.log({"iteration": 2, "train/loss": 0.5, "train/kl": None})
    logger.close()
    # a job outside a sweep: no group, an id of its folder (run_identity; the sweep case runs real wandb below)
    assert calls["init"]["mode"] == "offline" and calls["init"]["id"].startswith(f"{tmp_path.name}-")
    assert calls["init"]["name"] == "tiny-s_G4" and calls["init"]["group"] is None
    assert calls["init"]["dir"] == str(tmp_path) and calls["init"]["config"] == {"seed": 0}
    assert calls["log"] == [({"train/loss": 0.5}, 2)] and calls["finished"]


def _sweep_job(root, sweep: str, job_id: str, created: str):
    """A job folder inside a sweep folder as race plan writes it (plan.json and multirun.yaml beside jobs/)."""
    sweep_dir = root / sweep
    job = sweep_dir / "jobs" / job_id
    job.mkdir(parents=True)
    (sweep_dir / "plan.json").write_text("[]")
    (sweep_dir / "multirun.yaml").write_text(f"overrides: []\ncreated: '{created}'\n")
    return job


def test_wandb_one_run_per_job_grouped_by_sweep_with_unique_ids_offline(tmp_path, monkeypatch):
    """Real wandb in offline mode: two sweeps (one of them under the same folder name elsewhere) each with a
    job `mu1`: three runs, three ids, grouped by their sweep; a resumed job reopens its own run."""
    pytest.importorskip("wandb", reason="logger=wandb needs the wandb extra (in dev)")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("WANDB_RUN_ID", raising=False)
    monkeypatch.delenv("WANDB_RUN_GROUP", raising=False)
    jobs = [_sweep_job(tmp_path / "a", "tiny-1234", "mu1", "2026-12-03T10:00:00Z"),
            _sweep_job(tmp_path / "b", "tiny-1234", "mu1", "2026-12-03T11:00:00Z"),
            _sweep_job(tmp_path / "a", "mine", "mu1", "2026-12-03T10:00:00Z")]
    seen = []
    for job in jobs:
        logger = make_logger("wandb", job, {"seed": 0}, job_id="mu1")
        logger.log({"iteration": 1, "train/reward_mean": 0.25})
        run = logger.run
        seen.append((run.id, run.group, run.name))
        logger.close()
        (offline,) = (job / "wandb").glob(f"offline-run-*-{run.id}")  # the run's own folder, under the job
        assert list(offline.glob(f"run-{run.id}.wandb"))
    ids = [s[0] for s in seen]
    assert len(set(ids)) == 3 and all(i.endswith("-mu1") for i in ids)
    assert [s[1] for s in seen] == ["tiny-1234", "tiny-1234", "mine"]
    assert [s[2] for s in seen] == ["tiny-1234/mu1", "tiny-1234/mu1", "mine/mu1"]
    again = make_logger("wandb", jobs[0], {"seed": 0}, job_id="mu1")  # a resumed job: the same run id
    assert again.run.id == ids[0]
    again.close()


def test_missing_packages_say_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(RaceError, match=r"pip install 'race-cli\[wandb\]'"):
        make_logger("wandb", tmp_path, {})
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(RaceError, match=r"pip install 'race-cli\[tensorboard\]'"):
        make_logger("tensorboard", tmp_path, {})
