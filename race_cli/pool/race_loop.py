"""`race run`'s race: after a look's jobs have run, decide from the sweep folder and write the next look's jobs.

    plan.json  {"jobs": [rows written], "race": schedule, "reserve": [rows of later seeds]}

A look opens by moving reserve rows into "jobs" and writing their job folders (plan/race_plan.py says
why the later seeds wait in the reserve). Which ones: the report's own decisions, as values
(report/race.race_states -> needed_seeds), computed from the folder alone. Nothing here keeps state
of its own, so a race killed at any point and rerun recomputes the same decisions from the same jobs:

- a job folder is built under <sweep>/.race-look.tmp/ and renamed into jobs/;
- plan.json is rewritten atomically after the folders, so it never lists a folder that is not there;
  a folder written but not yet listed was never run (the pool runs only listed jobs): the rerun removes
  it before deciding and its decision writes it again.
plan.json is data (docs/security.md): every row and the race record are checked (race_cli/plan_file.py) before
anything here deletes, writes or decides; only folders in jobs/ named as a reserve row are ever removed (an
allow-list, never a path made from a row); a look's new jobs copy the config of their regime's first-look jobs
only when those agree with each other and with their rows; the decision reads only the jobs plan.json lists,
and refuses done jobs whose files were deleted or relabelled. The sweep lock is held for the whole race
(pool/run.py), so no other run can start between two looks.
No torch; pandas only through the report's reader.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.io import atomic_write_json
from race_cli.plan_file import FIX, RacePlan, read_race, regime_of
from race_cli.regime import is_seed, regime_key

TMP = ".race-look.tmp"  # under the sweep folder: job folders being written, renamed into jobs/ when whole


def sweep_schedule(sweep: Path):
    """The stats/race.Schedule of a raced sweep, None for a fixed design; plan.json checked (race_cli/plan_file.py)."""
    plan = read_race(sweep)
    return plan.schedule if plan is not None else None


# --- deciding ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """What the sweep folder decides now: the report's race states and the reserve jobs they open."""

    states: list  # stats/race.RaceState per condition and target
    open: list[str]  # reserve job ids the next look needs, in plan order
    evaluate: tuple[str, ...] = ()  # done job ids an evaluation look needs scored on the schedule's eval_items


def decide(sweep: Path, schedule=None, plan: RacePlan | None = None) -> Look:
    """The race states of the jobs plan.json lists and the reserve jobs they ask for (a pure function of the
    folder). RaceError when a done job's files no longer say what it ran (plan_file.race_jobs)."""
    from race_cli.plan_file import race_jobs
    from race_cli.report.race import needed_evaluations, needed_seeds, race_states
    from race_cli.report.table import read_sweeps

    plan = read_race(sweep) if plan is None else plan
    if plan is None:
        raise RaceError(f"{folder.plan_json(sweep)}: a fixed design (no race record); there is no race to decide.")
    data = race_jobs(read_sweeps([sweep]), plan, sweep)
    states = race_states(data, plan.schedule)
    need = needed_seeds(states)
    return Look(states=states, open=reserve_to_open(plan, data.jobs, need),
                evaluate=to_evaluate(data.jobs, needed_evaluations(states)))


