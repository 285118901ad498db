"""The validation's test of best − control, its power, and the seeds a validation needs (pure: numpy/scipy).

A validation (`race validate`, race_cli/plan/validate.py) reruns the pilot's best and a control with n
fresh seeds each, on fresh evaluation items, and its report (race_cli/report/validation.py) calls the
pilot's call CONFIRMED when the lower end of the 95% interval of best − control lies above the margin:

    (d̂ − margin) / ŝe > t_{0.975, df}                         (one-sided 2.5%)

d̂ the item-paired difference of the two regimes' means, ŝe and df from the report's variance model
(report/validation.py's `test_se_df`, the one function both the test and the plan call). Under a true gap Δ the statistic is
noncentral t with df degrees of freedom and noncentrality (Δ − margin)/se, so the chance of
CONFIRMED is

    power(Δ) = P(T_{df, ncp} > t_{0.975, df})                 (`confirm_power`, scipy.stats.nct)

The plan puts the pilot's variance components into the same variance model as the test will see them
(report/validation.py's `planned_noise`: the expected mean squares of a validation with n seeds per
regime on n_items fresh items) and reads se and df off the report's `test_se_df`, so the plan's power is
the test's by construction; only the variance estimates themselves (which the validation measures
afresh) differ. This module holds the distribution theory only and imports nothing of race_cli.

Variance parts of one paired difference, per validation (y = regime + item + item×regime + seed + e):
- item_var: the variance over items of the true per-item difference of the two regimes (the
  item × regime interaction; fresh items draw it anew, so it is noise, not a fixed offset);
- seed_var: the variance of one training run's mean score (per regime; the test pools them);
- resid_var: the item × seed residual of one per-item score (binomial sampling and the rest).

The gap to detect: the pilot's observed best − runner-up gap is the largest of several noisy gaps and
overstates the truth (the winner's curse); `shrunk_gap` removes the selection bias measured on draws
of the pilot's own estimates (parametric bootstrap: the bias of the selected gap when the truth is
the point estimate), floored at zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

ALPHA = 0.025  # one-sided level of CONFIRMED: the lower end of a two-sided 95% interval
DEFAULT_POWER = 0.8
DEFAULT_MAX_SEEDS = 8  # per validated regime: 8 conditions × 2 regimes × 8 seeds = 128 jobs at most
MIN_SEEDS = 2  # one seed per regime has no seed variance: no verdict (see report/validation.py)


# --- the test (shared by the report and the plan) ---------------------------------------------


def critical_value(df: float, alpha: float = ALPHA) -> float:
    """t_{1−alpha, df}: the one-sided critical value of the test (the normal's at df = inf); nan for df <= 0."""
    from scipy.stats import norm, t

    if not df > 0:
        return math.nan
    return float(norm.ppf(1 - alpha)) if math.isinf(df) else float(t.ppf(1 - alpha, df))


def confirm_interval(diff: float, se: float, df: float, alpha: float = ALPHA) -> tuple[float, float]:
    """diff ∓ t_{1−alpha, df} · se: the two-sided (1 − 2·alpha) interval whose lower end the test reads."""
    q = critical_value(df, alpha)
    if not (np.isfinite(se) and np.isfinite(q)):
        return math.nan, math.nan
    return diff - q * se, diff + q * se


def confidence_level(diff: float, se: float, df: float, margin: float = 0.0) -> float:
    """The one-sided confidence level at which best − control > margin still holds: 1 − p, p the one-sided
    p-value of H0: gap <= margin. A confidence level, not the probability that the best is better."""
    from scipy.stats import norm, t

    if not (np.isfinite(se) and se > 0 and df > 0):
        return math.nan
    z = (diff - margin) / se
    return float(norm.cdf(z) if math.isinf(df) else t.cdf(z, df))


def confirm_power(gap: float, se: float, df: float, margin: float = 0.0, alpha: float = ALPHA) -> float:
    """P(CONFIRMED) when the true gap is `gap`: P(T_{df, (gap − margin)/se} > t_{1−alpha, df})."""
    from scipy.stats import nct, norm

    q = critical_value(df, alpha)
    if not (np.isfinite(se) and se > 0 and np.isfinite(q)):
        return math.nan
    ncp = (gap - margin) / se
    return float(norm.sf(q - ncp) if math.isinf(df) else nct.sf(q, df, ncp))


def detectable_gap(se: float, df: float, power: float = DEFAULT_POWER, margin: float = 0.0,
                   alpha: float = ALPHA) -> float:
    """The smallest true gap confirmed with probability `power` (bisection on confirm_power, to 1e-5)."""
    if not (np.isfinite(se) and se > 0 and df > 0):
        return math.nan
    lo, hi = margin, margin + 50 * se
    for _ in range(60):
        mid = (lo + hi) / 2
        if confirm_power(mid, se, df, margin, alpha) >= power:
            hi = mid
        else:
            lo = mid
        if hi - lo < 1e-5:
            break
    return hi


# --- the plan: a validation's expected variance model ---------------------------------------------


@dataclass(frozen=True)
class PairParts:
    """The pilot's variance components for one condition's best − control difference (see module docstring)."""

    item_var: float  # interaction: var over items of the true per-item gap (>= 0)
    seed_var: tuple[float, float]  # (best, control): variance of one run's mean score (>= 0)
    resid_var: float  # per item×seed residual variance of one per-item score
    n_items: int  # items per evaluation (the validation keeps the pilot's count)
    seed_df: float  # degrees of freedom behind seed_var (how well the pilot knew it)


@dataclass(frozen=True)
class SeedPlan:
    """How many seeds one condition's validation runs, and what they buy."""

    seeds: int
    gap: float  # the gap the seeds were sized for (nan: none given and none left after shrinkage)
    power_at_gap: float  # the planned test's power at `gap`
    detectable: float  # the smallest gap confirmed with the target power at `seeds`
    se: float
    df: float
    capped: bool  # the target power at `gap` needs more than max_seeds


def seeds_for_power(test_of: Callable[[int], tuple[float, float]], gap: float, power: float = DEFAULT_POWER,
                    max_seeds: int = DEFAULT_MAX_SEEDS, margin: float = 0.0,
                    min_seeds: int = MIN_SEEDS) -> SeedPlan:
    """The fewest seeds per regime (min_seeds..max_seeds) whose planned test confirms `gap` with
    probability >= power; max_seeds (capped) when none does or when there is no positive gap to size for.

    test_of(n) -> (se, df) of the test with n seeds per regime (report/validation.py: planned_test)."""
    last = None
    for n in range(min_seeds, max(min_seeds, max_seeds) + 1):
        se, df = test_of(n)
        pw = confirm_power(gap, se, df, margin) if gap > margin else math.nan
        last = (n, se, df, pw)
        if pw >= power:
            return SeedPlan(n, gap, pw, detectable_gap(se, df, power, margin), se, df, False)
    n, se, df, pw = last
    return SeedPlan(n, gap, pw, detectable_gap(se, df, power, margin), se, df, True)


# --- the gap to detect ---------------------------------------------------------------------------


def shrunk_gap(point: np.ndarray, draws: np.ndarray, maximize: bool = True,
               second: str = "runner-up") -> tuple[float, float, float]:
    """(observed, selection bias, shrunk) gap between the best and the runner-up (second="lowest": the
    lowest-ranked) of one condition.

    point [R] the pilot's regime means; draws [B, R] draws of them from the pilot's variance model (the
    report's bootstrap). Bias: the mean over draws of (the selected gap in the draw − the same two
    regimes' gap in `point`), the two selected by the draw itself, as the pilot selected its own from
    its data (a parametric bootstrap of the winner's curse). Shrunk: max(0, observed − bias).
    """
    sign = 1.0 if maximize else -1.0
    p = sign * np.asarray(point, float)
    d = sign * np.atleast_2d(np.asarray(draws, float))
    if p.size < 2:
        return math.nan, math.nan, math.nan
    k = 1 if second == "runner-up" else -1
    o = np.argsort(-p, kind="stable")
    observed = float(p[o[0]] - p[o[k]])
    od = np.argsort(-d, axis=1, kind="stable")
    rows = np.arange(len(d))
    b, r = od[:, 0], od[:, k]
    bias = float(np.mean((d[rows, b] - d[rows, r]) - (p[b] - p[r])))
    return observed, bias, max(0.0, observed - bias)
