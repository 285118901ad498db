"""The validation's test of best − control, its power, and the seeds a validation needs (pure: numpy/scipy).

A validation (`race validate`, race_cli/plan/validate.py) reruns the pilot's best and a control with n
fresh seeds each, on fresh evaluation items, and its report (race_cli/report/validation.py) calls the
pilot's call CONFIRMED when the lower end of the 95% interval of best − control lies above the margin.
The interval is the report's own (stats/decisions.intervals: item, residual and seed parts each at its
own degrees of freedom, stats/variance.contrast_parts on the sweep-pooled variance model); its lower
end is a one-sided 2.5% bound (`confirm_interval`).

Power: `confirm_power` simulates the statistics the test reads — the estimate normal around the true
gap with the true variance, the seed part scaled by χ²_df/df — and passes each through the same
`confirm_interval`, so the plan's power is the test's by construction (as stats/power.py does for the
pilot's decisions). `planned_parts` gives the parts a validation with n seeds per regime would show,
from the pilot's components (`PairParts`):

- item_var: variance over items of the true per-item gap beyond its mean (the item × regime
  interaction; fresh items draw it anew, so it is noise, not a fixed offset);
- seed_var: (best, control) the variance of one job's mean score (the pilot's moderated s̃², on the
  pilot's item count, which the validation keeps);
- resid_var: the seed × item residual variance of one per-item score;
- prior_d0: the pilot pool's prior df (limma's d0; inf when its spreads agree): the validation's
  moderated seed df is min(d0 + n − 1, the pool's total df), or with d0 = inf the pool's total df
  combined with stats/variance.HETERO_DF, as stats/variance.moderate gives the test.

The pilot's components are estimates from two seeds per regime: on the default grid one pooled s0²
from 24 one-df spreads, and item_var a small difference of two larger variances (199 df). Taken as the
truth, plans for power 0.8 confirmed their gap less often than promised (power is concave above one
half, so a low estimate costs more than a high one gives back; docs/measurements/validation.md), and
they read the test's seed df as the pool's Σd where the test reads 1/(1/Σd + 1/HETERO_DF), far fewer. `planned_parts` gives the test's df and carries how well the pilot knows
its components (`PlannedParts`); `confirm_power` averages the power over that uncertainty — the expected
power, or assurance (O'Hagan, Stevens & Campbell 2005; Julious & Owen 2006 for a variance estimated
with d df). Each simulated validation first draws its truth:

- seed: a variance the pilot estimated with d df has the truth estimate · d/χ²_d (the scaled inverse
  χ², limma's posterior of σ² given s̃²; as χ²_d/d is also the estimate's pivot, the average over
  pilots of the power at the truth is the planned one where the sizing scales with the estimate).
  Where the pilot's pool had one variance (d0 = inf) d is the pool's Σd and the test will read the
  validation pool's variance (its estimate χ²_{pool_df}/pool_df around the pool's), while the pair's
  own variances stray from the pool's by χ²_h/h each (h = HETERO_DF, the allowance the test's df
  makes); otherwise d is the pair's moderated df and the test reads the pair's own variances, at its df;
- item: the pilot's var_i of the per-item gap · d_i/χ²_{d_i} (d_i = items − 1), less its residual
  share, floored at 0.

A plain `Parts` is a truth known (the power of the test alone).

`shrunk_gap`: the pilot's best − runner-up gap is the largest of several noisy gaps and overstates the
truth (the winner's curse); the selection bias is measured on draws of the pilot's own estimates (a
parametric bootstrap: the bias of the selected gap when the truth is the point estimate) and removed,
floored at zero. `seeds_for_power`: the fewest seeds whose planned test confirms the gap with the
target (expected) power, capped.

The validation report's own statistics live here too: `test_parts` and `pair_parts` (the variance parts of
best − control, which the test reads and `race validate` plans from), and `spearman` with `average_ranks`
(how well the pilot's order held).

References

- Spearman's ρ (`spearman`): Spearman, C. (1904), "The proof and measurement of association between two
  things", American Journal of Psychology 15(1):72–101.
- Assurance: O'Hagan, A., Stevens, J. W. & Campbell, M. J. (2005), Pharmaceutical Statistics 4(3):187–201;
  Julious, S. A. & Owen, R. J. (2006), Pharmaceutical Statistics 5(1):29–37.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from race_cli.stats.decisions import intervals
from race_cli.stats.draws import chi2_scale
from race_cli.stats.variance import HETERO_DF, Parts

ALPHA = 0.025  # one-sided level of CONFIRMED: the lower end of a two-sided 95% interval
DEFAULT_POWER = 0.8
DEFAULT_MAX_SEEDS = 8  # per validated regime: 8 conditions × 2 regimes × 8 seeds = 128 jobs at most
MIN_SEEDS = 2  # one seed per regime has no seed variance: no verdict (see report/validation.py)
N_SIM = 4000  # simulated validations per power (binomial sd near 0.8: 0.006), as stats/power.py


# --- the test (the report's) ---------------------------------------------------------------------


def confirm_interval(diff, parts: Parts, alpha: float = ALPHA) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) of the two-sided (1 − 2·alpha) interval of best − control [K] with variance parts
    `parts` (stats/decisions.intervals); CONFIRMED reads low > margin."""
    iv = intervals(np.atleast_1d(np.asarray(diff, float)), parts, 1 - 2 * alpha)
    return iv.low, iv.high


