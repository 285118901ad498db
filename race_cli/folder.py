"""The sweep folder's layout (docs/files.md), and the sweep's identity: every path race writes under
runs/<sweep>/ is spelled here and nowhere else, so plan, job, pool and report cannot disagree.

    runs/<sweep>/multirun.yaml, plan.csv, plan.json       multirun_yaml(sweep), plan_csv(sweep), plan_json(sweep)
    runs/<sweep>/jobs/<job_id>/                           job_dir(sweep, job_id)
        .hydra/config.yaml, .hydra/overrides.yaml         job_config(job), job_overrides(job)
        metrics.jsonl, ledger.json, summary.json, log.txt metrics_file(job), ledger_file, summary_file, log_file
    runs/<sweep>/report/                                  report_dir(sweep)
    runs/<sweep>/start-evals/<key>.json                   start_eval_file(sweep, key): one start evaluation per
                                                          (starting weights, evaluation settings), shared by jobs

The sweep's identity: `plan_hash` names a plan by its jobs, `default_sweep_dir` is where `race run`
puts it, `read_plan_rows` reads plan.json back, checking every id. Files that one module alone
reads and writes keep their names there (status.json: race_cli/status.py; the locks: lock.py;
checkpoint/: engine/checkpoint.py). No torch, nothing above config/ imported.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from race_cli.errors import RaceError
from race_cli.io import read_json


# --- paths ------------------------------------------------------------------------------------------


def plan_json(sweep_dir: str | Path) -> Path:
    """Every job with its planned ledger, a list of rows (race plan); for a race {"jobs": rows written,
    "race": schedule, "reserve": rows of later looks} (plan/race_plan.py)."""
    return Path(sweep_dir) / "plan.json"


def plan_csv(sweep_dir: str | Path) -> Path:
    """The same rows as plan.json, as CSV."""
    return Path(sweep_dir) / "plan.csv"


def multirun_yaml(sweep_dir: str | Path) -> Path:
    """The sweep's overrides as typed, its grid, axes and budgets."""
    return Path(sweep_dir) / "multirun.yaml"


def is_sweep(path: str | Path) -> bool:
    """A folder race plan wrote: it holds plan.json."""
    return plan_json(path).is_file()


def jobs_dir(sweep_dir: str | Path) -> Path:
    """The folder holding one folder per job."""
    return Path(sweep_dir) / "jobs"


def job_dir(sweep_dir: str | Path, job_id: str) -> Path:
    """runs/<sweep>/jobs/<job_id>."""
    return jobs_dir(sweep_dir) / job_id


def hydra_dir(job: str | Path) -> Path:
    """A job folder's .hydra/ (its composed config and overrides, Hydra's layout)."""
    return Path(job) / ".hydra"


def job_config(job: str | Path) -> Path:
    """The fully composed config of a job (race plan / race train --out write it)."""
    return hydra_dir(job) / "config.yaml"


def job_overrides(job: str | Path) -> Path:
    """The job's concrete overrides, a YAML list."""
    return hydra_dir(job) / "overrides.yaml"


def job_configs(sweep_dir: str | Path) -> list[Path]:
    """Every job's config.yaml in a sweep, sorted by job id."""
    return sorted(jobs_dir(sweep_dir).glob("*/.hydra/config.yaml"))


def metrics_file(job: str | Path) -> Path:
    return Path(job) / "metrics.jsonl"


def ledger_file(job: str | Path) -> Path:
    return Path(job) / "ledger.json"


def summary_file(job: str | Path) -> Path:
    return Path(job) / "summary.json"


def log_file(job: str | Path) -> Path:
    return Path(job) / "log.txt"


def more_eval_file(job: str | Path) -> Path:
    """jobs/<id>/eval-more.json: the finished policy scored on more items (engine/reeval.py writes it, the report
    reads it); summary.json is never rewritten for it."""
    return Path(job) / "eval-more.json"


def report_dir(sweep_dir: str | Path) -> Path:
    """Where `race report` writes by default."""
    return Path(sweep_dir) / "report"


def start_evals_dir(sweep_dir: str | Path) -> Path:
    """The start evaluations shared by the sweep's jobs (engine/job.py `start_evaluation`)."""
    return Path(sweep_dir) / "start-evals"


