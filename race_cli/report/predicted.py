"""Predictions a validation checks: the pilot's endpoint ranking against its compute curves.

`race validate` stores two predictions of every validated regime's score at the validation budget
in provenance.json (conditions[].curve_prediction next to predicted_order):

- endpoint: the pilot's own final score and interval (what the pilot measured at its budget C; at a
  scaled budget it assumes nothing changes beyond C);
- curve: the regime's compute curve (report/curve.py) extrapolated to the validation budget, with
  its bootstrap interval and the extrapolation factor.

The validation report (report/validation.py) shows per regime each prediction against the realised
validation mean: the error, whether the prediction's interval covered the realised mean (itself
an estimate with its own interval, so coverage here is a rough reading over few regimes), and per
condition which predictor had the smaller mean absolute error.
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
    cps, _ = read_checkpoints([Path(pilot)], data.jobs)
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
    """The per-regime validation table with both predictions, their errors and coverage of the
    realised validation mean (val_mean)."""
    t = table.copy()
    real = pd.to_numeric(t.get("val_mean", pd.Series(np.nan, index=t.index)), errors="coerce").to_numpy(float)
    t["endpoint_pred"] = pd.to_numeric(t["pilot_mean"], errors="coerce")
    t["endpoint_error"] = t["endpoint_pred"].to_numpy(float) - real
    t["endpoint_covered"] = _covers(t["pilot_ci_lo"], t["pilot_ci_hi"], real)
    cp = ((cond.get("curve_prediction") or {}).get("regimes")) or {}
    get = lambda k: np.array([float((cp.get(r) or {}).get(k, np.nan)) for r in t["regime"]])
    t["curve_pred"], t["curve_lo"], t["curve_hi"] = get("predicted"), get("lo"), get("hi")
    t["curve_extrapolation"] = get("extrapolation")
    t["curve_error"] = t["curve_pred"].to_numpy(float) - real
    t["curve_covered"] = _covers(t["curve_lo"], t["curve_hi"], real)
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


def _covers(lo, hi, real: np.ndarray) -> np.ndarray:
    lo, hi = np.asarray(lo, float), np.asarray(hi, float)
    out = np.full(len(real), np.nan)
    ok = np.isfinite(lo) & np.isfinite(hi) & np.isfinite(real)
    out[ok] = (lo[ok] <= real[ok]) & (real[ok] <= hi[ok])
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
            f"(its interval covered {e['covered']} of {e['n']} realised means)")
    if c["n"]:
        better = "the compute curve" if c["mae"] < e["mae"] else "the endpoint"
        text += (f"; the compute curve by {c['mae']:.3f} (covered {c['covered']} of {c['n']}): {better} "
                 "predicted better here")
        w = s["curve_trusted"]
        if w["warned"]:
            text += (f". The report warned against {w['warned']} of the {c['n']} curve predictions (⚠: not identified "
                     "or extrapolated beyond its measured coverage)" + (
                         f"; the other {w['n']} were off by {w['mae']:.3f} and covered {w['covered']}" if w["n"] else ""))
    else:
        text += "; no compute-curve prediction was stored (the pilot had no equal-FLOP checkpoints)"
    return text + "."


PRED_HEAD = ["regime", "realised", "endpoint [95% CI]", "error", "covered", "curve [95% CI]", "error", "covered",
             "× observed"]


def prediction_rows(t: pd.DataFrame) -> list[list[str]]:
    f = lambda v: "–" if not np.isfinite(v) else f"{v:.3f}"
    s = lambda v: "–" if not np.isfinite(v) else f"{v:+.3f}"
    y = lambda v: "–" if not np.isfinite(v) else ("yes" if v else "no")
    return [[r.regime, f(r.val_mean) if hasattr(r, "val_mean") else "–",
             f"{f(r.endpoint_pred)} [{f(float(r.pilot_ci_lo))}, {f(float(r.pilot_ci_hi))}]", s(r.endpoint_error),
             y(r.endpoint_covered), f"{f(r.curve_pred)} [{f(r.curve_lo)}, {f(r.curve_hi)}]"
             + (" ⚠" if getattr(r, "curve_warning", "") else ""), s(r.curve_error),
             y(r.curve_covered), "–" if not np.isfinite(r.curve_extrapolation) else f"{r.curve_extrapolation:.2f}"]
            for r in t.itertuples()]


def markdown_lines(t: pd.DataFrame) -> list[str]:
    from race_cli.report.render import md_table

    if "endpoint_pred" not in t or not len(t):
        return []
    out = [md_table(PRED_HEAD, prediction_rows(t)), ""]
    if (sent := predictor_sentence(t)):
        out += [sent, ""]
    return out


def print_lines(console, t: pd.DataFrame) -> None:
    from rich.table import Table

    if "endpoint_pred" not in t or not len(t):
        return
    tab = Table(title="predicted at the validation budget vs realised", title_justify="left")
    for h in PRED_HEAD:
        tab.add_column(h, justify="left" if h == "regime" else "right", overflow="fold")
    for row in prediction_rows(t):
        tab.add_row(*row)
    console.print(tab)
    if (sent := predictor_sentence(t)):
        console.print(sent, highlight=False)
