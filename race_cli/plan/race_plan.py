"""A raced plan: the grid's `race:` block read into a schedule, and the seed axis that follows from it.

    race:                 # in conf/grid/<name>.yaml
      max_seeds: 6        # the cap: seeds per regime at the last look (or looks: [2, 3, 4, 6])
      alpha: null         # familywise error over all looks; null = stats/race.DEFAULT_ALPHA
      margin: null        # equivalence margin (score scale), declared before the first job; null = the default
      spending: null      # how alpha is split over the looks; null = calibrated where measured, else bonferroni

The first look runs the grid's seed axis as it is (seed=0,1: 2 seeds per regime); later looks add
seeds 2, 3, ... up to the cap, to the regimes the race keeps. The plan holds every job to the cap:
the first look's jobs are written as usual, the others are kept in plan.json under "reserve" and
written into jobs/ only when a look opens (pool/race_loop.py). So `race report` sees only jobs the
race asked for, and the plan's identity (its folder name, its refusal of another plan) covers the
whole race. `--no-race` or a one-look schedule is a fixed design, written exactly as before.
No torch, no pandas.
"""

from __future__ import annotations

from typing import Any

from race_cli.errors import RaceError
from race_cli.regime import condition_key, is_seed, regime_key

RACE_KEYS = ("looks", "max_seeds", "alpha", "margin", "spending", "eval_items")


def _number(block: dict, key: str, where: str, problems: list[str], *, integer: bool = False) -> Any:
    value = block.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (integer and not isinstance(value, int)):
        problems.append(f"{where} race.{key}: {value!r} is not {'a whole number' if integer else 'a number'}.")
        return None
    return value


def race_block(grid: dict, *, no_race: bool = False, max_seeds: int | None = None) -> dict | None:
    """The race settings to plan with (keys of RACE_KEYS, None where the default applies), or None for a
    fixed design: --no-race, or a grid without a race block and no --max-seeds. RaceError on a bad block."""
    if no_race:
        return None
    raw = grid.get("race")
    where = f"grid '{grid.get('name', '?')}':"
    if not raw and max_seeds is None:  # no block (or an empty one): a fixed design
        return None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RaceError(f"{where} race: expected a mapping of {', '.join(RACE_KEYS)}; got {raw!r}.")
    problems = [f"{where} race.{k}: unknown key (expected {', '.join(RACE_KEYS)})." for k in raw if k not in RACE_KEYS]
    block: dict[str, Any] = {k: None for k in RACE_KEYS}
    looks = raw.get("looks")
    if looks is not None and (not isinstance(looks, list)
                              or not all(isinstance(x, int) and not isinstance(x, bool) for x in looks)):
        problems.append(f"{where} race.looks: {looks!r}; expected a list of seed counts such as [2, 3, 4, 6].")
        looks = None
    block["looks"] = looks
    block["max_seeds"] = _number(raw, "max_seeds", where, problems, integer=True)
    block["alpha"] = _number(raw, "alpha", where, problems)
    block["margin"] = _number(raw, "margin", where, problems)
    block["eval_items"] = _number(raw, "eval_items", where, problems, integer=True)  # the evaluation look
    spending = raw.get("spending")
    if spending is not None and not isinstance(spending, str):
        problems.append(f"{where} race.spending: {spending!r} is not a rule's name.")
        spending = None
    block["spending"] = spending
    if max_seeds is not None:  # race plan / race run --max-seeds wins over the grid's cap
        block["max_seeds"], block["looks"] = max_seeds, None
    if problems:
        raise RaceError(*problems)
    return block


def check_cap(block: dict, axes: list, limit: int) -> None:
    """RaceError when a race to the block's cap would plan more than `limit` jobs (race plan's --max-jobs, or
    build.HARD_MAX_JOBS with --yes): counted from the cap and the other axes' sizes before the seed axis is
    built, so `max_seeds: 100000000` is a message, not a list of a hundred million seeds."""
    from race_cli.stats.race import DEFAULT_LOOKS

    looks = block.get("looks")
    cap = max(looks) if looks else block.get("max_seeds") if block.get("max_seeds") is not None else DEFAULT_LOOKS[-1]
    regimes = 1
    for a in axes:
        regimes *= len(a.values)
    if int(cap) * regimes > limit:
        raise RaceError(f"a race to {cap} seeds plans {regimes} regime(s) x {cap} seeds = {int(cap) * regimes} jobs, "
                        f"more than the {limit} race plans here. Expected a cap such as 4 or 6 (race.max_seeds or "
                        "race.looks in the grid, or --max-seeds); narrow the axes, or pass --yes for up to the "
                        "hard limit.")


