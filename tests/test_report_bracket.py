"""The findings' `edge:` / `bracket:` lines and the `search vs learning:` line (race_cli/report/bracket.py)
on a hand-built finished G × μ sweep with a known answer.

The sweep: tiny-s/tiny-m × rule/PRM × G ∈ {4, 8} × μ ∈ {1, 2} × 2 seeds at 8e11 FLOPs, 40 items scored 0/1.
Item i is correct when i < c (c per regime below); both seeds of a regime score the same items, so the seed
mean square is 0 and an interval is the item part alone: a t interval with 39 df (as tests/test_report_joint.py).

    (model, reward)   G=4 μ=1  G=4 μ=2  G=8 μ=1  G=8 μ=2   start
    tiny-m rule         30       28       36       26       24
    tiny-m prm          29       27       33       25       24
    tiny-s rule         14       10       20        9        0
    tiny-s prm          13       12       18       11        0

G=8 μ=1 is best in all four conditions: the grid's largest G and its fewest updates (μ = 1 cannot go lower),
so the one step past the edge is G=16 μ=1 for every condition. Search against learning, G=8 μ=1 − G=4 μ=2
matched on model and reward, is by hand (36−28 + 33−27 + 20−10 + 18−12) / 4 / 40 = 30/160 = +0.1875.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy.stats import t as t_dist

from race_cli.report import bracket as BR
from race_cli.report.build import ReportOptions, build_report
from report_fixtures import Regime, write_job

N = 40
ARCH = {"tiny-s": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 128, "vocab_size": 257},
        "tiny-m": {"hidden_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 256, "vocab_size": 257}}
GRID = {("tiny-m", "rule"): {(4, 1): 30, (4, 2): 28, (8, 1): 36, (8, 2): 26},
        ("tiny-m", "prm"): {(4, 1): 29, (4, 2): 27, (8, 1): 33, (8, 2): 25},
        ("tiny-s", "rule"): {(4, 1): 14, (4, 2): 10, (8, 1): 20, (8, 2): 9},
        ("tiny-s", "prm"): {(4, 1): 13, (4, 2): 12, (8, 1): 18, (8, 2): 11}}
START = {"tiny-m": 24, "tiny-s": 0}
P = {(4, 1): 0.60, (4, 2): 0.70, (8, 1): 0.58, (8, 2): 0.68}  # update shares: any, distinct


def first(c: int, shift: int = 0) -> np.ndarray:
    """Items shift .. shift + c − 1 correct, the rest wrong."""
    return ((np.arange(N) >= shift) & (np.arange(N) < shift + c)).astype(float)


def write_sweep(root: Path, grid: dict, shift: dict | None = None, typed: list[str] | None = None) -> Path:
    """A finished sweep of `grid` ({(model, reward): {(G, μ): c}}) with its multirun.yaml (grid tiny and the
    overrides as typed, as race writes them). shift: {(model, reward, G, μ): first correct item}."""
    jobs = root / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for (model, reward), cells in grid.items():
        cond = {"model": model, "budget_flops": 8e11, "reward": reward, "task": "arithmetic"}
        for (g, mu), c in cells.items():
            fb = 0.1 if reward == "prm" else 0.0
            scores = first(c, (shift or {}).get((model, reward, g, mu), 0))
            for s in (0, 1):
                jid = write_job(jobs, cond, Regime(g, mu, P[(g, mu)] * (1 - fb)), s, {"arithmetic": scores}, rng,
                                feedback=fb, start={"arithmetic": first(START[model])})
                # m = G, as every job's summary records it (report_fixtures leaves it out)
                doc = json.loads((jobs / jid / "summary.json").read_text())
                doc["knobs"]["update_group_size"] = g
                (jobs / jid / "summary.json").write_text(json.dumps(doc))
                # the model's shapes (its size) and what tells one run from another (no counterfeit second seed)
                (jobs / jid / ".hydra" / "config.yaml").write_text(
                    yaml.safe_dump({"model": {"name": model, "arch": ARCH[model]}, "seed": s, "run": jid}))
    (root / "multirun.yaml").write_text(yaml.safe_dump(
        {"overrides": typed if typed is not None else ["budget.flops=8e11", "model=tiny-s,tiny-m"],
         "grid": {"name": "tiny", "description": "a hand-built G x mu grid"}}))
    return root


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = write_sweep(tmp_path_factory.mktemp("b") / "tiny-0123abcd", GRID)
    return root, build_report(ReportOptions([root], plots=False, bootstrap=200))


def _line(findings: list[str], start: str) -> str:
    return next(x for x in findings if x.startswith(start))


def _sentences(rep) -> pd.DataFrame:
    joint = rep.joint
    return joint["sentences"] if isinstance(joint, dict) else joint.sentences


# --- the edge of the grid and the command that brackets it ---------------------------------------


def test_a_best_on_the_grids_edge_is_said_with_the_command_that_brackets_it(report):
    _, rep = report
    assert set(rep.ranking.loc[rep.ranking["rank"] == 1, "regime"]) == {"G=8 μ=1"}  # the premise
    assert _line(rep.findings, "edge:") == "edge: 4 of 4 bests at the grid's edge: G=8 (max) in 4, μ=1 (min, no lower) in 4"
    (cmd,) = [x[len("  bracket: "):] for x in rep.findings if x.startswith("  bracket: ")]  # one step: G=16 μ=1
    words = shlex.split(cmd)
    assert words[:3] == ["race", "run", "grid=tiny"]
    args = words[3:]
    # the typed budget stays, the typed model sweep gives way to the conditions' own lists
    assert args[0] == "budget.flops=8e11" and sum(a.startswith("model=") for a in args) == 1
    kv = dict(a.split("=", 1) for a in args)
    assert set(kv) == {"budget.flops", "model", "reward", "grpo.group_size", "grpo.updates_per_batch"}
    assert set(kv["model"].split(",")) == {"tiny-s", "tiny-m"} and set(kv["reward"].split(",")) == {"rule", "prm"}
    assert (kv["grpo.group_size"], kv["grpo.updates_per_batch"]) == ("16", "1")  # G doubled; μ = 1 goes no lower


def test_the_bracket_command_really_plans(report):
    """The printed overrides are a sweep race accepts: `race plan` of them (race run's planning, no torch)
    makes the 4 conditions × 2 seeds at G=16 μ=1, each solved to the pilot's budget."""
    _, rep = report
    overrides = shlex.split(_line(rep.findings, "  bracket: ")[len("  bracket: "):])[2:]  # race run <overrides>
    res = subprocess.run([sys.executable, "-m", "race_cli", "plan", "--no-race", "--format", "json", *overrides],
                         capture_output=True, text=True, env={**os.environ, "COLUMNS": "200", "RACE_CPU_PROBE": "off"},
                         timeout=300)
    assert res.returncode == 0, res.stderr
    jobs = json.loads(res.stdout)["jobs"]
    assert len(jobs) == 2 * 2 * 2
    assert {(j["model"], j["reward"], j["group_size"], j["updates_per_batch"]) for j in jobs} == \
        {(m, r, 16, 1) for m in ("tiny-s", "tiny-m") for r in ("rule", "prm")}
    assert all(0.98 <= j["budget_used"] <= 1.0 and j["budget_flops"] == 8e11 for j in jobs)


def test_overrides_read_from_a_sweep_folder_are_quoted_in_the_command():
    """multirun.yaml is data: an override planted there prints as one shell word, never as a command."""
    launch = BR.Launch(grid="tiny", overrides=("task.name=x; rm -rf ~", "model=a,b"))
    cmd = BR.bracket_command({BR.G: 16, BR.MU: 1}, [{"model": "tiny-s"}], ["model"], launch)
    assert shlex.split(cmd) == ["race", "run", "grid=tiny", "task.name=x; rm -rf ~", "model=tiny-s",
                                "grpo.group_size=16", "grpo.updates_per_batch=1"]


def _ranking(rows: list[tuple], learned: bool = True) -> pd.DataFrame:
    """One condition's ranking: rows (G, μ, rank)."""
    return pd.DataFrame({"condition": "c", "target": "t", "model": "tiny-s", "reward": "rule", "budget_flops": 8e11,
                         "task": "arithmetic", "group_size": [r[0] for r in rows],
                         "updates_per_batch": [r[1] for r in rows], "rank": [r[2] for r in rows],
                         "beats_start": learned})


def test_edges_by_hand():
    inside = [(4, 1, 4), (8, 1, 3), (16, 1, 5), (4, 2, 6), (8, 2, 1), (16, 2, 7), (8, 4, 2)]
    assert BR.find_edges(_ranking(inside)) == []  # G=8 μ=2: inside on both axes
    # G=4 the smallest G (halved: G=2, the least GRPO takes), μ=2 the largest μ (doubled: 4)
    edges = BR.find_edges(_ranking([(4, 2, 1), (8, 2, 2), (4, 1, 3)]))
    assert {(e.axis, e.side): e.next for e in edges} == {(BR.G, "low"): {BR.G: 2, BR.MU: 2},
                                                          (BR.MU, "high"): {BR.G: 4, BR.MU: 4}}
    # G=2 goes no lower (G >= 2); μ=4 the largest: μ=8
    edges = BR.find_edges(_ranking([(2, 4, 1), (4, 4, 2), (2, 2, 3)]))
    assert {(e.axis, e.side): e.next for e in edges} == {(BR.G, "low"): None, (BR.MU, "high"): {BR.G: 2, BR.MU: 8}}
    # one G only is no axis; μ=1 is on the edge and goes no lower
    edges = BR.find_edges(_ranking([(4, 1, 1), (4, 2, 2)]))
    assert [(e.axis, e.side, e.next) for e in edges] == [(BR.MU, "low", None)]
    lines = BR.edge_lines(_ranking([(4, 1, 1), (4, 2, 2)]))
    assert lines == ["edge: 1 of 1 bests at the grid's edge: μ=1 (min, no lower) in 1"]  # and no command
    assert BR.find_edges(_ranking([(4, 1, 1), (8, 1, 2)], learned=False)) == []  # nothing learned: no best
    # a race's state names its best: the edge line follows it, not the ranking's first row
    named = _ranking([(8, 1, 1), (4, 1, 2), (8, 2, 3)]).assign(regime=["G=8 μ=1", "G=4 μ=1", "G=8 μ=2"])
    assert [(e.axis, e.side) for e in BR.find_edges(named)] == [(BR.G, "high"), (BR.MU, "low")]
    assert [(e.axis, e.side) for e in BR.find_edges(named, {"c": "G=4 μ=1"})] == [(BR.G, "low"), (BR.MU, "low")]


# --- search against learning at equal FLOPs ---------------------------------------------------------


def test_search_vs_learning_is_the_matched_contrast_with_its_hand_interval(report):
    """G=8 μ=1 − G=4 μ=2 averaged over the 4 (model, reward) pairs, item by item: d_i = mean over pairs of
    the two regimes' item scores' difference; seeds score alike, so the interval is mean(d) ± t(0.975, 39)·
    sd(d)/√40, and it clears zero: G=8 μ=1 ahead."""
    _, rep = report
    d = np.mean([first(c[(8, 1)]) - first(c[(4, 2)]) for c in GRID.values()], axis=0)
    m, se = d.mean(), d.std(ddof=1) / math.sqrt(N)
    assert m == pytest.approx(30 / 160)  # the hand figure of the module docstring
    q = float(t_dist.ppf(0.975, N - 1))
    s = _sentences(rep)
    row = s[s["question"] == BR.QUESTION].iloc[0]
    assert (row["a"], row["b"], row["n_pairs"]) == ("G=8 μ=1", "G=4 μ=2", 4)
    assert row["diff"] == pytest.approx(m, abs=1e-12)
    assert (row["ci_lo"], row["ci_hi"]) == (pytest.approx(m - q * se, abs=1e-9), pytest.approx(m + q * se, abs=1e-9))
    assert row["winner"] == "G=8 μ=1"
    assert _line(rep.findings, "  search vs learning: ") == (
        f"  search vs learning: G=8 μ=1 − G=4 μ=2 {m:+.3f} [{m - q * se:+.3f}, {m + q * se:+.3f}], G=8 μ=1 ahead")
    # its own 5%: the size and feedback claims keep the gatekept family they had (10 claims)
    assert set(s.loc[s["question"] != BR.QUESTION, "n_claims"].dropna()) == {10}


def test_search_vs_learning_not_separated_when_the_two_allocations_score_alike(tmp_path):
    """Equal counts on shifted items: every pair's difference averages 0 item by item, the interval straddles
    zero and the line says so."""
    grid = {k: {**v, (8, 1): v[(4, 2)]} for k, v in GRID.items()}
    shift = {(m, r, 8, 1): 3 for m, r in GRID}
    root = write_sweep(tmp_path / "tiny-eq", grid, shift=shift)
    rep = build_report(ReportOptions([root], plots=False, bootstrap=100))
    line = _line(rep.findings, "  search vs learning: ")
    assert line.startswith("  search vs learning: G=8 μ=1 − G=4 μ=2 +0.000 [") and line.endswith(", not separated")


def test_the_launch_is_read_as_data(tmp_path):
    """multirun.yaml's grid name and typed overrides; anything else (a link, not a mapping, overrides that
    are not strings) gives no launch or no overrides, never an error: the findings must not hide the report."""
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"overrides": ["seed=0,1"], "grid": {"name": "pilot"}}))
    assert BR.read_launch(tmp_path) == BR.Launch(grid="pilot", overrides=("seed=0,1",))
    (tmp_path / "multirun.yaml").write_text(yaml.safe_dump({"overrides": [{"a": 1}], "grid": "tiny"}))
    assert BR.read_launch(tmp_path) == BR.Launch(grid=None, overrides=())
    (tmp_path / "multirun.yaml").write_text("- a list\n")
    assert BR.read_launch(tmp_path) is None
    (tmp_path / "real.yaml").write_text(yaml.safe_dump({"grid": {"name": "tiny"}}))
    (tmp_path / "multirun.yaml").unlink()
    (tmp_path / "multirun.yaml").symlink_to(tmp_path / "real.yaml")
    assert BR.read_launch(tmp_path) is None  # a link in a sweep folder is refused
    assert BR.read_launch(tmp_path / "missing") is None
