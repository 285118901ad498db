"""Races simulated on a known truth: the one simulator behind `race plan`'s expected price and the harnesses
(numpy; scipy through stats/; no pandas, no torch, no I/O).

The truth of one condition (`true_p`): regime r of accuracy acc_r, item i, seed s is correct with probability

    P = acc_r + d_i + g_ri + e_rs    d_i ~ U(±ITEM_HALF): item difficulty, shared by the regimes (paired)
                                     g_ri ~ N(0, ITEM_REGIME_SD²), centred per regime: item × regime interaction
                                     e_rs: the training run's luck, `seed_effects` of one of SEED_KINDS

clipped to [0, 1]; a job's score on an item is the mean of k Bernoulli draws, independent per job
(`condition_scores`) or with common random numbers as `race run` evaluates (`CommonNumbers`). The regime's
expected score over items and runs is acc_r (the collapses aside, which are the point of that kind).

Seed effects (each regime's sd_r = seed_sd·U(0.5, 1.5): heterogeneous spread, drawn first in every kind):
- uniform: e ~ U(±√3·sd_r), the harnesses' and the plan's model before issue 52 (the lightest tails there are);
- normal: e ~ N(0, sd_r²), the variance model's own assumption;
- t3: e ~ sd_r·t(3 df)/√3 (heavy tails, the same sd);
- collapse: normal, and one seed in ten loses 0.15 (a run that diverged);
- spread3: normal, the last regime's seeds spread three times the others' (sd 3·seed_sd against 0.5-1.5×).

The look loop (`run_races`) decides simulated races as report/race.race_states replays a sweep folder: each
starts with looks[0] seeds per regime; at look k the seed variance is pooled over the races sharing a pool
key (stats/variance.fit_pools: the report pools a reward system's regimes on one target), every race still
open is decided by stats/race.decide_look on its active regimes, and the survivors get looks[k + 1] seeds.

Its users: plan/race_price.simulate_seeds (the expected price `race plan` prints, on the plan's own
conditions, items and samples); `expected_race` (the same on the harness's design, which
benchmarks/bench_race.py prints beside whole races written as job folders); benchmarks/bench_race.py and
bench_calibration.py, whose pilots are drawn by `true_p` and scored with `CommonNumbers` or independently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

ITEM_HALF = 0.2  # item difficulty U(±0.2), paired across regimes
ITEM_REGIME_SD = 0.05  # item × regime interaction
LEVEL = 0.45  # the regimes' accuracy (the better one: + gap)
SEED_SD = 0.02  # the harnesses' seed sd (each regime's: SEED_SD·U(0.5, 1.5))
N_ITEMS, SAMPLES = 200, 4  # the harnesses' evaluation: the default grid's items × sampled completions
SEED_KINDS = ("uniform", "normal", "t3", "collapse", "spread3")
COLLAPSE_SHARE, COLLAPSE_LOSS = 0.10, 0.15  # collapse: one seed in ten loses 0.15


# --- the truth --------------------------------------------------------------------------------------


def seed_effects(rng: np.random.Generator, R: int, cap: int, seed_sd: float = SEED_SD,
                 kind: str = "uniform") -> np.ndarray:
    """Each run's luck e [R, cap] under one of SEED_KINDS (the module docstring); mean 0 except the collapses."""
    if kind not in SEED_KINDS:
        raise ValueError(f"seed kind must be one of {', '.join(SEED_KINDS)}, got {kind!r}")
    sd = seed_sd * rng.uniform(0.5, 1.5, R)  # [R]
    if kind == "uniform":
        return rng.uniform(-1, 1, (R, cap)) * math.sqrt(3.0) * sd[:, None]
    if kind == "t3":
        return rng.standard_t(3, (R, cap)) / math.sqrt(3.0) * sd[:, None]
    if kind == "spread3":
        sd[-1] = 3 * seed_sd
    e = rng.normal(0.0, 1.0, (R, cap)) * sd[:, None]  # [R, cap]
    if kind == "collapse":
        e -= COLLAPSE_LOSS * (rng.random((R, cap)) < COLLAPSE_SHARE)
    return e