def make_race_schedule(block: dict, first: int):
    """The stats/race.Schedule of a race block whose first look runs `first` seeds per regime; None when the
    schedule has one look (a fixed design). RaceError when the block cannot make a schedule."""
    from race_cli.stats import race as sr

    kwargs = {k: block[k] for k in ("alpha", "margin", "spending") if block.get(k) is not None}
    if block.get("eval_items") is not None:  # an evaluation look: stats/race.Schedule checks it with the split
        return _with_eval_items(make_race_schedule({**block, "eval_items": None}, first), block["eval_items"])
    try:
        if block.get("looks") is not None:
            looks = [int(x) for x in block["looks"]]
            if looks[:1] != [first]:
                raise RaceError(f"race.looks {looks} starts at {looks[0] if looks else '?'} seeds, but the seed axis "
                                f"runs {first} (seed=0..{first - 1}). Make the first look the seed axis's count.")
            if len(looks) == 1:
                return None
            base = sr.make_schedule(looks[-1], first=first, **kwargs)  # alpha, margin, spending as make_schedule
            return sr.Schedule.from_json({**base.to_json(), "looks": looks})
        cap = block.get("max_seeds")
        cap = int(cap) if cap is not None else int(sr.DEFAULT_LOOKS[-1])
        if cap < first:
            raise RaceError(f"race max_seeds {cap}: fewer than the {first} seeds the first look runs (seed=0.."
                            f"{first - 1}). Expected max_seeds >= {first}, or --no-race for a fixed design.")
        if cap == first:
            return None
        return sr.make_schedule(cap, first=first, **kwargs)
    except RaceError:
        raise
    except (ValueError, TypeError) as exc:
        raise RaceError(f"race block {block}: {exc}") from None


def _with_eval_items(schedule, items: int):
    """The schedule with its evaluation look (stats/race.Schedule.eval_items); None stays a fixed design."""
    import dataclasses

    return None if schedule is None else dataclasses.replace(schedule, eval_items=int(items))


def regimes_per_condition(jobs: list) -> int:
    """The most regimes (jobs alike up to their seed) in one condition (model, budget, reward, task)."""
    regimes: dict[tuple, set] = {}
    for j in jobs:
        regimes.setdefault(condition_key(j.config), set()).add(regime_key(j.overrides))
    return max((len(r) for r in regimes.values()), default=0)


def resolve_spending(schedule, named: bool, jobs: list):
    """The schedule with its split of α settled: the grid's own when it names one (`named`), else
    stats/race.default_spending for these looks, this α and the plan's regimes per condition."""
    import dataclasses

    from race_cli.stats import race as sr

    if named or schedule.eval_items:  # an evaluation look races with the bonferroni split (stats/race.Schedule)
        return schedule
    rule = sr.default_spending(schedule.looks, schedule.alpha, regimes_per_condition(jobs))
    return dataclasses.replace(schedule, spending=rule)


def first_look_seeds(axes: list, fixed: list[str]) -> tuple[int, int | None]:
    """(seeds of the first look, index of the seed axis in `axes` or None) for a raced plan.

    The race numbers seeds 0, 1, ... (a regime at look k runs seeds below looks[k]), so a seed axis must be
    seed=0,1[,...]; without one the first look runs seeds 0 and 1."""
    if any(is_seed(t) for t in fixed):
        raise RaceError("seed= fixes one seed, but this plan races (it adds seeds to the regimes whose call is "
                        "open). Sweep seed=0,1 as the first look, or pass --no-race for a fixed design.")
    for i, a in enumerate(axes):
        if a.key == "seed":
            try:
                values = [int(v) for v in a.values]
            except ValueError:
                values = []
            if values != list(range(len(values))) or len(values) < 2:
                raise RaceError(f"seed={','.join(a.values)}: a race numbers its seeds from 0 (the first look runs "
                                "seed=0,1,..., later looks add the next ones). Expected seed=0,1 (or 0,1,2...), "
                                "or --no-race for a fixed design.")
            return len(values), i
    return 2, None


def split_looks(jobs: list, first: int) -> tuple[list, list]:
    """(the first look's jobs, the later looks' reserve), in plan order."""
    head = [j for j in jobs if int(j.config["seed"]) < first]
    tail = [j for j in jobs if int(j.config["seed"]) >= first]
    return head, tail
