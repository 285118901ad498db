"""Predictions that validation checks (race_cli/report/predicted.py): `race validate` stores the pilot's
endpoint ranking and the compute curves' extrapolation; the validation report sets both against what
the validation measured."""

from __future__ import annotations

import json
import shutil
from io import StringIO

import numpy as np
import pandas as pd
import pytest

from report_fixtures import DEFAULT_CONDITION, Regime, write_job
from test_report_frontier import FRACS, write_sweep
from race_cli.report.curve import sigmoid

C = DEFAULT_CONDITION["budget_flops"]
# EARLY has saturated by C; LATE is still rising (by the formula: 0.4485 and 0.475 at C, 0.4498 and 0.594 at 3·C)
EARLY_T = {"r0": 0.3, "a": 0.45, "c_mid": 1e11, "b": 2.0}
LATE_T = {"r0": 0.3, "a": 0.65, "c_mid": 1e12, "b": 1.5}
EARLY, LATE = Regime(4, 1, 0.83), Regime(4, 4, 0.95)


def _console():
    from rich.console import Console

    return Console(file=StringIO(), width=200)


def test_by_hand_errors_and_coverage():
    from race_cli.report.predicted import add_predictions, predictor_summary

    table = pd.DataFrame({"regime": ["a", "b"], "pilot_mean": [0.50, 0.40], "pilot_ci_lo": [0.45, 0.35],
                          "pilot_ci_hi": [0.55, 0.45], "val_mean": [0.52, 0.55]})
    cond = {"curve_prediction": {"regimes": {"a": {"predicted": 0.53, "lo": 0.50, "hi": 0.56, "extrapolation": 3.0},
                                             "b": {"predicted": 0.50, "lo": 0.46, "hi": 0.54, "extrapolation": 3.0}}}}
    t = add_predictions(table, cond)
    # endpoint errors 0.50 − 0.52 = −0.02 (covered), 0.40 − 0.55 = −0.15 (not); curve +0.01 (covered), −0.05 (not)
    assert t["endpoint_error"].tolist() == pytest.approx([-0.02, -0.15])
    assert t["curve_error"].tolist() == pytest.approx([0.01, -0.05])
    assert t["endpoint_covered"].tolist() == [1.0, 0.0] and t["curve_covered"].tolist() == [1.0, 0.0]
    s = predictor_summary(t)
    assert s["endpoint"]["mae"] == pytest.approx(0.085) and s["curve"]["mae"] == pytest.approx(0.03)
    assert s["endpoint"]["covered"] == 1 and s["curve"]["n"] == 2


def test_within_the_prediction_interval_by_hand():
    """The realised mean is an estimate too: pred 0.50 [0.47, 0.53] against a realised 0.545 [0.505, 0.585]
    is within sqrt(0.03² + 0.04²) = 0.05 of the prediction (|0.045| <= 0.05), though outside the prediction's
    own interval. The pilot best's interval is its selection-adjusted one when the table carries it."""
    from race_cli.report.predicted import add_predictions

    table = pd.DataFrame({"regime": ["a", "b"], "role": ["pilot best", "control"], "pilot_mean": [0.50, 0.40],
                          "pilot_ci_lo": [0.47, 0.37], "pilot_ci_hi": [0.53, 0.43], "pilot_sel_lo": [0.45, 0.35],
                          "pilot_sel_hi": [0.55, 0.45], "val_mean": [0.545, 0.455], "val_ci_lo": [0.505, 0.415],
                          "val_ci_hi": [0.585, 0.495]})
    t = add_predictions(table, {})
    # a (the best): sel interval ±0.05 → sqrt(0.05² + 0.04²) = 0.064 >= 0.045: within
    # b (the control): its CI ±0.03 → 0.05 < 0.055: not within
    assert t["endpoint_lo"].tolist() == pytest.approx([0.45, 0.37])
    assert t["endpoint_covered"].tolist() == [1.0, 0.0]
    t2 = add_predictions(table.assign(role=["control", "control"], val_mean=[0.545, 0.445]), {})
    assert t2["endpoint_covered"].tolist() == [1.0, 1.0]  # 0.045 <= 0.05 and 0.045 <= 0.05


def test_prediction_interval_holds_its_level_where_a_confidence_interval_does_not():
    """Known truth: a regime's expected score μ, a pilot estimate and a validation estimate, each normal
    with its own standard error and its 95% interval. The realised mean falls within the prediction interval
    in 95% of 20,000 draws (±0.5%); within the pilot's interval for the mean in only P(|Z| <= 1.96/√2) = 0.83
    when the two standard errors are equal."""
    from race_cli.report.predicted import _within

    rng = np.random.default_rng(0)
    mu, sp, sv, z = 0.5, 0.02, 0.02, 1.959964
    pred, real = mu + sp * rng.standard_normal(20_000), mu + sv * rng.standard_normal(20_000)
    inside = _within(pred, pred - z * sp, pred + z * sp, real, real - z * sv, real + z * sv)
    assert inside.mean() == pytest.approx(0.95, abs=0.005)
    ci_only = _within(pred, pred - z * sp, pred + z * sp, real, np.full(20_000, np.nan), np.full(20_000, np.nan))
    assert ci_only.mean() == pytest.approx(0.834, abs=0.01)


