"""Turn rankings and response fits into recommendations and the conditional frontier (no I/O).

Per condition (condition columns + evaluation target): whether any regime beats its starting
policy, the pilot-best regime with its selection-adjusted interval (simultaneous over the
condition's regimes: it was picked as the best) and its winner's curse, the regimes not shown worse
than it (familywise 5%; those are the ones worth a validation run), and the response fit's p* with
its interval, or its fallback. With one seed per regime nothing is tested ("not testable with one
seed") unless `race report --assume-seed-sd` supplied the seed term. Across conditions: how the best split moves with each condition column (model
size, budget, reward system, task, target) while the others are held fixed, and in words
where the best regime differs between targets.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from race_cli.report.records import Totals
from race_cli.report.response import FitResult, describe_fit, fit_response

from race_cli.report.words import NOT_TESTABLE


def fit_all(ranking: pd.DataFrame, maximize: bool | dict[str, bool] = True,
            draws: dict[str, np.ndarray] | None = None) -> dict[str, FitResult]:
    """Response fit of every condition, on its regime means (p, mean target).

    maximize: one flag, or {target: flag}; draws: {condition: bootstrap draws [B, R] of the
    regime means in ranking row order} (from rank_all), for the p* intervals.
    """
    if "p" not in ranking:
        return {}
    out = {}
    p, mean = ranking["p"].to_numpy(float), ranking["mean"].to_numpy(float)
    target = ranking["target"].to_numpy(object) if not isinstance(maximize, bool) else None
    for cond, rows in condition_rows(ranking).items():
        mx = maximize if isinstance(maximize, bool) else maximize.get(target[rows[0]], True)
        out[cond] = fit_response(p[rows], mean[rows], mx, (draws or {}).get(cond))
    return out


def condition_rows(table: pd.DataFrame) -> dict[str, np.ndarray]:
    """{condition: the positions of its rows}, conditions in order of first appearance, as
    `table.groupby("condition", sort=False)` yields them (rank.group_rows: no DataFrame per condition)."""
    from race_cli.report.rank import group_rows

    return {key[0]: rows for key, rows in group_rows(table, ["condition"], sort=False)}


def learned_with_known_gain(gain: np.ndarray, beats_start: np.ndarray) -> bool:
    """Whether some regime's gain is known and some regime beats its start: exactly when a condition's
    section opens with no `no_gain_sentence` (None)."""
    return bool(np.isfinite(np.asarray(gain, float)).any() and np.asarray(beats_start, bool).any())


def no_gain_sentence(g: pd.DataFrame) -> str | None:
    """The plain sentence that opens a condition's section when no regime beats its start.

    g: one condition's ranking rows. None when at least one regime's gain interval lies on
    the better side of zero.
    """
    target = g["target"].iloc[0]
    if "gain" in g and "beats_start" in g and learned_with_known_gain(g["gain"].to_numpy(float),
                                                                      g["beats_start"]):
        return None
    if "gain" not in g or not np.isfinite(g["gain"].to_numpy(float)).any():
        return (f"Gains over the starting policy are unknown for {target}: these jobs recorded no "
                "iteration-0 evaluation, so this ranking cannot tell learning from no change.")
    top = g[g["is_best"]].iloc[0]
    if "testable" in g and not bool(g["testable"].iloc[0]):
        return (f"{NOT_TESTABLE.capitalize()} on {target}: one training run per regime measures no seed noise, "
                f"so no regime is called ≈ best or better than its start (start {top['start']:.3f}; the "
                f"highest final score, {top['regime']}, gains {top['gain']:+.3f} on evaluation noise alone). "
                "Run two or more seeds per regime, or `race report --assume-seed-sd X` to assume the spread.")
    if not np.isfinite(g["gain_ci_lo"].to_numpy(float)).any():
        return (f"No regime can be shown to beat its starting policy on {target}: one seed per regime "
                f"and no per-item start scores leave every gain without an interval (start "
                f"{top['start']:.3f}; the pilot-best regime {top['regime']} gains {top['gain']:+.3f}). "
                "This ranking is not a finding; add seeds or record per-item scores.")
    ci = (f" [{top['gain_ci_lo']:+.3f}, {top['gain_ci_hi']:+.3f}]"
          if np.isfinite(top["gain_ci_lo"]) else " (no interval)")
    above = g[g["gain_ci_lo"].to_numpy(float) > 0] if "gain_ci_lo" in g else g.iloc[:0]
    if len(above):  # an interval clears zero, the familywise test does not
        r = above.sort_values("gain_ci_lo", ascending=False).iloc[0]
        return (f"No regime can be shown to beat its starting policy on {target} with familywise control: "
                f"{r['regime']} gains {r['gain']:+.3f} [{r['gain_ci_lo']:+.3f}, {r['gain_ci_hi']:+.3f}], an "
                f"interval above zero on its own, but after Holm's correction over the {len(g)} regimes no gain "
                f"clears zero (seed noise with {_seed_df(g)} degrees of freedom; more seeds per regime would "
                "sharpen it). This ranking is not a finding yet.")
    return (f"No regime beats its starting policy on {target}: every gain interval reaches zero "
            f"(start {top['start']:.3f}; the pilot-best regime {top['regime']} gains {top['gain']:+.3f}"
            f"{ci}). This ranking orders regimes that did not measurably learn; it is not a finding.")


def _seed_df(g: pd.DataFrame) -> str:
    if "seed_df" in g and np.isfinite(g["seed_df"].to_numpy(float)).all():
        return f"{float(g['seed_df'].min()):.0f}"
    return "few"


def recommend(ranking: pd.DataFrame, fits: dict[str, FitResult], by: list[str]) -> pd.DataFrame:
    """One row per condition: what to validate, and why."""
    rows = []
    cols = {c: ranking[c].to_numpy() for c in ranking.columns}  # read once, cut per condition
    for cond, at in condition_rows(ranking).items():
        top = at[np.flatnonzero(cols["is_best"][at])[0]]  # the first best row
        best = {c: a[top] for c, a in cols.items()}
        tied = at[cols["tied_best"][at].astype(bool)]
        fit = fits.get(cond)
        beats = cols["beats_start"][at].astype(bool) if "beats_start" in cols else None
        learned = bool(beats.any()) if beats is not None else False
        testable = bool(cols["testable"][at[0]]) if "testable" in cols else True
        quiet = beats is not None and "gain" in cols and learned_with_known_gain(cols["gain"][at], beats)
        row = {"condition": cond, **{c: best[c] for c in by if c in best}, "target": best["target"],
               "best_regime": best["regime"], "best_mean": best["mean"], "best_ci_lo": best["ci_lo"],
               "best_ci_hi": best["ci_hi"], "best_p_best": best["p_best"],
               "best_sel_lo": best.get("sel_lo", np.nan), "best_sel_hi": best.get("sel_hi", np.nan),
               "testable": testable, "pool": best.get("pool", ""),
               "best_start": best.get("start", np.nan), "best_gain": best.get("gain", np.nan),
               "best_gain_ci_lo": best.get("gain_ci_lo", np.nan),
               "best_gain_ci_hi": best.get("gain_ci_hi", np.nan),
               "learned": learned, "n_beat_start": int(beats.sum()) if beats is not None else 0,
               "no_gain": "" if quiet else no_gain_sentence(ranking.iloc[at]) or "",  # a frame only to speak
               "best_p": best.get("p", np.nan), "best_share_search": best.get("share_search", np.nan),
               "best_share_learning": best.get("share_learning", np.nan),
               "best_share_feedback": best.get("share_feedback", np.nan),
               "best_p_policy": best.get("p_policy", np.nan),
               "split_star": best.get("p_policy", np.nan),  # the recommended policy split (below)
               "expected_drop": best.get("expected_drop", np.nan),
               "seed_noise": bool(best.get("seed_noise", True)),
               "n_regimes": len(at), "n_tied": len(tied),
               "validate": "; ".join(cols["regime"][tied]) if learned else ""}
        if fit is not None:
            row.update(fit_model=fit.model or "none", fit_fallback=fit.fallback,
                       fit_reason=fit.reason, p_star=fit.p_star, y_star=fit.y_star,
                       p_fit_opt=fit.p_fit_opt, p_star_lo=fit.p_star_lo, p_star_hi=fit.p_star_hi,
                       p_min=fit.p_min, p_max=fit.p_max, p_star_inside=fit.inside,
                       p_star_interval_inside=fit.interval_inside, fit_text=describe_fit(fit))
            if learned and not fit.fallback and "p" in cols:  # the pilot regime closest to the fit's optimum
                near = at[int(np.argmin(np.abs(cols["p"][at].astype(float) - fit.p_star)))]
                near_regime = cols["regime"][near]
                row["nearest_regime"] = near_regime
                # p* in the comparable variable: the nearest regime's feedback share held fixed
                feedback = cols["share_feedback"][near] if "share_feedback" in cols else 0.0
                row["split_star"] = fit.p_star / (1.0 - float(feedback or 0.0))
                if near_regime not in row["validate"].split("; "):
                    row["validate"] += f"; {near_regime} (nearest to fit p*)"
        rows.append(row)
    return pd.DataFrame(rows)


def target_differences(rec: pd.DataFrame, ranking: pd.DataFrame, by: list[str]) -> list[str]:
    """In words, per condition (without the target): is the best regime the same for every target?

    A difference is called real only when each target's best regime is distinguishably worse
    than the best on some other target (its paired gap interval excludes zero there).
    """
    if "target" not in rec or rec["target"].nunique() < 2:
        return []
    others = [c for c in by if c != "target" and c in rec]
    groups = rec.groupby(others, dropna=False, sort=False) if others else [((), rec)]
    rank_of = dict(tuple(ranking.groupby("condition", sort=False)))  # once, not a mask per condition
    out = []
    for key, g in groups:
        if g["target"].nunique() < 2:
            continue
        key = key if isinstance(key, tuple) else (key,)
        where = " ".join(f"{o}={_short(v)}" for o, v in zip(others, key)) or "all jobs"
        bests = dict(zip(g["target"], g["best_regime"]))
        not_learned = [t for t, ok in zip(g["target"], g["learned"]) if not ok]
        listing = "; ".join(f"{t}: {r}" for t, r in bests.items())
        if not_learned:  # a ranking that is not a finding cannot disagree with another
            out.append(f"{where}: no comparison between targets — no regime beats its start on "
                       f"{', '.join(not_learned)}, so the best final scores ({listing}) are not findings.")
            continue
        if len(set(bests.values())) == 1:
            out.append(f"{where}: the best regime is the same for every target "
                       f"({next(iter(bests.values()))} on {', '.join(bests)}).")
            continue
        tied = {}  # target -> regimes within noise of its best
        for cond, t in zip(g["condition"], g["target"]):
            r = rank_of.get(cond, ranking.iloc[:0])
            tied[t] = set(r.loc[r["tied_best"].astype(bool), "regime"])
        real = [(a, bests[b]) for a in bests for b in bests if a != b and bests[b] not in tied[a]]
        verdict = ("a real difference: " + "; ".join(f"on {a}, {r} is distinguishably worse than "
                                                     f"{bests[a]}" for a, r in real) if real else
                   "within noise: each target's best regime is not shown worse than the best on the "
                   "others (familywise 5%)")
        out.append(f"{where}: the best regime differs between targets ({listing}), {verdict}.")
    return out


def frontier_moves(rec: pd.DataFrame, by: list[str]) -> list[str]:
    """Sentences on how the recommended split moves along each condition column, others fixed.

    The split is the policy-side one, learning / (search + learning): p itself counts reward
    FLOPs in its denominator, so a PRM regime has a lower p than the same regime under the
    rule reward, and "p moves along reward" would mostly report the PRM's cost."""
    from race_cli.report.rank import group_rows

    out = []
    cols = {c: rec[c].tolist() for c in rec.columns}  # Python values, as iterating a column gives them
    for c in by:
        if c not in rec or rec[c].nunique(dropna=True) < 2:
            continue
        others = [o for o in by if o != c and o in rec]
        for key, at in group_rows(rec, others):
            if len(at) < 2:
                continue
            fixed = ", ".join(f"{o}={_short(v)}" for o, v in zip(others, key))
            g = {k: [v[i] for i in at] for k, v in cols.items()}  # the group's rows, column by column
            learned = g["learned"] if "learned" in g else [True] * len(at)
            split = g["split_star"] if "split_star" in g else g["best_p"]
            fb = g["best_share_feedback"] if "best_share_feedback" in g else [np.nan] * len(at)
            steps = " → ".join(f"{_short(v)}: split={sp:.2f}"
                               + (f", feedback {f:.0%}" if isinstance(f, float) and np.isfinite(f) and f > 0 else "")
                               + f" ({r}{'' if ok else '; no regime beats its start'})"
                               for v, sp, f, r, ok in zip(g[c], split, fb, g["best_regime"], learned))
            out.append(f"Along {c}" + (f" ({fixed})" if fixed else "") + f": {steps}")
    return out


