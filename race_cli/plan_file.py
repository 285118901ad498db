"""A raced sweep's plan.json, read as data: every row and the race record checked before anything acts on them.

    plan.json  {"jobs": [rows written], "race": schedule, "reserve": [rows of later seeds]}  (plan/race_plan.py)
    race.json  {"race": schedule}   the record the race started with, pinned by `race run` before its first job

plan.json is a file in the sweep folder (docs/security.md): someone else may have written or edited it. `race run`
deletes, writes and runs job folders by its rows and `race report` replays the race by its record, so neither
believes a value before it is checked:

- every row (`check_document`) is a mapping whose job_id is the id race plan writes for its overrides (the
  swept overrides after the fixed ones, config/sweep.job_id, with unique_ids' suffix where ids clashed), whose
  seed is a whole number of this race (the first look's in "jobs", a later look's in "reserve") and the seed
  its overrides set; each regime (the overrides up to the seed) holds every seed 0 .. cap-1 exactly once, and
  the seeds written are the first ones, a look's count. So no id leaves jobs/, no job is listed twice (the seed
  is part of a job's identity), and no reserve row is missing or extra. A problem is refused (exit 2) naming
  plan.json, the row and the field.
- the race record (`read_race`) is fixed when the race starts: `race run` pins it in race.json before its
  first job (`pin_record`), and `race run` and `race report` alike refuse a plan.json whose record is not the
  pinned one, naming both. This is the one reader of the record (run and report used to read it apart).
No torch, no pandas.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from race_cli.errors import RaceError
from race_cli.regime import is_seed, regime_key

RECORD = "race.json"  # under the sweep folder: the race record as the race started with it
FIX = "The file was edited or is damaged: restore it, or replan the sweep into a new folder (race plan --out DIR)."
MAX_SAID = 8  # problems named one by one; the rest are counted


def record_file(sweep: str | Path) -> Path:
    return Path(sweep) / RECORD


@dataclass(frozen=True)
class RacePlan:
    """A raced plan.json, checked: the rows written, the rows waiting, and the schedule."""

    doc: dict  # the document as read (rewritten by pool/race_loop.open_jobs)
    schedule: Any  # stats/race.Schedule
    jobs: list[dict]
    reserve: list[dict]


# --- a row ---------------------------------------------------------------------------------------


def regime_of(row: dict) -> str:
    """A plan row's overrides without its seed (race_cli/regime.py), as the row writes them: the jobs of one
    regime share it."""
    return " ".join(regime_key(str(row.get("overrides", "")).split(" ")))


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def id_for(job_id: str, tokens: list[str], hint: list[int]) -> bool:
    """Whether `job_id` is the id race plan writes for a job of overrides `tokens`: config/sweep.job_id of the
    swept ones (the tail after the grid's and the command line's fixed ones), or that id with unique_ids'
    suffix. `hint[0]`: where the swept ones began in the last row matched (tried first, then every start)."""
    from race_cli.config.sweep import job_id as make_id

    digest = None
    for start in [hint[0]] + [i for i in range(len(tokens) + 1) if i != hint[0]]:
        if start > len(tokens):
            continue
        base = make_id(tokens[start:])
        if job_id != base and job_id.startswith(base + "_"):  # unique_ids' suffix, where ids clashed
            digest = digest or hashlib.sha1(chr(0).join(tokens).encode()).hexdigest()[:8]
            base = f"{base}_{digest}"
        if job_id == base:
            hint[0] = start
            return True
    return False


def _check_row(row: Any, where: str, seeds: range, what: str, hint: list[int]) -> tuple[list[str], tuple | None]:
    """(problems, (job_id, regime, seed) or None) of one row; `seeds`: the seeds this list may hold."""
    from race_cli.config.sweep import is_valid_job_id

    if not isinstance(row, dict):
        return [f"{where}: {str(row)[:60]!r} ({type(row).__name__}), expected a job row (a mapping with job_id, "
                "seed and overrides, as race plan writes it)."], None
    problems = []
    job_id, seed, overrides = row.get("job_id"), row.get("seed"), row.get("overrides")
    if "job_id" not in row:
        problems.append(f"{where}: no job_id.")
    elif not is_valid_job_id(job_id):
        problems.append(f"{where} job_id: {str(job_id)[:80]!r} is not a job id race writes (letters, digits, '.', "
                        "'_', '+', '-', at most 120 characters, no path separators or leading dots).")
    name = f"{where} ({job_id})" if is_valid_job_id(job_id) else where
    if "seed" not in row:
        problems.append(f"{name}: no seed.")
    elif not _whole(seed) or seed not in seeds:
        problems.append(f"{name} seed: {repr(seed)[:40]} is not a seed of {what} (whole numbers {seeds.start} to "
                        f"{seeds.stop - 1}).")
    if not isinstance(overrides, str) or not overrides.strip():
        problems.append(f"{name} overrides: {str(overrides)[:60]!r}, expected the job's overrides as race plan "
                        "writes them (a string such as 'grpo.group_size=4 seed=2').")
    if problems:
        return problems, None
    tokens = overrides.split(" ")
    typed = [t.partition("=")[2] for t in tokens if is_seed(t)]
    if typed != [str(seed)]:
        problems.append(f"{name} overrides: set seed {'/'.join(typed) or '(none)'}, but the row's seed is {seed}; a "
                        "row's overrides set its own seed once.")
    elif not id_for(job_id, tokens, hint):
        problems.append(f"{name} job_id: not the id race plan writes for its overrides '{overrides[:120]}' (a job "
                        "id names its regime and seed).")
    return problems, (job_id, regime_of(row), seed) if not problems else None


# --- the document --------------------------------------------------------------------------------


def _schedule(doc: dict, where: str):
    """plan.json's race record as a stats/race.Schedule (RaceError naming the file)."""
    from race_cli.stats.race import Schedule

    try:
        return Schedule.from_json(doc.get("race"))
    except RaceError as exc:
        raise RaceError(f"{where}: " + " ".join(exc.problems),
                        "Expected the race record race plan writes, e.g. "
                        '{"looks": [2, 3, 4], "alpha": 0.05, "margin": 0.05, "spending": "bonferroni"}. ' + FIX) from None


