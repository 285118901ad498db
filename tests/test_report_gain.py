"""Gain over the starting policy: hand-computed point and interval, and the plain sentence a
condition opens with when no regime beats its start (in the report and in `race run`'s summary)."""

from __future__ import annotations

import itertools
import json
from io import StringIO

import numpy as np
import pandas as pd
import pytest

from race_cli.report.build import ReportOptions
from race_cli.report.command import run_report
from race_cli.report.rank import rank_all
from race_cli.report.table import SweepData
from report_fixtures import Regime, build_sweep, peaked

LEVEL_LO, LEVEL_HI = 0.025, 0.975


def _quiet(**kw):
    from rich.console import Console

    buf = StringIO()
    res = run_report(ReportOptions(**kw), console=Console(file=buf, width=250))
    return res, buf.getvalue()


def _data(jobs: list[dict], items: dict, items_initial: dict) -> SweepData:
    df = pd.DataFrame(jobs)
    df["state"], df["readable"] = "done", True
    return SweepData(jobs=df, items=items, items_initial=items_initial,
                     knob_cols=["group_size"], targets=["arith"])


def _exact_quantile(values: list[float], q: float) -> tuple[float, float]:
    """Smallest support value v with P(mean ≤ v) ≥ q over all n^n equally likely resamples,
    and how far q is from the CDF's nearest jump (the bootstrap estimate is safe when large)."""
    n = len(values)
    means = np.array([np.mean([values[i] for i in pick]) for pick in itertools.product(range(n), repeat=n)])
    support = np.unique(means)
    cdf = np.array([(means <= v + 1e-12).mean() for v in support])
    k = int(np.argmax(cdf >= q))
    margin = min(abs(cdf[k] - q), abs(q - (cdf[k - 1] if k else 0.0)))
    return float(support[k]), float(margin)


def test_gain_and_interval_on_four_items_by_hand():
    # One job, four items, fractional scores (k = 4 samples per item). Start and end list the
    # items in different orders: pairing is by id.
    #   item      a     b     c     d
    #   start   0.00  0.25  0.50  0.50   mean 0.3125
    #   end     0.50  0.75  0.50  1.00   mean 0.6875
    #   gain    0.50  0.50  0.00  0.50   mean 0.375 = 0.6875 − 0.3125
    # One seed, so the interval covers item noise only: deviations +.125 +.125 −.375 +.125,
    # Σ² = 0.1875, variance (ddof 1) 0.0625, se = √(0.0625/4) = 0.125, t(3) 97.5% = 3.18245:
    # 0.375 ± 0.39781 = [−0.02281, 0.77281]. It reaches zero: four items cannot show a gain.
    start = {"d": 0.5, "c": 0.5, "a": 0.0, "b": 0.25}
    end = {"a": 0.5, "b": 0.75, "c": 0.5, "d": 1.0}
    jobs = [{"sweep": "s", "job_id": "j", "group_size": 4, "eval/arith": 0.6875,
             "eval_initial/arith": 0.3125}]
    data = _data(jobs, {("s", "j", "arith"): (list(end), np.array(list(end.values())))},
                 {("s", "j", "arith"): (list(start), np.array(list(start.values())))})
    r = rank_all(data, "arith", by=[], n_boot=20000, seed=1).iloc[0]
    assert r["start"] == pytest.approx(0.3125) and r["mean"] == pytest.approx(0.6875)
    assert r["gain"] == pytest.approx(0.375)
    assert r["gain_ci_lo"] == pytest.approx(-0.02281, abs=1e-5)
    assert r["gain_ci_hi"] == pytest.approx(0.77281, abs=1e-5)
    assert not r["beats_start"]
    assert r["gain_method"] == "items (paired with the start, pooled over the condition's 1 jobs) × seeds"
    assert "evaluation noise only" in r["noise"]


