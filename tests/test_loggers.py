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
    assert calls["init"]["mode"] == "offline" and calls["init"]["id"] == "tiny-s_G4"
    assert calls["init"]["dir"] == str(tmp_path) and calls["init"]["config"] == {"seed": 0}
    assert calls["log"] == [({"train/loss": 0.5}, 2)] and calls["finished"]


def test_missing_packages_say_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    with pytest.raises(RaceError, match=r"pip install 'race-cli\[wandb\]'"):
        make_logger("wandb", tmp_path, {})
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(RaceError, match=r"pip install 'race-cli\[tensorboard\]'"):
        make_logger("tensorboard", tmp_path, {})
