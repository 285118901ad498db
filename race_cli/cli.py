"""The `race` command line: plan, run, report (and flops, train, zoo), as typed Typer functions.

Each command's docstring is its help. Implementations are imported inside the commands, so
`race --help`, `race plan` and `race report` never import torch or transformers.
"""

from __future__ import annotations

import os
import sys
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer

from race_cli.errors import RaceError

app = typer.Typer(
    name="race",
    help="Run RACE pilot grids: budget-matched GRPO jobs that show where RL post-training compute should go "
    "(a bigger policy, more rollouts, more updates, or stronger feedback). Flow: race plan -> race run -> race report.",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

NO_RACE_HELP = "A fixed design: run the seed axis as it is, no race."
MAX_SEEDS_HELP = "Race to this many seeds per regime (default: the grid's race.max_seeds)."

OVERRIDES_HELP = ("Hydra overrides and sweeps, e.g. model=tiny-s,tiny-m grpo.group_size=4,8 "
                  "grpo.updates_per_batch=range(1,3) budget.flops=5e11 grid=none.")


class PlanFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def _fail(exc: RaceError) -> None:
    from rich.console import Console

    err = Console(stderr=True)
    for p in exc.problems or [str(exc)]:
        err.print(f"[bold red]error:[/] {p}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


@app.command()
def plan(
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    fmt: PlanFormat = typer.Option(PlanFormat.table, "--format", "-f", help="table, csv or json."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the sweep folder here (multirun.yaml, "
                                       "plan.csv, plan.json, jobs/<id>/.hydra/)."),
    max_jobs: int = typer.Option(512, min=1, max=100_000, help="Refuse sweeps larger than this unless --yes."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Plan sweeps larger than --max-jobs."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Plan for this GPU kind and count, e.g. H100, H200x8 or "
                                      "A100-80GB, whether or not this machine has one: its memory sizes the "
                                      "micro-batches, its assumed rates the wall time and GPU-hours. Wins over the "
                                      "GPU detected here."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", help="Device memory per job, e.g. 80GiB or 24GB: "
                                          "micro_batch_size=auto picks the largest micro-batch that fits, and a job "
                                          "that cannot fit is refused (exit 2). Default: the --gpu kind's memory, "
                                          "else the detected GPU (nvidia-smi), else no limit."),
    calibrate_from: Optional[Path] = typer.Option(None, "--calibrate-from", help="A finished sweep folder: plan "
                                                  "wall time from the per-phase FLOP/s, evaluation and setup "
                                                  "seconds its jobs measured (per model) instead of the defaults."),
    informative_from: Optional[Path] = typer.Option(None, "--informative-from", help="A finished sweep folder: "
                                                    "plan each job's update on the share of rows its jobs really "
                                                    "updated on (per regime, else per reward type), where "
                                                    "grpo.expected_informative_share is null."),
    seed_sd: Optional[str] = typer.Option(None, "--seed-sd", help="Seed spread for the power table: a number "
                                          "(0.02) or an earlier sweep whose report measured it (default 0.02, "
                                          "the default grid's measured spread)."),
    gpus_per_job: int = typer.Option(1, "--gpus-per-job", min=1, max=1024, help="GPUs each GPU job will hold, "
                                     "as race run --gpus-per-job gives them: that many GPU-hours per job-hour, "
                                     "GPUs // N jobs at once, and with 2 or more the PRM planned on the job's "
                                     "second GPU."),
    no_race: bool = typer.Option(False, "--no-race", help=NO_RACE_HELP, rich_help_panel="What to run"),
    max_seeds: Optional[int] = typer.Option(None, "--max-seeds", min=2, max=1000, help=MAX_SEEDS_HELP,
                                            rich_help_panel="What to run"),
) -> None:
    """Expand a sweep into budget-matched GRPO jobs and preview each job's planned FLOP split, peak memory and wall time.

    With no overrides: the embedded tiny grid (grid=tiny). [bold]race plan grid=pilot[/] shows the
    paper-like Qwen2.5 grid. Nothing is written unless --out is given.
    """
    from race_cli import machine
    from race_cli.cost.memory import parse_size
    from race_cli.plan.build import build_plan, write_sweep
    from race_cli.plan.render import print_plan

    try:
        if max_jobs < 1:
            raise RaceError(f"--max-jobs {max_jobs}: expected at least 1.")
        spec = None
        if gpu is not None:
            from race_cli.cost.walltime import parse_gpu

            try:
                spec = parse_gpu(gpu)
            except ValueError as exc:
                raise RaceError(str(exc)) from None
        if gpu_mem is not None:
            device_bytes = parse_size(gpu_mem)
        else:
            device_bytes = spec.kind.memory_bytes if spec is not None else machine.gpu_total_bytes()
        from race_cli.plan.measured import sweep_informative, sweep_rates

        rates = sweep_rates(calibrate_from) if calibrate_from is not None else None
        informative = sweep_informative(informative_from) if informative_from is not None else None
        from race_cli.plan.power import seed_sd_from

        sd = seed_sd_from(seed_sd)
        if spec is not None and gpus_per_job > spec.count:
            raise RaceError(f"--gpus-per-job {gpus_per_job} but --gpu {gpu} has {spec.count} GPU(s): a job "
                            f"cannot hold more GPUs than there are. Plan for more (--gpu {spec.kind.name}x"
                            f"{gpus_per_job}) or fewer per job.")
        p = build_plan(overrides or [], max_jobs=max_jobs, yes=yes, gpu_mem=device_bytes, rates=rates,
                       informative=informative, gpu=spec, gpus_per_job=gpus_per_job, race=not no_race,
                       max_seeds=max_seeds)
        if out is not None:
            written = write_sweep(p, out)
    except RaceError as exc:
        _fail(exc)
    print_plan(p, fmt.value)
    if p.race_note:
        from rich.console import Console

        Console(stderr=True).print(p.race_note, highlight=False)
    if p.race is not None and fmt == PlanFormat.table:  # what the race costs: minimum, expected, maximum
        from rich.console import Console

        from race_cli.plan.race_price import price_lines, price_race

        for line in price_lines(price_race(p, sd[0]), p.race):
            Console().print(line, highlight=False)
    from race_cli.plan.power import joint_power_lines, plan_joint_power, plan_power, print_power
    from race_cli.plan.walltime_eval import eval_share_line

    print_power(plan_power(p.jobs, sd[0]), sd[1], eval_share_line(p.jobs),
                joint_lines=joint_power_lines(plan_joint_power(p.jobs, sd[0])))
    from race_cli.plan.build import SEED_WARNING, one_seed_regimes

    if (n_one := one_seed_regimes(p.jobs)):
        from rich.console import Console

        n_reg = len({tuple(sorted(o for o in j.overrides if not o.startswith("seed="))) for j in p.jobs})
        Console(stderr=True).print(SEED_WARNING.format(n=n_one, r=n_reg), highlight=False)
    if p.capped:
        from rich.console import Console

        Console(stderr=True).print(
            f"note: budget.max_iterations caps {len(p.capped)} job(s) ({', '.join(p.capped[:3])}"
            f"{', ...' if len(p.capped) > 3 else ''}): they stop before spending budget.flops "
            "(see budget_used).", highlight=False)
    if out is not None:
        from rich.console import Console

        Console(stderr=True).print(
            f"{'wrote' if written else 'unchanged (same plan already there)'}: {out}  ({len(p.jobs)} jobs)")


@app.command()
def flops(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of ONE job (no sweeps).", show_default=False),
    audit: bool = typer.Option(False, "--audit", help="Also measure the real architecture with torch's "
                               "FlopCounterMode and compare with the ledger (imports torch)."),
    batch: int = typer.Option(2, min=1, max=1024, help="--audit: sequences per measured batch."),
) -> None:
    """Print one job's per-phase FLOP ledger (model and executed conventions), optionally audited."""
    from race_cli.plan.render import print_flops

    try:
        if audit and not 1 <= batch <= 1024:
            raise RaceError(f"--batch {batch}: expected 1 to 1024 sequences per measured batch.")
        code = print_flops(overrides or [], audit=audit, batch=batch)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


@app.command()
def mem(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of ONE job (no sweeps).", show_default=False),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", help="Device memory, e.g. 80GiB: resolves "
                                          "micro_batch_size=auto and refuses a job that cannot fit (exit 2)."),
    audit: bool = typer.Option(False, "--audit", help="Measure the audited shapes (Qwen2.5-0.5B/1.5B/7B and small "
                               "ones) on fake tensors and compare with the ledger (imports torch; ~5 minutes)."),
    quick: bool = typer.Option(False, "--quick", help="--audit: only the two small cases."),
) -> None:
    """Print one job's memory ledger: planned peak device bytes per phase and their parts."""
    from race_cli.cost.memory import parse_size
    from race_cli.plan.render import print_memory

    try:
        code = print_memory(overrides or [], gpu_mem=parse_size(gpu_mem) if gpu_mem else None, audit=audit,
                            quick=quick)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


@app.command()
def train(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of ONE job (no sweeps).", show_default=False),
    out: Optional[str] = typer.Option(None, "--out", "-o", help="Job folder to create (or resume) for these overrides."),
    job_dir: Optional[str] = typer.Option(None, "--job-dir", help="Run or resume a job folder written by "
                                          "`race plan --out` (reads its .hydra/config.yaml)."),
) -> None:
    """Run one budget-matched GRPO job: rollout -> reward -> update until the budget is spent.

    Writes metrics.jsonl, ledger.json, summary.json, adapter/ and checkpoint/ into the job folder;
    rerunning on the same folder resumes from the last checkpoint.
    """
    from race_cli.engine.train import train_main

    try:
        for flag, value in (("--out", out), ("--job-dir", job_dir)):
            if value is not None and not value.strip():  # Path('') is '.': the job would land in the current folder
                raise RaceError(f"{flag} {value!r} is empty: give the job folder, e.g. {flag} runs/one/jobs/try1.")
        code = train_main(overrides or [], out=None if out is None else Path(out),
                          job_dir=None if job_dir is None else Path(job_dir))
    except RaceError as exc:
        _fail(exc)
    except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM (engine.job.Stopped): status.json says interrupted
        code = 128 + int(getattr(exc, "signum", 2))
    raise typer.Exit(code)


@app.command()
def run(
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", "-d", help="Sweep folder to run or resume. "
                                             "Default: runs/<grid>-<hash of the plan>, so the same overrides resume the same folder."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, max=1024, help="CPU worker processes when no GPU is visible "
                                          "(default: one per core, at most one per job; cores are divided among them as torch threads)."),
    gpus_per_job: int = typer.Option(1, "--gpus-per-job", min=0, max=1024, help="GPUs per job (each job sees only its own via CUDA_VISIBLE_DEVICES). "
                                     "With --launcher slurm, 0 asks for CPU-only tasks."),
    launcher: str = typer.Option("local", "--launcher", help="local (this machine's GPUs or CPU workers) or slurm (one job array via submitit)."),
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Also rerun jobs that failed (they resume from their checkpoints)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Run sweeps larger than --max-jobs."),
    max_jobs: int = typer.Option(512, min=1, max=100_000, help="Refuse sweeps larger than this unless --yes."),
    partition: Optional[str] = typer.Option(None, "--partition", help="SLURM partition (default: the cluster's default)."),
    time_min: int = typer.Option(60, "--time-min", min=1, max=43_200, help="SLURM time limit per task, minutes; a task that reaches it is requeued and resumes."),
    array_parallelism: Optional[int] = typer.Option(None, "--array-parallelism", min=1, max=102_400, help="SLURM: most tasks of the array running at once (default: all)."),
    cpus_per_task: Optional[int] = typer.Option(None, "--cpus-per-task", min=1, max=1024, help="SLURM: CPUs per task (default: 8 per GPU, 4 for a CPU-only task; also the job's torch threads)."),
    mem_gb: Optional[int] = typer.Option(None, "--mem-gb", min=1, max=65_536, help="SLURM: host memory per task, GB (default: sized from the plan's largest models, see pool/slurm.task_memory_gb)."),
    allow_cpu: bool = typer.Option(False, "--allow-cpu", help="Run hub-sized models (e.g. grid=pilot) on CPU workers when no GPU is visible (refused otherwise)."),
    setup: Optional[List[str]] = typer.Option(None, "--setup", help="SLURM: a shell line run before each task, e.g. "
                                              "'module load cuda' or 'source .venv/bin/activate' (repeatable)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="SLURM: follow the tasks to the end (default), or submit and exit."),
    no_race: bool = typer.Option(False, "--no-race", help=NO_RACE_HELP, rich_help_panel="What to run"),
    max_seeds: Optional[int] = typer.Option(None, "--max-seeds", min=2, max=1000, help=MAX_SEEDS_HELP,
                                            rich_help_panel="What to run"),
) -> None:
    """Run every job of a sweep, one process per job, and end with the top of the ranking.

    Takes the same overrides as [bold]race plan[/]; with none, runs the embedded tiny grid on CPU.
    A grid with a race block races: after each look, seeds go only to the calls still open.
    Rerun the same command to resume: done jobs are skipped, interrupted ones resume from their
    checkpoints, failed ones are rerun only with --retry-failed. Ctrl-C stops the jobs cleanly. The
    end line prints the wall time against the plan's.

    Exit code: 0 all done, 1 some job failed (named), 2 bad input, 130 stopped by Ctrl-C.
    """
    from race_cli.pool.run import run_main

    try:
        code = run_main(overrides or [], sweep_dir=sweep_dir, workers=workers, gpus_per_job=gpus_per_job,
                        launcher=launcher, retry_failed=retry_failed, yes=yes, max_jobs=max_jobs,
                        partition=partition, time_min=time_min, array_parallelism=array_parallelism,
                        setup=setup or [], cpus_per_task=cpus_per_task, mem_gb=mem_gb, allow_cpu=allow_cpu,
                        wait=wait, race=not no_race, max_seeds=max_seeds)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


class ReportFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"
    markdown = "markdown"


def _one_blas_thread() -> None:
    """The report's matrix products are small (bootstrap weights [1000, items] times [items, regimes]): on a
    machine whose cores are busy, as when race run trains beside it, OpenBLAS's worker threads spin for the
    cores (5,004-job sweep on 2 cores, medians of 3 alternating: with one busy loop beside, 12.9 s with
    OpenBLAS's two threads, 9.8 s with one; idle, 10.5 and 10.3 s but 13.1 and 10.2 s of CPU; outputs
    identical). Set before numpy loads; the user's own setting wins. The report starts no process, so
    nothing else inherits it."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@app.command()
def report(
    sweep_dirs: List[Path] = typer.Argument(..., help="Sweep folders written by race run (several are combined).",
                                            show_default=False),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Rank one evaluation target (the <target> "
                                         "of eval/<target>/accuracy); default: every target, a section each."),
    by: Optional[List[str]] = typer.Option(None, "--by", help="Condition columns (repeatable); default: model, "
                                           "budget, reward, task."),
    fmt: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f", help="table, csv, json or markdown."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Folder for runs.csv, ranking.csv, summary.md and "
                                       "plots (default: <first sweep>/report)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", help="Draw the PNG plots."),
    bootstrap: int = typer.Option(1000, min=100, max=100_000, help="Bootstrap resamples for the confidence intervals."),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, help="Seed of the bootstrap."),
    at_budget: Optional[str] = typer.Option(None, "--at-budget", help="Predict every regime's score and the "
                                            "ranking at this budget from its compute curve: FLOPs (2.4e12) or a "
                                            "multiple of each condition's budget (3x)."),
    assume_seed_sd: Optional[float] = typer.Option(None, "--assume-seed-sd", min=1e-6, max=0.999, help="With one seed per regime: "
                                                   "the seed spread to assume (e.g. 0.02), so that ≈ best and "
                                                   "> start can be tested; the report says it was assumed."),
    full: bool = typer.Option(False, "--full", help="Print the whole report here after the findings (rankings, "
                              "joint comparison, frontier, ...); by default the console shows the findings only. "
                              "The files always hold everything."),
) -> None:
    """Rank the compute-allocation regimes of finished sweeps, with intervals, fits and plots.

    Opens with the findings: per target and condition the winner or "not separated", the model-size and
    feedback answers, the race validate command, and what would settle each open call. --full prints the
    rest here too; summary.md always has all of it.

    A pilot grid is a diagnostic, not a promise of held-out gains: validate the named regimes.
    """
    _one_blas_thread()
    from race_cli.report.command import report as report_main

    raise typer.Exit(report_main(list(sweep_dirs), target=target, by=by or None, fmt=fmt.value, out=out,
                                 plots=plots, bootstrap=bootstrap, seed=seed, at_budget=at_budget, full=full,
                                 assume_seed_sd=assume_seed_sd))


@app.command()
def validate(
    pilot: Path = typer.Argument(..., help="The pilot sweep folder; `race report` must have written its report/.",
                                 show_default=False),
    budget: Optional[float] = typer.Option(None, "--budget", min=1.0, max=1e30, help="Validation budget per job, FLOPs (e.g. 1e12). "
                                           "Exclusive with --scale."),
    scale: Optional[float] = typer.Option(None, "--scale", min=1e-3, max=1e6, help="Validation budget = K x each pilot job's budget "
                                          "(default 2 when neither --budget, --scale nor --replicate is given)."),
    replicate: bool = typer.Option(False, "--replicate", help="Replicate at the pilot's own budget with fresh "
                                   "seeds (tests the pilot's call itself; --scale/--budget test it at another budget)."),
    margin: float = typer.Option(0.0, "--margin", min=0.0, max=1.0, help="Confirm a call only when the interval of best − control "
                                 "lies above this improvement (fix it before running; default 0)."),
    unlearned: bool = typer.Option(False, "--unlearned", help="Also validate conditions where no regime beat its "
                                   "start in the pilot (skipped by default: their ranking is not a finding)."),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, max=512, help="Fix the seeds per validated regime (fresh ones: after "
                                        "the pilot's largest). Default: sized per condition by --power."),
    control: str = typer.Option("runner-up", "--control", help="The control the pilot's best is tested against: "
                                "runner-up (its closest rival) or lowest (its lowest-ranked regime)."),
    power: float = typer.Option(0.8, "--power", min=0.5, max=0.999, help="Size the seeds so that the test confirms the gap with this "
                                "probability (from the pilot's variance model, averaged over the uncertainty of its "
                                "estimates; ignored with --seeds)."),
    gap: Optional[float] = typer.Option(None, "--gap", min=1e-4, max=1.0, help="The true gap best − control to size for (default: the "
                                        "pilot's observed gap less its winner's-curse bias)."),
    max_seeds: int = typer.Option(8, "--max-seeds", min=1, max=512, help="At most this many seeds per regime when sizing by power."),
    top: Optional[int] = typer.Option(None, "--top", min=1, max=1000, help="Validate the K regimes with the highest best share per "
                                      "condition instead of the pilot's best alone."),
    tied: bool = typer.Option(False, "--tied", help="Also validate every regime the pilot could not tell from its "
                              "best (the report's 'validate' list); costs one regime's jobs each."),
    target: Optional[str] = typer.Option(None, "--target", "-t", help="Evaluation target whose recommendation to "
                                         "validate (default: the one the pilot report ranks)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Validation sweep folder (default: "
                                       "<pilot>-validate-x<K> or -C<budget>, beside the pilot)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Preview only; write nothing."),
) -> None:
    """Turn a pilot's recommendation into a validation sweep: the pilot's best, a control, more seeds.

    Per condition: the pilot's best regime (with --tied also those it could not tell from it, or
    --top K by best share) and its runner-up as the control (--control lowest: its lowest-ranked),
    re-planned at the validation budget with fresh seeds, as many as the power asks (--power, --gap,
    --max-seeds; or --seeds N), and evaluated on fresh items of the validated target (another
    task.eval_seed); the prediction goes in provenance.json.

    Then [bold]race run --sweep-dir DIR[/] and [bold]race report DIR[/]: per condition, best − control as a
    paired difference with its interval: confirmed, not separated or reversed.
    """
    from race_cli.plan.validate import validate_main

    typed = [str(pilot)] + [f"{k} {v}" for k, v in (("--budget", budget), ("--scale", scale), ("--seeds", seeds),
                                                     ("--top", top), ("--target", target), ("--gap", gap))
                            if v is not None]
    typed += [f"--control {control}"] if control != "runner-up" else []
    typed += [f"--power {power:g}"] if power != 0.8 and seeds is None else []
    typed += [f"--max-seeds {max_seeds}"] if max_seeds != 8 and seeds is None else []
    typed += ["--tied"] if tied else []
    typed += ["--replicate"] if replicate else []
    typed += [f"--margin {margin:g}"] if margin else []
    typed += ["--unlearned"] if unlearned else []
    try:
        validate_main(pilot, budget=budget, scale=scale, seeds=seeds, top=top, tied=tied, target=target, out=out,
                      dry_run=dry_run, typed=typed, replicate=replicate, margin=margin, unlearned=unlearned,
                      control=control, power=power, gap=gap, max_seeds=max_seeds)
    except RaceError as exc:
        _fail(exc)


@app.command()
def zoo(
    names: Optional[List[str]] = typer.Argument(None, help="Entries to show or build (default: all).", show_default=False),
    build: bool = typer.Option(False, "--build", help="Build missing entries (tiny policies, tiny PRM)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when cached."),
    verify: bool = typer.Option(False, "--verify", help="Rebuild from the recipe in a temp folder and check the "
                                "weights equal the shipped copy bit for bit."),
) -> None:
    """List (and build) the embedded tiny model zoo: tiny-s/m/l policies and the tiny PRM."""
    from race_cli.zoo import zoo_main

    try:
        code = zoo_main(names or None, build=build, force=force, verify=verify)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


# --- help text: written for Rich's wrapping -------------------------------------------------------


def reflow(doc: str) -> str:
    """A docstring as help text: each paragraph's lines joined into one, so Rich wraps it once at the
    terminal's width (a docstring's own line breaks, kept by rich markup mode, would break it twice).
    Lines that start a list item ('- ', '• ') or are indented (commands, examples) keep their breaks."""
    import inspect

    out = []
    for para in inspect.cleandoc(doc).split("\n\n"):
        lines: list[str] = []
        for line in para.splitlines():
            keep = line.startswith((" ", "- ", "• ")) or not lines
            if keep:
                lines.append(line.rstrip())
            else:
                lines[-1] += " " + line.strip()
        out.append("\n".join(lines))
    return "\n\n".join(out)


def _reflow_commands() -> None:
    for info in app.registered_commands:
        if info.help is None and info.callback is not None and info.callback.__doc__:
            info.help = reflow(info.callback.__doc__)


# errno values that say the machine, not the command line, is the problem: exit 1 (runtime)
_RUNTIME_ERRNOS = {"ENOSPC", "EDQUOT", "EIO", "ENOMEM", "EFBIG", "EMFILE", "ENFILE", "ESTALE"}


def _os_error_message(exc: OSError) -> tuple[str, int]:
    """One line for a file-system error a user can cause (read-only, full, a file where a folder
    should be, no permission), and its exit code: 1 for a full or failing disk, 2 for a bad path."""
    import errno

    name = errno.errorcode.get(exc.errno or 0, "")
    if name in ("ENOSPC", "EDQUOT"):  # the one message for a full disk (race_cli/io.py), whoever was writing
        from race_cli.io import disk_full_message

        return disk_full_message(exc), 1
    where = exc.filename if exc.filename is not None else "a file"
    hints = {"ENOSPC": "free some space, then rerun the same command (it resumes)",
             "EDQUOT": "free some space, then rerun the same command",
             "EFBIG": "raise the size limit (ulimit -f), then rerun",
             "EROFS": "choose a folder you can write (--out / --sweep-dir)",
             "EACCES": "choose a folder you can write (--out / --sweep-dir)",
             "EPERM": "choose a folder you can write (--out / --sweep-dir)",
             "ENOTDIR": "a file is in the way where a folder is needed: choose another path or move the file",
             "EEXIST": "a file is in the way where a folder is needed: choose another path or move the file",
             "EISDIR": "a folder is in the way where a file is needed: choose another path",
             "ELOOP": "race never reads or writes through links in a sweep folder (docs/security.md): remove the "
                      "link, or replan into a new folder",
             "EXDEV": "race writes only inside the sweep folder: choose a path under it",
             "EINVAL": "race reads and appends regular files only: remove it, then rerun"}
    hint = hints.get(name, "check the path and the disk, then rerun")
    return f"cannot use {where}: {exc.strerror or exc}. {hint[0].upper() + hint[1:]}.", 1 if name in _RUNTIME_ERRNOS else 2


_reflow_commands()  # after every @app.command above


def main() -> None:
    try:
        app()
    except OSError as exc:  # a path or a disk the user chose: one line, never a traceback
        from rich.console import Console

        msg, code = _os_error_message(exc)
        Console(stderr=True).print(f"[bold red]error:[/] {msg}", highlight=False, soft_wrap=True)
        sys.exit(code)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM in race train (engine.job.Stopped)
        sys.exit(128 + int(getattr(exc, "signum", 2)))


if __name__ == "__main__":
    main()