def test_validate_stores_both_predictions_and_the_report_compares_them(tmp_path):
    from race_cli.plan.validate import validate_main
    from race_cli.report import validation as V
    from race_cli.report.build import ReportOptions
    from race_cli.report.command import run_report

    curves = {EARLY: [float(sigmoid(f * C, **EARLY_T)) for f in FRACS],
              LATE: [float(sigmoid(f * C, **LATE_T)) for f in FRACS]}
    pilot = write_sweep(tmp_path / "pilot", curves, n=600)
    run_report(ReportOptions([pilot], plots=False, bootstrap=200), console=_console())
    val = validate_main(pilot, scale=3, seeds=2, out=tmp_path / "val")
    prov = json.loads((val / V.PROVENANCE).read_text())
    cond = prov["conditions"][0]
    cp = cond["curve_prediction"]
    assert cp["budget"] == pytest.approx(3 * C) and set(cp["regimes"]) == {"μ=1", "μ=4"}
    assert cp["regimes"]["μ=4"]["extrapolation"] == pytest.approx(3 / 1.01, rel=1e-6)  # checkpoints at 1.01·f·C
    assert cp["regimes"]["μ=4"]["predicted"] > cp["regimes"]["μ=1"]["predicted"]  # still rising: ahead at 3·C

    # stand in for `race run`: the validation jobs score the truth at 3·C
    rng = np.random.default_rng(9)
    truth = {"μ=1": float(sigmoid(3 * C, **EARLY_T)), "μ=4": float(sigmoid(3 * C, **LATE_T))}
    d = rng.uniform(-0.2, 0.2, 600)
    vcond = dict(cond["values"], budget_flops=cond["budget"])
    for v in cond["validated"]:
        reg = EARLY if v["regime"] == "μ=1" else LATE
        for jid in v["job_ids"]:
            s = rng.binomial(4, np.clip(truth[v["regime"]] + d + rng.normal(0, 0.01), 0, 1)) / 4
            tmp = val / "tmp-jobs"
            made = write_job(tmp, vcond, reg, 0, {"arithmetic": s}, rng, start={"arithmetic": np.full(600, 0.3)})
            for f in (tmp / made).iterdir():
                if f.name != ".hydra":
                    shutil.move(str(f), val / "jobs" / jid / f.name)
            shutil.rmtree(tmp)
    res = run_report(ReportOptions([val], plots=False, bootstrap=200), console=_console()).validation
    row = res.conditions[0]
    # the endpoint misses the rising regime by about 0.594 − 0.475 = 0.12; the curve gets closer
    assert row["endpoint_mae"] > 0.04 and row["curve_mae"] < row["endpoint_mae"]
    regs = res.regimes.set_index("regime")
    assert regs.loc["μ=4", "endpoint_error"] == pytest.approx(0.475 - 0.594, abs=0.03)
    md = (val / "report" / "validation.md").read_text()
    # two regimes are a reading, not evidence that one predictor is better: no such claim is printed
    assert "predicted better" not in md and "not evidence that either predictor is better" in md


def test_curve_predictions_the_report_warned_against_are_counted_apart():
    """A stored prediction whose fit hit a bound (B at 5, A at 0: the tiny-m PRM μ=4 shape of the default
    pilot, a 'collapse' to 0.08) is flagged ⚠ and summarised apart; one stored before warnings were kept
    is flagged from its parameters the same way."""
    from race_cli.report.predicted import add_predictions, predictor_sentence, predictor_summary
    from race_cli.report.views.predicted import prediction_rows

    table = pd.DataFrame({"regime": ["a", "b", "c"], "pilot_mean": [0.50, 0.40, 0.39], "pilot_ci_lo": [0.45, 0.35, 0.34],
                          "pilot_ci_hi": [0.55, 0.45, 0.44], "val_mean": [0.52, 0.41, 0.40]})
    ok = {"predicted": 0.53, "lo": 0.50, "hi": 0.56, "extrapolation": 2.0,
          "params": {"r0": 0.45, "a": 0.6, "c_mid": 1e11, "b": 1.2}}
    bad = {"predicted": 0.08, "lo": 0.07, "hi": 0.09, "extrapolation": 2.0,
           "params": {"r0": 0.45, "a": 0.0, "c_mid": 1.2e12, "b": 5.0}}
    stored = dict(bad, warning="the fit ran into the bound of B and A: ...")
    cond = {"curve_prediction": {"budget": 1.6e12, "regimes": {"a": ok, "b": bad, "c": stored}}}
    t = add_predictions(table, cond)
    assert [bool(w) for w in t["curve_warning"]] == [False, True, True]
    assert "ran into the bound of B and A" in t["curve_warning"][1]  # recomputed from the parameters
    s = predictor_summary(t)
    assert s["curve"]["n"] == 3 and s["curve_trusted"] == {"mae": pytest.approx(0.01), "covered": 1, "n": 1, "warned": 2}
    assert "warned against 2 of the 3 curve predictions" in predictor_sentence(t)
    assert "the other 1 were off by 0.010, 1 within" in predictor_sentence(t)
    assert [r[5].endswith("⚠") for r in prediction_rows(t)] == [False, True, True]
