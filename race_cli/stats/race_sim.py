"""The expected cost of a race, by simulating races through its own decisions (numpy/scipy, no I/O).

`expected_race(schedule, gap, seed_sd)` simulates `conditions` conditions of `regimes` regimes, one of them
better than the others by `gap`, item by item (n items × k samples, item difficulty ±0.2, item × regime
sd 0.05, seed sd `seed_sd`·U(0.5, 1.5) per regime), pools their seed variance in pools of `pool` conditions
as the report pools a reward system's regimes, and decides each look with stats/race.decide_look on the
active regimes' first looks[k] seeds, exactly as report/race.race_states replays a sweep folder. What
`race plan` prints as a race's expected jobs: benchmarks/bench_race.py checks it against whole races
written as job folders.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from race_cli.stats.race import Schedule, active_noise, decide_look

ITEM_HALF = 0.2  # item difficulty U(±0.2), paired across regimes
ITEM_REGIME_SD = 0.05  # item × regime interaction
LEVEL = 0.45  # the regimes' accuracy (the better one: + gap)


@dataclass(frozen=True)
class RaceCost:
    """Expected outcome of a race at one truth (shares of conditions; seeds and jobs per condition)."""

    seeds_per_regime: float  # mean over conditions of jobs / regimes
    jobs_per_condition: float
    separated: float  # winner = the truly better regime
    equivalent: float
    undecided: float
    conditions: int


def _runs(rng, R: int, cap: int, n: int, k: int, gap: float, seed_sd: float) -> np.ndarray:
    """Per-item scores [R, cap, n] of one condition, every seed up to the cap (regime 0 better by gap)."""
    d = rng.uniform(-ITEM_HALF, ITEM_HALF, n)
    g = rng.normal(0, ITEM_REGIME_SD, (R, n))
    g -= g.mean(axis=1, keepdims=True)
    sd = seed_sd * rng.uniform(0.5, 1.5, R)
    e = rng.uniform(-1, 1, (R, cap)) * math.sqrt(3.0) * sd[:, None]
    acc = np.full(R, LEVEL)
    acc[0] += gap
    P = np.clip(acc[:, None, None] + d + g[:, None, :] + e[:, :, None], 0, 1)
    return rng.binomial(k, P) / k


def expected_race(schedule: Schedule, gap: float, seed_sd: float, regimes: int = 3, n_items: int = 200,
                  samples: int = 4, conditions: int = 200, pool: int = 2, seed: int = 0) -> RaceCost:
    """Simulated races of `conditions` conditions at this truth; see the module docstring."""
    from race_cli.stats import variance as V

    rng = np.random.default_rng(seed)
    R, cap = regimes, schedule.cap
    runs = [_runs(rng, R, cap, n_items, samples, gap, seed_sd) for _ in range(conditions)]
    seeds = np.zeros((conditions, R), dtype=int)  # seeds each regime was given
    active = [list(range(R)) for _ in range(conditions)]
    racing = list(range(conditions))
    state = ["continue"] * conditions
    best = [0] * conditions
    for k, s_k in enumerate(schedule.looks):
        if not racing:
            break
        for c in racing:
            seeds[c, active[c]] = s_k
        noises = []
        for c in range(conditions):
            codes = np.repeat(np.arange(R), seeds[c])
            table = np.concatenate([runs[c][r, :seeds[c, r]] for r in range(R)])
            noises.append(V.noise_of(codes, table, R, own_pool=False))
        keys = [f"pool{c // pool}" for c in range(conditions)]
        priors = V.fit_pools(noises, keys)
        subs = []
        for c in racing:
            nz = noises[c].pooled(priors[keys[c]] if priors[keys[c]].df_total else None)
            subs.append(active_noise(nz, active[c]))
        for c, d in zip(list(racing), decide_look(subs, [None] * len(subs), schedule, k)):
            best[c] = active[c][d.best]
            if d.state == "continue":
                active[c] = [active[c][i] for i in d.active]
            else:
                state[c] = d.state
                racing.remove(c)
    jobs = seeds.sum(axis=1)
    st = np.array(state)
    return RaceCost(float(jobs.mean() / R), float(jobs.mean()),
                    float(np.mean((st == "winner") & (np.array(best) == 0))) if gap > 0 else 0.0,
                    float(np.mean(st == "equivalent")), float(np.mean(st == "undecided")), conditions)