def test_gain_interval_over_seeds_when_the_start_has_no_item_scores():
    # Two seeds of one regime, job-level scores only: gains 0.5 − 0.4 = 0.1 and 0.6 − 0.3 = 0.3.
    # Point 0.2; seed variance (ddof 1) 0.02, of the mean 0.01, se 0.1, one degree of freedom, which the
    # heterogeneity prior (stats/variance.HETERO_DF = 12) turns into 1/(1/1 + 1/12) = 0.923077 df:
    # t(0.923077) 97.5% = 15.50304, interval 0.2 ± 1.550304 = [−1.35030, 1.75030]: two seeds cannot
    # show this gain (the old two-seed bootstrap said [0.1, 0.3], covering nothing but the seeds).
    jobs = [{"sweep": "s", "job_id": f"j{k}", "group_size": 4, "eval/arith": e, "eval_initial/arith": i}
            for k, (e, i) in enumerate([(0.5, 0.4), (0.6, 0.3)])]
    r = rank_all(_data(jobs, {}, {}), "arith", by=[], n_boot=4000, seed=0).iloc[0]
    assert r["gain"] == pytest.approx(0.2) and r["start"] == pytest.approx(0.35)
    assert (r["gain_ci_lo"], r["gain_ci_hi"]) == (pytest.approx(-1.35030, abs=1e-5), pytest.approx(1.75030, abs=1e-5))
    assert not r["beats_start"] and r["gain_method"] == "seeds only (no per-item start scores)"


def test_a_gain_whose_interval_reaches_zero_does_not_beat_the_start():
    # gains per item +1, −1, 0, +1 (0/1 scores): mean +0.25; a resample of four items is ≤ 0
    # with probability well above 2.5% (e.g. K(+1) = 1, K(−1) = 1: 0), so the interval reaches 0.
    ids = ["a", "b", "c", "d"]
    jobs = [{"sweep": "s", "job_id": "j", "group_size": 4, "eval/arith": 0.5, "eval_initial/arith": 0.25}]
    data = _data(jobs, {("s", "j", "arith"): (ids, np.array([1.0, 0.0, 0.0, 1.0]))},
                 {("s", "j", "arith"): (ids, np.array([0.0, 1.0, 0.0, 0.0]))})
    r = rank_all(data, "arith", by=[], n_boot=4000, seed=0).iloc[0]
    assert r["gain"] == pytest.approx(0.25) and r["gain_ci_lo"] < 0 < r["gain_ci_hi"]
    assert not r["beats_start"]


def test_the_sum_of_start_and_gain_is_the_final_score_on_a_sweep(tmp_path):
    root = build_sweep(tmp_path / "s", initial=0.35, n_items=100)
    r = _quiet(sweep_dirs=[root], plots=False, bootstrap=200)[0].ranking
    np.testing.assert_allclose(r["start"] + r["gain"], r["mean"], atol=1e-12)
    assert r["start"].nunique() == 1  # one warm start for the whole condition (fixture)


# --- the sentence ------------------------------------------------------------------------

NO_GAIN = "No regime beats its starting policy on arithmetic"


def test_no_regime_beats_its_start_opens_the_section_and_the_run_summary(tmp_path):
    # truth peaks at 0.6 but the start scores 0.65: every regime ends at or below its start.
    root = build_sweep(tmp_path / "s", acc=peaked(0.25, top=0.6), initial=0.65)
    res, terminal = _quiet(sweep_dirs=[root], plots=False, bootstrap=300)
    assert not res.ranking["beats_start"].any()
    rec = res.recommendations.iloc[0]
    assert rec["no_gain"].startswith(NO_GAIN) and not rec["learned"] and rec["validate"] == ""
    md = (root / "report" / "summary.md").read_text()
    section = md.split("#### ")[1]  # the condition's section
    assert section.split("\n\n")[1].strip("*").startswith(NO_GAIN)  # first thing after the heading
    assert "it is not a finding" in section and "Nothing is worth validating for arithmetic" in section
    assert "Worth validating" not in md
    assert NO_GAIN in terminal
    doc = json.loads((root / "report" / "report.json").read_text())
    assert doc["recommendations"][0]["no_gain"].startswith(NO_GAIN)

    from race_cli.report.command import print_report_top

    said: list[str] = []
    print_report_top(root, said.append)
    assert any(s.startswith(NO_GAIN) for s in said), said