def start_eval_file(sweep_dir: str | Path, key: str) -> Path:
    """runs/<sweep>/start-evals/<key>.json: the iteration-0 evaluation of one (starting weights, evaluation
    settings), computed by the first job that needs it and read by every other (its lock: <key>.json.lock)."""
    if not key or not all(ch in "0123456789abcdef" for ch in key):
        raise RaceError(f"start evaluation key {key!r} is not a hex digest")
    return start_evals_dir(sweep_dir) / f"{key}.json"


def sweep_of(job: str | Path) -> Path | None:
    """The sweep folder holding job folder `job` (runs/<sweep>/jobs/<job_id>), or None for a job trained
    on its own (race train --out)."""
    job = Path(job).resolve()
    if job.parent.name == jobs_dir("").name and is_sweep(job.parent.parent):
        return job.parent.parent
    return None


# --- identity ---------------------------------------------------------------------------------------


def plan_hash(plan) -> str:
    """8 hex digits naming the plan: sha1 over each job's id and concrete overrides, in order (a race's
    later looks and its schedule included)."""
    ident: Any = [[j.job_id, list(j.overrides)] for j in plan.jobs]
    race = getattr(plan, "race", None)
    if race is not None:  # a race: its schedule and every job to the cap (a fixed design's name is unchanged)
        ident = [ident + [[j.job_id, list(j.overrides)] for j in plan.reserve], race.to_json()]
    return hashlib.sha1(json.dumps(ident).encode()).hexdigest()[:8]


def default_sweep_dir(plan, runs_root: Path = Path("runs")) -> Path:
    """runs/<grid name>-<plan hash>: the same overrides give the same folder, so a rerun resumes."""
    return Path(runs_root) / f"{plan.grid.get('name') or 'sweep'}-{plan_hash(plan)}"


def read_plan_rows(sweep_dir: Path) -> dict[str, dict]:
    """plan.json as job_id -> row, checking every id (the rule it was written with: nothing can
    name a folder outside jobs/) and that every job folder is there."""
    from race_cli.config.sweep import check_job_id

    where = f"{sweep_dir}/plan.json"
    try:
        rows = read_json(plan_json(sweep_dir))
        if isinstance(rows, dict) and "race" in rows:  # a raced sweep: the jobs written so far (plan/race_plan.py)
            rows = rows.get("jobs")
        if not isinstance(rows, list) or not all(isinstance(r, dict) and "job_id" in r for r in rows):
            raise ValueError("expected a list of job rows, each with a job_id")
    except (OSError, ValueError) as exc:
        raise RaceError(f"{where} is missing or unreadable ({exc}). Expected a sweep folder "
                        "written by race plan --out or race run; give the overrides instead to plan a new one.")
    by_id: dict[str, dict] = {}
    for r in rows:
        job_id = check_job_id(r["job_id"], where)
        if job_id in by_id:
            raise RaceError(f"{where} lists job {job_id!r} twice. The file was edited or is damaged: "
                            "replan the sweep into a new folder (race plan --out DIR).")
        by_id[job_id] = r
    refuse_linked_jobs(sweep_dir, by_id)
    for j in by_id:
        refuse_links_in(job_dir(sweep_dir, j))
    missing = [j for j in by_id if not job_config(job_dir(sweep_dir, j)).is_file()]
    if missing:
        raise RaceError(f"{len(missing)} job folder(s) of {sweep_dir} lack .hydra/config.yaml (e.g. {missing[0]}). "
                        "The folder is damaged: replan it into a new folder (race plan --out).")
    return by_id


def refuse_linked_jobs(sweep_dir: str | Path, job_ids=None) -> None:
    """RaceError when the sweep's jobs/ folder, or one job folder in it, is a symbolic link. race writes
    job folders itself, so a link was planted: `race run` would write through it and `race report` /
    `race validate` would rank a job from outside the sweep. job_ids: the jobs to check (plan.json's);
    None checks every entry of jobs/. Links above the sweep folder are the user's own and are followed."""
    jobs = jobs_dir(sweep_dir)
    if jobs.is_symlink():
        linked = jobs
    else:
        names = job_ids if job_ids is not None else (sorted(os.listdir(jobs)) if jobs.is_dir() else [])
        linked = next((job_dir(sweep_dir, j) for j in names if job_dir(sweep_dir, j).is_symlink()), None)
    if linked is not None:
        raise RaceError(f"{linked} is a symbolic link: race writes job folders itself and never follows links out "
                        "of a sweep (docs/security.md). Remove the link (copy the folder in if the job belongs "
                        "to this sweep), or replan the sweep into a new folder (race plan --out DIR).")


