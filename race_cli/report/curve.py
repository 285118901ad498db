"""A compute curve per regime: score against training FLOPs, fitted on the equal-FLOP checkpoints.

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

the saturating sigmoid used for RL compute scaling: R0 the starting score (the condition's
iteration-0 evaluation, pooled over its jobs, not fitted), A the asymptote, C_mid the compute at
which half the gain A − R0 is reached, B the steepness. The points are the regime's mean score
at each checkpoint (report/frontier.py) against the mean FLOPs its jobs had spent there. The fit is
scipy.optimize.least_squares (dogbox, bounded, analytic Jacobian: A within the score's range, B in
[0.3, 5], C_mid within 1/30 .. 30× the observed compute; several starts, the best kept).

Uncertainty: B draws, each refitted (warm-started at the point fit). A draw resamples the items
(one weight vector shared by every regime, checkpoint and the start, so everything stays paired)
and adds training (seed) noise: per checkpoint the seed variance pooled over the condition's regimes
(race_cli/report/stats.py, scaled per draw by df/χ²_df), one standard normal per regime and draw
shared by all of its checkpoints (a lucky run stays ahead). `predict_at` turns the draws into each
regime's predicted score at a budget X with a 95% percentile interval, the ranking at X, and the
regimes ≈ best there (the gap's Bonferroni percentile interval over every pair reaches zero).

How far to trust an extrapolation is measured, not assumed: benchmarks/bench_curve.py fits
synthetic pilots (the default grid's items, samples, seeds and checkpoints, its measured seed
spread) and measures the coverage of the interval at X = k·C (docs/frontier.md): curves that bend
inside the pilot kept >= 93% up to 4x, a curve still rising at C fell to ~80% from 1.5x; so the
report warns beyond MAX_EXTRAPOLATION, and beyond 1x when the fitted C_mid lies past the pilot.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

B_RANGE = (0.3, 5.0)  # steepness bounds
MID_SPAN = 30.0  # C_mid within [C_min / 30, C_max · 30]
CURVE_DRAWS = 200  # refits per regime for the intervals (each a least-squares fit)
MAX_EXTRAPOLATION = 4.0  # X / (largest compute observed) beyond which the report always warns (bench_curve.py)
UNBENT_MAX = 1.0  # ... and beyond this when the fitted C_mid lies past the observed compute (not yet bending)


def sigmoid(c, r0: float, a: float, c_mid: float, b: float):
    """R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B); R(0) = R0."""
    c = np.asarray(c, float)
    with np.errstate(divide="ignore", over="ignore"):
        return r0 + (a - r0) / (1.0 + np.exp(b * (math.log(c_mid) - np.log(np.maximum(c, 1e-300)))))


@dataclass
class CurveFit:
    r0: float
    a: float
    c_mid: float
    b: float
    rmse: float
    ok: bool

    def __call__(self, c):
        return sigmoid(c, self.r0, self.a, self.c_mid, self.b)


def _solve(c: np.ndarray, y: np.ndarray, r0: float, lo: float, hi: float, starts: list[np.ndarray]):
    from scipy.optimize import least_squares

    lc = np.log(c)
    lb = np.array([lo, lc.min() - math.log(MID_SPAN), B_RANGE[0]])
    ub = np.array([hi, lc.max() + math.log(MID_SPAN), B_RANGE[1]])

    def resid(th):
        a, lm, b = th
        return r0 + (a - r0) / (1.0 + np.exp(b * (lm - lc))) - y

    def jac(th):  # d resid / d (A, ln C_mid, B)
        a, lm, b = th
        e = np.exp(b * (lm - lc))
        s = 1.0 / (1.0 + e)
        ds = -s * s * e
        return np.stack([s, (a - r0) * ds * b, (a - r0) * ds * (lm - lc)], axis=1)

    best = None
    for x0 in starts:
        x0 = np.clip(x0, lb + 1e-9, ub - 1e-9)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = least_squares(resid, x0, jac=jac, bounds=(lb, ub), method="dogbox", x_scale=[0.1, 1.0, 1.0])
        if best is None or r.cost < best.cost:
            best = r
    return best


def fit_curve(c, y, r0: float, lo: float = 0.0, hi: float = 1.0, warm: CurveFit | None = None) -> CurveFit:
    """Least-squares fit of A, C_mid, B to points (c > 0, y), R0 fixed. lo/hi bound the asymptote
    (the score's range: [0, 1] for an accuracy). warm: start from this fit only (bootstrap refits)."""
    c, y = np.asarray(c, float), np.asarray(y, float)
    keep = np.isfinite(c) & np.isfinite(y) & (c > 0)
    c, y = c[keep], y[keep]
    if len(c) < 3:
        return CurveFit(r0, float("nan"), float("nan"), float("nan"), float("nan"), False)
    if warm is not None and warm.ok:
        starts = [np.array([warm.a, math.log(warm.c_mid), warm.b])]
    else:
        top = y[np.argmax(np.abs(y - r0))]
        lc = np.log(c)
        starts = [np.array([a0, m0, b0]) for a0 in (top, r0 + 1.5 * (top - r0))
                  for m0 in (lc.min(), np.median(lc), lc.max() + 1.0) for b0 in (1.0, 2.5)]
    r = _solve(c, y, r0, lo, hi, starts)
    a, lm, b = r.x
    return CurveFit(r0, float(a), float(math.exp(lm)), float(b), float(np.sqrt(np.mean(r.fun ** 2))), bool(r.success))


# --- one condition's regimes, with draws ---------------------------------------------------------


@dataclass
class ConditionCurves:
    """Per regime of one condition: the point fit, the observed compute range and the draws' fits."""

    regimes: list[str]
    fits: list[CurveFit]
    draws: list[list[CurveFit]]  # [R][B]
    c_max: np.ndarray  # [R] largest compute observed
    points: list[tuple[np.ndarray, np.ndarray]]  # per regime (compute [F], mean score [F])


def fit_condition(regime_of_job: np.ndarray, regimes: list[str], compute: np.ndarray, scores: np.ndarray,
                  start: np.ndarray, n_boot: int = CURVE_DRAWS, seed: int = 0, lo: float = 0.0, hi: float = 1.0,
                  ) -> ConditionCurves:
    """Fit every regime of one condition and its bootstrap refits.

    regime_of_job [J] ints; compute [J, F] FLOPs spent at each checkpoint (NaN: none); scores
    [J, F, n] per-item scores on the same n items at every checkpoint; start [n] the starting
    policy's per-item scores (pooled over the condition's jobs).
    """
    from race_cli.report import stats as S

    rng = np.random.default_rng(seed)
    R = len(regimes)
    J, F, n = scores.shape
    n_seeds = np.bincount(regime_of_job, minlength=R)
    job_means = np.nanmean(scores, axis=2)  # [J, F]
    reg_c = np.stack([np.nanmean(compute[regime_of_job == r], axis=0) for r in range(R)])  # [R, F]
    reg_y = np.stack([job_means[regime_of_job == r].mean(axis=0) for r in range(R)])  # [R, F]
    r0 = float(np.mean(start))
    fits = [fit_curve(reg_c[r], reg_y[r], r0, lo, hi) for r in range(R)]
    # seed noise per checkpoint, pooled over regimes (stats.noise_of on that checkpoint's table)
    seed_sd = np.zeros(F)
    df_seed = 0.0
    for f in range(F):
        ok = np.isfinite(scores[:, f, :]).all(axis=1)
        if ok.all():
            nz = S.noise_of(regime_of_job, scores[:, f, :], R)
            if nz.has_seed_noise:
                seed_sd[f], df_seed = math.sqrt(nz.seed_var), nz.df_seed
    w = S.item_weights(n, n_boot, rng).astype(float) / n if n > 1 else np.ones((n_boot, 1))  # [B, n]
    z = rng.standard_normal((n_boot, R))
    scale = np.sqrt(df_seed / rng.chisquare(df_seed, size=n_boot)) if df_seed > 0 else np.zeros(n_boot)
    r0_draws = w @ start  # [B]
    filled = np.nan_to_num(scores)
    draws: list[list[CurveFit]] = [[] for _ in range(R)]
    for r in range(R):
        sc = filled[regime_of_job == r].mean(axis=0)  # [F, n] seed-averaged item scores
        yb = w @ sc.T  # [B, F]
        yb += (scale * z[:, r])[:, None] * seed_sd[None, :] / math.sqrt(max(n_seeds[r], 1))
        draws[r] = [fit_curve(reg_c[r], yb[b], float(r0_draws[b]), lo, hi, warm=fits[r]) for b in range(n_boot)]
    return ConditionCurves(regimes=list(regimes), fits=fits, draws=draws, c_max=np.nanmax(reg_c, axis=1),
                           points=[(reg_c[r], reg_y[r]) for r in range(R)])


def predict_at(cc: ConditionCurves, x: float, maximize: bool = True, level: float = 0.95) -> pd.DataFrame:
    """Each regime's predicted score at budget x: point, percentile interval, rank, share of draws in
    which it is best, ≈ best (Bonferroni over pairs), and the extrapolation factor x / c_max."""
    R = len(cc.regimes)
    sign = 1.0 if maximize else -1.0
    point = np.array([float(f(x)) for f in cc.fits])
    d = np.array([[float(f(x)) for f in dr] for dr in cc.draws]).T  # [B, R]
    a = (1 - level) / 2
    lo, hi = np.nanquantile(d, [a, 1 - a], axis=0)
    best = int(np.nanargmax(sign * point))
    gap = sign * (d[:, [best]] - d)  # [B, R]
    n_pairs = max(1, R * (R - 1) // 2)
    gap_lo = np.nanquantile(gap, (1 - level) / (2 * n_pairs), axis=0)
    tied = gap_lo <= 0
    tied[best] = True
    top = (sign * d) >= np.nanmax(sign * d, axis=1, keepdims=True) - 1e-12
    p_best = (top / top.sum(axis=1, keepdims=True)).mean(axis=0)
    ranks = 1 + (sign * point[None, :] > sign * point[:, None]).sum(axis=1)
    return pd.DataFrame({"regime": cc.regimes, "budget": x, "predicted": point, "pred_lo": lo, "pred_hi": hi,
                         "rank": ranks, "is_best": np.arange(R) == best, "tied_best": tied, "p_best": p_best,
                         "extrapolation": x / cc.c_max, "a": [f.a for f in cc.fits],
                         "c_mid": [f.c_mid for f in cc.fits], "b": [f.b for f in cc.fits],
                         "r0": [f.r0 for f in cc.fits], "rmse": [f.rmse for f in cc.fits]}
                        ).sort_values(["rank", "regime"], kind="stable").reset_index(drop=True)


# --- the report: every condition's regimes at a budget X ---------------------------------------------


def parse_at_budget(text: str) -> tuple[float, bool]:
    """'3e12' -> (3e12, False): FLOPs; '3x' -> (3.0, True): 3 × each condition's own budget."""
    from race_cli.errors import RaceError

    s = str(text).strip().lower().replace("×", "x")
    rel = s.endswith("x")
    try:
        v = float(s[:-1] if rel else s)
    except ValueError:
        v = float("nan")
    if not math.isfinite(v) or v <= 0:
        raise RaceError(f"--at-budget {text!r} is not a budget. Expected FLOPs per job (e.g. 2.4e12) or a multiple "
                        "of each condition's budget (e.g. 3x).")
    return v, rel


def degenerate_warning(a: float, b: float, lo: float, hi: float) -> str:
    """'' unless the fit ran into a bound (steepness B at 0.3 or 5, asymptote A at the score's limit):
    then the checkpoints do not identify the curve and its prediction (and interval) mean nothing."""
    at = [n for n, hit in (("B", b <= B_RANGE[0] + 1e-6 or b >= B_RANGE[1] - 1e-6),
                            ("A", np.isfinite(lo) and a <= lo + 1e-6 or np.isfinite(hi) and a >= hi - 1e-6)) if hit]
    if not at:
        return ""
    return (f"the fit ran into the bound of {' and '.join(at)}: the checkpoints do not identify this curve "
            "(too few or too noisy points); do not use its prediction")


def extrapolation_warning(factor: float, bent: bool) -> str:
    """'' when the prediction at `factor` x the observed compute is within what bench_curve.py measured
    to cover the truth in >= 90% of pilots; else why not."""
    if factor > MAX_EXTRAPOLATION:
        return (f"{factor:.1f}x the largest compute observed, beyond {MAX_EXTRAPOLATION:g}x, where no curve's "
                "coverage was measured")
    if factor > UNBENT_MAX and not bent:
        return (f"{factor:.1f}x the largest compute observed while the fitted curve has not bent yet (C_mid beyond "
                "the pilot): such extrapolations covered the truth in only ~80% of synthetic pilots")
    return ""


def condition_inputs(jobs: pd.DataFrame, data, cps, target: str, reg_cols: list[str]):
    """One condition's arrays for fit_condition: (codes [J], regime labels, compute [J, F], scores [J, F, n],
    start [n], fractions), or None when the jobs lack per-item checkpoints on a common item set."""
    from race_cli.report.frontier import sweep_at
    from race_cli.report.rank import _item_matrix, _start_matrix, label

    keys = list(zip(jobs["sweep"], jobs["job_id"]))
    fracs = [f for f in cps.fractions if f > 0]
    mats, comp, columns = [], [], None
    for f in fracs:
        d = sweep_at(data, cps, f)
        m, _, cols = _item_matrix(keys, target, d.items)
        if m is None:
            continue
        if columns is not None and cols[0] != columns[0]:
            return None
        columns = cols
        mats.append(m)
        comp.append(d.jobs.set_index(["sweep", "job_id"]).loc[keys, "flops_at"].to_numpy(float))
    if len(mats) < 3 or columns is None:
        return None
    start = _start_matrix(keys, target, data.items_initial, columns)
    if start is None:
        return None
    if reg_cols:
        codes, uniq = pd.factorize(pd.MultiIndex.from_frame(jobs[reg_cols].astype(object)))
        names = [label(dict(zip(reg_cols, u))) for u in uniq]
    else:
        codes, names = np.zeros(len(jobs), dtype=int), [label({})]
    return (np.asarray(codes), names, np.stack(comp, axis=1), np.stack(mats, axis=1), start.mean(axis=0),
            fracs)


def predictions(data, cps, targets: list[str], by: list[str], at: float, relative: bool,
                n_boot: int = CURVE_DRAWS, seed: int = 0, maximize: dict[str, bool] | None = None,
                ) -> pd.DataFrame:
    """Every condition's regimes predicted at budget `at` (FLOPs, or × the condition's budget when
    relative): predict_at's columns plus condition, target, `warning` beyond MAX_EXTRAPOLATION."""
    from race_cli.report.rank import condition_label, rankable, regime_columns

    parts = []
    for k, t in enumerate(targets):
        jobs = data.jobs[rankable(data.jobs, t)]
        reg_cols = regime_columns(jobs, data.knob_cols, by)
        groups = jobs.groupby(by, dropna=False, sort=True) if by else [((), jobs)]
        for i, (key, g) in enumerate(groups):
            key = key if isinstance(key, tuple) else (key,)
            cond = dict(zip(by, key))
            inp = condition_inputs(g, data, cps, t, reg_cols)
            if inp is None:
                continue
            codes, names, comp, scores, start, _ = inp
            lo, hi = (0.0, 1.0) if np.nanmin(scores) >= 0 and np.nanmax(scores) <= 1 else (-np.inf, np.inf)
            cc = fit_condition(codes, names, comp, scores, start, n_boot=n_boot, seed=seed + 100 * k + i, lo=lo, hi=hi)
            x = at * float(cond.get("budget_flops", np.nan)) if relative else at
            p = predict_at(cc, x, (maximize or {}).get(t, True))
            p.insert(0, "condition", condition_label(cond | {"target": t}))
            p.insert(1, "target", t)
            p["warning"] = [degenerate_warning(a, b, lo, hi) or extrapolation_warning(e, c_mid <= x / e)
                            for e, c_mid, a, b in zip(p["extrapolation"], p["c_mid"], p["a"], p["b"])]
            parts.append(p)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


PRED_HEAD = ["rank", "regime", "predicted [95% CI]", "≈ best", "best share", "× observed", "A", "C_mid", "B"]


def prediction_rows(g: pd.DataFrame) -> list[list[str]]:
    return [[str(r.rank) + (" ★" if r.is_best else ""), r.regime, f"{r.predicted:.3f} [{r.pred_lo:.3f}, {r.pred_hi:.3f}]",
             "yes" if r.tied_best else "no", f"{r.p_best:.2f}", f"{r.extrapolation:.2f}" + (" ⚠" if r.warning else ""),
             f"{r.a:.3f}", f"{r.c_mid:.3g}", f"{r.b:.2f}"] for r in g.itertuples()]


PRED_INTRO = ("Each regime's compute curve R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B), fitted to its equal-FLOP "
              "checkpoints (R0 the condition's start), predicts its score at the budget; intervals from "
              "{n} refits on draws that resample items and add seed noise. ≈ best: the gap to the predicted "
              "best is not distinguishable from zero (Bonferroni over pairs). × observed: the budget over the "
              "largest compute measured; ⚠ where the intervals' measured coverage falls below 90%: beyond {k:g}x, "
              "or beyond 1x for a curve not yet bending (benchmarks/bench_curve.py).")


def markdown_section(pred: pd.DataFrame, n_boot: int) -> list[str]:
    from race_cli.report.render import md_table

    out = [f"## Predicted at {pred['budget'].iloc[0]:.3g} FLOPs (compute curves)", "",
           PRED_INTRO.format(n=n_boot, k=MAX_EXTRAPOLATION), ""]
    for cond, g in pred.groupby("condition", sort=False):
        out += [f"#### {cond}", "", md_table(PRED_HEAD, prediction_rows(g)), ""]
        out += [f"- ⚠ {', '.join(gw['regime'])}: {w}." for w, gw in g[g["warning"].astype(bool)].groupby("warning")]
        out += [""]
    return out


def print_section(console, pred: pd.DataFrame, n_boot: int) -> None:
    from rich.table import Table

    console.rule(f"[bold]predicted at {pred['budget'].iloc[0]:.3g} FLOPs")
    console.print(PRED_INTRO.format(n=n_boot, k=MAX_EXTRAPOLATION), highlight=False)
    for cond, g in pred.groupby("condition", sort=False):
        t = Table(title=f"{cond} at {g['budget'].iloc[0]:.3g} FLOPs", title_justify="left")
        for h in PRED_HEAD:
            t.add_column(h, justify="left" if h == "regime" else "right", overflow="fold")
        for row in prediction_rows(g):
            t.add_row(*row)
        console.print(t)
        for w, gw in g[g["warning"].astype(bool)].groupby("warning"):
            console.print(f"[bold yellow]warning[/] ({', '.join(gw['regime'])}): {w}", highlight=False)