def test_the_sentence_is_absent_when_a_regime_beats_its_start(tmp_path):
    root = build_sweep(tmp_path / "s", acc=peaked(0.25, top=0.6), initial=0.3)
    res, terminal = _quiet(sweep_dirs=[root], plots=False, bootstrap=300)
    assert res.ranking["beats_start"].any() and res.recommendations.iloc[0]["no_gain"] == ""
    md = (root / "report" / "summary.md").read_text()
    assert "beats its starting policy" not in md and "beats its starting policy" not in terminal
    assert "Worth validating for arithmetic" in md

    from race_cli.report.command import print_report_top

    said: list[str] = []
    print_report_top(root, said.append)
    assert not any("starting policy" in s for s in said)


def test_only_one_regime_beating_the_start_is_enough(tmp_path):
    # start 0.53: only the peak regime (0.6 at p = 0.25, gain +0.07) clears it after Holm over the
    # five regimes; the next, 0.545 at p = 0.40, gains +0.015, within 1000 items × 3 seeds' noise
    root = build_sweep(tmp_path / "s", acc=peaked(0.25, top=0.6), initial=0.53, n_items=1000,
                       item_sd=0.1)
    res, _ = _quiet(sweep_dirs=[root], plots=False, bootstrap=300)
    r = res.ranking.set_index("regime")
    assert r["beats_start"].sum() == 1 and r.loc["G=8 μ=2", "beats_start"]
    assert res.recommendations.iloc[0]["no_gain"] == ""


def test_without_a_starting_evaluation_the_gain_is_unknown_and_said_so(tmp_path):
    root = build_sweep(tmp_path / "s", initial=None, regimes=[Regime(4, 1, 0.2), Regime(8, 1, 0.1)],
                       n_items=50)
    res, terminal = _quiet(sweep_dirs=[root], plots=False, bootstrap=200)
    r = res.ranking
    assert r["gain"].isna().all() and not r["beats_start"].any()
    assert (r["gain_method"] == "no starting evaluation recorded").all()
    assert "Gains over the starting policy are unknown for arithmetic" in terminal


def test_the_start_falls_back_to_the_iteration_0_line_of_metrics(tmp_path):
    # summary.json without eval_initial blocks: the start is metrics.jsonl's iteration-0 value,
    # job-level, so the gain's interval is over seeds only.
    root = build_sweep(tmp_path / "s", initial=0.3, n_items=50)
    for jd in (root / "jobs").iterdir():
        s = json.loads((jd / "summary.json").read_text())
        del s["eval_initial"], s["eval_items_initial"]
        (jd / "summary.json").write_text(json.dumps(s))
    r = _quiet(sweep_dirs=[root], plots=False, bootstrap=200)[0].ranking
    assert (r["gain_method"] == "seeds only (no per-item start scores)").all()
    assert r["gain"].notna().all()


def test_one_seed_without_item_starts_cannot_show_a_gain(tmp_path):
    # A big gain (start 0.3, end ~0.6) but one seed per regime and job-level starts only:
    # nothing to resample, so no interval, and the section says so instead of ranking.
    root = build_sweep(tmp_path / "s", initial=0.3, seeds=(0,), n_items=50)
    for jd in (root / "jobs").iterdir():
        s = json.loads((jd / "summary.json").read_text())
        del s["eval_items_initial"]
        (jd / "summary.json").write_text(json.dumps(s))
    res, terminal = _quiet(sweep_dirs=[root], plots=False, bootstrap=200)
    r = res.ranking
    assert r["gain_ci_lo"].isna().all() and not r["beats_start"].any() and (r["gain"] > 0.1).any()
    assert "Not testable with one seed on arithmetic" in terminal
    assert "not testable with one seed (" in terminal  # the findings line says so too, not "no regime beats its start"
