"""Predictions a validation checks: the pilot's endpoint ranking against its compute curves.

`race validate` stores two predictions of every validated regime's score at the validation budget
in provenance.json (conditions[].curve_prediction next to predicted_order):

- endpoint: the pilot's own final score and interval (what the pilot measured at its budget C; at a
  scaled budget it assumes nothing changes beyond C). The pilot's best was picked as the maximum of its
  regimes, so its interval is the selection-adjusted one (`pilot_sel_lo`/`pilot_sel_hi`, simultaneous over
  the condition's regimes) when the validation table carries it;
- curve: the regime's compute curve (report/curve.py) extrapolated to the validation budget, with
  its bootstrap interval and the extrapolation factor.

The validation report (report/validation.py) shows per regime each prediction against the realised
validation mean: the error, and whether the realised mean lies within the prediction interval. The
realised mean is itself one noisy estimate (fresh seeds and items), so an interval for the pilot's
expected score is not what it should fall in: the prediction interval combines the prediction's
half-width with the realised mean's own 95% half-width in quadrature (exact for two independent normal
estimates; without the realised interval, the prediction's alone). Per condition the sentence gives
each predictor's mean absolute error; with two or three regimes that is a reading, not evidence that
one predictor is better (no such claim is made).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd


def curve_predictions_for_validation(pilot: Path, target: str, budget: float | None, scale: float | None,
                                     seed: int = 0) -> tuple[dict, str | None]:
    """{condition label: {"budget", "method", "regimes": {regime: {predicted, lo, hi, extrapolation}}}}
    for provenance.json, and a note when the pilot has no checkpoints to fit (then {})."""
    from race_cli.report.curve import CURVE_DRAWS, predictions
    from race_cli.report.frontier import read_checkpoints
    from race_cli.report.table import CONDITION_COLS, maximize_target, read_sweeps

    data = read_sweeps([Path(pilot)])
    cps, _ = read_checkpoints([Path(pilot)], data.jobs, data.eval_points)
    at, rel = (budget, False) if budget is not None else (float(scale or 1.0), True)
    pred = predictions(data, cps, [target], list(CONDITION_COLS), at, rel, seed=seed,
                       maximize={target: maximize_target(target)})
    if not len(pred):
        return {}, ("the pilot's jobs have no equal-FLOP checkpoints (eval.at) to fit compute curves to: "
                    "only the endpoint prediction is stored")
    out: dict = {}
    for cond, g in pred.groupby("condition", sort=False):
        out[cond] = {"budget": float(g["budget"].iloc[0]),
                     "method": f"compute curve (report/curve.py), {CURVE_DRAWS} refits",
                     "regimes": {r.regime: {"predicted": float(r.predicted), "lo": float(r.pred_lo),
                                            "hi": float(r.pred_hi), "extrapolation": float(r.extrapolation),
                                            "warning": str(r.warning),
                                            "params": {"r0": float(r.r0), "a": float(r.a), "c_mid": float(r.c_mid),
                                                       "b": float(r.b)}}
                                 for r in g.itertuples()}}
    return out, None


def add_predictions(table: pd.DataFrame, cond: dict) -> pd.DataFrame:
    """The per-regime validation table with both predictions, their errors and whether the realised
    validation mean (val_mean, with its interval val_ci_lo/val_ci_hi) lies within each prediction
    interval (`*_covered`: 1, 0, or NaN when either side has no interval)."""
    t = table.copy()
    col = lambda k: pd.to_numeric(t.get(k, pd.Series(np.nan, index=t.index)), errors="coerce").to_numpy(float)
    real, r_lo, r_hi = col("val_mean"), col("val_ci_lo"), col("val_ci_hi")
    t["endpoint_pred"] = pd.to_numeric(t["pilot_mean"], errors="coerce")
    t["endpoint_error"] = t["endpoint_pred"].to_numpy(float) - real
    lo, hi = col("pilot_ci_lo"), col("pilot_ci_hi")
    best = (t.get("role", pd.Series("", index=t.index)).astype(str) == "pilot best").to_numpy()
    s_lo, s_hi = col("pilot_sel_lo"), col("pilot_sel_hi")
    use = best & np.isfinite(s_lo) & np.isfinite(s_hi)  # the picked best: its selection-adjusted interval
    t["endpoint_lo"], t["endpoint_hi"] = np.where(use, s_lo, lo), np.where(use, s_hi, hi)
    t["endpoint_covered"] = _within(t["endpoint_pred"], t["endpoint_lo"], t["endpoint_hi"], real, r_lo, r_hi)
    cp = ((cond.get("curve_prediction") or {}).get("regimes")) or {}
    get = lambda k: np.array([float((cp.get(r) or {}).get(k, np.nan)) for r in t["regime"]])
    t["curve_pred"], t["curve_lo"], t["curve_hi"] = get("predicted"), get("lo"), get("hi")
    t["curve_extrapolation"] = get("extrapolation")
    t["curve_error"] = t["curve_pred"].to_numpy(float) - real
    t["curve_covered"] = _within(t["curve_pred"], t["curve_lo"], t["curve_hi"], real, r_lo, r_hi)
    t["curve_warning"] = [_warning(cp.get(r), cond.get("curve_prediction") or {}) for r in t["regime"]]
    return t


def _warning(reg: dict | None, pred: dict) -> str:
    """The report's warning on a stored curve prediction (not identified, or extrapolated beyond what
    was measured to cover); recomputed from its parameters for a provenance.json written before the
    warning was stored (accuracy-like scores in [0, 1], as curve.predictions bounds them)."""
    from race_cli.report.curve import degenerate_warning, extrapolation_warning

    if not reg:
        return ""
    if "warning" in reg:
        return str(reg["warning"])
    prm, e, x = reg.get("params") or {}, float(reg.get("extrapolation", np.nan)), float(pred.get("budget", np.nan))
    try:
        a, b, c_mid = float(prm["a"]), float(prm["b"]), float(prm["c_mid"])
    except (KeyError, TypeError, ValueError):
        return ""
    return degenerate_warning(a, b, 0.0, 1.0) or extrapolation_warning(e, c_mid <= x / e)


def _within(pred, lo, hi, real, r_lo, r_hi) -> np.ndarray:
    """Whether the realised mean lies within the prediction interval: the prediction's half-width on the
    side of the realised mean (a curve's percentile interval may be asymmetric), combined in quadrature
    with the realised mean's own half-width (0 where the validation gave none). 1/0, NaN when undefined."""
    pred, lo, hi, real = (np.asarray(x, float) for x in (pred, lo, hi, real))
    r_lo, r_hi = np.asarray(r_lo, float), np.asarray(r_hi, float)
    r_half = np.where(np.isfinite(r_lo) & np.isfinite(r_hi), (r_hi - r_lo) / 2, 0.0)
    side = np.where(real >= pred, hi - pred, pred - lo)
    half = np.sqrt(np.maximum(side, 0.0) ** 2 + r_half ** 2)
    out = np.full(len(real), np.nan)
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(real) & np.isfinite(pred)
    out[ok] = (np.abs(real - pred) <= half)[ok]
    return out


def predictor_summary(t: pd.DataFrame) -> dict:
    """Mean absolute error and coverage of each predictor over the regimes the validation ran."""
    out = {}
    for name in ("endpoint", "curve"):
        err = t[f"{name}_error"].to_numpy(float)
        cov = t[f"{name}_covered"].to_numpy(float)
        ok = np.isfinite(err)
        out[name] = {"mae": float(np.abs(err[ok]).mean()) if ok.any() else np.nan,
                     "covered": int(np.nansum(cov[ok])), "n": int(ok.sum())}
    warned = t["curve_warning"].astype(str).str.len().gt(0).to_numpy() if "curve_warning" in t else np.zeros(len(t), bool)
    err, cov = t["curve_error"].to_numpy(float), t["curve_covered"].to_numpy(float)
    ok = np.isfinite(err) & ~warned  # the predictions the report did not warn against
    out["curve_trusted"] = {"mae": float(np.abs(err[ok]).mean()) if ok.any() else np.nan,
                            "covered": int(np.nansum(cov[ok])), "n": int(ok.sum()),
                            "warned": int((np.isfinite(err) & warned).sum())}
    return out


def predictor_sentence(t: pd.DataFrame) -> str | None:
    s = predictor_summary(t)
    e, c = s["endpoint"], s["curve"]
    if not e["n"]:
        return None
    text = (f"Predictions at the validation budget: the pilot's endpoint was off by {e['mae']:.3f} on average "
            f"({e['covered']} of {e['n']} realised means within its prediction interval)")
    if c["n"]:
        text += (f"; the compute curve by {c['mae']:.3f} ({c['covered']} of {c['n']} within); with {c['n']} "
                 f"regime{'s' if c['n'] != 1 else ''} that is a reading, not evidence that either predictor is better")
        w = s["curve_trusted"]
        if w["warned"]:
            text += (f". The report warned against {w['warned']} of the {c['n']} curve predictions (⚠: not identified "
                     "or extrapolated beyond its measured coverage)" + (
                         f"; the other {w['n']} were off by {w['mae']:.3f}, {w['covered']} within" if w["n"] else ""))
    else:
        text += "; no compute-curve prediction was stored (the pilot had no equal-FLOP checkpoints)"
    return text + "."


