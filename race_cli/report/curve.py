"""A compute curve per regime: score against training FLOPs, fitted on the equal-FLOP checkpoints.

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

the saturating sigmoid used for RL compute scaling (race_cli/stats/curves.py fits it): R0 the starting
score (the condition's iteration-0 evaluation, pooled over its jobs, not fitted), A the asymptote, C_mid
the compute at which half the gain A − R0 is reached, B the steepness. The points are the regime's mean
score at each checkpoint (report/frontier.py) against the mean FLOPs its jobs had spent there.

Uncertainty: B draws, each refitted (warm-started at the point fit). A draw resamples the items (one
weight vector shared by every regime, checkpoint and the start, so everything stays paired) and adds
training (seed) noise: per regime a normal vector over the checkpoints with the seed covariance estimated
from the observed per-seed trajectories (stats/curves.seed_covariance, pooled over the condition's
replicated regimes, net of evaluation noise), scaled per draw by df/χ²_df. `predict_at` turns the draws
into each regime's predicted score at a budget X with a 95% percentile interval, the ranking at X, and
the regimes ≈ best there: the gap to the best is within its studentized-range bound (all pairs,
familywise 5%), the gap's scale a t scale fitted to the refits' quartiles (stats/curves.t_scale) — the
bound's level (the range's 95% over R regimes) is far beyond what a percentile of 200 refits resolves.

What the report can see of a fit, and warns about (measured by benchmarks/bench_curve.py, docs/measurements/frontier.md):
- not identified: the point fit, or at least BOUND_SHARE of the refits, ran into a bound of B or A;
- not yet bent: beyond UNBENT_MAX × the observed compute unless the point fit's C_mid lies inside the
  observed compute *and* at least BENT_SHARE of the refits' do (a still-rising truth whose point fit merely
  looks bent is caught by its refits when most of them are not bent);
- beyond MAX_EXTRAPOLATION × the observed compute always.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from race_cli.report.records import CURVE_DRAWS, MAX_EXTRAPOLATION
from race_cli.stats.curves import B_RANGE, MID_SPAN, CurveFit, at_bound, fit_curve, seed_covariance, sigmoid, t_scale  # noqa: F401

UNBENT_MAX = 1.0  # ... and beyond this unless the refits put C_mid inside the observed compute
BENT_SHARE = 0.5  # share of refits with C_mid <= the largest observed compute for "bent" (with the point fit's)
BOUND_SHARE = 0.9  # share of refits at a bound of B or A from which a fit is "not identified" (see docs/measurements/frontier.md)
ALPHA = 0.05


# --- one condition's regimes, with draws ---------------------------------------------------------


@dataclass
class ConditionCurves:
    """Per regime of one condition: the point fit, the observed compute range and the draws' fits."""

    regimes: list[str]
    fits: list[CurveFit]
    draws: list[list[CurveFit]]  # [R][B]
    c_max: np.ndarray  # [R] largest compute observed
    points: list[tuple[np.ndarray, np.ndarray]]  # per regime (compute [F], mean score [F])
    df_seed: float = 0.0  # the seed covariance's degrees of freedom (0: evaluation noise only)
    lo: float = 0.0  # the asymptote's bounds (the score's range)
    hi: float = 1.0


