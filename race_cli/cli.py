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

# --- help panels: every option sits in one of these (docs/commands.md has each option in full)
WHAT, WHERE, RESOURCES, SLURM, OUTPUT = "What to run", "Where", "Resources", "SLURM", "Output"
DOCS = "Every option in full: docs/commands.md."
# numeric options whose range the help says in words ("(0.5 to 0.999)"); no help prints Click's raw
# [0.5<=x<=0.999]. Every range is still enforced, and a value outside it is refused with the range named.
RANGE_IN_WORDS = {"--power": "0.5 to 0.999", "--margin": "0 to 1", "--bootstrap": "100 to 100,000"}


def _plain_help(params: list) -> None:
    """Flags (and -h/--help) show no value placeholder such as <bool>: they take none."""
    for p in params:
        if getattr(p, "is_flag", False) or getattr(p, "is_bool_flag", False):
            p.metavar = ""
        if getattr(p, "param_type_name", "") == "option":
            p._get_number_range_help_str = lambda: None
        if getattr(p, "param_type_name", "") == "argument":  # its name says it: OVERRIDES..., not <list[str]>
            p.display_type_rich = lambda ctx: None


class _Command(typer.core.TyperCommand):
    def get_help_option(self, ctx):
        opt = super().get_help_option(ctx)
        _plain_help([opt] if opt is not None else [])
        return opt

    def format_help(self, ctx, formatter):
        _plain_help(self.params)
        return super().format_help(ctx, formatter)


class _Group(typer.core.TyperGroup):
    def get_help_option(self, ctx):
        opt = super().get_help_option(ctx)
        _plain_help([opt] if opt is not None else [])
        return opt

    def format_help(self, ctx, formatter):
        _plain_help(self.params)  # race --version is a flag: no <bool> beside it
        return super().format_help(ctx, formatter)


