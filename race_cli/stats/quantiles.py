"""Quantiles of the reference distributions the decisions use (scipy, cached; no I/O).

- `t_quantile(level, df)` / `t_sf(x, df)`: Student's t (scipy.special.stdtrit / stdtr; df = inf is
  the normal);
- `range_quantile(level, k, df)`: the studentized range of k means, exact at k = 2 through t
  (q = √2·t at (1 + level)/2), by a tabulated quadrature otherwise (scipy.stats.studentized_range's
  formula, the same values to 1e-5, orders of magnitude faster), cached;
- `half_width(parts, q)`: the interval half-width with each variance part scaled by the quantile at its
  own degrees of freedom (Banerjee 1961, "modified large-sample"): sqrt(q(df_item)²·item −
  q(df_resid)²·resid + q(df_seed)²·seed), the item-minus-residual bracket floored at zero.

Dunnett's many-to-one quantile lives with the procedure that uses it (stats/gatekeeping.py).

References

- Studentized range: Tukey, J. W. (1953), "The problem of multiple comparisons", unpublished manuscript,
  printed in The Collected Works of John W. Tukey, Vol. VIII (Chapman & Hall, 1994); for unequal
  replication Kramer, C. Y. (1956), Biometrics 12(3):307–310, shown conservative by Hayter, A. J. (1984),
  Annals of Statistics 12(1):61–75.
- Per-part quantiles (`half_width`): Banerjee, S. K. (1961), Sankhyā Series A 23 (the two-means problem with
  separate variance estimates, each at its own df).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special



def t_quantile(level, df):
    """The `level` quantile of Student's t with df degrees of freedom (arrays broadcast; inf: normal)."""
    df = np.asarray(df, float)
    t = lambda d: special.stdtrit(np.where(np.isfinite(d), d, 1e300), level)
    if df.size > 64 and np.ndim(level) == 0:  # a simulation's df (thousands, a few distinct): each one once
        uniq, inv = np.unique(df, return_inverse=True)
        return t(uniq)[inv].reshape(df.shape)
    out = t(df)
    return float(out) if out.ndim == 0 else out


def t_sf(x, df):
    """P(T > x) for Student's t with df degrees of freedom (arrays broadcast; inf: normal)."""
    df = np.asarray(df, float)
    out = special.stdtr(np.where(np.isfinite(df), df, 1e300), -np.asarray(x, float))
    return float(out) if out.ndim == 0 else out


def _sig(df: float) -> float:
    """df rounded to 3 significant digits (the cache key; quantiles move < 1e-3 within it)."""
    if not math.isfinite(df):
        return math.inf
    return float(f"{df:.3g}")


# The studentized range by quadrature (scipy.stats.studentized_range gives the same values to 1e-5,
# tests/test_stats.py, but is slow at finite df; the report needs hundreds of calls):
# P(W <= q) = ∫ f_s(u) G_k(q·u) du, G_k(w) = k ∫ φ(z) [Φ(z) − Φ(z − w)]^(k−1) dz, s = sqrt(χ²_df/df)
# (Lund & Lund 1983, the formula scipy integrates). G_k is tabulated once per k on a grid of w.
_Z = np.linspace(-8.5, 8.5, 341)
_PHI_Z = np.exp(-_Z ** 2 / 2) / math.sqrt(2 * math.pi)
_CDF_Z = special.ndtr(_Z)
_W = np.concatenate([np.linspace(0, 12, 1201), np.geomspace(12.01, 4000, 300)])
_V = np.linspace(math.log(1e-3), math.log(12), 1500)  # log s
_U = np.exp(_V)


@lru_cache(maxsize=1)
def _band() -> np.ndarray:
    """Φ(z) − Φ(z − w) on the grid [W, Z], clipped to [0, 1]: the part of G_k that does not depend on k."""
    return np.clip(_CDF_Z[None, :] - special.ndtr(_Z[None, :] - _W[:, None]), 0, 1)


@lru_cache(maxsize=64)
def _g(k: int) -> np.ndarray:
    inner = _band() ** (k - 1)
    return np.minimum(k * np.trapezoid(_PHI_Z[None, :] * inner, _Z, axis=1), 1.0)


@lru_cache(maxsize=512)
def _s_weights(df: float) -> np.ndarray:
    logf = ((df / 2) * math.log(df) - special.gammaln(df / 2) - (df / 2 - 1) * math.log(2) + (df - 1) * _V
            - df * _U ** 2 / 2)
    return np.exp(logf + _V)  # f_s(u) du = f_s(u)·u d(log u)


def range_cdf(q: float, k: int, df: float) -> float:
    """P(studentized range of k means <= q) with df degrees of freedom (df = inf: known variance)."""
    if not math.isfinite(df) or df > 1e5:
        return float(np.interp(q, _W, _g(k)))
    return float(np.trapezoid(_s_weights(df) * np.interp(q * _U, _W, _g(k), right=1.0), _V))


