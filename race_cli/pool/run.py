"""`race run`: plan the sweep (or reopen it), run every job not yet done, report.

    race run                                     # the embedded grid (grid=tiny) on CPU workers
    race run model=tiny-s grpo.group_size=4,8    # same overrides as race plan
    race run --sweep-dir runs/tiny-1a2b3c4d       # resume a sweep folder (race plan --out wrote it)
    race run --launcher slurm --partition gpu --time-min 240 --setup "module load cuda"

The same overrides always name the same folder, runs/<grid>-<8 hex of the plan's identity>,
so rerunning the command resumes: done jobs are skipped, interrupted ones resume from their
checkpoints, failed ones are left alone unless --retry-failed. A folder that holds a different
plan is refused. Exit code: 0 all done, 1 some job failed (named), 2 bad input, 128+signal
when stopped by Ctrl-C / SIGTERM.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from race_cli import folder
from race_cli import status as st
from race_cli.errors import RaceError

LAUNCHERS = ("local", "slurm")


# --- the command -------------------------------------------------------------------------------

MAX_WORKERS = 1024  # processes or GPUs on one machine; more is a typo (and would exhaust memory)
MAX_TIME_MIN = 60 * 24 * 30  # a month
MAX_MEM_GB = 65536  # 64 TB: beyond any node


@dataclass(frozen=True)
class RunOptions:
    """What `race run` was asked; cli.py builds it once, every step reads it from here (as report/build.py's
    ReportOptions for race report). The flags are those of `race run --help` (docs/commands.md)."""

    overrides: tuple[str, ...] = ()  # Hydra overrides, as race plan takes them (none: the embedded grid)
    sweep_dir: Path | None = None  # --sweep-dir: the folder to plan into or resume; None: runs/<grid>-<hash>
    workers: int | None = None  # --workers: CPU worker processes; None: one per core
    gpus_per_job: int = 1  # --gpus-per-job (SLURM: 0 runs CPU-only tasks)
    launcher: str = "local"  # --launcher: local (this machine) or slurm (a submitit array)
    retry_failed: bool = False  # --retry-failed: run failed jobs again
    yes: bool = False  # --yes: plan sweeps larger than max_jobs
    max_jobs: int = 512  # --max-jobs: refuse larger sweeps unless yes
    partition: str | None = None  # --partition: SLURM partition
    time_min: int = 60  # --time-min: SLURM minutes per task, then requeued
    array_parallelism: int | None = None  # --array-parallelism: most SLURM tasks running at once
    setup: tuple[str, ...] = ()  # --setup: shell lines before each SLURM task
    cpus_per_task: int | None = None  # --cpus-per-task: SLURM CPUs per task
    mem_gb: int | None = None  # --mem-gb: SLURM host memory per task
    wait: bool = True  # --wait/--no-wait: wait for the SLURM tasks
    allow_cpu: bool = False  # --allow-cpu: run hub-sized models on CPU workers
    race: bool = True  # False: --no-race, a new plan is a fixed design even where the grid races
    max_seeds: int | None = None  # --max-seeds: the race's cap for a new plan (plan/race_plan.py)
    grace_s: float = 10.0  # seconds a stopped job gets between SIGTERM and SIGKILL (no flag)
    live: bool | None = None  # the live progress table; None: when stdout is a terminal (no flag)
    report: bool = True  # end with the report's top (tests turn it off; no flag)
    runs_root: Path = Path("runs")  # where a new sweep folder goes when sweep_dir is None (no flag)

    def __post_init__(self) -> None:
        object.__setattr__(self, "overrides", tuple(self.overrides))
        object.__setattr__(self, "setup", tuple(self.setup))


@dataclass
class RunTiming:
    """The wall time of the pool's passes in one `race run` (a race runs a pass per look), filled by run_local
    and said at the end: the planned-vs-actual line, and the CPU rates kept for the next plan (plan/learned.py)."""

    line: str | None = None  # the last pass's planned-vs-actual line (wall_check_line); None: no job ran
    looks: int = 0  # passes that ran jobs
    jobs: int = 0  # jobs run over those passes
    actual_s: float = 0.0  # wall seconds of those passes
    planned_s: float | None = 0.0  # the plan's seconds for the same jobs on each pass's slots; None: one unknown
    where: str = ""  # the last pass's slots in words, e.g. "2 CPU worker(s), 1 thread(s) each"
    cpu_slots: int = 0  # the widest pass of CPU workers (0: GPU slots only), the rates' worker count

    def add_pass(self, planned: list, actual_s: float, slots: int, where: str) -> None:
        """Add one pass of the pool (a race's look): its jobs, its seconds and the plan's seconds for them."""
        from race_cli.cost.walltime import grid_seconds

        known = None if any(p is None for p in planned) else grid_seconds([float(p) for p in planned], slots)
        self.planned_s = None if known is None or self.planned_s is None else self.planned_s + known
        self.looks += 1
        self.jobs += len(planned)
        self.actual_s += actual_s
        self.where = where


def validate_args(o: RunOptions) -> None:
    """RaceError listing every value of `o` out of range (before anything is planned or run)."""
    problems = []
    if o.launcher not in LAUNCHERS:
        problems.append(f"--launcher {o.launcher!r}: expected one of {', '.join(LAUNCHERS)}.")
    if o.workers is not None and not 1 <= o.workers <= MAX_WORKERS:
        problems.append(f"--workers {o.workers}: expected 1 to {MAX_WORKERS} CPU worker processes.")
    if o.gpus_per_job > MAX_WORKERS:
        problems.append(f"--gpus-per-job {o.gpus_per_job}: expected at most {MAX_WORKERS}.")
    elif o.gpus_per_job < 0 or (o.launcher == "local" and o.gpus_per_job < 1):
        problems.append(f"--gpus-per-job {o.gpus_per_job}: expected at least 1 (0 is allowed with "
                        "--launcher slurm for CPU-only tasks).")
    if not 1 <= o.time_min <= MAX_TIME_MIN:
        problems.append(f"--time-min {o.time_min}: expected a SLURM time limit of 1 to {MAX_TIME_MIN} minutes.")
    if o.array_parallelism is not None and not 1 <= o.array_parallelism <= MAX_WORKERS * 100:
        problems.append(f"--array-parallelism {o.array_parallelism}: expected 1 to {MAX_WORKERS * 100} tasks at "
                        "a time.")
    if o.cpus_per_task is not None and not 1 <= o.cpus_per_task <= MAX_WORKERS:
        problems.append(f"--cpus-per-task {o.cpus_per_task}: expected 1 to {MAX_WORKERS}.")
    if o.max_jobs is not None and o.max_jobs < 1:
        problems.append(f"--max-jobs {o.max_jobs}: expected at least 1.")
    if o.grace_s < 0:
        problems.append(f"grace {o.grace_s} s: expected >= 0.")
    if o.mem_gb is not None and not 1 <= o.mem_gb <= MAX_MEM_GB:
        problems.append(f"--mem-gb {o.mem_gb}: expected 1 to {MAX_MEM_GB} GB of host memory per SLURM task.")
    if problems:
        raise RaceError(*problems)


def run_main(o: RunOptions, *, job_command: Callable[[Path], list[str]] | None = None,
             say: Callable[[str], None] = print) -> int:
    """Plan (or reopen) the sweep, run what is not done, print the outcome; returns the exit code.

    Raises RaceError (exit 2) on bad input before anything runs. See the module docstring. A raced sweep
    (plan.json "race") runs look after look until no call needs more seeds (pool/race_loop.py); `o.race` False
    (--no-race) and `o.max_seeds` (--max-seeds) shape a new plan as in race plan. `job_command` builds a job's
    command line (None: the real engine, pool/local.default_job_command; tests inject fake jobs).
    """
    from race_cli.pool.local import default_job_command

    own_jobs = job_command is None
    validate_args(o)
    job_command = job_command or default_job_command
    check: Callable[[list[dict]], None] | None = None
    gpu_mem = None  # bytes per GPU the jobs will run on (None: not known here, e.g. SLURM nodes)
    if o.launcher == "local":  # hub-sized models on CPU workers only when asked (--allow-cpu)
        from race_cli import machine
        from race_cli.pool.local import refuse_cpu_for_big_models

        gpus = machine.visible_gpus()
        check = lambda configs: refuse_cpu_for_big_models(configs, gpus=gpus, allow_cpu=o.allow_cpu)
        gpu_mem = machine.gpu_total_bytes() if gpus else None  # every job must fit it, before the first one runs

    from race_cli.plan.build import prepare_sweep

    sweep = prepare_sweep(list(o.overrides), o.sweep_dir, yes=o.yes, max_jobs=o.max_jobs, runs_root=o.runs_root,
                          say=say, check=check, race=o.race, max_seeds=o.max_seeds, gpu_mem=gpu_mem,
                          gpus_per_job=o.gpus_per_job)
    from race_cli.lock import SweepLock
    from race_cli.pool.race_loop import sweep_schedule

    schedule = sweep_schedule(sweep)  # None: a fixed design, one pass; plan.json checked (race_cli/plan_file.py)
    if schedule is None:
        return _run_passes(sweep, None, o, own_jobs, job_command, say)
    with SweepLock(sweep, say=say, reenter=True):  # a race holds the sweep from its first pass to its end
        from race_cli.plan_file import pin_record

        pin_record(sweep, schedule)  # the record is fixed before the race's first job (race_cli/plan_file.py)
        return _run_passes(sweep, schedule, o, own_jobs, job_command, say)


def _run_passes(sweep: Path, schedule, o: RunOptions, own_jobs: bool, job_command, say) -> int:
    """One pass of the pool for a fixed design; for a race, a pass per look until no call needs more seeds."""
    from race_cli.pool.race_loop import end_lines, next_look, stuck

    timing = RunTiming()
    look = None
    while True:  # one pass per look of a race
        rows = folder.read_plan_rows(sweep)
        if o.launcher == "slurm":
            from race_cli.pool.slurm import run_slurm

            code = run_slurm(sweep, rows, retry_failed=o.retry_failed, partition=o.partition, time_min=o.time_min,
                             gpus_per_job=o.gpus_per_job, array_parallelism=o.array_parallelism, setup=list(o.setup),
                             cpus_per_task=o.cpus_per_task, mem_gb=o.mem_gb, wait=o.wait, job_command=job_command,
                             say=say)
            if code is not None:
                return code
        else:
            if own_jobs:
                prebuild_zoo(sweep, list(rows), say)
            stopped = run_local(sweep, rows, workers=o.workers, gpus_per_job=o.gpus_per_job,
                                retry_failed=o.retry_failed, grace_s=o.grace_s, live=o.live, job_command=job_command,
                                say=say, timing=timing)
            if stopped:
                say(f"Stopped by {signal.Signals(stopped).name}: running jobs are marked interrupted. "
                    f"Resume with the same command, or: race run --sweep-dir {sweep}")
                return 128 + stopped
        if schedule is None:
            break
        look = next_look(sweep, schedule, say)
        if not look.open:
            why = stuck(sweep, look)
            if why:  # every listed job done, a call still open: never a silent exit 0 with the race unfinished
                raise RaceError(why, *end_lines(look.states, schedule))
            break
    end = [*end_lines(look.states, schedule)] if look is not None else []
    if timing.looks > 1:
        end.append(race_wall_line(timing))
    elif timing.line:
        end.append(timing.line)
    if o.launcher == "local" and own_jobs and timing.jobs:
        end.append(learn_line(sweep, timing.cpu_slots))
    return finish(sweep, list(rows), retry_failed=o.retry_failed, report=o.report, say=say,
                  end_line="\n".join(end) or None)


def race_wall_line(timing: RunTiming) -> str:
    """The planned-vs-actual wall time of a race's passes: each look runs after the one before, so the
    planned time is the sum of each pass's schedule on its slots."""
    from race_cli.cost.walltime import fmt_duration

    planned, actual, n = timing.planned_s, timing.actual_s, timing.jobs
    text = f"wall time {fmt_duration(actual)} for {n} job(s) in {timing.looks} pass(es) on {timing.where}"
    if planned is None or planned <= 0:
        return text + "."
    return text + f"; planned {fmt_duration(planned)} for those jobs (actual / planned {actual / planned:.2f})."


def learn_line(sweep: Path, workers: int) -> str:
    """Keep the CPU rates the sweep measured with `workers` CPU workers for the next plan on this machine
    (plan/learned.py), and say so; with none (GPU jobs) or nothing kept, point to --calibrate-from."""
    from race_cli.plan.learned import learn

    models = learn(sweep, workers) if workers else []
    if not models:
        return "race plan --calibrate-from this sweep plans the next one on its own rates."
    return (f"The next race plan on this machine prices {', '.join(models)} at the rates this sweep measured "
            f"with {workers} worker(s) (race plan --reprobe forgets them).")


def wall_check_line(planned: list[float | None], actual_s: float, slots: int, where: str) -> str:
    """'wall time 6m17s for 24 job(s) on 2 CPU worker(s); planned 8m04s (actual / planned 0.78)': every run
    checks the wall-time model race plan printed (the plan's seconds of the jobs run, scheduled as the pool did)."""
    from race_cli.cost.walltime import fmt_duration, grid_seconds

    text = f"wall time {fmt_duration(actual_s)} for {len(planned)} job(s) on {where}"
    if not planned or any(p is None for p in planned):
        return text + "; plan.json has no planned seconds to compare with (a sweep planned before they existed)."
    plan_s = grid_seconds([float(p) for p in planned], slots)
    if plan_s <= 0:
        return text + "."
    return text + f"; planned {fmt_duration(plan_s)} (actual / planned {actual_s / plan_s:.2f})."


def prebuild_zoo(sweep: Path, job_ids: list[str], say: Callable[[str], None]) -> None:
    """Build the embedded zoo entries the jobs name (zoo:<name>) once, here, with every core.

    Otherwise the first workers would each build (or wait on) the same entries in parallel.
    """
    from race_cli.status import read_status
    from race_cli.zoo.recipes import RECIPES

    known = set(RECIPES)
    names: list[str] = []
    for job_id in job_ids:
        job_dir = folder.job_dir(sweep, job_id)
        if read_status(job_dir).get("state") == "done":
            continue
        cfg = folder.job_config_data(job_dir)
        model, reward = cfg.get("model"), cfg.get("reward")
        reward_model = reward.get("model") if isinstance(reward, dict) else None
        for node in (model, reward_model):
            path = node.get("path") if isinstance(node, dict) else None
            # only entries the zoo knows: a bad name fails its own job, not the whole run
            if isinstance(path, str) and path.startswith("zoo:") and path[4:] in known and path[4:] not in names:
                names.append(path[4:])
    if not names:
        return
    from race_cli import zoo

    from race_cli.zoo.build import shipped_dir

    missing = [n for n in names if not zoo.is_built(zoo.entry_dir(n))]
    shipped = [n for n in missing if zoo.is_built(shipped_dir(n))]
    if shipped:
        say(f"copying the shipped tiny zoo into {zoo.cache_root()} once: {', '.join('zoo:' + n for n in shipped)}")
    if len(shipped) < len(missing):
        say(f"building the embedded zoo once (cached under {zoo.cache_root()}): "
            f"{', '.join('zoo:' + n for n in missing if n not in shipped)}")
    for name in names:
        zoo.build(name)


def wait_for_live_trainers(sweep: Path, job_ids: list[str], say, poll_s: float = 0.5) -> list[str]:
    """Wait until no live process holds a job lock of this sweep; returns the jobs waited for.

    Under the sweep lock no other race run is alive, so a live holder is a worker an earlier run
    left behind when it was killed (SIGKILL orphans its children), or a `race train --job-dir` by
    hand. Starting the job beside it would interleave its files; waiting lets it finish or stop,
    and its status then says what is left to do.
    """
    from race_cli.lock import JOB_LOCK_NAME, stale_reason

    def holder(j: str) -> dict | None:
        try:
            record = json.loads((folder.job_dir(sweep, j) / JOB_LOCK_NAME).read_text() or "{}")
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record and stale_reason(record) is None else None

    waited = [j for j in job_ids if holder(j) is not None]
    for j in waited:
        record = holder(j)
        if record is not None:
            say(f"{j}: pid {record.get('pid')} (left by an earlier run, or a race train by hand) is still "
                "training it; waiting for it to stop before running the sweep")
        while holder(j) is not None:
            time.sleep(poll_s)
    return waited


def run_local(sweep: Path, rows: dict[str, dict], *, workers: int | None, gpus_per_job: int,
              retry_failed: bool, grace_s: float, live: bool | None, job_command, say,
              timing: RunTiming | None = None) -> int | None:
    """Run the jobs not yet done on this machine under the sweep lock; returns the stopping signal or None.
    `timing` gets this pass added (RunTiming.add_pass) and its planned-vs-actual line (wall_check_line)."""
    from race_cli.pool.display import Progress, make_display
    from race_cli import machine
    from race_cli.pool.local import LocalPool, make_slots
    from race_cli.lock import SweepLock

    with SweepLock(sweep, say=say, reenter=True):  # a race holds it already (run_main)
        from race_cli.pool.slurm import refuse_if_live_on_slurm

        refuse_if_live_on_slurm(sweep, list(rows))
        wait_for_live_trainers(sweep, list(rows), say)
        st.sweep_temp_files(sweep)
        states = st.read_states(sweep, list(rows))
        orphans = st.adopt_orphans(sweep, states)
        if orphans:
            say(f"{len(orphans)} job(s) were left running by a race run that is gone; resuming them: "
                + ", ".join(orphans[:5]) + (" ..." if len(orphans) > 5 else ""))
        todo = st.select_jobs(states, retry_failed)
        counts = {s: sum(1 for v in states.values() if v == s) for s in st.STATES}
        skipped_failed = counts["failed"] if not retry_failed else 0
        if not todo:
            say(f"nothing to run: {counts['done']} done, {counts['failed']} failed"
                + (" (--retry-failed reruns them)" if skipped_failed else ""))
            return None
        slots = make_slots(gpus=machine.visible_gpus(), gpus_per_job=gpus_per_job, workers=workers, n_jobs=len(todo))
        where = (f"{len(slots)} GPU slot(s) of {gpus_per_job} GPU(s)" if slots[0].name.startswith("cuda")
                 else f"{len(slots)} CPU worker(s), {slots[0].env['OMP_NUM_THREADS']} thread(s) each")
        say(f"running {len(todo)} job(s) on {where}; {counts['done']} already done"
            + (f", {skipped_failed} failed left alone (--retry-failed reruns them)" if skipped_failed else ""))
        seconds = {j: float(r["planned_seconds"]) for j, r in rows.items()
                   if isinstance(r.get("planned_seconds"), (int, float))}
        progress = Progress(sweep, planned={j: float(r.get("planned_flops_total") or 0.0) for j, r in rows.items()},
                            states=dict(states), planned_seconds=seconds, slots=len(slots))
        display = make_display(progress, live=live)
        pool = LocalPool(sweep, todo, slots, plan_rows=rows, job_command=job_command, display=display,
                         grace_s=grace_s)
        t0 = time.monotonic()
        try:
            pool.run()
        finally:
            display.close()
        if timing is not None:
            planned = [rows.get(j, {}).get("planned_seconds") for j in todo]
            actual = time.monotonic() - t0
            timing.line = wall_check_line(planned, actual, len(slots), where)
            timing.add_pass(planned, actual, len(slots), where)
            if not slots[0].name.startswith("cuda"):  # the widest pass of CPU workers (plan/learned.py)
                timing.cpu_slots = max(timing.cpu_slots, len(slots))
        return pool.stopped_by


def finish(sweep: Path, job_ids: list[str], *, retry_failed: bool, report: bool, say,
           end_line: str | None = None) -> int:
    """Say how the sweep stands, report it when something is done; 1 when any job failed. `end_line`
    (the planned-vs-actual wall time) is said last."""
    statuses = {j: st.read_status(folder.job_dir(sweep, j)) for j in job_ids}
    by_state: dict[str, list[str]] = {}
    for j, s in statuses.items():
        by_state.setdefault(s["state"], []).append(j)
    say("sweep " + str(sweep) + ": " + ", ".join(f"{len(v)} {k}" for k, v in sorted(by_state.items())))
    if report and by_state.get("done"):
        from race_cli.report.command import print_report_top

        print_report_top(sweep, say)
    failed = by_state.get("failed", [])
    if failed:
        say(f"{len(failed)} job(s) failed:")
        for j in failed:
            s = statuses[j]
            say(f"  {j}: {s.get('error') or 'no error recorded'} (log: {folder.log_file(folder.job_dir(sweep, j))})")
        say("Fix the cause, then rerun with --retry-failed to run them again.")
    if end_line:
        say(end_line)
    if failed:
        return 1
    unfinished = [j for k, v in by_state.items() if k != "done" for j in v]
    return 0 if not unfinished else 1