app = typer.Typer(
    name="race",
    cls=_Group,
    help="Run RACE pilot grids: budget-matched GRPO jobs that show where RL post-training compute should go "
    "(a bigger policy, more rollouts, more updates, or stronger feedback).\n\n"
    "Flow: race plan -> race run -> race report -> race validate. Guides: race docs (docs/README.md).",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

NO_RACE_HELP = "Fixed design: the seed axis as typed."
CFG_HELP = "Print the first job's composed config; exit."
EACH_JOB_HELP = "With --cfg job: every job's config."
MAX_SEEDS_HELP = "The race's cap: seeds per regime."

OVERRIDES_HELP = "Hydra overrides and sweeps, e.g. model=tiny-s,tiny-m grpo.group_size=4,8."


class PlanFormat(str, Enum):
    table = "table"
    csv = "csv"
    json = "json"


def _config_dir_option():
    return typer.Option(None, "--config-dir", metavar="DIR", rich_help_panel="What to run", show_default=False,
                        help="Your own configs (repeatable).")


def _use_config_dirs(dirs: Optional[List[Path]]) -> None:
    """Search the --config-dir folders before the shipped conf/ (RaceError when one is missing)."""
    if dirs:
        from race_cli.config.compose import set_config_dirs

        set_config_dirs(dirs)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            typer.echo(f"race {version('race-cli')}")
        except PackageNotFoundError:  # a checkout on PYTHONPATH, never installed
            typer.echo("race (not installed: no version recorded; pip install . records it)")
        raise typer.Exit()


@app.callback()
def _app(version: bool = typer.Option(False, "--version", "-V", callback=_version, is_eager=True,
                                      help="Print race's version and exit.")) -> None:
    pass


# --- Hydra's habits: -m/--multirun, --cfg job, hydra.sweep.dir= ------------------------------------------

MULTIRUN_NOTE = ("note: -m/--multirun is Hydra's switch for a sweep; race plan and race run always expand comma "
                 "lists and range() into one job each (a multirun), so it changes nothing.")


def _multirun_option():
    return typer.Option(False, "--multirun", "-m", hidden=True,
                        help="Hydra's sweep switch: accepted; a sweep is always a multirun here.")


def _cfg_option():
    return typer.Option(None, "--cfg", metavar="job", rich_help_panel=OUTPUT, show_default=False, help=CFG_HELP)


def _note(text: str) -> None:
    from rich.console import Console

    Console(stderr=True).print(text, highlight=False, soft_wrap=True)


def _hydra_folder(overrides: Optional[List[str]], folder: Optional[Path], flag: str,
                  key: str = "hydra.sweep.dir") -> tuple[list[str], Optional[Path]]:
    """(the overrides less Hydra's output folder, the folder): `hydra.sweep.dir=DIR` (`hydra.run.dir` for one
    job) is taken as race's `flag` (a note says so); any other hydra.* key is refused naming what race uses."""
    rest, found = [], None
    for o in overrides or []:
        k, eq, v = o.lstrip("+~").partition("=")
        if k == key and eq:
            found = v
        elif k == "hydra" or k.startswith("hydra."):
            raise RaceError(f"{o}: race composes its configs with Hydra but runs no Hydra app, so Hydra's own "
                            f"settings do not apply. The output folder is {flag} DIR (or {key}=DIR).")
        else:
            rest.append(o)
    if found is None:
        return rest, folder
    if not found.strip():
        raise RaceError(f"{key}= is empty: give a folder, e.g. {flag} runs/my-sweep.")
    if folder is not None and Path(found) != folder:
        raise RaceError(f"{key}={found} and {flag} {folder} name two folders: give one ({flag} is race's own).")
    _note(f"note: {key}={found} is taken as {flag} {found}.")
    return rest, Path(found)


def _sweep_habits(overrides: Optional[List[str]], folder: Optional[Path], flag: str, multirun: bool,
                  cfg: Optional[str], each_job: bool, **plan_kw) -> tuple[list[str], Optional[Path]]:
    """Hydra's habits on race plan and race run: -m noted, hydra.sweep.dir taken as `flag`, and --cfg job
    printed and exited (typer.Exit). Returns (the overrides less Hydra's folder, the folder)."""
    if multirun:
        _note(MULTIRUN_NOTE)
    overrides, folder = _hydra_folder(overrides, folder, flag)
    if cfg is not None:
        _print_cfg(cfg, overrides, each_job, **plan_kw)
        raise typer.Exit(0)
    return overrides, folder


def _print_cfg(what: str, overrides: list[str], each: bool, **plan_kw) -> None:
    """`--cfg job` (Hydra's habit): the composed config of the first job (every job's with --each-job), as
    its .hydra/config.yaml will hold it, on stdout; nothing is written or run."""
    if what != "job":
        raise RaceError(f"--cfg {what}: race prints a job's composed config (--cfg job); Hydra's own runtime "
                        "config (hydra, all) is not used by race.")
    import yaml

    from race_cli.plan.build import build_plan

    os.environ.setdefault("RACE_CPU_PROBE", "off")  # a config needs no wall time: no probe of this CPU for it
    plan = build_plan(overrides, **plan_kw)
    for note in (plan.race_note, plan.task_note):
        if note:
            _note(note)
    jobs = plan.jobs
    for i, job in enumerate(jobs if each else jobs[:1]):
        typer.echo(("---\n" if i else "") + f"# job {job.job_id}: {' '.join(job.overrides)}")
        typer.echo(yaml.safe_dump(job.config, sort_keys=False), nl=False)
    if not each and len(jobs) > 1:
        _note(f"note: the first of {len(jobs)} jobs; --each-job prints every one.")


def _fail(exc: RaceError) -> None:
    from rich.console import Console

    err = Console(stderr=True)
    for p in exc.problems or [str(exc)]:
        err.print(f"[bold red]error:[/] {p}", highlight=False, soft_wrap=True)
    raise typer.Exit(exc.exit_code)


def _folder(value: str) -> Path:
    """A folder argument as typed: an empty one is refused here, since Path('') is the current folder and
    the command would plan, run or report there (and its messages would name '.')."""
    if not value.strip():
        raise typer.BadParameter(f"{value!r} is empty: give a folder, e.g. runs/my-sweep.")
    return Path(value)


@app.command(cls=_Command)
def plan(
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False,
                                                    metavar="OVERRIDES"),
    max_jobs: int = typer.Option(512, min=1, max=100_000, metavar="N", rich_help_panel=WHAT,
                                 help="Refuse sweeps larger than this unless --yes."),
    yes: bool = typer.Option(False, "--yes", "-y", rich_help_panel=WHAT, help="Plan sweeps larger than --max-jobs."),
    seed_sd: Optional[str] = typer.Option(None, "--seed-sd", metavar="SD|DIR", rich_help_panel=WHAT,
                                          help="Seed spread for the power table and race price "
                                               "(default: the grid's seed_sd, else 0.02)."),
    no_race: bool = typer.Option(False, "--no-race", rich_help_panel=WHAT, help=NO_RACE_HELP),
    max_seeds: Optional[int] = typer.Option(None, "--max-seeds", min=2, max=1000, metavar="N", rich_help_panel=WHAT,
                                            help=MAX_SEEDS_HELP),
    power_table: bool = typer.Option(False, "--power-table", rich_help_panel=OUTPUT,
                                     help="Print the power per condition (the headline sums it up)."),
    informative_from: Optional[Path] = typer.Option(None, "--informative-from", parser=_folder,
                                                    metavar="DIR", rich_help_panel=WHAT,
                                                    help="Plan updates on a finished sweep's informative share."),
    gpu: Optional[str] = typer.Option(None, "--gpu", metavar="KIND", rich_help_panel=WHERE,
                                      help="Plan for this GPU, e.g. H100 or H200x8."),
    calibrate_from: Optional[Path] = typer.Option(None, "--calibrate-from", parser=_folder,
                                                  metavar="DIR", rich_help_panel=WHERE,
                                                  help="Wall-time rates from a finished sweep."),
    reprobe: bool = typer.Option(False, "--reprobe", rich_help_panel=WHERE,
                                 help="Probe this CPU again; forget its learned rates."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", metavar="SIZE", rich_help_panel=RESOURCES,
                                          help="Device memory per job, e.g. 80GiB."),
    gpus_per_job: int = typer.Option(1, "--gpus-per-job", min=1, max=1024, metavar="N", rich_help_panel=RESOURCES,
                                     help="GPUs each job will hold."),
    fmt: PlanFormat = typer.Option(PlanFormat.table, "--format", "-f", metavar="FORMAT", rich_help_panel=OUTPUT,
                                   help="table, csv or json."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=_folder, metavar="DIR", rich_help_panel=OUTPUT,
                                       help="Write the sweep folder here."),
    config_dir: Optional[List[Path]] = _config_dir_option(),
    cfg: Optional[str] = _cfg_option(),
    each_job: bool = typer.Option(False, "--each-job", rich_help_panel=OUTPUT, help=EACH_JOB_HELP),
    multirun: bool = _multirun_option(),
) -> None:
    """Expand a sweep into budget-matched GRPO jobs; preview each job's FLOPs, memory and wall time.

    With no overrides: the embedded tiny grid. [bold]race plan grid=pilot[/] shows the paper-like
    Qwen2.5 grid. Nothing is written unless --out is given. Every option in full: docs/commands.md.
    """
    from race_cli import machine
    from race_cli.cost.memory import parse_size
    from race_cli.plan.build import build_plan, write_sweep
    from race_cli.plan.render import print_plan

    try:
        _use_config_dirs(config_dir)
        overrides, out = _sweep_habits(overrides, out, "--out", multirun, cfg, each_job,
                                       max_jobs=max_jobs, yes=yes, race=not no_race, max_seeds=max_seeds)
        if max_jobs < 1:
            raise RaceError(f"--max-jobs {max_jobs}: expected at least 1.")
        if reprobe:  # plan/cpu_probe.py reads it where the CPU rates are scaled
            os.environ["RACE_CPU_PROBE"] = "refresh"
        from race_cli.plan.cpu_probe import set_background

        set_background()  # a first probe of this machine runs beside the plan, not before it
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
                       informative=informative, gpu=spec, gpus_per_job=gpus_per_job, assume_gpu=True,
                       race=not no_race, max_seeds=max_seeds)
        if seed_sd is None:  # checked above; now the grid's own declared spread, where it has one
            sd = seed_sd_from(None, p.grid)
        if out is not None:
            written = write_sweep(p, out)
    except RaceError as exc:
        _fail(exc)
    from race_cli.plan.power import joint_power_lines, plan_joint_power, plan_power, print_power
    from race_cli.plan.render import power_line
    from race_cli.plan.walltime_eval import eval_share_line

    powers, joint = plan_power(p.jobs, sd[0]), plan_joint_power(p.jobs, sd[0])
    head = []  # the headline under the jobs and wall time: what the pilot resolves, what the race costs
    if fmt == PlanFormat.table:
        head += [line for line in [power_line(powers, joint, sd[0], sd[1], table=power_table)] if line]
        if p.race is not None:
            from race_cli.plan.race_price import price_lines, price_race

            head += price_lines(price_race(p, sd[0]), p.race)
            from race_cli.plan.walltime_eval import eval_route_line  # issue 52: the evaluation route's price

            head += [line for line in [eval_route_line(p.jobs, p.race)] if line]
    print_plan(p, fmt.value, head=head)
    for note in (p.race_note, p.task_note):
        if note:
            from rich.console import Console

            Console(stderr=True).print(note, highlight=False)
    if power_table or fmt != PlanFormat.table:  # the table on stderr: stdout stays the plan (or its data)
        print_power(powers, sd[1], eval_share_line(p.jobs), joint_lines=joint_power_lines(joint))
    elif (share := eval_share_line(p.jobs)):
        from rich.console import Console

        Console().print(share, highlight=False)
    from race_cli.plan.build import SEED_WARNING, one_seed_regimes

    if (n_one := one_seed_regimes(p.jobs)):
        from rich.console import Console

        from race_cli.regime import regime_key

        n_reg = len({regime_key(j.overrides) for j in p.jobs})
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


