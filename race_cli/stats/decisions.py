"""Intervals and familywise decisions on one condition's regimes (numpy/scipy, no I/O).

Every bound scales each variance part (stats/variance.py: item, residual, seed) by the quantile of the
procedure's distribution at that part's own degrees of freedom (stats/quantiles.half_width).

- `intervals`: est ± half-width at a two-sided level, per contrast (Interval records);
- `worse_than_best` ("≈ best" is its negation): all pairwise gaps by the Ryan–Einot–Gabriel–Welsch
  step-down on the studentized range (REGWQ): the set of p adjacent regimes (in the order of their
  means) is called unequal when its range exceeds q(p, df)/√2 · se at level α_p = 1 − (1 − α)^(p/R)
  (α for p ≥ R − 1) and every set containing it was; a regime is worse than the best when the set
  spanning the two was. Strong familywise control at α over all pairs (the best is picked from the same
  data); at R = 3 the second step tests at full α. Batched over a leading axis (race plan simulates
  pilots through it);
- `holm_above`: Holm's step-down on one-sided bounds (estimate − half-width at 1 − α/m, m = hypotheses
  left) for "> margin", so each step uses the critical value of its own level;
- `simultaneous`: Bonferroni intervals over the R regimes: the selected best's interval holds whichever
  regime the data pick (the winner's interval used wherever the best's value is reported);
- `winners_curse`: the best estimate's expected excess over its truth, from the same variance parts
  (normal-normal empirical Bayes: between-regime variance τ² from the spread of the means net of their
  noise; excess = v/(v + τ²) · (m_best − m̄));
- `rank_decisions` / `gain_decisions`: one condition's table of the above, as RankDecision / GainDecision
  records; `rank_decisions_many` /
  `gain_decisions_many` the same for many conditions, stacked by shape (variance.stack) and decided at once.

With no seed variance (one seed per regime and nothing assumed) the intervals cover evaluation noise
only and no decision is made (`testable` False): the caller says "not testable with one seed".

References

- REGWQ (`worse_than_best`): Ryan, T. A. (1960), "Significance tests for multiple comparison of proportions,
  variances, and other statistics", Psychological Bulletin 57(4):318–328; Einot, I. & Gabriel, K. R. (1975),
  "A study of the powers of several methods of multiple comparisons", JASA 70(351):574–583 (the levels α_p);
  Welsch, R. E. (1977), "Stepwise multiple comparison procedures", JASA 72(359):566–575 (α for p ≥ R − 1).
- Holm (`holm_above`): Holm, S. (1979), "A simple sequentially rejective multiple test procedure",
  Scandinavian Journal of Statistics 6(2):65–70.
- Bonferroni intervals (`simultaneous`): Dunn, O. J. (1961), "Multiple comparisons among means", JASA
  56(293):52–64.
- The winner's curse as normal-normal empirical Bayes shrinkage (`winners_curse`): Efron, B. & Morris, C.
  (1975), "Data analysis using Stein's estimator and its generalizations", JASA 70(350):311–319.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from race_cli.stats.quantiles import df_for_t975, half_width, range_quantile, t_quantile
from race_cli.stats import variance as V
from race_cli.stats.variance import Noise, Parts

ALPHA = 0.05


@dataclass
class Interval:
    """Estimates with their bounds: arrays [K] (or floats), the effective df, and how they were made."""

    estimate: np.ndarray
    low: np.ndarray
    high: np.ndarray
    df: np.ndarray
    method: str


def _half(parts: Parts, q) -> np.ndarray:
    """Half-widths with the quantile function q(df) applied to each part at its own df."""
    return half_width(parts.item, parts.resid, parts.seed, q(parts.df_item), q(parts.df_resid), q(parts.df_seed))


def intervals(est: np.ndarray, parts: Parts, level: float = 0.95, method: str = "t, parts at own df") -> Interval:
    """Two-sided `level` intervals of contrasts with parts `parts` (nan where nothing is estimable)."""
    tq = lambda df: t_quantile(0.5 + level / 2, df)
    h = _half(parts, tq)
    se = parts.se
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(se > 0, df_for_t975(h / np.where(se > 0, se, 1.0)), math.inf) if level == 0.95 else \
            np.full(np.shape(se), np.nan)
    h = np.where(se > 0, h, np.where(np.isfinite(se), 0.0, np.nan))
    return Interval(est, est - h, est + h, df, method)


# --- ≈ best: REGWQ over all pairs ----------------------------------------------------------------


def _level(p: int, R: int, alpha: float) -> float:
    return alpha if p >= R - 1 else 1 - (1 - alpha) ** (p / R)


def worse_than_best(point: np.ndarray, item: np.ndarray, resid: np.ndarray, seed: np.ndarray,
                    df_item: float, df_resid: float, df_seed: np.ndarray, alpha: float = ALPHA) -> np.ndarray:
    """Which regimes are shown worse than the best (higher is better), familywise alpha over all pairs.

    point [..., R]; item/resid/seed/df_seed [..., R, R]: the parts of gap i − j for every pair (symmetric);
    df_item, df_resid scalars. Returns [..., R] bool (the best itself is never worse).
    """
    point = np.asarray(point, float)
    shape = point.shape
    R = shape[-1]
    if R < 2:
        return np.zeros(shape, dtype=bool)
    # flat over the leading axes: pilot p's gap i − j is column i·R + j of row p (plain fancy indexing,
    # much cheaper per step than take_along_axis over [..., R, R])
    P = point.reshape(-1, R)
    N = len(P)
    flat = lambda a: np.broadcast_to(a, shape[:-1] + (R, R)).reshape(N, R * R)
    item, resid, seed, df_seed = flat(item), flat(resid), flat(seed), flat(df_seed)
    order = np.argsort(-P, axis=-1, kind="stable")  # positions: 0 = best
    rows = np.arange(N)
    rejected: dict[tuple[int, int], np.ndarray] = {}
    for p in range(R, 1, -1):
        lev = 1 - _level(p, R, alpha)
        q = lambda df, lev=lev, p=p: range_quantile(lev, p, df) / math.sqrt(2.0)
        qi, qe = q(df_item), q(df_resid)
        for a in range(R - p + 1):
            b = a + p - 1
            i, j = order[:, a], order[:, b]
            gap = P[rows, i] - P[rows, j]
            ij = i * R + j
            h = half_width(item[rows, ij], resid[rows, ij], seed[rows, ij], qi, qe, q(df_seed[rows, ij]))
            rej = gap > h
            if a > 0:
                rej = rej & rejected[(a - 1, b)]
            if b < R - 1:
                rej = rej & rejected[(a, b + 1)]
            rejected[(a, b)] = rej
    out = np.zeros((N, R), dtype=bool)
    for b in range(1, R):  # the best (position 0) against position b
        out[rows, order[:, b]] = rejected[(0, b)]
    return out.reshape(shape)


def pair_contrasts(R: int) -> np.ndarray:
    """Every gap i − j of R regimes as a contrast: c [R·R, R], row i·R + j."""
    return (np.eye(R)[:, None, :] - np.eye(R)[None, :, :]).reshape(R * R, R)



# --- > margin: Holm on bounds --------------------------------------------------------------------


def holm_above(est: np.ndarray, parts: Parts, alpha: float, margin: float = 0.0) -> np.ndarray:
    """Holm's step-down for H0: value <= margin, one-sided familywise alpha: at each step, with m
    hypotheses left, those whose bound est − half-width(1 − α/m) exceeds the margin are rejected.
    est [..., K]; parts of the K contrasts (item/resid/seed arrays broadcast against est)."""
    est = np.asarray(est, float)
    K = est.shape[-1]
    out = np.zeros(est.shape, dtype=bool)
    left = np.ones(est.shape, dtype=bool)
    for _ in range(K):
        m = left.sum(axis=-1, keepdims=True)
        new = np.zeros(est.shape, dtype=bool)
        for mm in np.unique(m[m > 0]):
            h = _half(parts, lambda df, mm=mm: t_quantile(1 - alpha / mm, df))
            hit = (m == mm) & left & (est - h > margin)
            new |= hit
        if not new.any():
            break
        out |= new
        left &= ~new
    return out


# --- winners --------------------------------------------------------------------------------------


def simultaneous(est: np.ndarray, parts: Parts, level: float = 0.95) -> Interval:
    """Bonferroni intervals over the K contrasts (two-sided, familywise 1 − level; est [..., K]): any one the data
    select, the best regime included, is covered with probability >= level."""
    K = np.shape(est)[-1] if np.ndim(est) else 1  # est [..., K]: over the last axis
    h = _half(parts, lambda df: t_quantile(1 - (1 - level) / (2 * K), df))
    return Interval(est, est - h, est + h, np.full(np.shape(est), np.nan), f"simultaneous over {K} regimes (Bonferroni)")


def winners_curse(point: np.ndarray, dev_var: np.ndarray, maximize: bool = True) -> float:
    """Expected excess of the best estimate over its truth (>= 0, in the better direction).

    point [R] regime means; dev_var [R] the variance of each m_r − m̄ (contrast parts). τ² = the
    between-regime variance of the truths, max(0, (Σ(m − m̄)² − Σ dev_var)/(R − 1)); the best's
    posterior mean shrinks it towards m̄ by v/(v + τ²)."""
    R = len(point)
    if R < 2 or not np.all(np.isfinite(dev_var)):
        return 0.0
    sign = 1.0 if maximize else -1.0
    d = sign * (point - point.mean())
    tau2 = max(0.0, float((d ** 2).sum() - dev_var.sum()) / (R - 1))
    b = int(np.argmax(d))
    v = float(dev_var[b])
    return max(0.0, v / (v + tau2) * float(d[b])) if v + tau2 > 0 else 0.0


# --- one condition --------------------------------------------------------------------------------


def _stacks(noises: list[Noise]) -> list[tuple[list[int], "V.NoiseStack"]]:
    """The noises grouped by shape (variance.stack_key) and stacked: (their positions, the stack)."""
    groups: dict[tuple, list[int]] = {}
    for i, x in enumerate(noises):
        groups.setdefault(V.stack_key(x), []).append(i)
    return [(idx, V.stack([noises[i] for i in idx])) for idx in groups.values()]


def _row(p: Parts, c: int) -> Parts:
    return Parts(p.item[c], p.resid[c], p.seed[c], p.df_item, p.df_resid, p.df_seed[c])


@dataclass(frozen=True)
class RankDecision:
    """One condition's ranking decisions, per regime (arrays [R]) unless said."""

    mean: np.ndarray  # the regime's mean score
    se: np.ndarray
    df: np.ndarray  # the interval's effective df (display)
    ci_lo: np.ndarray  # two-sided `level` interval of the mean
    ci_hi: np.ndarray
    sel_lo: np.ndarray  # the same, simultaneous over the regimes (holds for the regime the data pick)
    sel_hi: np.ndarray
    best: int  # index of the pilot-best regime
    gap_to_best: np.ndarray  # >= 0: how much worse than the best, in the better direction
    gap_ci_lo: np.ndarray  # the gap's lower bound at the range's first step
    tied_best: np.ndarray  # bool: not shown worse than the best (REGWQ)
    testable: bool  # False without seed variance: nothing is called worse
    expected_drop: float  # the best's winner's curse
    parts: Parts  # the regime means' variance parts

    def __getitem__(self, key: str):
        """Read by name as the dict this record replaced was read (callers still using rec["mean"])."""
        return getattr(self, key)


