"""What a race costs before it runs: jobs, FLOPs, GPU-hours and wall time at three points.

- minimum: every condition stops at the first look (the first look's jobs, as a fixed design would run);
- expected: the mean over simulated races on a stated truth (one regime per condition better by `gap`,
  the others equal, seeds spread by the plan's seed sd), decided look by look by the race's own
  decision (stats/race.decide_look) on the report's variance model (stats/variance.noise_of, pooled
  per reward system as the ranking pools);
- maximum: every regime runs to the cap.

Wall time is the pool's: a look starts when the one before has ended everywhere (the race decides a
look when all of its jobs are done), so it is the sum over looks of that look's jobs scheduled on the
plan's slots, longest first (cost/walltime.grid_seconds).

The races are simulated and decided by stats/race_sim, the harnesses' simulator (benchmarks/bench_race.py checks
its expected cost against whole races written as job folders), one per (condition, target) of each simulated
sweep, on the harness's truth: item difficulties U(±ITEM_HALF) around LEVEL, an item × regime interaction, a
normal seed effect (SEED_KIND) of sd `seed sd`·U(0.5, 1.5) per regime, scores the mean of eval.samples
Bernoulli draws, here on the plan's own conditions, regimes, items and samples, pooled per reward system
and target as the ranking pools. Evaluation noise is drawn independently per job (no common random
numbers): slightly more noise than the engine's, so slightly more seeds. Targets of one job are simulated
independently; a regime's seeds are the most any of its targets asks for (one job serves all).
No torch; numpy and scipy through stats/.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

EXPECTED_GAP = 0.05  # the stated truth of the expected price: one regime better by this much (score scale)
N_SIM = 40  # simulated sweeps: the expected jobs within a few percent of the range (Monte Carlo)
SEED_KIND = "normal"  # simulated seed effects (stats/race_sim.SEED_KINDS): the variance model's own assumption
# (uniform before issue 54: the lightest tails there are, so the most favourable price)


@dataclass(frozen=True)
class Point:
    """One price of a race."""

    jobs: float
    flops: float  # planned training FLOPs (model convention), evaluation not charged
    gpu_hours: float | None  # None: CPU workers
    wall_s: float | None  # None: a job without planned seconds


@dataclass(frozen=True)
class RacePrice:
    looks: tuple[int, ...]
    minimum: Point
    expected: Point
    maximum: Point
    gap: float  # the truth of `expected`
    seed_sd: float
    n_sim: int
    slots: int
    resolution: tuple = ()  # Resolution per condition and target: what the race resolves at its cap


@dataclass
class _Regime:
    cond: tuple  # (model, budget, reward, task): the report's condition columns
    targets: list[tuple[str, int, int]]  # (target, items, samples per item)
    seconds: float | None  # planned wall seconds of one job
    flops: float
    gpus: int


def _regimes(plan: Any) -> list[_Regime]:
    """The plan's regimes (jobs equal up to their seed), first look and reserve alike, in plan order."""
    from race_cli.plan.power import planned_items
    from race_cli.regime import condition_key, regime_key
    from race_cli.tasks.targets import target_names

    out: dict[tuple, _Regime] = {}
    for j in list(plan.jobs) + list(plan.reserve):
        key = regime_key(j.overrides)
        if key in out:
            continue
        c = j.config
        ev = c.get("eval", {})
        k = int(ev.get("samples", 1))
        targets = [(t, n, k) for t in target_names(c) if (n := planned_items(c, t)) and n >= 2]
        out[key] = _Regime(cond=condition_key(c),
                           targets=targets, seconds=j.wall.total if j.wall else None,
                           flops=float(j.planned()["flops"]["total"]), gpus=int(j.gpus or 0))
    return list(out.values())