@app.command(cls=_Command)
def flops(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of ONE job (no sweeps).", show_default=False,
                                                    metavar="OVERRIDES"),
    audit: bool = typer.Option(False, "--audit", rich_help_panel=WHAT,
                               help="Compare with torch's FlopCounterMode (imports torch)."),
    batch: int = typer.Option(2, min=1, max=1024, metavar="N", rich_help_panel=RESOURCES,
                              help="--audit: sequences per measured batch."),
    config_dir: Optional[List[Path]] = _config_dir_option(),
) -> None:
    """Print one job's per-phase FLOP ledger (model and executed conventions), optionally audited."""
    from race_cli.plan.render import print_flops

    try:
        _use_config_dirs(config_dir)
        if audit and not 1 <= batch <= 1024:
            raise RaceError(f"--batch {batch}: expected 1 to 1024 sequences per measured batch.")
        code = print_flops(overrides or [], audit=audit, batch=batch)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


@app.command(cls=_Command)
def mem(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of ONE job (no sweeps).", show_default=False,
                                                    metavar="OVERRIDES"),
    audit: bool = typer.Option(False, "--audit", rich_help_panel=WHAT,
                               help="Compare with peaks measured on fake tensors (slow)."),
    quick: bool = typer.Option(False, "--quick", rich_help_panel=WHAT, help="--audit: only the two small cases."),
    gpu_mem: Optional[str] = typer.Option(None, "--gpu-mem", metavar="SIZE", rich_help_panel=RESOURCES,
                                          help="Device memory, e.g. 80GiB."),
    config_dir: Optional[List[Path]] = _config_dir_option(),
) -> None:
    """Print one job's memory ledger: planned peak device bytes per phase and their parts."""
    from race_cli.cost.memory import parse_size
    from race_cli.plan.render import print_memory

    try:
        _use_config_dirs(config_dir)
        code = print_memory(overrides or [], gpu_mem=parse_size(gpu_mem) if gpu_mem else None, audit=audit,
                            quick=quick)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