def check_document(doc: Any, where: str) -> RacePlan:
    """The checked RacePlan of a raced plan.json's content (RaceError listing every problem, the file named)."""
    if not isinstance(doc, dict):
        raise RaceError(f"{where}: expected a race's plan (an object with jobs, race and reserve); got "
                        f"{type(doc).__name__}. {FIX}")
    schedule = _schedule(doc, where)
    problems = [f"{where}: {key} is {type(doc.get(key)).__name__}, expected a list of job rows."
                for key in ("jobs", "reserve") if not isinstance(doc.get(key), list)]
    if problems:
        raise RaceError(*problems, FIX)
    looks = schedule.looks
    first, cap = looks[0], looks[-1]
    found: list[tuple[str, tuple]] = []
    hint = [0]
    for key, seeds, what in (("jobs", range(cap), f"this race (it runs seeds 0 to {cap - 1})"),
                             ("reserve", range(first, cap), f"a later look (the first look runs seeds 0 to "
                                                            f"{first - 1}, the cap is {cap} seeds)")):
        for i, row in enumerate(doc[key]):
            got, ident = _check_row(row, f"{where} {key}[{i}]", seeds, what, hint)
            problems += got
            if ident is not None:
                found.append((f"{key}[{i}]", ident))
    if not problems:
        problems += _check_whole(found, doc, looks, where)
    if problems:
        said = problems[:MAX_SAID] + ([f"... and {len(problems) - MAX_SAID} more."] if len(problems) > MAX_SAID else [])
        raise RaceError(*said, FIX)
    return RacePlan(doc=doc, schedule=schedule, jobs=list(doc["jobs"]), reserve=list(doc["reserve"]))