def _short(v: object) -> str:
    return f"{v:.3g}" if isinstance(v, float) else str(v)


TOTALS = {"rollout": "flops_rollout", "update": "flops_update", "reward": "flops_reward",
          "total": "flops_total", "eval": "eval_flops", "budget": "budget_ledger"}  # total -> job column summed


def compute_totals(jobs: pd.DataFrame) -> Totals:
    """Total model-convention FLOPs of all readable jobs, split by phase (+ eval, not charged)."""
    return _totals(_total_columns(jobs), np.arange(len(jobs)))


def totals_by(jobs: pd.DataFrame, key: str) -> dict[Any, Totals]:
    """{value of jobs[key]: compute_totals of its jobs} (e.g. per condition), from one pass over the table."""
    cols = _total_columns(jobs)
    return {k: _totals(cols, rows) for k, rows in jobs.groupby(key, sort=False).indices.items()}


def _total_columns(jobs: pd.DataFrame) -> dict[str, np.ndarray]:
    """The TOTALS columns present as float arrays, missing values read as 0 (Series.sum skips them),
    and `readable`: which jobs count (none without a flops_total column)."""
    out = {"readable": (jobs["readable"].astype(bool).to_numpy() if "flops_total" in jobs
                        else np.zeros(len(jobs), dtype=bool))}
    for col in TOTALS.values():
        if col in jobs:
            out[col] = np.nan_to_num(jobs[col].to_numpy(float, na_value=np.nan), nan=0.0, posinf=np.inf,
                                     neginf=-np.inf)
    return out


def _totals(cols: dict[str, np.ndarray], rows: np.ndarray) -> Totals:
    """compute_totals of the jobs at these row positions (`_total_columns` of the table)."""
    ok = rows[cols["readable"][rows]]
    return Totals(**{name: float(cols[col][ok].sum()) if col in cols else 0.0 for name, col in TOTALS.items()})
