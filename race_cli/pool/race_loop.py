"""`race run`'s race: after a look's jobs have run, decide from the sweep folder and write the next look's jobs.

    plan.json  {"jobs": [rows written], "race": schedule, "reserve": [rows of later seeds]}

A look opens by moving reserve rows into "jobs" and writing their job folders (plan/race_plan.py says
why the later seeds wait in the reserve). Which ones: the report's own decisions, as values
(report/race.race_states -> needed_seeds), computed from the folder alone. Nothing here keeps state
of its own, so a race killed at any point and rerun recomputes the same decisions from the same jobs:

- a job folder is built under <sweep>/.race-look.tmp/ and renamed into jobs/;
- plan.json is rewritten atomically after the folders, so it never lists a folder that is not there;
  a folder written but not yet listed was never run (the pool runs only listed jobs): the rerun removes
  it before deciding (the report reads every folder) and its decision writes it again.
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
from race_cli.io import atomic_write_json, read_json

TMP = ".race-look.tmp"  # under the sweep folder: job folders being written, renamed into jobs/ when whole


def read_plan_document(sweep: Path) -> Any:
    try:
        return read_json(folder.plan_json(sweep))
    except (OSError, ValueError) as exc:
        raise RaceError(f"{sweep}/plan.json is missing or unreadable ({exc}). Expected a sweep folder written "
                        "by race plan --out or race run.") from None


def sweep_schedule(sweep: Path):
    """The stats/race.Schedule of a raced sweep, None for a fixed design (plan.json without "race")."""
    doc = read_plan_document(sweep)
    if not isinstance(doc, dict) or "race" not in doc:
        return None
    from race_cli.stats.race import Schedule

    return Schedule.from_json(doc["race"])


def regime_of(row: dict) -> str:
    """A plan row's overrides without its seed: the jobs of one regime share it."""
    return " ".join(t for t in str(row.get("overrides", "")).split(" ") if t.lstrip("+").partition("=")[0] != "seed")


# --- deciding ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Look:
    """What the sweep folder decides now: the report's race states and the reserve jobs they open."""

    states: list  # stats/race.RaceState per condition and target
    open: list[str]  # reserve job ids the next look needs, in plan order


def decide(sweep: Path, schedule, doc: Any | None = None) -> Look:
    """The race states of the sweep's jobs and the reserve jobs they ask for (a pure function of the folder)."""
    from race_cli.report.race import needed_seeds, race_states
    from race_cli.report.table import read_sweeps

    doc = read_plan_document(sweep) if doc is None else doc
    data = read_sweeps([sweep])
    states = race_states(data, schedule)
    need = needed_seeds(states)
    return Look(states=states, open=reserve_to_open(doc, data.jobs, need))


def _same(a: Any, b: Any) -> bool:
    if a == b:
        return True
    try:
        return float(a) == float(b)
    except (TypeError, ValueError):
        return str(a) == str(b)


def reserve_to_open(doc: dict, jobs, need: dict[tuple, int]) -> list[str]:
    """Reserve job ids with seed < the count needed_seeds gives their regime. `jobs`: the report's job table
    (report/table.SweepData.jobs), which names each job's condition and regime columns as the keys do."""
    rows = {r["job_id"]: r for r in doc.get("jobs", [])}
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
    return [r["job_id"] for r in doc.get("reserve", [])
            if regime_of(r) in wanted and int(r["seed"]) < wanted[regime_of(r)]]


# --- opening a look ------------------------------------------------------------------------------


def open_jobs(sweep: Path, job_ids: list[str], doc: dict | None = None) -> list[str]:
    """Write the job folders of reserve jobs `job_ids` and list them in plan.json; returns the ids opened.
    Call under the sweep lock. Each folder is its regime's first written job's config with the seed set."""
    import yaml

    from race_cli.config.sweep import check_job_id
    from race_cli.plan.build import _write_csv
    from race_cli.status import pending_status, write_status

    doc = read_plan_document(sweep) if doc is None else doc
    reserve = {r["job_id"]: r for r in doc.get("reserve", [])}
    missing = [j for j in job_ids if j not in reserve]
    if missing:
        raise RaceError(f"{sweep}/plan.json: job(s) {', '.join(missing[:3])} are not in the race's reserve. The "
                        "file was edited or is damaged: replan the sweep into a new folder.")
    if not job_ids:
        return []
    siblings: dict[str, str] = {}
    for r in doc["jobs"]:
        siblings.setdefault(regime_of(r), r["job_id"])
    tmp_root = Path(sweep) / TMP
    shutil.rmtree(tmp_root, ignore_errors=True)  # left by a kill mid-write: never listed, never run
    tmp_root.mkdir()
    dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
    created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        for job_id in job_ids:
            row = reserve[job_id]
            target = folder.job_dir(sweep, check_job_id(job_id, f"{sweep}/plan.json"))
            sib = siblings.get(regime_of(row))
            if sib is None:
                raise RaceError(f"{sweep}/plan.json: reserve job {job_id} has no written job of its regime to "
                                "take its config from. Replan the sweep into a new folder.")
            config = folder.job_config_data(folder.job_dir(sweep, sib))
            overrides = yaml.safe_load(folder.job_overrides(folder.job_dir(sweep, sib)).read_text(encoding="utf-8"))
            if not config or not isinstance(overrides, list):
                raise RaceError(f"{folder.job_dir(sweep, sib)}: unreadable .hydra/ files; cannot write job {job_id}.")
            seed = int(row["seed"])
            config = {**config, "seed": seed}
            overrides = [o if str(o).lstrip("+").partition("=")[0] != "seed"
                         else f"{str(o).partition('=')[0]}={seed}" for o in overrides]
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


def drop_unlisted(sweep: Path, doc: dict) -> list[str]:
    """Remove the folders of reserve jobs that plan.json does not list yet (a kill came between their
    rename and plan.json): never run, so nothing is lost, and the report reads only jobs the race opened.
    Call under the sweep lock."""
    gone = []
    for r in doc.get("reserve", []):
        d = folder.job_dir(sweep, r["job_id"])
        if d.is_dir() and not d.is_symlink():
            shutil.rmtree(d)
            gone.append(r["job_id"])
    return gone


def next_look(sweep: Path, schedule, say: Callable[[str], None] = print) -> Look:
    """Decide from the folder and open what the decision asks for (under the sweep lock)."""
    from race_cli.lock import SweepLock

    with SweepLock(sweep, say=say):
        doc = read_plan_document(sweep)
        drop_unlisted(sweep, doc)
        look = decide(sweep, schedule, doc)
        open_jobs(sweep, look.open, doc)
    if look.open:
        open_states = [s for s in look.states if s.state == "continue"]
        seeds = sorted({s.next_seeds for s in open_states if s.next_seeds})
        say(f"race: {len(look.open)} more job(s) ({' / '.join(map(str, seeds)) or '?'} seeds per active regime) "
            f"for the {len(open_states)} call(s) still open")
    return look


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