def _check_whole(found: list[tuple[str, tuple]], doc: dict, looks, where: str) -> list[str]:
    """Across rows: ids and (regime, seed) once each; every regime holds seeds 0 .. cap-1, the first ones written."""
    problems = []
    by_id: dict[str, str] = {}
    by_job: dict[tuple, str] = {}
    seeds: dict[str, dict[str, set]] = {}
    for at, (job_id, regime, seed) in found:
        if job_id in by_id:
            problems.append(f"{where}: {at} and {by_id[job_id]} have the same job_id {job_id!r}.")
        by_id.setdefault(job_id, at)
        if (regime, seed) in by_job:
            problems.append(f"{where}: {at} ({job_id}) is the same job as {by_job[(regime, seed)]} (the same overrides "
                            f"and seed {seed}); a race runs each job once.")
        by_job.setdefault((regime, seed), f"{at} ({job_id})")
        seeds.setdefault(regime, {"jobs": set(), "reserve": set()})[at.partition("[")[0]].add(seed)
    cap = looks[-1]
    for regime, got in seeds.items():
        every = got["jobs"] | got["reserve"]
        missing = sorted(set(range(cap)) - every)
        if missing:
            problems.append(f"{where}: the regime '{regime[:120]}' lacks the row(s) of seed(s) "
                            f"{', '.join(map(str, missing[:6]))}: a race plans every regime to {cap} seeds, written "
                            "(jobs) or waiting (reserve).")
        written = sorted(got["jobs"])
        if written != list(range(len(written))) or len(written) not in looks:
            problems.append(f"{where}: the regime '{regime[:120]}' lists seeds {written[:8]} in jobs; a look writes "
                            f"the first seeds of a regime, as many as a look runs ({', '.join(map(str, looks))}).")
    return problems


# --- the race record -----------------------------------------------------------------------------


def _plan_document(sweep: Path) -> Any:
    from race_cli import folder
    from race_cli.io import read_json

    try:
        return read_json(folder.plan_json(sweep))
    except (OSError, ValueError) as exc:
        raise RaceError(f"{folder.plan_json(sweep)} is missing or unreadable ({exc}). Expected a sweep folder written "
                        "by race plan --out or race run.") from None


def pinned(sweep: Path):
    """The stats/race.Schedule race.json pins, or None when the race has not started (no race.json)."""
    from race_cli.io import read_json
    from race_cli.stats.race import Schedule

    path = record_file(sweep)
    if not path.exists() and not path.is_symlink():
        return None
    try:
        data = read_json(path, limit=2**20)
        return Schedule.from_json(data.get("race") if isinstance(data, dict) else data)
    except (OSError, ValueError, RaceError) as exc:
        detail = " ".join(exc.problems) if isinstance(exc, RaceError) else str(exc)
        raise RaceError(f"{path}: not the race record race run pins ({detail}). It fixes the race's schedule at its "
                        "first job; without it the race cannot be checked. Restore it, or replan the sweep into a "
                        "new folder (race plan --out DIR).") from None


def _words(schedule) -> str:
    d = schedule.to_json()
    return ", ".join(f"{k} {d[k]}" for k in ("looks", "alpha", "margin", "spending"))


def check_pinned(sweep: Path, schedule) -> None:
    """RaceError when race.json pins another race record than `schedule` (plan.json's), naming both."""
    fixed = pinned(sweep)
    if fixed is None or fixed.to_json() == schedule.to_json():
        return
    from race_cli import folder

    diff = [k for k in ("looks", "alpha", "margin", "spending") if fixed.to_json()[k] != schedule.to_json()[k]]
    raise RaceError(f"{folder.plan_json(sweep)}: the race record says {_words(schedule)}, but this race started with "
                    f"{_words(fixed)} ({record_file(sweep).name}); {', '.join(diff)} changed after the first job. A race's "
                    "schedule, α and margin are fixed before its first job, so its decisions cannot be replayed under "
                    "others.", "Restore plan.json's \"race\" to the values it started with, or replan the sweep into "
                    "a new folder (race plan --out DIR) to race under the new ones.")


def read_race(sweep: Path, *, rows: bool = True) -> RacePlan | None:
    """The checked race of a sweep folder, or None for a fixed design (plan.json a list of rows, or a one-look
    race). `rows` False (race report) checks the record only: the report acts on no row. RaceError otherwise."""
    from race_cli import folder

    try:
        doc = _plan_document(sweep)
    except RaceError:
        if rows or pinned(sweep) is not None:
            raise
        return None  # the report lists the jobs without it (docs/security.md)
    where = str(folder.plan_json(sweep))
    if not isinstance(doc, dict) or "race" not in doc:
        if pinned(sweep) is not None:
            raise RaceError(f"{where}: no race record, but this sweep raced ({record_file(sweep)} pins one). {FIX}")
        return None
    schedule = _schedule(doc, where)
    check_pinned(sweep, schedule)  # before the rows: an edited record is named as such
    if rows:
        plan = check_document(doc, where)
    else:
        listed = doc.get("jobs") if isinstance(doc.get("jobs"), list) else []
        plan = RacePlan(doc=doc, schedule=schedule, jobs=listed, reserve=[])
    return plan if len(plan.schedule.looks) > 1 else None