def confidence_level(diff: float, parts: Parts, margin: float = 0.0) -> float:
    """The one-sided confidence level at which best − control > margin holds: 1 − a for the smallest
    one-sided level a whose lower bound (the report's interval, read at a; past a = 0.5 the mirror of
    the upper bound) clears the margin, to 1e-4. A confidence level, not the probability that the best
    is better. nan without an interval."""
    def lower(a: float) -> float:
        lo, hi = confirm_interval(diff, parts, min(a, 1 - a))
        return float(lo[0] if a <= 0.5 else diff + (diff - lo[0]))

    if not np.isfinite(lower(0.25)):
        return math.nan
    a, b = 1e-6, 1 - 1e-6
    if lower(a) > margin:
        return 1 - a
    if lower(b) <= margin:
        return 1 - b
    while b - a > 1e-4:
        mid = 0.5 * (a + b)
        a, b = (a, mid) if lower(mid) > margin else (mid, b)
    return 1 - b


# --- the plan: a validation's expected variance parts ---------------------------------------------


@dataclass(frozen=True)
class PairParts:
    """The pilot's variance components of one condition's best − control difference (module docstring),
    and how well the pilot knows them (inf df: as known; the defaults)."""

    item_var: float
    seed_var: tuple[float, float]
    resid_var: float
    n_items: int
    prior_d0: float = math.inf
    seed_df: float = math.inf  # df of the estimate seed_var comes from: the pool's Σd where the pool has one
    # variance (prior_d0 = inf), else the pair's moderated df (the report's contrast df)
    item_df: float = math.inf  # df of the pilot's var_i of the per-item gap (items − 1)
    item_resid: float = 0.0  # the residual share of that variance, MS_resid·(1/n_b + 1/n_c): item_var is net of it


@dataclass
class PlannedParts(Parts):
    """A validation's Parts [1] at the pilot's estimates, with what confirm_power needs to draw their
    truth (module docstring). pooled: the test will read one pooled seed variance (the pilot's pool had
    one, d0 = inf), whose estimate has pool_df df around the pool's variance, while the pair's own
    variances stray from the pool's by χ²_h/h each (h = HETERO_DF, the test's own allowance)."""

    seed_df_pilot: float = math.inf  # the truth of the seed part: seed · seed_df_pilot/χ²
    pooled: bool = False
    pool_df: float = math.inf
    hetero_df: float = math.inf
    item_var: float = 0.0  # the truth's item × regime variance: max(0, (item_var + item_resid)·d/χ²_d − item_resid)
    item_resid: float = 0.0
    item_df_pilot: float = math.inf
    n_items: int = 1


