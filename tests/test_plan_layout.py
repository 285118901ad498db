"""`race plan` reads in one screen: the headline (jobs, wall time, the race's price, what the pilot resolves)
first, then the per-job table, then a legend of the columns the width kept; the power per condition behind
--power-table; never two columns of one name (issue 53)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _plan(*args: str, columns: int = 80) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns), "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-m", "race_cli", "plan", *args], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done


@pytest.fixture(scope="module")
def default_80() -> subprocess.CompletedProcess:
    return _plan()


def test_the_headline_and_the_race_price_come_in_the_first_24_lines_at_80_columns(default_80):
    lines = default_80.stdout.splitlines()
    first = "\n".join(lines[:24])
    for said in ("race plan: grid 'tiny'", "planned wall time:", "  minimum ", "  expected ", "  maximum ",
                 "resolves with 80% power"):
        assert said in first, f"{said!r} not in the first 24 lines:\n{first}"
    assert lines.index(next(x for x in lines if x.startswith("job id"))) > lines.index(
        next(x for x in lines if x.startswith("  maximum "))), "the table comes after the headline"


def test_the_legend_explains_the_shown_columns_only(default_80):
    text = " ".join(default_80.stdout.split())
    header = next(x for x in default_80.stdout.splitlines() if x.startswith("job id"))
    assert "search / learning / feedback = planned shares" in text and "job time = the job's planned" in text
    for col, entry in (("mb", "mb = sequences per micro-batch"), ("T", "T: iterations"), ("GPU-h", "GPU-h = job"),
                       ("inf.", "inf. = planned share")):
        assert f" {col} " not in f" {header} " and entry not in text, f"{col} is not shown but explained"
    assert "Not shown at this width:" in text  # what the width dropped is named, not explained


def test_the_power_table_waits_for_its_flag_and_the_headline_sums_it_up(default_80):
    assert "Power before spending" not in default_80.stdout + default_80.stderr
    assert "Per condition: race plan --power-table." in " ".join(default_80.stdout.split())
    full = _plan("--power-table")
    assert "Power before spending" in full.stderr
    assert "joint comparison at 8e+11 FLOPs on arithmetic" in " ".join(full.stderr.split())


@pytest.mark.parametrize("columns", [180, 240])
def test_no_column_twice_at_wide_terminals(columns):
    header = next(x for x in _plan(columns=columns).stdout.splitlines() if x.startswith("job id"))
    names = header.replace("job id", "job_id").replace("peak mem", "peak_mem").replace("job time", "job_time").split()
    assert len(names) == len(set(names)), header
    assert "seed" in names and "T" in names  # the wide table still has them, once
    text = " ".join(_plan(columns=columns).stdout.split())
    assert "T: iterations" in text  # shown, so explained


def test_legend_by_hand():
    from race_cli.plan.render import FLOPS_NOTE, legend

    assert legend(["job id", "search", "learning", "feedback"], phase=False) == (
        "search / learning / feedback = planned shares of the job's FLOPs (rollout / update / reward). " + FLOPS_NOTE)
    assert legend(["job id", "peak mem"], phase=False) == "peak mem = planned peak device memory. " + FLOPS_NOTE
    assert "and its phase" in legend(["peak mem"], phase=True)
    assert legend(["job id"]) == FLOPS_NOTE


def test_power_line_by_hand():
    from types import SimpleNamespace as NS

    from race_cli.plan.render import power_line

    rows = [NS(gain=0.114, gap=0.113, seeds=2), NS(gain=0.092, gap=0.117, seeds=2)]
    joint = [NS(size=0.051, feedback=float("nan"))]
    line = power_line(rows, joint, 0.02, "assumed 0.02 (...)")
    assert line == ("resolves with 80% power (2 condition x target, seed sd 0.02 assumed): a gain over the start of "
                    "0.092-0.114, a gap between regimes of 0.113-0.117; joint: model size 0.051, rule - reward "
                    "model –. Per condition: race plan --power-table.")
    one = power_line([NS(gain=float("nan"), gap=float("nan"), seeds=1)], [], 0.03, "--seed-sd", table=True)
    assert one == ("resolves with 80% power (1 condition x target, seed sd 0.03 (--seed-sd)): a gain over the start "
                   "of –, a gap between regimes of – (one seed per regime: not testable).")
    assert power_line([], [], 0.02, "x") == ""