def to_evaluate(jobs, need: dict[tuple, tuple[int, int]]) -> tuple[str, ...]:
    """Done jobs an evaluation look needs (their regime key in `need`, seed < its count) whose eval-more.json
    does not hold exactly the items asked (report/table: eval_more_items)."""
    out = []
    for key, (seeds, items) in need.items():
        match = [True] * len(jobs)
        for col, value in key:
            match = [m and col in jobs.columns and _same(v, value) for m, v in zip(match, jobs[col].tolist())]
        have = jobs["eval_more_items"].tolist() if "eval_more_items" in jobs.columns else [None] * len(jobs)
        for job_id, m, seed, state, n in zip(jobs["job_id"].tolist(), match, jobs["seed"].tolist(),
                                             jobs["state"].tolist(), have):
            if m and state == "done" and seed is not None and 0 <= int(seed) < seeds and not _same(n, items):
                out.append(str(job_id))
    return tuple(dict.fromkeys(sorted(out)))


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def reserve_to_open(plan: RacePlan, jobs, need: dict[tuple, int]) -> list[str]:
    """Reserve job ids with seed < the count needed_seeds gives their regime. `jobs`: the report's job table
    (report/table.SweepData.jobs), which names each job's condition and regime columns as the keys do."""
    rows = {r["job_id"]: r for r in plan.jobs}
    wanted: dict[str, int] = {}  # regime (overrides without seed) -> seeds needed
    for key, n in need.items():
        match = [True] * len(jobs)
        for col, value in key:
            if col not in jobs.columns:
                raise RaceError(f"the race asks for column {col!r}, which the report's job table lacks "
                                f"(columns: {', '.join(map(str, jobs.columns))}).")
            match = [m and _same(v, value) for m, v in zip(match, jobs[col].tolist())]
        for job_id, m in zip(jobs["job_id"].tolist(), match):
            if m and job_id in rows:
                reg = regime_of(rows[job_id])
                wanted[reg] = max(wanted.get(reg, 0), int(n))
    return [r["job_id"] for r in plan.reserve if regime_of(r) in wanted and r["seed"] < wanted[regime_of(r)]]


# --- opening a look ------------------------------------------------------------------------------


