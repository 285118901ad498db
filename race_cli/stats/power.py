"""Power of a design, by the report's own decisions (numpy/scipy, no I/O).

A design: R regimes × s seeds, n items × k samples, a seed spread σ_b, the seed pool's degrees of
freedom (the report pools seed variance over every regime of a reward system on a target), an
item × regime interaction σ_g (regimes learning different items) and, for gains, the per-item spread of
the gain σ_gain. From these come the expected variance parts of a gap and of a gain exactly as
stats/variance.contrast_parts defines them; pilots are then simulated at the level of the statistics the
decisions read (means normal around their truths, the seed part scaled by χ²_df/df) and passed through
the same functions the report calls (decisions.worse_than_best, decisions.holm_above). So the plan's
power is the report's test by construction; benchmarks/bench_calibration.py checks it against pilots
simulated item by item and read by the report.

- `separation_power(design, delta)`: the share of pilots in which a regime truly better than every other
  by delta is the only "≈ best" regime;
- `separation_powers(queries)`: the same for many (design, delta) at once (the report's settle line);
- `gain_power(design, delta)`: the share in which one regime gaining delta (the others none) "beats its
  start";
- `smallest_separated` / `smallest_gain`: the smallest delta reaching `power` (0.80), to 0.001;
- `open_call_power`: a race's futility question, the power at the cap of an open call from its measured
  variance parts (normal approximation).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from race_cli.stats.decisions import ALPHA, holm_above, worse_than_best
from race_cli.stats.draws import chi2_scale
from race_cli.stats.variance import HETERO_DF, Parts

POWER = 0.80
N_SIM = 2000  # simulated pilots per effect size (binomial sd of a power near 0.8: 0.009)
ITEM_REGIME_SD = 0.05  # assumed sd of an item's score change between two regimes beyond their mean gap
GAIN_ITEM_SD = 0.18  # per-item spread of the gain over the start (measured on the default grid's pilot)
# Under common random numbers (every evaluation draws sample j of item i from one keyed stream), the share
# of a sample's randomness two policies' completions keep in common, as benchmarks/bench_crn.py measured it
# on the default pilot's final policies (docs/measurements/embedded-study.md). Not all of it:
# once two completions part at one token their contexts differ and the rest is drawn independently.
CRN_SHARE = 1 / 3


@dataclass(frozen=True)
class Design:
    """What the power depends on (probabilities on the 0-1 score scale)."""

    n: int  # items
    k: int  # samples per item (k = 1 greedy: its flips across seeds count as 0.25 too)
    seeds: int
    regimes: int
    seed_sd: float
    pool_df: float | None = None  # the seed pool's total df; None: this condition alone, R·(s − 1)
    item_regime_sd: float = ITEM_REGIME_SD
    gain_item_sd: float = GAIN_ITEM_SD
    crn: bool = False  # evaluation with common random numbers: paired differences lose CRN_SHARE of sampling noise
    assumed_seed_sd: float | None = None  # one seed: the report's --assume-seed-sd

    @property
    def df_seed(self) -> float:
        if self.seeds < 2:
            return math.inf if self.assumed_seed_sd is not None else 0.0
        pool = float(self.pool_df) if self.pool_df is not None else float(self.regimes * (self.seeds - 1))
        return 1.0 / (1.0 / pool + 1.0 / HETERO_DF)  # as stats/variance.moderate gives a pooled regime

    def resid(self) -> float:
        """Per-item, per-job evaluation residual variance that does not cancel between two jobs."""
        s2 = 0.25 / self.k  # a score near 0.5: the largest a Bernoulli has
        if not self.crn:
            return s2
        # common random numbers: on the CRN_SHARE of samples two jobs draw alike they differ only where
        # their probabilities do, var(1[U<P1] − 1[U<P2]) ≈ E|P1 − P2| with P1 − P2 ~ N(0, 2σ_g² + 2σ_b²),
        # half of it per job; the other samples are drawn independently
        spread = math.sqrt(2 * (self.item_regime_sd ** 2 + self.seed_sd ** 2))
        alike = min(s2, 0.5 * spread * math.sqrt(2 / math.pi) / self.k)
        return (1 - CRN_SHARE) * s2 + CRN_SHARE * alike


def gap_parts(d: Design) -> Parts:
    """Expected parts of the gap between two regimes (items paired)."""
    s, n, e = d.seeds, d.n, d.resid()
    sd = d.assumed_seed_sd if d.seeds < 2 and d.assumed_seed_sd is not None else d.seed_sd
    item = (2 * d.item_regime_sd ** 2 + 2 * e / s) / n
    if d.seeds < 2:
        return Parts(np.array([item]), np.zeros(1), np.array([2 * sd ** 2 if d.df_seed else 0.0]), n - 1.0,
                     math.inf, np.array([d.df_seed]))
    resid = 2 / s * e / n
    seed = 2 / s * (sd ** 2 + e / n)
    return Parts(np.array([item]), np.array([resid]), np.array([seed]), n - 1.0, d.df_seed * (n - 1),
                 np.array([d.df_seed]))


def gain_parts(d: Design) -> Parts:
    """Expected parts of one regime's gain over the start: the start is one evaluation shared by the
    condition's jobs (priced without CRN credit: a trained policy's completions part from the start's)."""
    s, n, e = d.seeds, d.n, 0.25 / d.k
    sd = d.assumed_seed_sd if d.seeds < 2 and d.assumed_seed_sd is not None else d.seed_sd
    item = (d.gain_item_sd ** 2 + e / s + e) / n
    if d.seeds < 2:
        return Parts(np.array([item]), np.zeros(1), np.array([sd ** 2 if d.df_seed else 0.0]), n - 1.0,
                     math.inf, np.array([d.df_seed]))
    return Parts(np.array([item]), np.array([e / (s * n)]), np.array([(sd ** 2 + e / n) / s]), n - 1.0,
                 d.df_seed * (n - 1), np.array([d.df_seed]))


