"""Power before spending: the smallest effects a grid can detect, per condition (pure, no torch).

`race plan` prints, per condition (model, budget, reward, evaluation target), the smallest gain over
the start and the smallest gap between regimes that the report's own tests detect with 80% power, from
the grid's items n, samples per item k, seeds per regime s, regimes R, a seed spread σ_b (`--seed-sd`,
or an earlier sweep's measured one) and the seed pool's degrees of freedom (the report pools seed
variance over every regime of the sweep with the same reward system: Σ R·(s − 1) over those conditions).

Both figures come from race_cli/stats/power.py, which simulates pilots at the level of the statistics
and passes them through the report's own decision functions (REGWQ for ≈ best, Holm on one-sided
bounds for > start), so the plan's power is the report's test by construction:

- gap: a regime better than every other by the gap is the *only* ≈ best regime (told apart from all);
- gain: one regime gaining that much over the pooled start beats its start (the others gaining none);
- per-item sampling variance 0.25 / k (a score near 0.5: the largest a Bernoulli has); an assumed item ×
  regime interaction (stats.power.ITEM_REGIME_SD) and per-item spread of the gain (GAIN_ITEM_SD, measured);
- with one seed per regime there is no seed variance to test against: "–" (not testable).

benchmarks/bench_calibration.py's separation table checks the gap against pilots simulated item by item
and read by the report.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Sequence

POWER = 0.80
ALPHA = 0.05
SEED_SD_DEFAULT = 0.02  # assumed where nothing is measured: an earlier default (mu in {1, 2, 4}) measured 0.016-0.026 under the rule
# (docs/measurements/embedded-study.md); the 1200-item G x mu default's job means spread 0.004-0.014, so for it the
# price is conservative (race plan --seed-sd runs/<a finished run> prices at that run's spread)
ITEMS_OF = {"gsm8k": 1319, "math500": 500}  # standard sets; arithmetic targets use task.num_eval
ARITHMETIC_DEFAULT_ITEMS = 200  # an arithmetic target of another task: conf/task/arithmetic.yaml's num_eval


@dataclass
class Power:
    condition: str
    target: str
    items: int
    samples: int
    seeds: int
    regimes: int
    seed_sd: float
    gain: float  # smallest gain over the start detected with 80% power
    gap: float  # smallest gap by which a regime is told apart from every other with 80% power
    seed_df: float


def detectable(n: int, k: int, seeds: int, regimes: int, seed_sd: float, greedy: bool = False,
               power: float = POWER, alpha: float = ALPHA, pool_df: float | None = None,
               crn: bool = False) -> tuple[float, float, float]:
    """(smallest detectable gain over the start, smallest gap told apart from every other regime, seed df)
    with `power`, by race_cli/stats/power.py (the report's decisions); nan where nothing is testable.
    greedy: k = 1 greedy evaluation (its seed × item flips counted as a sample's variance)."""
    from race_cli.stats.power import Design

    d = Design(n=n, k=1 if greedy else k, seeds=seeds, regimes=regimes, seed_sd=seed_sd,
               pool_df=pool_df, crn=crn)
    return _gain(d, power, alpha), _gap(d, power, alpha), d.df_seed


@lru_cache(maxsize=256)
def _gain(d, power: float, alpha: float) -> float:
    from race_cli.stats.power import smallest_gain

    return smallest_gain(d, power, alpha)


@lru_cache(maxsize=256)
def _gap(d, power: float, alpha: float) -> float:
    from race_cli.stats.power import smallest_separated

    return smallest_separated(d, power, alpha) if d.regimes >= 2 else math.nan


def joint_claims(sizes: int, rewards: int) -> int:
    """Claims of one joint condition that could name a winner (report/joint.py): per size pair four (best
    against best and allocation by allocation, each on final scores and gains), per reward pair two per
    scope (each size, and across sizes when there are several)."""
    scopes = sizes + (1 if sizes > 1 else 0)
    return 4 * (sizes * (sizes - 1) // 2) + 2 * (rewards * (rewards - 1) // 2) * scopes


ITEM_MODEL_SD = 0.03  # an assumption: how much a model's per-item accuracy departs from another's beyond the
# shared item difficulty (items pair across models only in part); bench_joint.py simulates U(-0.05, 0.05), SD 0.029


def joint_detectable(n: int, k: int, seeds: int, sizes: int, rewards: int, allocations: int, seed_sd: float,
                     greedy: bool = False, power: float = POWER, alpha: float = ALPHA,
                     item_model_sd: float = ITEM_MODEL_SD) -> dict[str, float]:
    """The smallest differences the joint comparison's allocation-by-allocation claims detect with 80%
    power: `size` (larger − smaller at the same reward, G, μ: rewards × allocations pairs) and `feedback`
    (rule − reward model across sizes at the same model, G, μ: sizes × allocations pairs), each tested at
    the entry level the joint comparison's gatekept graph gives it (stats/gatekeeping.joint_design: α split
    evenly between the size and the feedback family, then between a family's pairs), with seed noise pooled
    over one reward system's regimes as the report pools it (stats/variance.HETERO_DF). The
    contrast averages P paired differences: Σ c²/n_r = 2/(P s), item part 2 σ_e²/(P s n), plus, for a
    size contrast, the two models' own item effects, which every allocation shares: 2 σ_im²/n."""
    from race_cli.stats.quantiles import t_quantile

    from race_cli.stats.variance import HETERO_DF

    s2e = 0.25 / (1 if greedy else k)
    pooled = float(sizes * allocations * (seeds - 1))  # one reward system's regimes (the report's seed pool)
    df_seed = 1.0 / (1.0 / pooled + 1.0 / HETERO_DF) if pooled > 0 else 0.0
    df_resid = pooled * (n - 1)
    claims = max(1, joint_claims(sizes, rewards))
    size_pairs, reward_pairs = sizes * (sizes - 1) // 2, rewards * (rewards - 1) // 2
    families = (size_pairs > 0) + (reward_pairs > 0)
    out: dict[str, float] = {"claims": float(claims), "seed_df": df_seed}
    for name, pairs, present in (("size", rewards * allocations, sizes > 1),
                                 ("feedback", sizes * allocations, rewards > 1)):
        if not present:
            out[name] = math.nan
            continue
        weight = 2.0 / (pairs * seeds)
        a = 2 * s2e / (pairs * seeds * n) + (2 * item_model_sd ** 2 / n if name == "size" else 0.0)
        if df_seed <= 0:
            se, df = math.sqrt(a), n - 1.0
        else:
            b = weight * (seed_sd ** 2 + s2e / n)
            e = weight * s2e / n
            v = a - e + b
            se = math.sqrt(v)
            df = min(df_seed, v * v / (a * a / (n - 1) + b * b / df_seed + e * e / df_resid))
        level = alpha / max(families, 1) / max(size_pairs if name == "size" else reward_pairs, 1)  # entry level
        out[name] = _shift(t_quantile(1 - level / 2, df), df, power) * se
    return out


@dataclass
class JointPower:
    budget: float
    target: str
    items: int
    samples: int
    seeds: int
    sizes: int
    rewards: int
    allocations: int
    claims: int
    size: float  # smallest size difference detected allocation by allocation (nan: one size)
    feedback: float  # smallest rule − reward-model difference across sizes (nan: one reward system)


def plan_joint_power(jobs: Sequence[Any], seed_sd: float) -> list[JointPower]:
    """Per (budget, task, target) of the planned jobs with two model sizes or two reward systems."""
    from race_cli.cost.budget import reward_name
    from race_cli.regime import override_key, regime_key
    from race_cli.tasks.targets import target_names

    groups: dict[tuple, dict[tuple, dict[tuple, int]]] = {}
    first: dict[tuple, dict] = {}
    for j in jobs:
        c = j.config
        key = (float(c["budget"]["flops"]), c["task"]["name"])
        cond = (c["model"]["name"], reward_name(c))
        regime = tuple(o for o in regime_key(j.overrides) if override_key(o) not in ("model", "reward"))
        regs = groups.setdefault(key, {}).setdefault(cond, {})
        regs[regime] = regs.get(regime, 0) + 1
        first.setdefault(key, c)
    out = []
    for key, conds in groups.items():
        sizes = len({m for m, _ in conds})
        rewards = len({r for _, r in conds})
        if sizes < 2 and rewards < 2:
            continue
        c = first[key]
        ev = c.get("eval", {})
        k = int(ev.get("samples", 1))
        greedy = bool(ev.get("greedy", True)) and k == 1
        seeds = min(n for regs in conds.values() for n in regs.values())
        alloc = min(len(regs) for regs in conds.values())
        for t in target_names(c):
            n = planned_items(c, t)
            if not n or n < 2:
                continue
            d = joint_detectable(n, k, seeds, sizes, rewards, alloc, seed_sd, greedy=greedy)
            out.append(JointPower(key[0], t, n, k, seeds, sizes, rewards, alloc, int(d["claims"]), d["size"],
                                  d["feedback"]))
    return out


def joint_power_lines(rows: list[JointPower]) -> list[str]:
    """One line per joint condition for `race plan`."""
    fmt = lambda v: "–" if not math.isfinite(v) else f"{v:.3f}"
    return [f"joint comparison at {r.budget:.3g} FLOPs on {r.target} ({r.sizes} sizes × {r.rewards} reward systems "
            f"× {r.allocations} allocations, {r.items} × {r.samples} × {r.seeds}; {r.claims} claims, gatekept): "
            f"smallest model-size difference detected with 80% power allocation by allocation {fmt(r.size)}, "
            f"smallest rule − reward-model difference across sizes {fmt(r.feedback)}." for r in rows]


def _shift(crit: float, df: float, power: float) -> float:
    """The noncentrality δ at which a t statistic with df degrees of freedom exceeds `crit` with
    probability `power` (scipy's noncentral t; with few df it is well above crit + t_power)."""
    if not math.isfinite(df) or df > 1e6:
        df = 1e6
    sf = _nct_sf()
    return float(brentq(lambda d: sf(crit, df, d) - power, 0.0, crit + 50.0))


def _nct_sf():
    """The noncentral t's survival function (x, df, nc) as scipy.stats.nct.sf computes it for valid scalar
    arguments (the ufunc it calls, clipped to [0, 1]), without importing scipy.stats (~0.5 s of `race plan`,
    docs/measurements/plan-speed.md); scipy.stats where the private ufunc is gone."""
    try:
        from scipy.special._ufuncs import _nct_sf as ufunc
    except ImportError:  # another scipy: the public, slower-to-import way
        from scipy.stats import nct

        return lambda x, df, nc: float(nct.sf(x, df, nc))
    return lambda x, df, nc: min(max(float(ufunc(x, df, nc)), 0.0), 1.0)


def brentq(f, xa: float, xb: float, xtol: float = 2e-12, rtol: float = 8.881784197001252e-16,
           maxiter: int = 100) -> float:
    """A root of f in [xa, xb] by Brent's method, step for step scipy.optimize.brentq (its C code,
    scipy/optimize/Zeros/brentq.c, with scipy's default tolerances), so the same root to the last bit
    (tests/test_plan_power.py compares them) without importing scipy.optimize (~0.4 s)."""
    xpre, xcur = float(xa), float(xb)
    xblk = fblk = spre = scur = 0.0
    fpre, fcur = f(xpre), f(xcur)
    if fpre == 0:
        return xpre
    if fcur == 0:
        return xcur
    if math.copysign(1.0, fpre) == math.copysign(1.0, fcur):
        raise ValueError("f(a) and f(b) must have different signs")
    for _ in range(maxiter):
        if fpre != 0 and fcur != 0 and math.copysign(1.0, fpre) != math.copysign(1.0, fcur):
            xblk, fblk = xpre, fpre
            spre = scur = xcur - xpre
        if abs(fblk) < abs(fcur):
            xpre, xcur, xblk = xcur, xblk, xcur
            fpre, fcur, fblk = fcur, fblk, fcur
        delta = (xtol + rtol * abs(xcur)) / 2
        sbis = (xblk - xcur) / 2
        if fcur == 0 or abs(sbis) < delta:
            return xcur
        if abs(spre) > delta and abs(fcur) < abs(fpre):
            if xpre == xblk:  # interpolate
                stry = -fcur * (xcur - xpre) / (fcur - fpre)
            else:  # extrapolate
                dpre = (fpre - fcur) / (xpre - xcur)
                dblk = (fblk - fcur) / (xblk - xcur)
                stry = -fcur * (fblk * dblk - fpre * dpre) / (dblk * dpre * (fblk - fpre))
            if 2 * abs(stry) < min(abs(spre), 3 * abs(sbis) - delta):  # a good short step
                spre, scur = scur, stry
            else:  # bisect
                spre = scur = sbis
        else:  # bisect
            spre = scur = sbis
        xpre, fpre = xcur, fcur
        xcur += scur if abs(scur) > delta else (delta if sbis > 0 else -delta)
        fcur = f(xcur)
    raise RuntimeError(f"brentq: no convergence in {maxiter} iterations")


def planned_items(cfg: dict, target: str) -> int | None:
    """Items a job will score on `target` (race_cli/tasks/targets.py; the caps of eval.max_items and
    eval.max_items_by_target applied), or None when the plan cannot know (a jsonl file's size)."""
    from race_cli.tasks.targets import task_target_name

    ev, task = cfg.get("eval", {}), cfg.get("task", {})
    if target == task_target_name(task) or (target == "arithmetic-hard" and task.get("name") == "arithmetic"):
        n = task.get("num_eval") or ITEMS_OF.get(target)
    elif target in ("arithmetic", "arithmetic-hard"):
        n = ARITHMETIC_DEFAULT_ITEMS
    else:
        n = ITEMS_OF.get(target)
    cap = (ev.get("max_items_by_target") or {}).get(target, ev.get("max_items"))
    if cap is not None and n is not None:
        n = min(int(cap), int(n))
    return int(n) if n is not None else None


def plan_power(jobs: Sequence[Any], seed_sd: float) -> list[Power]:
    """Per condition and target of the planned jobs (PlannedJob: .config, .overrides)."""
    from race_cli.regime import condition_key, regime_key
    from race_cli.tasks.targets import target_names

    groups: dict[tuple, dict[tuple, int]] = {}
    first: dict[tuple, dict] = {}
    for j in jobs:
        c = j.config
        cond = condition_key(c)
        regime = regime_key(j.overrides)
        groups.setdefault(cond, {})
        groups[cond][regime] = groups[cond].get(regime, 0) + 1
        first.setdefault(cond, c)
    pool: dict[str, float] = {}  # the report's seed pool: every regime of a reward system (on each target)
    for cond, regs in groups.items():
        pool[cond[2]] = pool.get(cond[2], 0.0) + sum(max(v - 1, 0) for v in regs.values())
    out = []
    for cond, regs in groups.items():
        c = first[cond]
        ev = c.get("eval", {})
        k = int(ev.get("samples", 1))
        greedy = bool(ev.get("greedy", True)) and k == 1
        seeds = min(regs.values())
        for t in target_names(c):
            n = planned_items(c, t)
            if not n or n < 2:
                continue
            gain, gap, df = detectable(n, k, seeds, len(regs), seed_sd, greedy=greedy,
                                       pool_df=pool[cond[2]] if seeds >= 2 else None, crn=not greedy)
            out.append(Power(f"{cond[0]} C={cond[1]:.3g} {cond[2]}", t, n, k, seeds, len(regs), seed_sd, gain,
                             gap, df))
    return out


def seed_sd_from(arg: str | None, grid: dict | None = None) -> tuple[float, str]:
    """--seed-sd: a number, or an earlier sweep whose report/ranking.csv has the measured seed spread
    (the median over its conditions); None: the spread the grid declares (its `seed_sd:`, measured on its own
    run), else SEED_SD_DEFAULT, assumed. Returns (sd, where from)."""
    from pathlib import Path

    from race_cli.errors import RaceError

    if arg is None:
        if grid is not None and grid.get("seed_sd") is not None:
            return float(grid["seed_sd"]), f"declared by grid '{grid['name']}', its own run's; --seed-sd to set it"
        return SEED_SD_DEFAULT, f"assumed {SEED_SD_DEFAULT} (--seed-sd to set it)"
    if not arg.strip():
        raise RaceError(f"--seed-sd {arg!r} is empty: give a spread such as 0.02, or a sweep folder with a report.")
    try:
        v = float(arg)
    except ValueError:
        v = None
    if v is not None:
        if not math.isfinite(v) or v < 0:
            raise RaceError(f"--seed-sd {arg}: expected a spread >= 0 (e.g. 0.02) or an earlier sweep's folder.")
        return v, "--seed-sd"
    path = Path(arg) / "report" / "ranking.csv"
    if not path.is_file():
        raise RaceError(f"--seed-sd {arg}: neither a number nor a sweep with a report ({path} is missing).",
                        "Give a spread such as 0.02, or run `race report` on that sweep first.")
    import csv

    with path.open(encoding="utf-8") as fh:
        vals = []
        for row in csv.DictReader(fh):
            try:
                x = float(row.get("seed_sd") or "nan")
            except ValueError:
                continue
            if math.isfinite(x):
                vals.append(x)
    if not vals:
        raise RaceError(f"--seed-sd {arg}: its report measured no seed spread (one seed per regime?).",
                        "Give a spread such as 0.02 instead.")
    vals.sort()
    med = vals[len(vals) // 2] if len(vals) % 2 else 0.5 * (vals[len(vals) // 2 - 1] + vals[len(vals) // 2])
    return med, f"measured in {arg} (median over its conditions)"


def print_power(rows: list[Power], source: str, eval_share: str | None = None, file=None,
                joint_lines: list[str] | None = None) -> None:
    """The power table `race plan` prints under the jobs (and the evaluation's share of the time)."""
    from rich.console import Console
    from rich.table import Table

    if not rows:
        return
    t = Table(title="Power before spending: the smallest effects detected with 80% power (the report's tests)",
              title_justify="left",
              caption=f"seed spread σ_b {rows[0].seed_sd:.3g}: {source}. gain: a regime's gain over the start "
                      "(Holm, familywise 2.5% one-sided); gap: the better of two regimes the only one ≈ best "
                      "(studentized range step-down, familywise 5%). Per-item sampling variance taken at its largest (score 0.5), "
                      "a third of it common to two jobs (common random numbers, as measured on the default pilot); "
                      "the start one shared evaluation: race_cli/plan/power.py.", caption_justify="left")
    console = Console(file=file) if file is not None else Console(stderr=True)  # the terminal's width
    if file is None:  # the plan above went to stdout: let it out first when both go to one pipe (2>&1)
        sys.stdout.flush()
    if console.width < 120:  # a pipe or an 80-column terminal: short headers, one space apart, nothing folded
        from rich import box

        console.print(t.title + ":", highlight=False)
        caption = str(t.caption) + " n × k × seeds: items × samples × seeds; gain, gap: the smallest detected."
        t = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False, caption=caption,
                  caption_justify="left")
        heads = ("condition", "target", "n × k × seeds", "regimes", "gain", "gap")
    else:
        heads = ("condition", "target", "items × samples × seeds", "regimes", "smallest gain", "smallest gap")
    for h in heads:
        t.add_column(h, justify="left" if h in ("condition", "target") else "right", no_wrap=True)
    seen = set()
    for r in rows:
        key = (r.items, r.samples, r.seeds, r.regimes, r.target)
        fmt = lambda v: f"{v:.3f}" if math.isfinite(v) else "–"
        t.add_row(r.condition, r.target, f"{r.items} × {r.samples} × {r.seeds}", str(r.regimes), fmt(r.gain),
                  fmt(r.gap))
        seen.add(key)
    console.print(t)
    if any(r.seeds < 2 for r in rows):
        from race_cli.report.words import NOT_TESTABLE

        console.print(f"note: one seed per regime: the report cannot test a gain or a gap (\"–\": {NOT_TESTABLE}) "
                      "unless `race report --assume-seed-sd X` supplies the seed term.", highlight=False)
    for line in joint_lines or []:
        console.print(line, highlight=False)
    if eval_share:
        console.print(eval_share, highlight=False)
