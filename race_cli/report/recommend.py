"""Turn rankings and response fits into recommendations and the conditional frontier (no I/O).

Per condition: the pilot-best regime, the regimes statistically indistinguishable from it
(those are the ones worth a validation run), and the response fit's p* or its fallback.
Across conditions: how the best split moves with each condition column (model size,
budget, reward system, task) while the others are held fixed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from race_cli.report.fit import FitResult, fit_response

CAVEAT = ("A pilot grid is a diagnostic, not a promise of held-out gains; "
          "validate before committing compute.")


def fit_all(ranking: pd.DataFrame, maximize: bool = True) -> dict[str, FitResult]:
    """Response fit of every condition, on its regime means (p, mean target)."""
    return {cond: fit_response(g["p"].to_numpy(float), g["mean"].to_numpy(float), maximize)
            for cond, g in ranking.groupby("condition", sort=False)} if "p" in ranking else {}


def recommend(ranking: pd.DataFrame, fits: dict[str, FitResult], by: list[str]) -> pd.DataFrame:
    """One row per condition: what to validate, and why."""
    rows = []
    for cond, g in ranking.groupby("condition", sort=False):
        best = g[g["is_best"]].iloc[0]
        tied = g[g["tied_best"]]
        fit = fits.get(cond)
        row = {"condition": cond, **{c: best[c] for c in by}, "target": best["target"],
               "best_regime": best["regime"], "best_mean": best["mean"], "best_ci_lo": best["ci_lo"],
               "best_ci_hi": best["ci_hi"], "best_p_best": best["p_best"],
               "best_p": best.get("p", np.nan), "best_share_search": best.get("share_search", np.nan),
               "best_share_learning": best.get("share_learning", np.nan),
               "best_share_feedback": best.get("share_feedback", np.nan),
               "n_regimes": len(g), "n_tied": len(tied),
               "validate": "; ".join(tied["regime"])}
        if fit is not None:
            row.update(fit_model=fit.model or "none", fit_fallback=fit.fallback,
                       fit_reason=fit.reason, p_star=fit.p_star, y_star=fit.y_star)
            if not fit.fallback and "p" in g:  # the pilot regime closest to the fit's optimum
                near = g.iloc[int(np.argmin(np.abs(g["p"].to_numpy(float) - fit.p_star)))]
                row["nearest_regime"] = near["regime"]
                if near["regime"] not in row["validate"].split("; "):
                    row["validate"] += f"; {near['regime']} (nearest to fit p*)"
        rows.append(row)
    return pd.DataFrame(rows)


def recommendation_text(rec: pd.Series) -> str:
    """One paragraph per condition, for the terminal and summary.md."""
    ci = (f" [{rec['best_ci_lo']:.3f}, {rec['best_ci_hi']:.3f}]"
          if np.isfinite(rec["best_ci_lo"]) else " (no interval: one seed, no per-item scores)")
    s = (f"Pilot-best regime: {rec['best_regime']} (p = {rec['best_p']:.3f}), {rec['target']} "
         f"{rec['best_mean']:.3f}{ci}, P(best) = {rec['best_p_best']:.2f}. ")
    if rec["n_tied"] > 1:
        s += f"{rec['n_tied'] - 1} other regime(s) are statistically indistinguishable from it. "
    if rec.get("fit_model") is not None:
        if rec["fit_fallback"]:
            s += f"Response fit: fell back to the pilot-best point ({rec['fit_reason']}). "
        else:
            s += (f"Response fit ({rec['fit_model']}, chosen by leave-one-out error): optimum at "
                  f"p* = {rec['p_star']:.3f}, predicted {rec['target']} {rec['y_star']:.3f}. ")
    s += f"Worth validating: {rec['validate']}."
    return s


def frontier_moves(rec: pd.DataFrame, by: list[str]) -> list[str]:
    """Sentences on how the recommended p moves along each condition column, others fixed."""
    out = []
    for c in by:
        if c not in rec or rec[c].nunique(dropna=True) < 2:
            continue
        others = [o for o in by if o != c and o in rec]
        groups = rec.groupby(others, dropna=False, sort=True) if others else [((), rec)]
        for key, g in groups:
            if len(g) < 2:
                continue
            key = key if isinstance(key, tuple) else (key,)
            fixed = ", ".join(f"{o}={_short(v)}" for o, v in zip(others, key))
            steps = " → ".join(f"{_short(v)}: p={p:.2f} ({r})" for v, p, r in
                               zip(g[c], g["p_star"] if "p_star" in g else g["best_p"], g["best_regime"]))
            out.append(f"Along {c}" + (f" ({fixed})" if fixed else "") + f": {steps}")
    return out


def _short(v: object) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


def compute_totals(jobs: pd.DataFrame) -> dict[str, float]:
    """Total model-convention FLOPs of all readable jobs, split by phase (+ eval, not charged)."""
    ok = jobs[jobs["readable"].astype(bool)] if "flops_total" in jobs else jobs.iloc[:0]
    tot = {ph: float(ok[f"flops_{ph}"].sum()) if f"flops_{ph}" in ok else 0.0
           for ph in ["rollout", "update", "reward", "total"]}
    tot["eval"] = float(ok["eval_flops"].sum()) if "eval_flops" in ok else 0.0
    tot["budget"] = float(ok["budget_ledger"].sum()) if "budget_ledger" in ok else 0.0
    return tot