def planned_parts(pp: PairParts, n_seeds: int, n_regimes: int = 2, pool_df: float | None = None) -> PlannedParts:
    """The parts of best − control in a validation with n_seeds per regime on pp.n_items fresh items, at
    their expectations: item = (item_var + 2·s2_e/n)/n_items, resid = 2·s2_e/(n·n_items), seed =
    (s̃_b² + s̃_c²)/n; df: items n_items − 1, residual n_regimes·(n − 1)·(n_items − 1), seed
    min(d0 + n − 1, pool_df), or 1/(1/pool_df + 1/HETERO_DF) when d0 = inf (stats/variance.moderate)
    (pool_df: the validation pool's total seed df; default this condition's, n_regimes·(n − 1)). With
    pp's df, the pilot's uncertainty about its components (PlannedParts)."""
    n, k = int(n_seeds), max(int(pp.n_items), 1)
    e = float(pp.resid_var) if k > 1 else 0.0
    total = float(pool_df) if pool_df is not None else float(n_regimes * (n - 1))
    pooled = not math.isfinite(pp.prior_d0)
    df_seed = 1.0 / (1.0 / total + 1.0 / HETERO_DF) if pooled else min(pp.prior_d0 + n - 1, total)
    item = (max(pp.item_var, 0.0) + 2 * e / n) / k if k > 1 else 0.0
    resid = 2 * e / (n * k) if k > 1 else 0.0
    return PlannedParts(item=np.array([item]), resid=np.array([resid]), seed=np.array([sum(pp.seed_var) / n]),
                        df_item=k - 1.0 if k > 1 else math.inf,
                        df_resid=n_regimes * (n - 1) * (k - 1.0) if k > 1 else math.inf, df_seed=np.array([df_seed]),
                        seed_df_pilot=float(pp.seed_df), pooled=pooled, pool_df=total, hetero_df=HETERO_DF,
                        item_var=max(float(pp.item_var), 0.0), item_resid=float(pp.item_resid),
                        item_df_pilot=float(pp.item_df) if k > 1 else math.inf, n_items=k)


def _simulated(parts: Parts, n_sim: int, seed: int) -> tuple[np.ndarray, Parts, np.ndarray]:
    """Standard normal draws [S] of the estimate, the parts [S] as the test would estimate them (the seed
    part scaled by χ²_df/df; item and residual parts, with hundreds of df, at their expectation) and the
    true variance [S] of the estimate. A PlannedParts draws each simulation's truth first (module
    docstring); a plain Parts is the truth."""
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n_sim)
    df = float(parts.df_seed[0])
    if not isinstance(parts, PlannedParts):
        seed_true, item_true = np.full(n_sim, parts.seed[0]), np.full(n_sim, parts.item[0])
        seed_est = seed_true * chi2_scale(df, n_sim, rng)
    else:
        truth = parts.seed[0] / chi2_scale(parts.seed_df_pilot, n_sim, rng)  # of what the pilot estimated
        if parts.pooled:  # the test reads the validation pool's variance; the pair's own stray from the pool's
            seed_est = truth * chi2_scale(parts.pool_df, n_sim, rng)
            stray = (chi2_scale(parts.hetero_df, n_sim, rng) + chi2_scale(parts.hetero_df, n_sim, rng)) / 2
            seed_true = truth * stray
        else:  # the test reads the pair's own (moderated) variances
            seed_true = truth
            seed_est = seed_true * chi2_scale(df, n_sim, rng)
        gap_var = parts.item_var + parts.item_resid  # the pilot's var_i of the per-item gap
        item_var = np.maximum(gap_var / chi2_scale(parts.item_df_pilot, n_sim, rng) - parts.item_resid, 0.0)
        item_true = parts.item[0] + (item_var - parts.item_var) / parts.n_items
    resid = np.full(n_sim, parts.resid[0])
    sim = Parts(item=item_true, resid=resid, seed=seed_est, df_item=parts.df_item, df_resid=parts.df_resid,
                df_seed=np.array([df]))  # one df for every draw: its quantile is computed once, broadcast
    true_var = np.maximum(item_true - resid, 0.0) + seed_true
    return z, sim, true_var