@app.command(cls=_Command)
def train(
    overrides: Optional[List[str]] = typer.Argument(None, help="Overrides of ONE job (no sweeps).", show_default=False,
                                                    metavar="OVERRIDES"),
    job_dir: Optional[str] = typer.Option(None, "--job-dir", metavar="DIR", rich_help_panel=WHAT,
                                          help="Run or resume a job folder of race plan --out."),
    out: Optional[str] = typer.Option(None, "--out", "-o", metavar="DIR", rich_help_panel=OUTPUT,
                                      help="Job folder to create or resume."),
    config_dir: Optional[List[Path]] = _config_dir_option(),
) -> None:
    """Run one budget-matched GRPO job: rollout -> reward -> update until the budget is spent.

    Writes metrics.jsonl, ledger.json, summary.json, adapter/ and checkpoint/ into the job folder;
    rerunning on the same folder resumes from the last checkpoint.
    """
    from race_cli.engine.train import train_main

    try:
        _use_config_dirs(config_dir)
        overrides, run_dir = _hydra_folder(overrides, Path(out) if out and out.strip() else None, "--out",
                                           "hydra.run.dir")
        out = str(run_dir) if run_dir is not None and out is None else out
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


@app.command(cls=_Command)
def run(
    overrides: Optional[List[str]] = typer.Argument(None, help=OVERRIDES_HELP, show_default=False,
                                                    metavar="OVERRIDES"),
    retry_failed: bool = typer.Option(False, "--retry-failed", rich_help_panel=WHAT,
                                      help="Also rerun failed jobs (they resume)."),
    max_jobs: int = typer.Option(512, min=1, max=100_000, metavar="N", rich_help_panel=WHAT, show_default=False,
                                 help="Refuse larger sweeps unless --yes (512)."),
    yes: bool = typer.Option(False, "--yes", "-y", rich_help_panel=WHAT, help="Run sweeps larger than --max-jobs."),
    launcher: str = typer.Option("local", "--launcher", metavar="local|slurm", rich_help_panel=WHERE,
                                 show_default=False, help="This machine (local), or a SLURM array."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, max=1024, metavar="N",
                                          rich_help_panel=RESOURCES, help="CPU workers (default: one per core)."),
    gpus_per_job: int = typer.Option(1, "--gpus-per-job", min=0, max=1024, metavar="N", rich_help_panel=RESOURCES,
                                     help="GPUs per job (SLURM: 0 = CPU tasks)."),
    allow_cpu: bool = typer.Option(False, "--allow-cpu", rich_help_panel=RESOURCES,
                                   help="Run hub-sized models on CPU workers."),
    partition: Optional[str] = typer.Option(None, "--partition", metavar="NAME", rich_help_panel=SLURM,
                                            help="SLURM partition."),
    time_min: int = typer.Option(60, "--time-min", min=1, max=43_200, metavar="MIN", rich_help_panel=SLURM,
                                 show_default=False, help="Minutes, then requeued (60)."),
    array_parallelism: Optional[int] = typer.Option(None, "--array-parallelism", min=1, max=102_400, metavar="N",
                                                    rich_help_panel=SLURM, help="Most tasks running at once."),
    cpus_per_task: Optional[int] = typer.Option(None, "--cpus-per-task", min=1, max=1024, metavar="N",
                                                rich_help_panel=SLURM, help="CPUs per task (8 per GPU)."),
    mem_gb: Optional[int] = typer.Option(None, "--mem-gb", min=1, max=65_536, metavar="GB", rich_help_panel=SLURM,
                                         help="Host memory per task."),
    setup: Optional[List[str]] = typer.Option(None, "--setup", metavar="LINE", rich_help_panel=SLURM,
                                              help="Shell line before each task."),
    wait: bool = typer.Option(True, "--wait/--no-wait", rich_help_panel=SLURM, show_default=False,
                              help="Wait for the tasks (default)."),
    sweep_dir: Optional[Path] = typer.Option(None, "--sweep-dir", "-d", parser=_folder,
                                             metavar="DIR", rich_help_panel=OUTPUT,
                                             help="Sweep folder (default: runs/<grid>-<hash>)."),
    no_race: bool = typer.Option(False, "--no-race", rich_help_panel=WHAT, help=NO_RACE_HELP),
    max_seeds: Optional[int] = typer.Option(None, "--max-seeds", min=2, max=1000, metavar="N", rich_help_panel=WHAT,
                                            help=MAX_SEEDS_HELP),
    config_dir: Optional[List[Path]] = _config_dir_option(),
    cfg: Optional[str] = _cfg_option(),
    each_job: bool = typer.Option(False, "--each-job", rich_help_panel=OUTPUT, help=EACH_JOB_HELP),
    multirun: bool = _multirun_option(),
) -> None:
    """Run every job of a sweep, one process per job, and end with the findings.

    Same overrides as [bold]race plan[/] (none: the embedded tiny grid). A raced grid gives later
    seeds only to open calls. Rerun to resume; Ctrl-C stops cleanly.

    Exit code: 0 all done, 1 some job failed, 2 bad input, 130 stopped. Every option in full:
    docs/commands.md.
    """
    from race_cli.pool.run import RunOptions, run_main

    try:
        _use_config_dirs(config_dir)
        overrides, sweep_dir = _sweep_habits(overrides, sweep_dir, "--sweep-dir", multirun, cfg, each_job,
                                             max_jobs=max_jobs, yes=yes, race=not no_race, max_seeds=max_seeds)
        options = RunOptions(overrides=tuple(overrides or ()), sweep_dir=sweep_dir, workers=workers,
                             gpus_per_job=gpus_per_job, launcher=launcher, retry_failed=retry_failed, yes=yes,
                             max_jobs=max_jobs, partition=partition, time_min=time_min,
                             array_parallelism=array_parallelism, setup=tuple(setup or ()),
                             cpus_per_task=cpus_per_task, mem_gb=mem_gb, wait=wait, allow_cpu=allow_cpu,
                             race=not no_race, max_seeds=max_seeds)
        code = run_main(options)
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
    machine whose cores are busy, as when race run trains beside it, OpenBLAS's worker threads only spin for
    the cores, and one thread is faster with the same output (docs/measurements/code.md). Set before numpy
    loads; the user's own setting wins. The report starts no process, so nothing else inherits it."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