def true_p(rng: np.random.Generator, accs, seeds: int, n: int, seed_sd: float = SEED_SD,
           kind: str = "uniform", effects: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """One condition's probabilities of a correct sample P [R, seeds, n] and its item difficulties d [n].
    effects [R, seeds]: the runs' luck already drawn (one set of runs scored on several targets), else drawn
    here by `seed_effects`."""
    accs = np.asarray(accs, float)  # [R]
    R = len(accs)
    d = rng.uniform(-ITEM_HALF, ITEM_HALF, n)  # [n]
    g = rng.normal(0.0, ITEM_REGIME_SD, (R, n))  # [R, n]
    g -= g.mean(axis=1, keepdims=True)
    e = seed_effects(rng, R, seeds, seed_sd, kind) if effects is None else effects  # [R, seeds]
    return np.clip(accs[:, None, None] + d + g[:, None, :] + e[:, :, None], 0.0, 1.0), d


def condition_scores(rng: np.random.Generator, R: int, cap: int, n: int, k: int, gap: float, seed_sd: float,
                     kind: str = "uniform") -> np.ndarray:
    """Per-item scores [R, cap, n] of one condition, every seed up to the cap, k samples drawn independently
    per job; regime 0 better than the others (LEVEL) by gap."""
    acc = np.full(R, LEVEL)
    acc[0] += gap
    P, _ = true_p(rng, acc, cap, n, seed_sd, kind)
    return rng.binomial(k, P) / k


@dataclass(frozen=True)
class CommonNumbers:
    """One condition's common random numbers as measured, not as idealised: on the (item, sample) pairs where
    two policies' completions stay alike (`alike`, a share benchmarks/bench_crn.py measured on real policies)
    every job draws the same uniform u_ij, correct when u_ij < P; elsewhere each job draws its own."""

    u: np.ndarray  # [n, k]
    alike: np.ndarray  # [n, k] bool

    @classmethod
    def draw(cls, rng: np.random.Generator, n: int, k: int, share: float) -> CommonNumbers:
        u = rng.random((n, k))
        return cls(u, rng.random((n, k)) < share)

    def scores(self, rng: np.random.Generator, P: np.ndarray) -> np.ndarray:
        """Per-item scores [..., n] of jobs whose probabilities are P [..., n]."""
        W = np.where(self.alike, self.u, rng.random(P.shape + self.u.shape[1:]))  # [..., n, k]
        return (W < P[..., None]).mean(axis=-1)


# --- the look loop ----------------------------------------------------------------------------------


@dataclass
class SimRace:
    """One simulated race (a condition, or a condition × target, of a simulated sweep) and where it stands."""

    scores: np.ndarray  # [R, cap, n] per-item scores of every seed up to the cap
    pool: str  # races with one key pool their seed variance (the report's pool: a reward system on a target)
    seeds: np.ndarray = field(init=False)  # [R] seeds each regime has been given
    active: list[int] = field(init=False)  # regimes still racing
    state: str = "continue"  # one of stats/race.STATES
    best: int = 0  # the latest look's best regime
    noise: Any = None  # stats/variance.Noise of the seeds given so far (unchanged once the race stops)

    def __post_init__(self):
        self.seeds = np.zeros(len(self.scores), dtype=int)
        self.active = list(range(len(self.scores)))


def run_races(races: list[SimRace], schedule) -> list[SimRace]:
    """Decide the races look by look (the module docstring) until every one stops; returns them, updated."""
    from race_cli.stats.race import active_noise, decide_look
    from race_cli.stats.variance import fit_pools, noise_of

    for k, s_k in enumerate(schedule.looks):
        racing = [u for u in races if u.state == "continue"]
        if not racing:
            break
        for u in racing:
            u.seeds[u.active] = s_k
            codes = np.repeat(np.arange(len(u.seeds)), u.seeds)  # [jobs] each job's regime
            table = np.concatenate([u.scores[r, :s] for r, s in enumerate(u.seeds)])  # [jobs, n]
            u.noise = noise_of(codes, table, n_reg=len(u.seeds), own_pool=False)
        pools = fit_pools([u.noise for u in races], [u.pool for u in races])  # stopped races' seeds stay pooled
        subs = [active_noise(u.noise.pooled(pools[u.pool] if pools[u.pool].df_total else None), u.active)
                for u in racing]
        for u, d in zip(racing, decide_look(subs, [None] * len(subs), schedule, k)):
            u.best = u.active[d.best]
            if d.state == "continue":
                u.active = [u.active[i] for i in d.active]
            else:
                u.state = d.state
    return races


# --- the expected cost on the harness's design ------------------------------------------------------


@dataclass(frozen=True)
class RaceCost:
    """Expected outcome of a race at one truth (shares of conditions; seeds and jobs per condition)."""

    seeds_per_regime: float  # mean over conditions of jobs / regimes
    jobs_per_condition: float
    separated: float  # winner = the truly better regime
    equivalent: float
    undecided: float
    conditions: int


def expected_race(schedule, gap: float, seed_sd: float, regimes: int = 3, n_items: int = N_ITEMS,
                  samples: int = SAMPLES, conditions: int = 200, pool: int = 2, seed: int = 0,
                  kind: str = "uniform") -> RaceCost:
    """`conditions` simulated races at this truth (regime 0 better by gap), seed pools of `pool` conditions."""
    rng = np.random.default_rng(seed)
    races = [SimRace(condition_scores(rng, regimes, schedule.cap, n_items, samples, gap, seed_sd, kind),
                     f"pool{c // pool}") for c in range(conditions)]
    run_races(races, schedule)
    jobs = np.array([u.seeds.sum() for u in races])
    st = np.array([u.state for u in races])
    best = np.array([u.best for u in races])
    return RaceCost(float(jobs.mean() / regimes), float(jobs.mean()),
                    float(np.mean((st == "winner") & (best == 0))) if gap > 0 else 0.0,
                    float(np.mean(st == "equivalent")), float(np.mean(st == "undecided")), conditions)