def separation_power(d: Design, delta: float, n_sim: int = N_SIM, seed: int = 0, alpha: float = ALPHA) -> float:
    """Share of simulated pilots in which regime 0, better than every other by delta, is the only ≈ best."""
    R = d.regimes
    if R < 2 or d.df_seed <= 0:
        return 0.0
    rng = np.random.default_rng(seed)
    p = gap_parts(d)
    v = float(p.var[0])
    z = rng.standard_normal((n_sim, R))
    scale = chi2_scale(d.df_seed, n_sim, rng)
    point = np.zeros((n_sim, R))
    point[:, 0] = delta
    point += math.sqrt(v / 2) * z  # gaps have variance v
    off = 1.0 - np.eye(R)
    item = np.broadcast_to(p.item[0] * off, (n_sim, R, R))
    resid = np.broadcast_to(p.resid[0] * off, (n_sim, R, R))
    seed = p.seed[0] * scale[:, None, None] * off
    df_seed = np.broadcast_to(p.df_seed[0] * off + (1 - off), (n_sim, R, R))
    worse = worse_than_best(point, item, resid, seed, p.df_item, p.df_resid, df_seed, alpha)
    return float(worse[:, 1:].all(axis=1).mean())


def separation_powers(queries: list[tuple[Design, float]], n_sim: int = N_SIM, seed: int = 0,
                      alpha: float = ALPHA, chunk: int = 64) -> list[float]:
    """separation_power(d, delta) for many (design, delta) at once, the same values: designs of equal
    regimes, seed df and items draw the same pilots (one generator per call, seeded alike), so their
    simulated pilots are stacked on a leading axis and go through worse_than_best together."""
    out = [0.0] * len(queries)
    groups: dict[tuple, list[int]] = {}
    for i, (d, _) in enumerate(queries):
        if d.regimes >= 2 and d.df_seed > 0:
            p = gap_parts(d)
            groups.setdefault((d.regimes, d.df_seed, p.df_item, p.df_resid), []).append(i)
    for (R, df_seed, df_item, df_resid), idx in groups.items():
        rng = np.random.default_rng(seed)  # the draws separation_power makes, in its order
        z = rng.standard_normal((n_sim, R))
        scale = chi2_scale(df_seed, n_sim, rng)
        off = 1.0 - np.eye(R)
        for at in range(0, len(idx), chunk):
            part = idx[at:at + chunk]
            ps = [gap_parts(queries[i][0]) for i in part]
            v = np.array([float(p.var[0]) for p in ps])
            point = np.zeros((len(part), n_sim, R))
            point[:, :, 0] = np.array([queries[i][1] for i in part])[:, None]
            point += np.sqrt(v / 2)[:, None, None] * z[None]
            item = np.array([p.item[0] for p in ps])[:, None, None, None] * off
            resid = np.array([p.resid[0] for p in ps])[:, None, None, None] * off
            seed_part = np.array([p.seed[0] for p in ps])[:, None, None, None] * scale[None, :, None, None] * off
            df = np.broadcast_to(ps[0].df_seed[0] * off + (1 - off), (len(part), n_sim, R, R))
            worse = worse_than_best(point, np.broadcast_to(item, df.shape), np.broadcast_to(resid, df.shape),
                                    seed_part, df_item, df_resid, df, alpha)
            for i, w in zip(part, worse[:, :, 1:].all(axis=-1)):
                out[i] = float(w.mean())
    return out


