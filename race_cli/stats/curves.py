"""Compute curves, pure (numpy/scipy, no I/O): the saturating sigmoid, its bounded least-squares fit, the
seed covariance of a regime's trajectory across checkpoints, and the interval rules on refit draws that
race_cli/report/curve.py applies.

    R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B)

R0 the starting score (not fitted), A the asymptote, C_mid the compute at half the gain, B the steepness.
`fit_curve`: scipy.optimize.least_squares (dogbox, bounded, analytic Jacobian: A within the score's range,
B in B_RANGE, C_mid within 1/MID_SPAN .. MID_SPAN × the observed compute; several starts, the best kept).

`seed_covariance`: the training-run (seed) covariance of a regime's mean score between checkpoints, from
the observed per-seed trajectories of every regime with two or more seeds: the covariance of the job
means' deviations, net of the evaluation residual's share (the seed × item residual's cross-checkpoint
covariance over n items), clipped to be positive semi-definite. A seed that is lucky at one checkpoint is
lucky at the next only as far as the trajectories show (the earlier model drew one normal per regime for
all its checkpoints: perfect correlation).

`t_scale`: the scale of a t-shaped sample from its quartiles (IQR / (2·t_df(0.75))), so an interval at a
far level (a Bonferroni or studentized-range share) is a t quantile × that scale rather than an extreme
order statistic of a few hundred refits (at R = 6 regimes, 15 pairs, the 0.17% percentile lies below
1/200).

`at_bound`: which fits ran into a bound of B or A (the checkpoints do not identify the curve there).
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np

B_RANGE = (0.3, 5.0)  # steepness bounds
MID_SPAN = 30.0  # C_mid within [C_min / 30, C_max · 30]


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


def at_bound(a: np.ndarray, b: np.ndarray, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """(B at a bound, A at a bound) for fits with parameters a, b [K] (A bounded by [lo, hi])."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    hit_b = (b <= B_RANGE[0] + 1e-6) | (b >= B_RANGE[1] - 1e-6)
    hit_a = (np.isfinite(lo) & (a <= lo + 1e-6)) | (np.isfinite(hi) & (a >= hi - 1e-6))
    return hit_b, hit_a


def seed_covariance(codes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, float]:
    """(Σ_b [F, F], df): the covariance of one training run's effect on the mean score between checkpoints,
    pooled over the regimes with >= 2 seeds, and its degrees of freedom Σ (n_r − 1) (0: no replicated
    regime, Σ_b = 0).

    codes [J] regime of each job; scores [J, F, n] per-item scores (no NaN). Per regime, the job means'
    deviations d [n_r, F] give Σ d dᵀ; the seed × item residual e [n_r, F, n] gives the evaluation
    noise's part of a job mean's covariance, Σ_i e_f e_g / (n·df_e) per (f, g); Σ_b is the difference,
    with negative eigenvalues set to zero."""
    codes = np.asarray(codes)
    J, F, n = scores.shape
    s_jm, s_e = np.zeros((F, F)), np.zeros((F, F))
    df_s = df_e = 0
    for r in np.unique(codes):
        y = scores[codes == r]  # [n_r, F, n]
        if len(y) < 2:
            continue
        jm = y.mean(axis=2)  # [n_r, F]
        d = jm - jm.mean(axis=0)
        s_jm += d.T @ d
        if n > 1:
            e = y - jm[:, :, None] - y.mean(axis=0)[None] + jm.mean(axis=0)[None, :, None]
            s_e += np.einsum("sfi,sgi->fg", e, e)
        df_s += len(y) - 1
        df_e += (len(y) - 1) * (n - 1)
    if not df_s:
        return np.zeros((F, F)), 0.0
    cov = s_jm / df_s - (s_e / df_e / n if df_e else 0.0)
    w, v = np.linalg.eigh((cov + cov.T) / 2)
    return (v * np.maximum(w, 0.0)) @ v.T, float(df_s)


def t_scale(x: np.ndarray, df: float, axis: int = 0) -> np.ndarray:
    """The scale s of draws x distributed as center + s·t_df, from their quartiles: IQR / (2·t_df(0.75))
    (df = inf or 0: the normal's 0.6745). NaN draws are ignored."""
    from scipy.special import ndtri, stdtrit

    q75 = float(stdtrit(df, 0.75)) if (math.isfinite(df) and df > 0) else float(ndtri(0.75))
    lo, hi = np.nanquantile(x, [0.25, 0.75], axis=axis)
    return (hi - lo) / (2.0 * q75)