def _lower_ends(parts: Parts, n_sim: int, seed: int, alpha: float) -> np.ndarray | None:
    """Lower ends [S] of the report's interval (confirm_interval) in simulated validations whose true gap
    is 0: the estimate the true se·z, the parts as the test would estimate them. The interval's half-width
    does not depend on the estimate, so at a true gap Δ the lower end is Δ + these: one simulation serves every Δ."""
    if not (parts.df_seed[0] > 0 and np.isfinite(parts.var[0]) and parts.var[0] > 0):
        return None
    z, sim, var = _simulated(parts, n_sim, seed)
    lo, _ = confirm_interval(np.sqrt(var) * z, sim, alpha)
    return lo


def confirm_power(gap: float, parts: Parts, margin: float = 0.0, n_sim: int = N_SIM, seed: int = 0,
                  alpha: float = ALPHA) -> float:
    """P(CONFIRMED) when the true gap is `gap`: the share of simulated validations whose interval
    (confirm_interval, the report's) lies above the margin. For PlannedParts the expected power over the
    pilot's uncertainty about its components (each simulation draws its truth); for a Parts, the truth's."""
    lo = _lower_ends(parts, n_sim, seed, alpha)
    return math.nan if lo is None else float(np.mean(gap + lo > margin))


def detectable_gap(parts: Parts, power: float = DEFAULT_POWER, margin: float = 0.0, n_sim: int = N_SIM,
                   seed: int = 0, alpha: float = ALPHA) -> float:
    """The smallest true gap confirmed with probability `power` in the same simulated validations as
    confirm_power: margin − the (1 − power) quantile of their lower ends."""
    lo = _lower_ends(parts, n_sim, seed, alpha)
    return math.nan if lo is None else float(margin - np.quantile(lo, 1 - power))


@dataclass(frozen=True)
class SeedPlan:
    """How many seeds one condition's validation runs, and what they buy."""

    seeds: int
    gap: float  # the gap the seeds were sized for
    power_at_gap: float  # the planned test's power at `gap` (nan: no positive gap)
    detectable: float  # the smallest gap confirmed with the target power at `seeds`
    se: float  # the planned standard error of best − control
    df_seed: float
    capped: bool  # the target power at `gap` needs more than max_seeds (or there is no gap to size for)


def plan_at(parts_of: Callable[[int], Parts], n: int, gap: float, power: float = DEFAULT_POWER,
            margin: float = 0.0, capped: bool = False) -> SeedPlan:
    """What n seeds per regime buy: the power at `gap` and the gap confirmed with `power`."""
    p = parts_of(n)
    pw = confirm_power(gap, p, margin) if gap > margin else math.nan
    return SeedPlan(n, gap, pw, detectable_gap(p, power, margin), float(p.se[0]), float(p.df_seed[0]), capped)


def seeds_for_power(parts_of: Callable[[int], Parts], gap: float, power: float = DEFAULT_POWER,
                    max_seeds: int = DEFAULT_MAX_SEEDS, margin: float = 0.0,
                    min_seeds: int = MIN_SEEDS) -> SeedPlan:
    """The fewest seeds per regime (min_seeds..max_seeds) whose planned test confirms `gap` with
    probability >= power (confirm_power: expected over the pilot's uncertainty for PlannedParts);
    max_seeds, capped, when none does or when there is no gap above the margin.

    parts_of(n) -> the planned Parts of best − control with n seeds per regime (planned_parts)."""
    if gap > margin:
        for n in range(min_seeds, max(min_seeds, max_seeds) + 1):
            if confirm_power(gap, parts_of(n), margin) >= power:
                return plan_at(parts_of, n, gap, power, margin)
    return plan_at(parts_of, max(min_seeds, max_seeds), gap, power, margin, capped=True)