@app.command(cls=_Command)
def report(
    sweep_dirs: List[Path] = typer.Argument(..., parser=_folder,
                                            help="Sweep folders of race run (combined).", show_default=False,
                                            metavar="SWEEP..."),
    target: Optional[str] = typer.Option(None, "--target", "-t", metavar="NAME", rich_help_panel=WHAT,
                                         help="One evaluation target (default: each)."),
    by: Optional[List[str]] = typer.Option(None, "--by", metavar="COLUMN", rich_help_panel=WHAT,
                                           help="Condition columns (repeatable)."),
    at_budget: Optional[str] = typer.Option(None, "--at-budget", metavar="X", rich_help_panel=WHAT,
                                            help="Predict the ranking at 2.4e12 FLOPs or 3x."),
    assume_seed_sd: Optional[float] = typer.Option(None, "--assume-seed-sd", min=1e-6, max=0.999, metavar="SD",
                                                   rich_help_panel=WHAT, help="One seed per regime: assume this sd."),
    bootstrap: int = typer.Option(1000, min=100, max=100_000, metavar="N", rich_help_panel=RESOURCES,
                                  help="Bootstrap resamples (100 to 100,000)."),
    seed: int = typer.Option(0, min=0, max=2**32 - 1, metavar="N", rich_help_panel=RESOURCES,
                             help="Seed of the bootstrap."),
    fmt: ReportFormat = typer.Option(ReportFormat.table, "--format", "-f", metavar="FORMAT",
                                     rich_help_panel=OUTPUT,
                                     help="table, csv, json or markdown."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=_folder, metavar="DIR", rich_help_panel=OUTPUT,
                                       help="Report folder (default: <sweep>/report)."),
    plots: bool = typer.Option(True, "--plots/--no-plots", rich_help_panel=OUTPUT, help="Draw the PNG plots."),
    full: bool = typer.Option(False, "--full", rich_help_panel=OUTPUT,
                              help="Print the whole report, not the findings only."),
) -> None:
    """Rank the compute-allocation regimes of finished sweeps, with intervals, fits and plots.

    Opens with the findings: per condition the winner or "not separated", and what would settle
    each open call; summary.md has everything. A pilot is a diagnostic: validate the named regimes.
    Reading it: docs/report.md.
    """
    _one_blas_thread()
    from race_cli.report.build import ReportOptions
    from race_cli.report.command import report as report_main

    raise typer.Exit(report_main(ReportOptions(tuple(sweep_dirs), target=target, by=tuple(by) if by else None,
                                               fmt=fmt.value, out=out, plots=plots, bootstrap=bootstrap, seed=seed,
                                               at_budget=at_budget, assume_seed_sd=assume_seed_sd, full=full)))


