"""One name per reward system: the config group option is the name in the job config, the plan, the
summary the job writes and every report view; sweeps written with the old `prm:<model name>` labels
read under today's names."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from race_cli.config.compose import compose, group_options
from race_cli.cost.budget import reward_label, reward_name

from report_fixtures import DEFAULT_CONDITION, Regime, build_sweep

ROOT = Path(__file__).resolve().parents[1]


def test_every_shipped_reward_is_named_by_its_config_group_option():
    for option in group_options("reward"):
        cfg = compose(["grid=none", f"reward={option}"])
        assert reward_name(cfg) == option
        if cfg.reward.model is not None:
            assert cfg.reward.model.name == option


def test_the_plan_names_the_reward_by_its_one_name():
    from race_cli.plan.build import build_plan

    rows = build_plan(["grid=none", "reward=rule,prm"]).rows()
    assert [r["reward"] for r in rows] == ["rule", "prm"]
    assert [r["job_id"] for r in rows] == ["rule", "prm"]


def test_old_labels_read_as_todays_names():
    assert reward_label("prm:qwen2.5-math-prm-7b") == "prm-7b"
    assert reward_label("prm:tiny-prm") == "prm"
    assert reward_label("tiny-prm") == "prm"  # an old job resumed now: its saved config keeps the old model name
    assert reward_label("prm:my-prm") == "my-prm"  # a user's own PRM: its model name
    assert reward_label("rule") == "rule" and reward_label("prm-7b") == "prm-7b"


def test_a_sweep_with_the_old_name_reports_under_the_new_one(tmp_path):
    """A sweep whose summaries say prm:qwen2.5-math-prm-7b and one that says prm-7b: one condition,
    one name in runs.csv, ranking.csv and the report's JSON."""
    from race_cli.report.table import read_sweeps

    regimes = [Regime(4, 1, 0.3), Regime(8, 1, 0.2)]
    old = build_sweep(tmp_path / "old", conditions=[{**DEFAULT_CONDITION, "reward": "prm:qwen2.5-math-prm-7b"}],
                      regimes=regimes, seeds=(0, 1), n_items=40, feedback={"prm:qwen2.5-math-prm-7b": 0.1})
    new = build_sweep(tmp_path / "new", conditions=[{**DEFAULT_CONDITION, "reward": "prm-7b"}],
                      regimes=regimes, seeds=(2, 3), n_items=40, feedback={"prm-7b": 0.1}, rng_seed=1)
    data = read_sweeps([old, new])
    assert set(data.jobs["reward"]) == {"prm-7b"}
    out = tmp_path / "report"
    got = subprocess.run([sys.executable, "-m", "race_cli", "report", str(old), "--no-plots", "--out", str(out),
                          "--bootstrap", "200"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert got.returncode == 0, got.stderr
    with open(out / "runs.csv", newline="") as f:
        assert {r["reward"] for r in csv.DictReader(f)} == {"prm-7b"}
    assert "qwen2.5-math-prm-7b" not in (out / "summary.md").read_text()