@dataclass(frozen=True)
class GainDecision:
    """One condition's gains over its start, per regime (arrays [R])."""

    gain: np.ndarray  # an improvement, already signed
    gain_se: np.ndarray
    gain_ci_lo: np.ndarray
    gain_ci_hi: np.ndarray
    beats_start: np.ndarray  # bool: Holm on one-sided bounds at alpha/2
    parts: Parts

    def __getitem__(self, key: str):
        """Read by name as the dict this record replaced was read."""
        return getattr(self, key)


def rank_decisions(noise: Noise, maximize: bool = True, level: float = 0.95, alpha: float = ALPHA) -> RankDecision:
    """Per regime: mean and interval, the selection-adjusted (simultaneous) interval, the gap to the best
    with its familywise lower bound, `worse` (REGWQ), the winner's curse; `testable` False without seed
    variance (then nothing is called worse)."""
    return rank_decisions_many([noise], maximize, level, alpha)[0]


def rank_decisions_many(noises: list[Noise], maximize: bool = True, level: float = 0.95,
                        alpha: float = ALPHA) -> list[RankDecision]:
    """rank_decisions of many conditions, the same values: conditions of one shape are stacked and decided
    at once (a condition's decisions are many small array operations; a sweep has hundreds)."""
    out: list[RankDecision | None] = [None] * len(noises)
    sign = 1.0 if maximize else -1.0
    for idx, st in _stacks(noises):
        C, R = st.n_seeds.shape
        point = st.m.mean(axis=-1)  # [C, R]
        p1 = V.stacked_parts(st, np.eye(R))
        iv = intervals(point, p1, level)
        sim = simultaneous(point, p1, level)
        best = np.argmax(sign * point, axis=-1)  # [C]
        rows = np.arange(C)
        testable = st.has_seed_noise and R >= 1
        pp = V.stacked_parts(st, pair_contrasts(R))
        sq = lambda a: np.asarray(a).reshape(C, R, R)
        if testable and R >= 2:
            worse = worse_than_best(sign * point, sq(pp.item), sq(pp.resid), sq(pp.seed), pp.df_item, pp.df_resid,
                                    sq(pp.df_seed), alpha)
        else:
            worse = np.zeros((C, R), dtype=bool)
        gap = sign * (point[rows, best][:, None] - point)  # >= 0: how much worse than the best
        gp = Parts(sq(pp.item)[rows, best], sq(pp.resid)[rows, best], sq(pp.seed)[rows, best], pp.df_item,
                   pp.df_resid, sq(pp.df_seed)[rows, best])  # [C, R]: the best against each regime
        first = lambda df: range_quantile(1 - alpha, R, df) / math.sqrt(2.0)  # the range's first step
        gap_lo = (np.where(np.arange(R)[None, :] == best[:, None], 0.0, gap - _half(gp, first)) if R >= 2
                  else np.zeros((C, R)))
        dev = V.stacked_parts(st, np.eye(R) - 1.0 / R).var
        for k, i in enumerate(idx):
            out[i] = RankDecision(mean=point[k], se=p1.se[k], df=iv.df[k], ci_lo=iv.low[k], ci_hi=iv.high[k],
                                  sel_lo=sim.low[k], sel_hi=sim.high[k], best=int(best[k]), gap_to_best=gap[k],
                                  gap_ci_lo=gap_lo[k], tied_best=~worse[k], testable=testable,
                                  expected_drop=winners_curse(point[k], dev[k], maximize), parts=_row(p1, k))
    return out


def gain_decisions(noise: Noise, level: float = 0.95, alpha: float = ALPHA) -> GainDecision:
    """Per regime: the gain (an improvement, already signed), its interval, and `beats_start` by Holm
    over the regimes at one-sided familywise alpha/2 (not tested without seed variance)."""
    return gain_decisions_many([noise], level, alpha)[0]


def gain_decisions_many(noises: list[Noise], level: float = 0.95, alpha: float = ALPHA) -> list[GainDecision]:
    """gain_decisions of many conditions, stacked by shape as rank_decisions_many; the same values."""
    out: list[GainDecision | None] = [None] * len(noises)
    for idx, st in _stacks(noises):
        C, R = st.n_seeds.shape
        g = st.m.mean(axis=-1)
        p1 = V.stacked_parts(st, np.eye(R))
        iv = intervals(g, p1, level)
        beats = holm_above(g, p1, alpha / 2) if st.has_seed_noise else np.zeros((C, R), dtype=bool)
        for k, i in enumerate(idx):
            out[i] = GainDecision(gain=g[k], gain_se=p1.se[k], gain_ci_lo=iv.low[k], gain_ci_hi=iv.high[k],
                                  beats_start=beats[k], parts=_row(p1, k))
    return out