def pin_record(sweep: Path, schedule) -> bool:
    """Write race.json with `schedule` when the race has none yet (race run, under the sweep lock, before a job
    runs); True when written. An existing record is never rewritten (check_pinned compares with it)."""
    from race_cli.io import atomic_write_json

    if record_file(sweep).exists() or record_file(sweep).is_symlink():
        return False
    atomic_write_json(record_file(sweep), {"race": schedule.to_json()})
    return True


# --- the jobs a race reads -------------------------------------------------------------------------

# A done job's summary.json fields and where its config has them: a summary that says another run than the
# config it was trained from was relabelled (or the config was), and the race would count it elsewhere.
SUMMARY_LABELS = {"seed": ("seed",), "model": ("model", "name"), "budget_flops": ("budget", "flops"),
                  "group_size": ("grpo", "group_size"), "updates_per_batch": ("grpo", "updates_per_batch")}


def _value(config: Any, path: tuple) -> Any:
    for k in path:
        config = config.get(k) if isinstance(config, dict) else None
    return config


def _shown(v: Any) -> str:
    """A table value as the files hold it (numpy scalars as plain numbers)."""
    return repr(v.item() if hasattr(v, "item") else v)


def _alike(a: Any, b: Any) -> bool:
    try:
        return a == b or float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def race_jobs(data, plan: RacePlan, sweep: Path):
    """The report's SweepData (report/table.read_sweeps of this one sweep) cut to the jobs the race may read:
    the ones plan.json lists (a folder it does not list was never asked for by the race), less unfinished ones
    whose condition cannot be read (a damaged job of a later look: placed nowhere, it would make a phantom
    condition that holds every look back). A done job whose files no longer say the run its row and config
    name (summary.json deleted, unreadable, or relabelled) is refused, named: dropped, it would undo the
    decisions made with it."""
    import dataclasses

    from race_cli import folder
    from race_cli.report.table import CONDITION_COLS

    jobs = data.jobs
    rows = {r["job_id"]: r for r in plan.doc.get("jobs", []) if isinstance(r, dict) and isinstance(r.get("job_id"), str)}
    listed = jobs["job_id"].isin(list(rows)).to_numpy()
    placed = jobs[CONDITION_COLS].notna().all(axis=1).to_numpy()
    done = (jobs["state"] == "done").to_numpy()
    problems = []
    for i in [i for i in range(len(jobs)) if listed[i] and done[i]]:
        job_id = jobs["job_id"].iat[i]
        where = folder.job_dir(sweep, job_id)
        if not bool(jobs["readable"].iat[i]):
            problems.append(f"{where}: status.json says done, but {jobs['problem'].iat[i]}.")
            continue
        config = folder.job_config_data(where)
        wrong = [f"{k} {_shown(jobs[k].iat[i])} (its config: {_value(config, p)!r})" for k, p in SUMMARY_LABELS.items()
                 if k in jobs and _value(config, p) is not None and not _alike(jobs[k].iat[i], _value(config, p))]
        row_seed = rows[job_id].get("seed")
        if isinstance(row_seed, int) and "seed" in jobs and not _alike(jobs["seed"].iat[i], row_seed):
            wrong.append(f"seed {_shown(jobs['seed'].iat[i])} (plan.json: {row_seed})")
        if wrong:
            problems.append(f"{where}: summary.json says {'; '.join(dict.fromkeys(wrong))}.")
    if problems:
        said = problems[:MAX_SAID] + ([f"... and {len(problems) - MAX_SAID} more."] if len(problems) > MAX_SAID else [])
        raise RaceError(*said, "A race's decisions are replayed from its done jobs, so these would undo or change "
                        "decisions already reached. Restore the files from a copy, or delete the job's status.json "
                        "so that race run runs it again (race run --sweep-dir DIR).")
    keep = listed & (done | placed)
    return dataclasses.replace(data, jobs=jobs[keep].reset_index(drop=True))