@app.command(cls=_Command)
def evaluate(
    sweep: Path = typer.Argument(..., parser=_folder, help="A sweep folder with finished jobs.", show_default=False),
    items: int = typer.Option(..., "--items", min=1, max=10_000_000, metavar="N", rich_help_panel=WHAT,
                              help="Items per target to score in all (e.g. 1200).", show_default=False),
    jobs: Optional[List[str]] = typer.Option(None, "--job", metavar="ID", rich_help_panel=WHAT,
                                             help="Only this job (repeatable; default: every finished job)."),
    workers: Optional[int] = typer.Option(None, "--workers", "-w", min=1, max=1024, metavar="N",
                                          rich_help_panel=RESOURCES, help="CPU workers (default: one per core)."),
) -> None:
    """Score finished jobs' kept policies (and their start) on more items, without training: paired, same draws.

    Each job writes jobs/<id>/eval-more.json; [bold]race report[/] then ranks a condition on the added items
    where all its jobs have them. A rerun redoes only the jobs without them. Details: docs/racing.md.
    """
    from race_cli.pool.reeval import reevaluate_sweep

    try:
        results = reevaluate_sweep(sweep, items, jobs, workers)
    except RaceError as exc:
        _fail(exc)
    failed = sorted(j for j, st in results.items() if st != "done")
    for j in failed:
        typer.echo(f"{j}: {results[j]} (see jobs/{j}/log.txt)")
    typer.echo(f"{len(results) - len(failed)} re-evaluated, {len(failed)} not")
    raise typer.Exit(1 if failed else 0)