def fit_condition(regime_of_job: np.ndarray, regimes: list[str], compute: np.ndarray, scores: np.ndarray,
                  start: np.ndarray, n_boot: int = CURVE_DRAWS, seed: int = 0, lo: float = 0.0, hi: float = 1.0,
                  ) -> ConditionCurves:
    """Fit every regime of one condition and its bootstrap refits.

    regime_of_job [J] ints; compute [J, F] FLOPs spent at each checkpoint (NaN: none); scores
    [J, F, n] per-item scores on the same n items at every checkpoint; start [n] the starting
    policy's per-item scores (pooled over the condition's jobs).
    """
    rng = np.random.default_rng(seed)
    R = len(regimes)
    J, F, n = scores.shape
    n_seeds = np.bincount(regime_of_job, minlength=R)
    job_means = np.nanmean(scores, axis=2)  # [J, F]
    reg_c = np.stack([np.nanmean(compute[regime_of_job == r], axis=0) for r in range(R)])  # [R, F]
    reg_y = np.stack([job_means[regime_of_job == r].mean(axis=0) for r in range(R)])  # [R, F]
    r0 = float(np.mean(start))
    fits = [fit_curve(reg_c[r], reg_y[r], r0, lo, hi) for r in range(R)]
    filled = np.nan_to_num(scores)
    cov, df_seed = seed_covariance(regime_of_job, filled)  # [F, F] one run's effect across checkpoints
    w = (np.bincount((rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]).ravel(),
                     minlength=n_boot * n).reshape(n_boot, n).astype(float) / n) if n > 1 else np.ones((n_boot, 1))
    ev, evec = np.linalg.eigh(cov)
    root = evec * np.sqrt(np.maximum(ev, 0.0))  # [F, F]: root @ rootᵀ = cov
    z = rng.standard_normal((n_boot, R, F)) @ root.T  # [B, R, F] one run's effect per regime and draw
    scale = np.sqrt(df_seed / rng.chisquare(df_seed, size=n_boot)) if df_seed > 0 else np.zeros(n_boot)
    r0_draws = w @ start  # [B]
    draws: list[list[CurveFit]] = [[] for _ in range(R)]
    for r in range(R):
        sc = filled[regime_of_job == r].mean(axis=0)  # [F, n] seed-averaged item scores
        yb = w @ sc.T  # [B, F]
        yb += scale[:, None] * z[:, r, :] / math.sqrt(max(n_seeds[r], 1))
        draws[r] = [fit_curve(reg_c[r], yb[b], float(r0_draws[b]), lo, hi, warm=fits[r]) for b in range(n_boot)]
    return ConditionCurves(regimes=list(regimes), fits=fits, draws=draws, c_max=np.nanmax(reg_c, axis=1),
                           points=[(reg_c[r], reg_y[r]) for r in range(R)], df_seed=df_seed, lo=lo, hi=hi)


def _at(x: float, par) -> np.ndarray:
    """Every draw's curve at x, vectorised: [B, R] from the parameter arrays par(name) -> [B, R]."""
    r0, a, b = par("r0"), par("a"), par("b")
    lm = np.log(np.maximum(par("c_mid"), 1e-300))
    with np.errstate(over="ignore", invalid="ignore"):
        return r0 + (a - r0) / (1.0 + np.exp(b * (lm - math.log(x))))