def _differences(a: Any, b: Any, where: str = "") -> list[str]:
    """Dotted keys where two configs differ (the first few)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            out += _differences(a.get(k), b.get(k), f"{where}.{k}" if where else str(k))
            if len(out) >= 3:
                break
        return out
    return [] if a == b else [where or "(the whole config)"]


ROW_FIELDS = {"model": ("model", "name"), "group_size": ("grpo", "group_size"),
              "updates_per_batch": ("grpo", "updates_per_batch"), "prompts_per_iter": ("grpo", "prompts_per_iter"),
              "budget_flops": ("budget", "flops"), "seed": ("seed",)}  # a plan row's field -> where its config has it


def _config_value(config: dict, path: tuple) -> Any:
    for k in path:
        config = config.get(k) if isinstance(config, dict) else None
    return config


def regime_source(sweep: Path, plan: RacePlan, regime: str) -> tuple[dict, list]:
    """(config, overrides) a later seed of `regime` copies: its first-look jobs' (seeds below looks[0]), after
    checking that they agree with each other up to the seed and with their plan rows (RaceError naming the file
    otherwise: an edited config would reach every later seed)."""
    import yaml

    first = plan.schedule.looks[0]
    rows = sorted((r for r in plan.jobs if regime_of(r) == regime and r["seed"] < first), key=lambda r: r["seed"])
    if not rows:
        raise RaceError(f"{folder.plan_json(sweep)}: no first-look job of the regime '{regime[:120]}' to take a later "
                        f"seed's config from. {FIX}")
    got = []
    for r in rows:
        d = folder.job_dir(sweep, r["job_id"])
        config = folder.job_config_data(d)
        try:
            overrides = yaml.safe_load(folder.job_overrides(d).read_text(encoding="utf-8"))
        except (OSError, ValueError, yaml.YAMLError):
            overrides = None
        if not config or not isinstance(overrides, list):
            raise RaceError(f"{d}: unreadable .hydra/ files; a later seed of its regime copies them. Restore them, "
                            "or replan the sweep into a new folder (race plan --out DIR).")
        wrong = [f"{k} {_config_value(config, p)!r} (plan.json: {r[k]!r})" for k, p in ROW_FIELDS.items()
                 if k in r and not _same(_config_value(config, p), r[k])]
        if " ".join(map(str, overrides)) != r["overrides"]:  # as the row joins them (a value may hold a space)
            wrong.append(f"overrides {' '.join(map(str, overrides))[:120]!r} (plan.json: {r['overrides'][:120]!r})")
        if wrong:
            raise RaceError(f"{folder.job_config(d)}: the job's files say {'; '.join(wrong)}. A later seed copies its "
                            "regime's first-look config, so an edited one would reach every later seed. Restore "
                            "the files, or replan the sweep into a new folder (race plan --out DIR).")
        got.append((r, d, config, overrides))
    base_row, base_dir, base, base_over = got[0]
    for r, d, config, overrides in got[1:]:
        diff = _differences({**base, "seed": None}, {**config, "seed": None})
        same_over = regime_key(map(str, base_over)) == regime_key(map(str, overrides))
        if diff or not same_over:
            raise RaceError(f"{folder.job_config(base_dir)} and {folder.job_config(d)} differ beyond the seed "
                            f"({', '.join(diff) or 'overrides'}): the jobs of one regime share a config. A later seed "
                            "copies it, so an edited one would reach every later seed. Restore the file, or replan "
                            "the sweep into a new folder (race plan --out DIR).")
    return base, base_over


def open_jobs(sweep: Path, job_ids: list[str], plan: RacePlan | None = None) -> list[str]:
    """Write the job folders of reserve jobs `job_ids` and list them in plan.json; returns the ids opened.
    Call under the sweep lock. Each folder is its regime's first-look config (regime_source) with the seed set."""
    import yaml

    from race_cli.plan.build import _write_csv
    from race_cli.status import pending_status, write_status

    plan = read_race(sweep) if plan is None else plan
    if plan is None:
        raise RaceError(f"{folder.plan_json(sweep)}: a fixed design (no race record); no look to open.")
    doc = plan.doc
    reserve = {r["job_id"]: r for r in plan.reserve}
    missing = [j for j in job_ids if j not in reserve]
    if missing:
        raise RaceError(f"{sweep}/plan.json: job(s) {', '.join(missing[:3])} are not in the race's reserve. The "
                        "file was edited or is damaged: replan the sweep into a new folder.")
    if not job_ids:
        return []
    sources = {regime_of(reserve[j]): None for j in job_ids}
    for regime in sources:  # every copy checked before the first folder is written
        sources[regime] = regime_source(sweep, plan, regime)
    tmp_root = Path(sweep) / TMP
    shutil.rmtree(tmp_root, ignore_errors=True)  # left by a kill mid-write: never listed, never run
    tmp_root.mkdir()
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for job_id in job_ids:
            row = reserve[job_id]
            target = folder.job_dir(sweep, job_id)  # a checked id (race_cli/plan_file.py): one name inside jobs/
            if target.exists() or target.is_symlink():
                raise RaceError(f"{target}: something is already there where race writes the job folder of reserve "
                                f"job {job_id} (a file, a link, or a folder plan.json does not list). Remove it, "
                                "then rerun.")
            config, overrides = sources[regime_of(row)]
            seed = row["seed"]
            config = {**config, "seed": seed}
            overrides = [o if not is_seed(str(o)) else f"{str(o).partition('=')[0]}={seed}" for o in overrides]
            tmp = tmp_root / job_id
            folder.hydra_dir(tmp).mkdir(parents=True)
            folder.job_config(tmp).write_text(yaml.dump(config, Dumper=dumper, sort_keys=False), encoding="utf-8")
            folder.job_overrides(tmp).write_text(yaml.dump(overrides, Dumper=dumper), encoding="utf-8")
            write_status(tmp, pending_status(job_id, created))
            os.replace(tmp, target)
        opened = set(job_ids)
        doc = {**doc, "jobs": list(doc["jobs"]) + [reserve[j] for j in job_ids],
               "reserve": [r for r in doc["reserve"] if r["job_id"] not in opened]}
        atomic_write_json(folder.plan_json(sweep), doc)
        _write_csv(folder.plan_csv(sweep), doc["jobs"])
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return list(job_ids)


def drop_unlisted(sweep: Path, plan: RacePlan) -> list[str]:
    """Remove the folders of reserve jobs that plan.json does not list yet (a kill came between their
    rename and plan.json): never run, so nothing is lost. Only entries of jobs/ whose name is a reserve row's id
    (checked ids, race_cli/plan_file.py) are removed, and only real folders; a folder jobs/ holds that is neither
    listed nor reserved is refused, never removed. Call under the sweep lock."""
    listed = {r["job_id"] for r in plan.jobs}
    reserve = {r["job_id"] for r in plan.reserve}
    jobs = folder.jobs_dir(sweep)
    gone, foreign = [], []
    for name in sorted(os.listdir(jobs)) if jobs.is_dir() and not jobs.is_symlink() else []:
        path = jobs / name
        if name in listed or not (path.is_dir() or name in reserve):
            continue  # a listed job, or a stray file race neither reads nor writes
        if name in reserve and path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
            gone.append(name)
        elif name in reserve:
            raise RaceError(f"{path}: not a folder race wrote, where the job folder of reserve job {name} goes (a file "
                            "or a link). Nothing was removed. Remove it, then rerun.")
        else:
            foreign.append(name)
    if foreign:
        raise RaceError(f"{jobs}: {', '.join(foreign[:5])}{' ...' if len(foreign) > 5 else ''}: folder(s) that are no "
                        "job of this race (plan.json neither lists nor reserves them). The race reads only its own "
                        "jobs and removes only the reserve's; move these out of jobs/ (or replan the sweep into a "
                        "new folder), then rerun.")
    return gone