def _cost(regs: list[_Regime], seeds: np.ndarray, looks: tuple[int, ...], slots: int) -> Point:
    """The price of a race whose regime r ends with seeds[r] seeds (a value of `looks`)."""
    from race_cli.cost.walltime import grid_seconds

    jobs = float(seeds.sum())
    flops = float(sum(r.flops * s for r, s in zip(regs, seeds)))
    gpu = [r.gpus for r in regs]
    gpu_hours = (float(sum((r.seconds or 0.0) * r.gpus * s for r, s in zip(regs, seeds))) / 3600
                 if any(gpu) else None)
    wall: float | None = None
    if all(r.seconds is not None for r in regs):
        wall, before = 0.0, 0
        for s_k in looks:
            run = [r.seconds for r, s in zip(regs, seeds) for _ in range(max(0, min(int(s), s_k) - before))]
            wall += grid_seconds(run, slots) if run else 0.0
            before = s_k
    return Point(jobs, flops, gpu_hours, wall)


def _mean(points: list[Point]) -> Point:
    def avg(xs):
        return None if any(x is None for x in xs) else float(np.mean(xs))

    return Point(float(np.mean([p.jobs for p in points])), float(np.mean([p.flops for p in points])),
                 avg([p.gpu_hours for p in points]), avg([p.wall_s for p in points]))


def simulate_seeds(regs: list[_Regime], schedule: Any, seed_sd: float, gap: float, rng, n_sim: int) -> np.ndarray:
    """`n_sim` simulated races, decided together look by look by stats/race_sim.run_races: [n_sim, regimes] the
    seeds each regime ends with (see the module docstring for the truth)."""
    from race_cli.stats.race_sim import SimRace, condition_scores, run_races

    conds: dict[tuple, list[int]] = {}
    for i, r in enumerate(regs):
        conds.setdefault(r.cond, []).append(i)
    races, owners = [], []  # one race per (simulation, condition, target); owners: (simulation, its regimes)
    for sim in range(n_sim):
        for cond, idx in conds.items():
            for t, n, k in regs[idx[0]].targets:  # the condition's first regime is the better one
                scores = condition_scores(rng, len(idx), schedule.cap, n, k, gap, seed_sd, SEED_KIND)  # [R, cap, n]
                races.append(SimRace(scores, pool=f"{sim}|{cond[2]}|{t}"))  # each simulated sweep pools its own
                owners.append((sim, idx))
    run_races(races, schedule)
    seeds = np.full((n_sim, len(regs)), schedule.looks[0])
    for (sim, idx), race in zip(owners, races):
        for r, s in zip(idx, race.seeds):
            seeds[sim, r] = max(seeds[sim, r], s)
    return seeds


# --- simulated races kept between runs ----------------------------------------------------------------
# The expected price's 40 simulated sweeps are most of `race plan`'s time (docs/measurements/plan-speed.md),
# and a pure function of what simulate_seeds reads: the regimes' conditions and targets, the schedule, the
# seed sd, the gap, the random seed and the count, run by this file's and stats/'s code. The seeds they end
# with are kept under the race cache (RACE_CACHE, else ~/.cache/race) in race-price/<key>.json, the key a
# hash of all of those (the code as its source text), so any change simulates afresh. RACE_PRICE_CACHE=off
# simulates every time; an unreadable or unwritable cache is the same as none.
PRICE_CACHE_ENV = "RACE_PRICE_CACHE"