@app.command(cls=_Command)
def validate(
    pilot: Path = typer.Argument(..., parser=_folder,
                                 help="The pilot sweep folder (race report has run).", show_default=False,),
    replicate: bool = typer.Option(False, "--replicate", rich_help_panel=WHAT,
                                   help="At the pilot's own budget, fresh seeds."),
    scale: Optional[float] = typer.Option(None, "--scale", min=1e-3, max=1e6, metavar="K", rich_help_panel=WHAT,
                                          help="Budget = K x the pilot's (default 2)."),
    budget: Optional[float] = typer.Option(None, "--budget", min=1.0, max=1e30, metavar="FLOPS",
                                           rich_help_panel=WHAT, help="Budget per job, e.g. 1e12."),
    target: Optional[str] = typer.Option(None, "--target", "-t", metavar="NAME", rich_help_panel=WHAT,
                                         help="Target to validate (default: the report's)."),
    control: str = typer.Option("runner-up", "--control", metavar="runner-up|lowest", rich_help_panel=WHAT,
                                help="What the best is tested against."),
    top: Optional[int] = typer.Option(None, "--top", min=1, max=1000, metavar="K", rich_help_panel=WHAT,
                                      help="The K regimes of highest best share."),
    tied: bool = typer.Option(False, "--tied", rich_help_panel=WHAT, help="Also every regime tied with the best."),
    unlearned: bool = typer.Option(False, "--unlearned", rich_help_panel=WHAT,
                                   help="Also conditions with no gain."),
    margin: float = typer.Option(0.0, "--margin", min=0.0, max=1.0, metavar="M", rich_help_panel=WHAT,
                                 help="Gap to confirm above (0 to 1)."),
    seeds: Optional[int] = typer.Option(None, "--seeds", min=1, max=512, metavar="N", rich_help_panel=RESOURCES,
                                        help="Seeds per regime (default: by power)."),
    power: float = typer.Option(0.8, "--power", min=0.5, max=0.999, metavar="P", rich_help_panel=RESOURCES,
                                help="Power the seeds are sized for (0.5 to 0.999)."),
    gap: Optional[float] = typer.Option(None, "--gap", min=1e-4, max=1.0, metavar="G", rich_help_panel=RESOURCES,
                                        help="Gap to size for (default: the pilot's)."),
    max_seeds: int = typer.Option(8, "--max-seeds", min=1, max=512, metavar="N", rich_help_panel=RESOURCES,
                                  help="At most this many seeds per regime."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=_folder, metavar="DIR", rich_help_panel=OUTPUT,
                                       help="Validation folder (default: beside it)."),
    dry_run: bool = typer.Option(False, "--dry-run", rich_help_panel=OUTPUT, help="Preview only; write nothing."),
    config_dir: Optional[List[Path]] = _config_dir_option(),
) -> None:
    """Turn a pilot's recommendation into a validation sweep: the pilot's best, a control, more seeds.

    Then [bold]race run --sweep-dir DIR[/] and [bold]race report DIR[/]: per condition, best − control
    with its interval: confirmed, not separated or reversed. Details: docs/validation.md.
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
        _use_config_dirs(config_dir)
        validate_main(pilot, budget=budget, scale=scale, seeds=seeds, top=top, tied=tied, target=target, out=out,
                      dry_run=dry_run, typed=typed, replicate=replicate, margin=margin, unlearned=unlearned,
                      control=control, power=power, gap=gap, max_seeds=max_seeds)
    except RaceError as exc:
        _fail(exc)


@app.command(cls=_Command)
def zoo(
    names: Optional[List[str]] = typer.Argument(None, help="Entries to show or build (default: all).",
                                                show_default=False, metavar="NAMES"),
    build: bool = typer.Option(False, "--build", rich_help_panel=WHAT, help="Build missing entries."),
    force: bool = typer.Option(False, "--force", rich_help_panel=WHAT, help="Rebuild even when cached."),
    verify: bool = typer.Option(False, "--verify", rich_help_panel=WHAT,
                                help="Rebuild and compare with the shipped weights."),
) -> None:
    """List (and build) the embedded tiny model zoo: tiny-s/m/l policies and the tiny PRM."""
    from race_cli.zoo import zoo_main

    try:
        code = zoo_main(names or None, build=build, force=force, verify=verify)
    except RaceError as exc:
        _fail(exc)
    raise typer.Exit(code)


@app.command(cls=_Command)
def docs(
    page: Optional[str] = typer.Argument(None, metavar="PAGE", show_default=False,
                                         help="A page: commands, gpu, docs/security.md, ... (default: the index)."),
    path: bool = typer.Option(False, "--path", rich_help_panel=OUTPUT, help="Print where the page is instead."),
) -> None:
    """Print a guide (docs/<page>.md, installed with race): the pages help texts and messages name."""
    from race_cli.guide import docs_dir, find_page, pages

    try:
        root = docs_dir()
        found = find_page(page, root)
    except RaceError as exc:
        _fail(exc)
    if path:
        typer.echo(str(found))
        return
    typer.echo(found.read_text(encoding="utf-8"), nl=False)
    if page is None:
        typer.echo("\nPages (race docs PAGE): " + ", ".join(pages(root)))


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