MAX_JOB_ENTRIES = 100_000  # files and folders in one job folder; race writes a few dozen


def refuse_links_in(job: str | Path) -> None:
    """RaceError when anything inside a job folder is a symbolic link (or the folder holds an
    absurd number of entries): race writes every file there itself, so a link was planted, and
    writing the job's log, metrics or checkpoint through it would leave the sweep (docs/security.md)."""
    job = Path(job)
    if not job.is_dir() or job.is_symlink():
        return  # a missing folder is created; a linked job folder is refused by read_plan_rows
    seen = 0
    for root, dirs, files in os.walk(job):  # os.walk does not descend into links to folders
        for name in dirs + files:
            seen += 1
            path = Path(root) / name
            if path.is_symlink():
                raise RaceError(f"{path} is a symbolic link: race writes job folders itself and never reads or writes "
                                "through links in a sweep (docs/security.md). Remove the link, or replan the sweep "
                                "into a new folder (race plan --out DIR).")
        if Path(root) == job:  # wandb keeps its own `latest-run` link inside wandb/; the folder itself is checked
            dirs[:] = [d for d in dirs if d != "wandb"]
        if seen > MAX_JOB_ENTRIES:
            raise RaceError(f"{job} holds more than {MAX_JOB_ENTRIES} files: not a job folder race wrote. Replan "
                            "the sweep into a new folder (race plan --out DIR).")


def job_config_section(job_or_config: str | Path, key: str) -> Any:
    """`job_config_data(job)[key]` (None when absent or unreadable) without parsing the whole config: the
    block of lines from `key:` at the start of a line to the next top-level line is parsed alone, as race
    plan writes configs (block style, one document). Anything else (the key twice, a flow-style document,
    an alias defined elsewhere, more than one document) parses the whole file instead, so the answer is
    always the whole parse's. The report reads one model block per model size this way (much faster than the whole file)."""

    from race_cli.io import load_yaml, read_bounded

    path = Path(job_or_config)
    path = path if path.name == "config.yaml" else job_config(path)
    try:
        lines = read_bounded(path, 4 * 2**20).decode("utf-8").split("\n")
    except Exception:  # noqa: BLE001 - as job_config_data: the job's own failure, later
        return None
    head = f"{key}:"
    starts = [i for i, line in enumerate(lines) if line == head or line.startswith(head + " ")]
    if len(starts) == 1 and lines[starts[0]] == head and not any(x.startswith(("%", "---", "...", "{"))
                                                                 for x in lines):
        i = starts[0] + 1
        while i < len(lines) and (not lines[i] or lines[i][0] in " -#"):
            i += 1
        try:
            block = load_yaml("\n".join(lines[starts[0]:i]))
            if isinstance(block, dict) and list(block) == [key]:
                return block[key]
        except Exception:  # noqa: BLE001 - not parseable alone (an alias, say): the whole parse decides
            pass
    return job_config_data(path).get(key)


def job_config_data(job_or_config: str | Path) -> dict:
    """A job's .hydra/config.yaml as plain data for a look at it (the zoo entries to build, whether a
    model is hub-sized), or {} when it is missing, a link, a device, too large or not YAML: that
    job then fails with its own message when `race train` loads it (config/compose.py), and the
    sweep's other jobs are not held up. Interpolations are left as text, never resolved."""

    from race_cli.io import load_yaml, read_bounded

    path = Path(job_or_config)
    path = path if path.name == "config.yaml" else job_config(path)
    try:
        data = load_yaml(read_bounded(path, 4 * 2**20).decode("utf-8"))
    except Exception:  # noqa: BLE001 - any unreadable config is the job's own failure, later
        return {}
    return data if isinstance(data, dict) else {}