def _price_key(regs: list[_Regime], schedule: Any, seed_sd: float, gap: float, seed: int, n_sim: int) -> str:
    import hashlib
    import json
    from pathlib import Path

    here = Path(__file__).resolve()
    h = hashlib.sha256(here.read_bytes())
    for path in sorted((here.parents[1] / "stats").glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    what = {"regs": [[list(r.cond), [list(t) for t in r.targets]] for r in regs],
            "schedule": repr(schedule),  # a dataclass's repr: every field, a field added later included
            "seed_sd": seed_sd, "gap": gap, "seed": seed, "n_sim": n_sim, "numpy": np.__version__}
    h.update(json.dumps(what, sort_keys=True, default=repr).encode())
    return h.hexdigest()[:32]


def _simulated_seeds(regs: list[_Regime], schedule: Any, seed_sd: float, gap: float, seed: int,
                     n_sim: int) -> np.ndarray:
    """simulate_seeds(..., np.random.default_rng(seed), n_sim), from the race cache where these inputs ran."""
    import json
    import os

    path = None
    if os.environ.get(PRICE_CACHE_ENV, "").strip().lower() != "off":
        from race_cli.io import cache_root

        try:
            path = cache_root() / "race-price" / f"{_price_key(regs, schedule, seed_sd, gap, seed, n_sim)}.json"
            got = np.asarray(json.loads(path.read_text(encoding="utf-8"))["seeds"], dtype=int)
            if got.shape == (n_sim, len(regs)):
                return got
        except (OSError, ValueError, KeyError, TypeError):
            pass
    seeds = simulate_seeds(regs, schedule, seed_sd, gap, np.random.default_rng(seed), n_sim)
    if path is not None:
        from race_cli.io import atomic_write_text

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"seeds": seeds.tolist()}), durable=False)
        except OSError:
            pass
    return seeds


def price_race(plan: Any, seed_sd: float, gap: float = EXPECTED_GAP, n_sim: int = N_SIM, seed: int = 0) -> RacePrice:
    """The race's minimum, expected and maximum price (plan.race must be set)."""
    schedule = plan.race
    looks = tuple(schedule.looks)
    regs = _regimes(plan)
    slots = max(1, int(plan.slots))
    sims = [_cost(regs, s, looks, slots) for s in _simulated_seeds(regs, schedule, seed_sd, gap, seed, n_sim)]
    return RacePrice(looks=looks, minimum=_cost(regs, np.full(len(regs), looks[0]), looks, slots),
                     expected=_mean(sims), maximum=_cost(regs, np.full(len(regs), looks[-1]), looks, slots),
                     gap=gap, seed_sd=seed_sd, n_sim=n_sim, slots=slots,
                     resolution=tuple(race_resolution(plan, seed_sd)))


def price_lines(price: RacePrice, schedule: Any) -> list[str]:
    """The price as printed under the plan."""
    from race_cli.cost.walltime import fmt_duration

    def fmt(p: Point, what: str) -> str:
        parts = [f"{p.jobs:.0f} jobs" if float(p.jobs).is_integer() else f"{p.jobs:.1f} jobs", f"{p.flops:.3g} FLOPs"]
        if p.gpu_hours is not None:
            parts.append(f"{p.gpu_hours:.1f} GPU-hours")
        if p.wall_s is not None:
            parts.append(f"wall {fmt_duration(p.wall_s)}")
        return f"  {what:<9} {', '.join(parts)}"

    from race_cli.report.words import race_schedule_brief

    return [race_schedule_brief(schedule) + f"; expected = {price.n_sim} simulated sweeps, one regime per condition "
            f"better by {price.gap:g}, normal seed effects of sd {price.seed_sd:g}",
            fmt(price.minimum, "minimum") + ": all stop at look 0",
            fmt(price.expected, "expected"),
            fmt(price.maximum, "maximum") + ": all to the cap"] + resolution_lines(list(price.resolution), schedule.margin)


# --- what the race resolves at its cap -------------------------------------------------------------


@dataclass(frozen=True)
class Resolution:
    """One condition and target's resolution at the race's cap (stats/race_power.py)."""

    condition: str
    target: str
    seeds: int  # the cap
    regimes: int
    alpha: float  # the last look's level
    margin: float  # the smallest equivalence margin shown with 80% power when all regimes are equal
    gap: float  # the smallest gap named the winner with 80% power