def predict_at(cc: ConditionCurves, x: float, maximize: bool = True, level: float = 0.95,
               alpha: float = ALPHA) -> pd.DataFrame:
    """Each regime's predicted score at budget x: point, percentile interval, rank, best share (a ranking
    score, not a probability), ≈ best (the gap to the best within its studentized-range bound, familywise
    alpha over all pairs, on a t scale fitted to the refits), the extrapolation factor x / c_max, and what
    the refits say of the fit: the share at a bound of B or A, the share with C_mid inside the pilot."""
    from race_cli.stats.quantiles import range_quantile

    R = len(cc.regimes)
    sign = 1.0 if maximize else -1.0
    point = np.array([float(f(x)) for f in cc.fits])
    par = lambda k: np.array([[getattr(f, k) for f in dr] for dr in cc.draws], float).T  # [B, R]
    d = _at(x, par)  # [B, R]
    a = (1 - level) / 2
    lo, hi = np.nanquantile(d, [a, 1 - a], axis=0)
    best = int(np.nanargmax(sign * point))
    gap = sign * (d[:, [best]] - d)  # [B, R]
    # the scale is read from B refits' quartiles (an IQR has ~37% of the sd's efficiency: ~0.37·B df), on top
    # of the seed variance's own df
    df = 1.0 / ((1.0 / cc.df_seed if cc.df_seed > 0 else 0.0) + 1.0 / (0.37 * max(d.shape[0], 1)))
    q = float(range_quantile(1 - alpha, R, df)) / math.sqrt(2.0) if R >= 2 else 0.0
    gap_point = sign * (point[best] - point)
    gap_lo = gap_point - q * t_scale(gap, cc.df_seed if cc.df_seed > 0 else math.inf)  # the draws' shape: t_df_seed
    tied = ~(gap_lo > 0)
    tied[best] = True
    top = (sign * d) >= np.nanmax(sign * d, axis=1, keepdims=True) - 1e-12
    p_best = (top / top.sum(axis=1, keepdims=True)).mean(axis=0)
    ranks = 1 + (sign * point[None, :] > sign * point[:, None]).sum(axis=1)
    shares = [at_bound([f.a for f in dr], [f.b for f in dr], cc.lo, cc.hi) for dr in cc.draws]
    bound_share = np.array([float(np.mean(hb | ha)) if len(hb) else math.nan for hb, ha in shares])
    bent_share = np.array([float(np.mean([f.c_mid <= c for f in dr])) if dr else math.nan
                           for dr, c in zip(cc.draws, cc.c_max)])
    return pd.DataFrame({"regime": cc.regimes, "budget": x, "predicted": point, "pred_lo": lo, "pred_hi": hi,
                         "rank": ranks, "is_best": np.arange(R) == best, "tied_best": tied, "p_best": p_best,
                         "gap_lo": gap_lo, "extrapolation": x / cc.c_max, "a": [f.a for f in cc.fits],
                         "c_mid": [f.c_mid for f in cc.fits], "b": [f.b for f in cc.fits],
                         "r0": [f.r0 for f in cc.fits], "rmse": [f.rmse for f in cc.fits],
                         "bound_share": bound_share, "bent_share": bent_share}
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


def degenerate_warning(a: float, b: float, lo: float, hi: float, bound_share: float = math.nan) -> str:
    """'' unless the fit ran into a bound (steepness B at 0.3 or 5, asymptote A at the score's limit), or
    at least BOUND_SHARE of its refits did: then the checkpoints do not identify the curve and its
    prediction (and interval) mean nothing."""
    hb, ha = at_bound([a], [b], lo, hi)
    at = [n for n, hit in (("B", bool(hb[0])), ("A", bool(ha[0]))) if hit]
    if at:
        return (f"the fit ran into the bound of {' and '.join(at)}: the checkpoints do not identify this curve "
                "(too few or too noisy points); do not use its prediction")
    if np.isfinite(bound_share) and bound_share >= BOUND_SHARE:
        return (f"{100 * bound_share:.0f}% of its refits ran into a bound of B or A: the checkpoints do not identify "
                "this curve (too few or too noisy points); do not use its prediction")
    return ""


def extrapolation_warning(factor: float, bent, point_bent: bool = True) -> str:
    """'' when the prediction at `factor` x the observed compute is within what bench_curve.py measured
    to cover the truth in >= 90% of pilots; else why not. bent: the share of refits whose C_mid lies
    inside the observed compute (or, for a stored prediction without it, whether the point fit's does);
    point_bent: whether the point fit's does. Bent means both."""
    if factor > MAX_EXTRAPOLATION:
        return (f"{factor:.1f}x the largest compute observed, beyond {MAX_EXTRAPOLATION:g}x, where the intervals' "
                "measured coverage falls below 90%")
    share = float(bent) if not isinstance(bent, (bool, np.bool_)) else (1.0 if bent else 0.0)
    if not point_bent:
        share = min(share, 0.0)
    if factor > UNBENT_MAX and not share >= BENT_SHARE:
        return (f"{factor:.1f}x the largest compute observed while the curve's bend is not established (only "
                f"{100 * share:.0f}% of its refits put C_mid inside the pilot): such extrapolations covered the "
                "truth too rarely in synthetic pilots")
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
            p["warning"] = [degenerate_warning(a, b, lo, hi, bs) or extrapolation_warning(e, bent, c_mid <= x / e)
                            for e, a, b, bs, bent, c_mid in zip(p["extrapolation"], p["a"], p["b"], p["bound_share"],
                                                                p["bent_share"], p["c_mid"])]
            parts.append(p)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