MEMO: dict[tuple[float, int, float], float] = {}  # (level, k, df to 3 significant digits) -> quantile


def _range_q(level: float, k: int, df: float) -> float:
    """The quantile, once per process (MEMO: a few hundred in a report, each a 50-step bisection)."""
    q = MEMO.get((level, k, df))
    if q is None:
        q = MEMO[level, k, df] = _range_q_of(level, k, df)
    return q


def _range_q_of(level: float, k: int, df: float) -> float:
    if not df > 0:
        return math.nan  # no degrees of freedom: no quantile (half_width ignores it where the part is empty)
    if k == 2:
        return math.sqrt(2.0) * t_quantile(0.5 + level / 2, df)
    a, b = _bracket(level, k, df)
    lo, hi = 1e-3, 3999.0  # bisection in log q (range_cdf rises in q): 1e-9 relative after 50 steps
    for _ in range(50):
        mid = math.sqrt(lo * hi)
        below = mid <= a or (mid < b and range_cdf(mid, k, df) < level)  # outside [a, b]: known, not evaluated
        lo, hi = (mid, hi) if below else (lo, mid)
    return math.sqrt(lo * hi)


_MARGIN = 1e-12  # far above range_cdf's rounding wobble in q (~1e-15): beyond it, monotonicity decides a step


def _bracket(level: float, k: int, df: float) -> tuple[float, float]:
    """q values a < b close around the quantile with range_cdf(a) < level − _MARGIN < level + _MARGIN <
    range_cdf(b), found by a secant search in log q from the known-variance quantile; (0, inf) if none is.

    range_cdf rises in q (every step of it is monotone: q·u, the interpolation of a rising table, positive
    weights, a sum), up to rounding far below _MARGIN, so the bisection above takes the same step at any mid
    outside (a, b) as it would by evaluating there: the same quantile to the last bit, in about half the
    evaluations (the ~17 steps inside the bracket and ~10 to find it, instead of 50)."""
    f = lambda x: range_cdf(math.exp(x), k, df) - level
    x0 = math.log(min(max(float(np.interp(level, _g(k), _W)), 1e-2), 3000.0))
    x1 = x0 + 0.05
    f0, f1 = f(x0), f(x1)
    for _ in range(12):
        if f1 == f0 or not math.isfinite(x1):
            return 0.0, math.inf
        x0, f0, x1 = x1, f1, x1 - f1 * (x1 - x0) / (f1 - f0)
        if not -7.0 < x1 < 8.3:  # outside the bisection's own range
            return 0.0, math.inf
        f1 = f(x1)
        if abs(x1 - x0) < 1e-11:
            break
    for w in (1e-9, 1e-7, 1e-5):
        a, b = math.exp(x1 - w), math.exp(x1 + w)
        if range_cdf(a, k, df) < level - _MARGIN and range_cdf(b, k, df) > level + _MARGIN:
            return a, b
    return 0.0, math.inf


def range_quantile(level: float, k: int, df) -> np.ndarray | float:
    """The `level` quantile of the studentized range of k means with df degrees of freedom
    (elementwise over an array of df; k = 1 has no range: 0); cached per level, k and df to 3 digits."""
    if k < 2:
        return 0.0 if np.ndim(df) == 0 else np.zeros(np.shape(df))
    if np.ndim(df) == 0:
        return _range_q(round(float(level), 12), int(k), _sig(float(df)))
    d = np.asarray(df, float)
    uniq, inv = np.unique(d, return_inverse=True)
    vals = np.array([_range_q(round(float(level), 12), int(k), _sig(float(u))) for u in uniq])
    return vals[inv].reshape(d.shape)


def half_width(item, resid, seed, q_item, q_resid, q_seed):
    """sqrt(max(q_item²·item − q_resid²·resid, 0) + q_seed²·seed), elementwise (see the module docstring)."""
    term = lambda q, v: np.where(np.asarray(v) > 0, np.asarray(q) ** 2 * v, 0.0)  # an empty part: no df needed
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.maximum(term(q_item, item) - term(q_resid, resid), 0.0) + term(q_seed, seed))


_T975_DF = np.geomspace(0.5, 1e5, 600)
_T975 = special.stdtrit(_T975_DF, 0.975)


def df_for_t975(q) -> np.ndarray:
    """The degrees of freedom whose 97.5% t quantile is q (interpolated in log df; inf at the normal's):
    how a combined half-width is summarised as one 'df' for display."""
    q = np.asarray(q, float)
    df = np.exp(np.interp(-q, -_T975, np.log(_T975_DF)))
    return np.where(q <= _T975[-1], math.inf, df)