def next_look(sweep: Path, schedule=None, say: Callable[[str], None] = print) -> Look:
    """Decide from the folder and open what the decision asks for (under the sweep lock, re-entered: the
    whole race holds it, pool/run.py)."""
    from race_cli.lock import SweepLock

    with SweepLock(sweep, say=say, reenter=True):
        plan = read_race(sweep)
        if plan is None:
            raise RaceError(f"{folder.plan_json(sweep)}: no race record any more; the race cannot go on. {FIX}")
        drop_unlisted(sweep, plan)
        look = decide(sweep, plan.schedule, plan)
        if look.evaluate:  # an evaluation look: finished jobs scored on more items (no training), then decided
            look = _evaluate(sweep, plan, look, say)
        open_jobs(sweep, look.open, plan)
    if look.open:
        open_states = [s for s in look.states if s.state == "continue"]
        seeds = sorted({s.next_seeds for s in open_states if s.next_seeds})
        say(f"race: {len(look.open)} more job(s) ({' / '.join(map(str, seeds)) or '?'} seeds per active regime) "
            f"for the {len(open_states)} call(s) still open")
    return look


def _evaluate(sweep: Path, plan: RacePlan, look: Look, say: Callable[[str], None]) -> Look:
    """Run the re-evaluations the states ask for through the pool (pool/reeval.py), then decide again."""
    from race_cli.pool.reeval import reevaluate_sweep

    items = plan.schedule.eval_items
    say(f"race: evaluation look: {len(look.evaluate)} finished job(s) scored on {items} items per target "
        "(no training)")
    results = reevaluate_sweep(sweep, items, list(look.evaluate), say=say)
    failed = sorted(j for j, s in results.items() if s != "done")
    if failed:
        raise RaceError(f"race: {len(failed)} re-evaluation(s) did not finish ({', '.join(failed[:3])}; their log.txt "
                        "says why); the race waits at the evaluation look. Rerun the same command to retry them.")
    return decide(sweep, plan.schedule, plan)


def stuck(sweep: Path, look: Look) -> str | None:
    """Why a race whose listed jobs are all done still waits (a look opened nothing, yet a call is open), or
    None when it does not: the race would otherwise end short, with exit 0."""
    from race_cli.status import read_status

    waiting = [s for s in look.states if s.state == "continue"]
    if look.open or not waiting:
        return None
    listed = folder.read_plan_rows(sweep)
    if any(read_status(folder.job_dir(sweep, j)).get("state") != "done" for j in listed):
        return None  # failed or unfinished jobs: named by the run's end (exit 1)
    return (f"race: every job plan.json lists is done, yet {len(waiting)} call(s) still wait for jobs "
            f"({waiting[0].condition}: {waiting[0].reason}). plan.json and the job folders disagree: a row or a "
            f"job's files were removed or edited. {FIX}")


# --- the end ---------------------------------------------------------------------------------------


def end_lines(states: list, schedule) -> list[str]:
    """Per condition and target: its end state and the look it was decided at (looks counted from 0, as the
    state record's `look`)."""
    looks = " -> ".join(map(str, schedule.looks))
    out = [f"race (seeds per regime {looks}, familywise alpha {schedule.alpha:g}, margin ±{schedule.margin:g}):"]
    from race_cli.report.words import race_state

    for s in states:  # the report's own wording of each state (report/words.race_state)
        out.append(f"  {s.condition}: {race_state(s)}")
    return out