def gain_power(d: Design, delta: float, n_sim: int = N_SIM, seed: int = 0, alpha: float = ALPHA) -> float:
    """Share of simulated pilots in which regime 0, gaining delta while the others gain nothing, beats its
    start (Holm over the R regimes at one-sided familywise alpha/2, as the report tests it)."""
    R = d.regimes
    if d.df_seed <= 0:
        return 0.0
    rng = np.random.default_rng(seed + 1)
    p = gain_parts(d)
    est = np.zeros((n_sim, R))
    est[:, 0] = delta
    est += float(p.se[0]) * rng.standard_normal((n_sim, R))
    scale = chi2_scale(d.df_seed, n_sim, rng)
    parts = Parts(np.full((n_sim, R), p.item[0]), np.full((n_sim, R), p.resid[0]),
                  p.seed[0] * np.broadcast_to(scale[:, None], (n_sim, R)), p.df_item, p.df_resid,
                  np.full((n_sim, R), p.df_seed[0]))
    return float(holm_above(est, parts, alpha / 2)[:, 0].mean())


def _smallest(f, power: float) -> float:
    """The smallest delta in (0, 1] with f(delta) >= power, to 0.002 (f rises with delta: common draws)."""
    lo, hi = 0.0, 0.4
    if f(hi) < power:
        lo, hi = hi, 1.0
        if f(hi) < power:
            return math.nan
    while hi - lo > 0.002:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if f(mid) < power else (lo, mid)
    return round(hi, 3)


def smallest_separated(d: Design, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest gap at which the better regime is the only ≈ best with probability `power` (nan: none
    up to 1, or nothing testable)."""
    return _smallest(lambda x: separation_power(d, x, alpha=alpha), power)


def smallest_gain(d: Design, power: float = POWER, alpha: float = ALPHA) -> float:
    """The smallest gain over the start found ("beats its start") with probability `power`."""
    return _smallest(lambda x: gain_power(d, x, alpha=alpha), power)


def with_seeds(d: Design, seeds: int) -> Design:
    """The same design with another seed count (the pool's df scaled with it)."""
    pool = None if d.pool_df is None else d.pool_df / max(d.seeds - 1, 1) * (seeds - 1)
    return replace(d, seeds=seeds, pool_df=pool)


def open_call_power(gap: float, parts: Parts, seeds_now: int, seeds_cap: int, regimes: int, margin: float,
                    alpha: float, z: float = 0.0, items_factor: float = 1.0) -> float:
    """Power at the cap of an open call between the best and its runner-up, measured gap `gap`: the larger
    of separating it and showing it within ±margin (both on the same Tukey–Kramer intervals at `alpha`, as
    stats/race.decide_look reads them), a normal approximation at the measured gap, as the settle line asks
    it. parts: the gap's measured variance parts now; the item × regime part stays (the same items), the
    job-mean (seed) part shrinks as seeds_now / seeds_cap and its pooled df grows as seeds − 1 (combined with HETERO_DF as
    stats/variance.moderate combines them). What a race's futility stop asks: below 80% neither outcome is
    in reach at the cap.
    items_factor f > 1: the finished checkpoints are also scored on f times the items (engine/reeval.py, the
    race's evaluation look, common random numbers): the item × regime part and the residual part E shrink as
    1/f, the pure seed part (job-mean part − E) only with seeds, so the variance is
    inter/f + (max(seed − E, 0) + E/f)·seeds_now/seeds_cap."""
    from scipy import special

    from race_cli.stats.quantiles import range_quantile

    inter = max(float(parts.item) - float(parts.resid), 0.0)
    se_now = math.sqrt(max(inter + float(parts.seed), 0.0))
    var = inter + float(parts.seed) * seeds_now / seeds_cap
    if items_factor > 1:
        resid = max(float(parts.resid), 0.0)
        pure = max(float(parts.seed) - resid, 0.0)
        var = inter / items_factor + (pure + resid / items_factor) * seeds_now / seeds_cap
    se = math.sqrt(var) if var > 0 else 0.0
    if se == 0:
        return 1.0
    df = float(parts.df_seed)
    if math.isfinite(df) and 0 < df < HETERO_DF and seeds_now > 1:
        pool = 1.0 / (1.0 / df - 1.0 / HETERO_DF) * (seeds_cap - 1) / (seeds_now - 1)  # the pool's df at the cap
        df = 1.0 / (1.0 / pool + 1.0 / HETERO_DF)
    crit = float(range_quantile(1 - alpha, max(regimes, 2), df)) / math.sqrt(2.0)
    hi, lo = abs(gap) + z * se_now, max(abs(gap) - z * se_now, 0.0)  # the gaps most in favour of each outcome
    sep = float(special.ndtr(hi / se - crit))
    m = margin - crit * se  # the same Tukey–Kramer half-width the race's equivalence reads (stats/race.py)
    eq = float(special.ndtr((m - lo) / se) - special.ndtr((-m - lo) / se)) if m > 0 else 0.0
    return max(sep, eq)