# --- the gap to detect ---------------------------------------------------------------------------


def shrunk_gap(point: np.ndarray, draws: np.ndarray, maximize: bool = True,
               second: str = "runner-up") -> tuple[float, float, float]:
    """(observed, selection bias, shrunk) gap between the best and the runner-up (second="lowest": the
    lowest-ranked) of one condition.

    point [R] the pilot's regime means; draws [B, R] draws of them from the pilot's variance model (the
    report's bootstrap). Bias: the mean over draws of (the selected gap in the draw − the same two
    regimes' gap in `point`), the two selected by the draw itself, as the pilot selected its own from
    its data. Shrunk: max(0, observed − bias).
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


# --- the validation's agreement and its test's variance parts (report/validation.py reads them) ----------


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n along the last axis, ties sharing their average rank: [..., n] -> [..., n]."""
    from scipy.stats import rankdata

    return rankdata(np.asarray(x, dtype=float), method="average", axis=-1)


def spearman(pred: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Spearman's ρ between one ordering score pred [R] and each row of obs [..., R].

    Pearson correlation of average ranks (the textbook 1 - 6Σd²/(n(n²-1)) when nothing ties);
    NaN where either side is constant (no order to compare).
    """
    rp = average_ranks(pred)
    ro = average_ranks(obs)
    a = rp - rp.mean()
    b = ro - ro.mean(axis=-1, keepdims=True)
    den = np.sqrt((a ** 2).sum() * (b ** 2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (b * a).sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)


def test_parts(noise, c: np.ndarray):
    """Variance parts of the contrast c [R] of regime means (stats/variance.contrast_parts on the pooled
    variance model): the validation's test reads them through stats/validation_power.confirm_interval,
    and `race validate` sizes its seeds by simulating that same test on planned parts."""
    from race_cli.stats.variance import contrast_parts

    return contrast_parts(noise, np.asarray(c, float)[None, :])


def pair_parts(noise, i: int, j: int):
    """The variance components of regime i − regime j in one (pooled) condition's noise, a pilot's:
    the item × regime part var_i(m_i − m_j) − MS_resid·(1/n_i + 1/n_j) floored at 0, the two moderated
    job-mean variances, the residual and the pool's prior df; and how well they are known: the df of
    the seed variances (the pool's Σd where it has one variance, else the pair's moderated df:
    stats/variance.contrast_parts, the report's), of var_i (n − 1) and its residual share
    MS_resid·(1/n_i + 1/n_j); stats/validation_power.PairParts."""
    from race_cli.stats.variance import contrast_parts

    n = noise.n
    k = 1.0 / max(noise.n_seeds[i], 1) + 1.0 / max(noise.n_seeds[j], 1)
    d = noise.m[i] - noise.m[j]
    item = max(0.0, float(d.var(ddof=1)) - noise.ms_resid * k) if n > 1 else 0.0
    d0 = noise.prior.d0 if noise.prior is not None else math.inf
    if noise.prior is not None and not noise.prior.assumed and not math.isfinite(d0):
        seed_df = float(noise.prior.df_total)  # both regimes read the pool's s0², estimated on Σd df
    else:
        c = np.zeros(len(noise.n_seeds))
        c[i], c[j] = 1.0, -1.0
        seed_df = float(contrast_parts(noise, c[None, :]).df_seed[0])
    return PairParts(item_var=item, seed_var=(float(noise.seed_var[i]), float(noise.seed_var[j])),
                     resid_var=float(noise.ms_resid), n_items=n, prior_d0=float(d0),
                     seed_df=seed_df if seed_df > 0 else math.inf, item_df=n - 1.0 if n > 1 else math.inf,
                     item_resid=float(noise.ms_resid * k) if n > 1 else 0.0)