def race_resolution(plan: Any, seed_sd: float) -> list[Resolution]:
    """Per condition and target of a raced plan, what its last look resolves with every regime at the cap:
    the items, samples, regimes and seed pool of the plan (the report's pool: a reward system's regimes)."""
    from race_cli.plan.power import planned_items
    from race_cli.regime import condition_key
    from race_cli.stats.power import Design
    from race_cli.tasks.targets import target_names

    schedule = plan.race
    cap, alpha = schedule.cap, schedule.level(len(schedule.looks) - 1)
    regs = _regimes(plan)
    conds: dict[tuple, list[_Regime]] = {}
    for r in regs:
        conds.setdefault(r.cond, []).append(r)
    pool: dict[str, float] = {}  # seed df of the report's pool at the cap: every regime of a reward system
    for cond, rs in conds.items():
        pool[cond[2]] = pool.get(cond[2], 0.0) + len(rs) * (cap - 1)
    first = {}
    for j in list(plan.jobs) + list(plan.reserve):
        c = j.config
        first.setdefault(condition_key(c), c)
    out = []
    for cond, rs in conds.items():
        c = first[cond]
        ev = c.get("eval", {})
        k = int(ev.get("samples", 1))
        greedy = bool(ev.get("greedy", True)) and k == 1
        for t in target_names(c):
            n = planned_items(c, t)
            if not n or n < 2:
                continue
            d = Design(n=n, k=1 if greedy else k, seeds=cap, regimes=len(rs), seed_sd=seed_sd, pool_df=pool[cond[2]],
                       crn=not greedy)
            out.append(Resolution(f"{cond[0]} C={cond[1]:.3g} {cond[2]}", t, cap, len(rs), alpha, *_resolve(d, alpha)))
    return out


@lru_cache(maxsize=64)
def _resolve(d, alpha: float) -> tuple[float, float]:
    """(smallest margin, smallest gap) of one design: conditions alike in items, regimes and pool share it."""
    from race_cli.stats.race_power import smallest_margin, smallest_race_gap

    return smallest_margin(d, alpha), smallest_race_gap(d, alpha)


def resolution_lines(rows: list[Resolution], margin: float) -> list[str]:
    """What `race plan` prints under the price: per condition the margin and gap the race resolves at its cap,
    then a note where the declared margin lies below what the cap can show (such calls end undecided), and one
    where it is larger than the effect the price assumes (EXPECTED_GAP: equivalence could lump that effect)."""
    if not rows:
        return []
    fmt = lambda v: f"{v:.3f}" if v == v else "–"
    r0 = rows[0]
    head = (f"race resolution at the cap ({r0.seeds} seeds per regime, last look's α {r0.alpha:.4g}, seed sd as above): "
            f"declared margin ±{margin:g}")
    alike = {(fmt(r.margin), fmt(r.gap)) for r in rows}
    if len(alike) == 1:  # one design throughout: one line says it for every condition
        m, g = alike.pop()
        out = [f"{head}; in each of its {len(rows)} condition x target the smallest margin resolved with 80% power "
               f"is ±{m}, the smallest gap {g}"]
    else:
        width = max(len(r.condition) for r in rows)
        out = [f"{head}; per condition the smallest margin and gap resolved with 80% power"]
        out += [f"  {r.condition.ljust(width)}  {r.target}: margin ±{fmt(r.margin)}, gap {fmt(r.gap)}" for r in rows]
    short = [r for r in rows if r.margin == r.margin and margin < r.margin]
    if short:
        out.append(f"note: the declared margin ±{margin:g} lies below what the race can show at its cap in {len(short)} "
                   f"of {len(rows)} condition(s): there equivalence cannot be shown and an open call ends undecided "
                   "with its price (more items, samples or a larger cap would reach it; a larger margin would not "
                   "mean the same question).")
    if margin > EXPECTED_GAP:  # at the margin itself equivalence cannot be shown (it needs |θ| < margin)
        out.append(f"note: the declared margin ±{margin:g} is larger than the effect the price assumes "
                   f"({EXPECTED_GAP:g}): a regime that much better than the rest may end 'equivalent' to them, so "
                   "equivalence there cannot answer the allocation question; declare the smallest difference that "
                   "matters, at most that effect.")
    return out
