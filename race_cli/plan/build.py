"""`race plan`: expand a sweep into budget-matched jobs and preview their planned FLOP split.

    race plan                                  # the embedded tiny grid (grid=tiny)
    race plan grid=pilot                       # the paper-like Qwen2.5 grid
    race plan grid=none model=tiny-m grpo.group_size=4,8,16 budget.flops=5e11 --out runs/g

Each job fixes everything but one free knob, the number of GRPO iterations T, which the
budget solver (race_cli/cost/budget.py, the same code the job runs) sets so the planned total is
as close to `budget.flops` as possible without exceeding it: full iterations while they fit,
then one smaller last iteration (docs/design.md "The budget"). Every job is composed and
validated before anything is printed or written. No torch import here.
"""

from __future__ import annotations

import copy
import itertools
import math
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from race_cli import machine
from race_cli.cost.budget import BudgetPlan, check_fits, job_backend, plan_budget, reward_name, shares
from race_cli.errors import RaceError
from race_cli.folder import (default_sweep_dir, hydra_dir, is_sweep, job_config, job_configs, job_dir, job_overrides,
                             multirun_yaml, plan_csv, plan_json)
from race_cli.regime import is_seed, regime_key
from race_cli.cost.memory import memory_row

MAX_JOBS = 512  # a larger sweep needs --yes
HARD_MAX_JOBS = 100_000  # even with --yes: every job is composed and written; more is a typo


@dataclass
class PlannedJob:
    """One job of a plan: its overrides, composed config and budget plan (the engine's Job runs it)."""

    job_id: str
    overrides: list[str]  # all concrete overrides of this job (grid fixed, axes, yours)
    axis_overrides: list[str]  # the swept ones only (they name the job)
    config: dict  # the fully composed config, plain containers
    backend: str = "hf"  # the rollout backend assumed (budget.job_backend on this machine)
    budget: BudgetPlan | None = None  # T and the planned ledger (race_cli.cost.budget.solve)
    memory: Any = None  # memory.JobMemory: planned peak device bytes per phase, resolved micro-batch
    wall: Any = None  # walltime.JobTime: planned wall seconds per part (race_cli/plan/wall.py)
    gpus: int = 0  # GPUs the job runs on (0: a CPU worker)

    @property
    def iterations(self) -> int:
        """T, solved (the last iteration may be smaller, see budget.solve)."""
        return self.budget.iterations if self.budget else 0

    @property
    def per_iteration(self) -> dict:
        """Phase -> flops.Flops of one full iteration."""
        return self.budget.per_iteration if self.budget else {}

    def planned(self) -> dict[str, Any]:
        """Planned ledger: FLOPs and tokens of all T iterations (model and executed conventions)."""
        return self.budget.ledger()

    def row(self, cache: dict | None = None) -> dict[str, Any]:
        """One line of plan.csv / plan.json / the table. `cache`: id(budget) -> (ledger, shares, memory
        columns), shared by the jobs of one regime (Plan.rows)."""
        c = self.config
        key = (id(self.budget), id(self.memory))
        if cache is None or key not in cache:
            pl = self.planned()
            got = (pl, shares(pl["flops"]), memory_row(self.memory))
            if cache is None:
                cache = {}
            cache[key] = got
        pl, share, mem = cache[key]
        total = pl["flops"]["total"]
        return {
            "job_id": self.job_id,
            "model": c["model"]["name"],
            "group_size": c["grpo"]["group_size"],
            "updates_per_batch": c["grpo"]["updates_per_batch"],
            "prompts_per_iter": c["grpo"]["prompts_per_iter"],
            "reward": reward_name(c),
            "task": c["task"]["name"],
            "seed": c["seed"],
            "rollout_backend": self.backend,
            "budget_flops": c["budget"]["flops"],
            "iterations": self.iterations,
            "last_iteration_prompts": self.budget.last_prompts,
            "planned_flops_total": total,
            "planned_flops_rollout": pl["flops"]["rollout"],
            "planned_flops_update": pl["flops"]["update"],
            "planned_flops_reward": pl["flops"]["reward"],
            "planned_executed_flops_total": pl["executed_flops"]["total"],
            "share_search": share["search"],
            "share_learning": share["learning"],
            "share_feedback": share["feedback"],
            "p": share["p"],
            "budget_used": total / c["budget"]["flops"],
            "informative_share": self.budget.spec.trained_share,
            "planned_seconds": self.wall.total if self.wall else None,
            "planned_gpu_hours": (self.wall.total * self.gpus / 3600) if self.wall and self.gpus else None,
            "tokens_prompt": pl["tokens"]["prompt"],
            "tokens_completion": pl["tokens"]["completion"],
            **mem,
            "overrides": " ".join(self.overrides),
        }


def one_seed_regimes(jobs: Sequence[PlannedJob]) -> int:
    """How many regimes (jobs equal up to their seed) run a single seed: their intervals in
    `race report` cannot include training noise unless other regimes of the condition repeat."""
    count: dict[tuple, int] = {}
    for j in jobs:
        key = regime_key(j.overrides)
        count[key] = count.get(key, 0) + 1
    return sum(n == 1 for n in count.values())


SEED_WARNING = ("warning: {n} of {r} regime(s) run one seed. `race report` then pools training (seed) "
                "noise from the condition's repeated regimes, or, where no regime repeats, its intervals "
                "cover evaluation noise only and say so. Sweep seed=0,1 (or more) for intervals that "
                "include training noise.")


@dataclass
class Plan:
    typed: list[str]  # the overrides as typed
    grid: dict  # name, description, axes, fixed of the chosen grid
    axes: dict[str, list[str]]  # swept key -> values
    jobs: list[PlannedJob]
    capped: list[str] = field(default_factory=list)  # ids of jobs whose T budget.max_iterations cut
    slots: int = 1  # jobs race run would run at once here (CPU workers or GPUs)
    wall_source: str = ""  # where the wall-time rates come from
    gpu: Any = None  # walltime.GpuSpec of `race plan --gpu KINDxN` (None: the machine detected here)
    host_note: str | None = None  # pinned host memory of vLLM's level-1 sleep per job and node (memory.pinned_host_check)
    gpu_assumed: str | None = None  # why the plan assumed ASSUMED_GPU (no GPU here, no --gpu): its first line
    race: Any = None  # stats/race.Schedule of a raced plan (None: a fixed design); `jobs` is then its first look
    reserve: list[PlannedJob] = field(default_factory=list)  # a race's later seeds, written when a look opens
    race_note: str | None = None  # why a grid that races planned a fixed design (the seeds typed)
    task_note: str | None = None  # which of the grid's fixed keys were left out because task= names another task

    def grid_seconds(self) -> float:
        """Planned wall seconds of the whole grid on `slots` (longest first, as the pool runs it)."""
        from race_cli.cost.walltime import grid_seconds

        return grid_seconds([j.wall.total for j in self.jobs if j.wall], self.slots)

    def rows(self) -> list[dict]:
        cache: dict = {}
        return [j.row(cache) for j in self.jobs]


# --- building a plan ---------------------------------------------------------------------------

def default_grid() -> str:
    """The grid chosen in conf/config.yaml's defaults list."""
    return default_option("grid", "none")


def default_option(group: str, fallback: str) -> str:
    """The option of `group` chosen in conf/config.yaml's defaults list."""
    import yaml

    from race_cli.config.compose import CONFIG_NAME, config_file

    with open(config_file(None, CONFIG_NAME), encoding="utf-8") as f:
        root = yaml.safe_load(f) or {}
    for entry in root.get("defaults", []):
        if isinstance(entry, dict) and group in entry:
            return str(entry[group])
    return fallback


# A grid's fixed keys that belong to its task: what it evaluates on and the task's lengths and item counts.
# When the command names another task=, they are left out, so evaluation and lengths follow that task.
TASK_BOUND = ("eval.targets", "eval.max_items", "eval.max_items_by_target", "rollout.max_new_tokens",
              "rollout.expected_completion_tokens", "rollout.max_model_len")


def task_fixed(grid: dict, typed: Any) -> tuple[dict, str | None]:
    """(the grid's fixed block to apply, a note) when `typed` (config.sweep.parse_sweep) names task=: a task
    other than the grid's own (its fixed task:, else conf/config.yaml's) drops the grid's TASK_BOUND and task.*
    keys, and the note says which; the grid's own task, or no task=, keeps the block whole."""
    named = [t.lstrip("+").partition("=")[2] for t in typed.fixed if t.lstrip("+").partition("=")[0] == "task"]
    named += [v for a in typed.axes if a.key == "task" for v in a.values]
    own = str(grid["fixed"].get("task") or default_option("task", "arithmetic"))
    drop = [k for k in grid["fixed"] if k in TASK_BOUND or k.startswith("task.")]
    if not drop or all(n == own for n in named):
        return grid["fixed"], None
    note = (f"note: task={','.join(dict.fromkeys(named))} is not the task of grid '{grid['name']}' ({own}): its "
            f"{', '.join(drop)} are left out, so evaluation and lengths follow your task (eval.targets: the "
            "task's own). Name eval.targets=[...] to evaluate elsewhere.")
    return {k: v for k, v in grid["fixed"].items() if k not in drop}, note


def load_grid(name: str) -> dict:
    import yaml

    from race_cli.config.compose import config_file, group_options

    path = config_file("grid", name) if name in group_options("grid") else None  # a name of <dir>/grid/, never a path
    if path is None:
        raise RaceError(f"Unknown grid option '{name}'. Available: {', '.join(group_options('grid'))}.")
    with open(path, encoding="utf-8") as f:
        grid = yaml.safe_load(f) or {}
    seed_sd = grid.get("seed_sd")  # the seed spread `race plan` prices at without --seed-sd (plan/power.py)
    if seed_sd is not None and (isinstance(seed_sd, bool) or not isinstance(seed_sd, (int, float))
                                or not 0 <= seed_sd < 1):
        raise RaceError(f"grid '{name}': seed_sd {seed_sd!r} is not a spread on the score scale; expected a number "
                        "in [0, 1) such as 0.01 (a finished run's: race plan --seed-sd runs/<sweep>), or none.")
    return {"name": grid.get("name", name), "description": grid.get("description", ""),
            "axes": dict(grid.get("axes") or {}), "fixed": dict(grid.get("fixed") or {}), "race": grid.get("race"),
            "seed_sd": seed_sd}


def _fixed_override(key: str, value: Any) -> str:
    if isinstance(value, bool):
        value = str(value).lower()
    elif value is None:
        value = "null"
    return f"{key}={value}"


def build_plan(overrides: Sequence[str], *, max_jobs: int = MAX_JOBS, yes: bool = False,
               check_budget: bool = True, gpu_mem: int | None = None, rates: dict | None = None,
               informative: dict | None = None, gpu: Any = None, gpus_per_job: int = 1,
               too_many: str = "Check the axes, or pass --yes to plan it anyway.",
               say: Callable[[str], None] | None = None, assume_gpu: bool = False, race: bool = True,
               max_seeds: int | None = None) -> Plan:
    """Expand, compose, validate and budget-match every job; RaceError lists every problem.

    `gpu_mem` (bytes): resolve `grpo.micro_batch_size: auto` against it and refuse jobs whose
    planned peak does not fit (race_cli/cost/memory.py); None = plan memory without a limit.
    `rates` (model -> walltime.Rates, plan/measured.sweep_rates): the throughput a finished sweep
    measured, for the planned wall time (default: the measured CPU defaults, or the GPU kind's
    assumptions). `informative` (plan/measured.sweep_informative): the measured share of rows the
    update runs on, per regime or reward type, for jobs that leave grpo.expected_informative_share null.
    `gpu` (walltime.GpuSpec, race plan --gpu H100x8): plan backends, wall time and GPU-hours for that
    device instead of the one detected here (its memory comes in as `gpu_mem`). `gpus_per_job` (as `race
    run --gpus-per-job`): GPUs per GPU job; with 2 or more the PRM is planned on the job's second GPU.
    `say`: where a progress line goes for large sweeps (default: stderr, when more than PROGRESS_JOBS jobs).
    `assume_gpu` (race plan): with no `gpu` and no GPU here, a sweep whose jobs need one (hub-sized models)
    or that gives `gpu_mem` is planned on one ASSUMED_GPU, never on CPU rates borrowed from a tiny model;
    the plan's gpu_assumed says so.
    `race` False (--no-race) plans a fixed design even where the grid races; `max_seeds` (--max-seeds) sets
    the race's cap (plan/race_plan.py): a raced plan's `jobs` are its first look, `reserve` the seeds after.
    """
    from race_cli.cost.memory import plan_memory

    from race_cli.config.compose import config_groups, group_options, refuse_planted_interpolation
    from race_cli.config.sweep import Axis, job_id, parse_sweep, unique_ids
    from race_cli.plan.wall import on_gpu, plan_wall

    groups = {g: group_options(g) for g in config_groups()}
    limit = HARD_MAX_JOBS if yes else max_jobs
    typed = parse_sweep(overrides, groups, max_values=limit,
                        too_many="Narrow the axes." if yes else too_many)

    # The grid: chosen by a fixed grid=NAME override (sweeping grids is refused), else the default.
    if any(a.key == "grid" for a in typed.axes):
        raise RaceError("grid= selects a whole sweep; plan one grid at a time (race plan grid=tiny, then grid=pilot).")
    grid_name = default_grid()
    for text in typed.fixed:
        key, _, value = text.lstrip("+").partition("=")
        if key == "grid":
            grid_name = value
    grid = load_grid(grid_name)
    grid_axes = parse_sweep([f"{k}={v}" for k, v in grid["axes"].items()], groups).axes
    for a in grid_axes:
        if not a.values:
            raise RaceError(f"grid '{grid_name}' axis {a.key} has no values.")

    # Axes: the grid's, replaced by a command-line sweep or fixed value of the same key.
    user_keys = {a.key for a in typed.axes} | {t.lstrip("+").partition("=")[0] for t in typed.fixed}
    axes: list[Axis] = [a for a in grid_axes if a.key not in user_keys] + typed.axes
    grid_fixed, task_note = task_fixed(grid, typed)
    fixed = [_fixed_override(k, v) for k, v in grid_fixed.items() if k not in user_keys] + typed.fixed
    schedule, first, race_note, spending_named = _race_seeds(grid, axes, fixed, race, max_seeds, user_keys,
                                                             limit)

    n_jobs = math.prod(len(a.values) for a in axes) if axes else 1  # counted before anything is expanded
    if n_jobs > max_jobs and not yes:
        raise RaceError(f"The sweep expands to {n_jobs} jobs, more than the maximum of {max_jobs}. {too_many}")
    if n_jobs > HARD_MAX_JOBS:
        raise RaceError(f"The sweep expands to {n_jobs} jobs, more than the {HARD_MAX_JOBS} race plans even with "
                        "--yes. Narrow the axes.")
    combos = [list(c) for c in itertools.product(*[a.overrides() for a in axes])]

    jobs, problems = _compose_jobs(fixed, combos, set(groups))
    if problems:
        raise RaceError(*problems)
    assumed = None
    if assume_gpu and gpu is None and not machine.visible_gpus():
        gpu, assumed = _assumed_gpu(jobs, gpu_mem)
        if gpu is not None and gpu_mem is None:
            gpu_mem = gpu.kind.memory_bytes

    ids = unique_ids([job_id(c) for c in combos], [j.overrides for j in jobs])
    short, capped = [], []
    # Backend, budget, memory and wall time read no seed: solved once per regime (jobs equal up to
    # their seed) and shared, read-only, by its jobs; a 100,000-seed sweep solves one regime.
    solved: dict[tuple, tuple] = {}
    reps: list[PlannedJob] = []
    progress = _Progress(len(jobs), say)
    for jid, job, combo in zip(ids, jobs, combos):
        progress.tick()
        job.job_id, job.axis_overrides = jid, combo
        if informative:
            apply_informative(job.config, informative)
        regime = _split_seed(job.overrides)[0]
        who = "This job" if jid == "job" else f"Job {jid}"
        if regime not in solved:
            refuse_planted_interpolation(job.config, job.overrides)  # race run would refuse it when reading back
            job_on_gpu = on_gpu(job.config, gpu)
            backend = job_backend(job.config, on_gpu=job_on_gpu,
                                  vllm_installed=machine.vllm_installed())  # the job resolves it again where it runs
            budget = plan_budget(job.config, backend)
            try:
                memory, mem_problems = plan_memory(job.config, gpu_mem, vllm_installed=machine.vllm_installed(),
                                                   kv_release=machine.vllm_kv_release(),
                                                   reward_gpu=job_on_gpu and gpus_per_job >= 2), []
            except RaceError as exc:
                memory, mem_problems = None, exc.problems
            problem = check_fits(budget)
            solved[regime] = (backend, budget, memory, mem_problems, problem if check_budget else None, job)
            reps.append(job)
        job.backend, job.budget, job.memory, mem_problems, problem, _rep = solved[regime]
        short.extend(f"{who}: {p}" for p in mem_problems)
        if problem:
            short.append(f"{who}: {problem}")
        if job.budget.capped:
            capped.append(jid)
    from race_cli.tasks.checks import job_problems

    short.extend(job_problems(j.config for j in jobs))  # each model's tokenizer, the task's rows, the targets
    if short:
        raise RaceError(*short)
    slots, source = plan_wall(reps, rates, gpu, gpus_per_job)
    for job in jobs:
        rep = solved[_split_seed(job.overrides)[0]][5]
        job.wall, job.gpus = rep.wall, rep.gpus
    reserve: list[PlannedJob] = []
    if schedule is not None:
        from race_cli.plan.race_plan import resolve_spending, split_looks

        schedule = resolve_spending(schedule, spending_named, jobs)
        jobs, reserve = split_looks(jobs, first)
    if not any(j.gpus for j in jobs):  # CPU workers: as many as the cores allow, at most one per job
        from race_cli.plan.wall import cpu_workers

        slots = cpu_workers(machine.cpu_cores(), len(jobs))
    progress.done()
    from race_cli.cost.memory import pinned_host_check

    local = machine.visible_gpus() if gpu is None else []
    refuse_vllm_on_mig(local, jobs + reserve)
    host = pinned_host_check([j.memory.pinned_host_bytes for j in jobs if j.memory is not None],
                             gpus_per_node=gpu.count if gpu is not None else len(local),
                             ram=machine.host_ram_bytes(), local=bool(local))
    if host.refuse:
        raise RaceError(host.text)
    return Plan(typed=list(overrides), grid=grid, axes={a.key: a.values for a in axes}, jobs=jobs, capped=capped,
                slots=slots, wall_source=source, gpu=gpu, host_note=host.text, gpu_assumed=assumed,
                race=schedule, reserve=reserve, race_note=race_note, task_note=task_note)


def refuse_vllm_on_mig(gpus: Sequence[str], jobs: Sequence[PlannedJob]) -> None:
    """RaceError when the GPUs here are MIG devices and a job samples with vLLM: refused, not merely untested.

    The pool hands a job its MIG device by UUID (CUDA_VISIBLE_DEVICES=MIG-...), the form vLLM's device lookup
    takes for an integer and fails on at start-up (vLLM issue 41848; the fix, pull request 46132, was still
    open at the time of writing), and vLLM's NVML queries read the parent GPU's memory, not the slice's, so its
    gpu_memory_utilization would not be the ledger's. race's own samplers run on a MIG device as on any GPU."""
    migs = [g for g in gpus if g.startswith("MIG-")]
    on_vllm = [j.job_id for j in jobs if j.backend == "vllm"]
    if not migs or not on_vllm:
        return
    raise RaceError(f"The GPUs here are MIG devices ({', '.join(migs[:2])}{', ...' if len(migs) > 2 else ''}) and "
                    f"{len(on_vllm)} job(s) would sample with vLLM ({', '.join(on_vllm[:3])}"
                    f"{', ...' if len(on_vllm) > 3 else ''}): vLLM does not start on a MIG device selected by UUID "
                    "(vLLM issue 41848) and sizes its memory from the whole GPU. Try: rollout.backend=lean (race's "
                    "sampler, which runs on a MIG device as on any GPU), or whole GPUs (MIG off).")


ASSUMED_GPU = "H100"  # the kind a plan assumes when its jobs need a GPU and none is named or detected


def _assumed_gpu(jobs: Sequence[PlannedJob], gpu_mem: int | None) -> tuple[Any, str | None]:
    """(one ASSUMED_GPU, the line that says why) when these jobs need a GPU (a hub-sized model: CPU workers
    would take days, cost/flops.too_big_for_cpu) or --gpu-mem names a GPU's memory; else (None, None)."""
    from race_cli.cost.walltime import GPU_KINDS, GpuSpec
    from race_cli.cost.flops import too_big_for_cpu

    big = too_big_for_cpu([j.config for j in jobs])
    if not big and gpu_mem is None:
        return None, None
    why = (f"its jobs load hub-sized models ({', '.join(big[:3])}{', ...' if len(big) > 3 else ''})" if big
           else "--gpu-mem names a GPU's memory")
    return GpuSpec(GPU_KINDS[ASSUMED_GPU], 1), (
        f"GPU assumed: 1 {ASSUMED_GPU} per job, as no GPU is visible here and no --gpu was given ({why}). "
        f"Plan for yours with --gpu KIND or KINDxN (known: {', '.join(GPU_KINDS)}), e.g. --gpu {ASSUMED_GPU}x8.")


def _race_seeds(grid: dict, axes: list, fixed: list[str], race: bool, max_seeds: int | None,
                user_keys: set[str], limit: int = HARD_MAX_JOBS) -> tuple[Any, int, str | None, bool]:
    """(the race's schedule or None, seeds of its first look, a note, whether the grid named the split of α);
    a raced plan's seed axis is set to
    0..cap-1 in `axes` (in place), the jobs past the first look being its reserve. Seeds typed on the command
    line that a race cannot start from (seed=0, seed=3,5) make a fixed design, said in the note, unless
    --max-seeds asked for a race (then refused)."""
    from race_cli.config.sweep import Axis
    from race_cli.plan.race_plan import check_cap, first_look_seeds, make_race_schedule, race_block

    block = race_block(grid, no_race=not race, max_seeds=max_seeds)
    if block is None:
        return None, 0, None, False
    try:
        first, at = first_look_seeds(axes, fixed)
    except RaceError:
        if max_seeds is not None or "seed" not in user_keys:
            raise
        typed = [t for t in fixed if is_seed(t)] + \
            [f"seed={','.join(a.values)}" for a in axes if a.key == "seed"]
        return None, 0, (f"note: grid '{grid['name']}' races, but {' '.join(typed)} cannot start a race (seeds 0, 1, "
                         "... are its first look): a fixed design is planned."), False
    check_cap(block, [a for i, a in enumerate(axes) if i != at], limit)  # before the seed axis is built
    schedule = make_race_schedule(block, first)
    if schedule is None:  # one look: the fixed design the seed axis names
        return None, 0, None, False
    seeds = Axis(key="seed", prefix=axes[at].prefix if at is not None else "",
                 values=[str(s) for s in range(schedule.looks[-1])])
    if at is None:
        axes.append(seeds)
    else:
        axes[at] = seeds
    return schedule, first, None, block.get("spending") is not None


PROGRESS_JOBS = 5000  # sweeps larger than this print a progress line while they are planned


class _Progress:
    """'planning 100000 jobs: 40% (12 s)' on stderr, rewritten in place, for sweeps of more than PROGRESS_JOBS."""

    def __init__(self, total: int, say: Callable[[str], None] | None):
        self.total, self.n, self.t0, self.last = total, 0, time.monotonic(), 0.0
        self.on = total > PROGRESS_JOBS
        self.say = say or (lambda text: print(text, end="", file=sys.stderr, flush=True))

    def tick(self) -> None:
        self.n += 1
        if self.on and self.n % 1000 == 0 and time.monotonic() - self.last > 1.0:
            self.last = time.monotonic()
            self.say(f"\rplanning {self.total} jobs: {100 * self.n // self.total}% ({self.last - self.t0:.0f} s)")

    def done(self) -> None:
        if self.on:
            self.say(f"\rplanned {self.total} jobs in {time.monotonic() - self.t0:.1f} s\n")


def apply_informative(config: dict, measured: dict) -> None:
    """Set grpo.expected_informative_share from a sweep's measurement (its regime, else its reward type)
    when the job leaves it null; an explicit value is kept."""
    from race_cli.plan.measured import settings_key

    g = config["grpo"]
    if g.get("expected_informative_share") is not None:
        return
    key = settings_key(config["model"]["name"], reward_name(config), g["group_size"], g["updates_per_batch"])
    value = measured.get(key, measured.get(("rule" if config["reward"]["type"] == "rule" else "prm",)))
    if value is not None and value > 0:
        config["grpo"] = g = dict(g)  # the section may be shared with other jobs of the regime
        g["expected_informative_share"] = round(float(value), 4)


def _compose_jobs(fixed: list[str], combos: list[list[str]], groups: set[str]) -> tuple[list[PlannedJob], list[str]]:
    """Compose every job: Hydra once per distinct group choice, typed dict updates for the rest."""
    from omegaconf import OmegaConf

    from race_cli.config.compose import compose, derive_settings
    from race_cli.config.schema import validate
    from race_cli.config.sweep import apply_value, schema_types

    from race_cli.config.domains import field_problems

    types = schema_types()
    bases: dict[tuple, dict | RaceError] = {}
    regimes: dict[tuple, dict | RaceError] = {}  # the overrides up to the seed -> composed, validated config
    jobs, problems = [], []
    seen_problems: dict[str, list[str]] = {}
    for combo in combos:
        overrides = fixed + combo
        regime, seeds = _split_seed(overrides)
        try:
            if regime not in regimes:
                regimes[regime] = _compose_regime(list(regime), groups, bases, types, compose, OmegaConf, validate,
                                                  apply_value, derive_settings)
            cfg = regimes[regime]
            if isinstance(cfg, RaceError):
                raise cfg
            if seeds:  # the seed is read by no cross-field rule: only its own domain is checked per job
                cfg = dict(cfg)  # sections are shared by the jobs of one regime and never written
                for o in seeds:
                    apply_value(cfg, o, types)
                msgs = field_problems(cfg, {"seed"})
                if msgs:
                    raise RaceError(*msgs)
        except RaceError as exc:
            for p in exc.problems:
                seen_problems.setdefault(p, []).append(" ".join(combo) or "(the single job)")
            continue
        jobs.append(PlannedJob(job_id="", overrides=overrides, axis_overrides=combo, config=cfg))
    for p, where in seen_problems.items():
        more = f" (and {len(where) - 1} more jobs)" if len(where) > 1 else ""
        problems.append(f"{p}  [job: {where[0]}{more}]" if where[0] != "(the single job)" else p)
    return jobs, problems


def _split_seed(overrides: list[str]) -> tuple[tuple, list[str]]:
    """(every override but the seed's, the seed's): jobs equal up to their seed share one composed regime."""
    return regime_key(overrides), [o for o in overrides if is_seed(o)]


def _compose_regime(overrides: list[str], groups: set[str], bases: dict, types: dict, compose, OmegaConf, validate,
                    apply_value, derive_settings) -> dict | RaceError:
    """One composed, validated config: Hydra once per distinct group choice (cached in `bases`), typed
    dict updates for the rest. A RaceError is returned, not raised, so it is cached like a config."""
    is_group = [o.lstrip("+").partition("=")[0] in groups for o in overrides]
    group_part = tuple(o for o, g in zip(overrides, is_group) if g)
    if group_part not in bases:
        from race_cli.config.compose import compose_plain

        try:
            bases[group_part] = compose_plain(list(group_part))  # Hydra, or the race cache's copy of it
        except RaceError as exc:
            bases[group_part] = exc
    base = bases[group_part]
    if isinstance(base, RaceError):
        return base
    cfg = copy.deepcopy(base)
    try:
        for o, g in zip(overrides, is_group):
            if not g:
                apply_value(cfg, o, types)
        derive_settings(cfg)  # after every override: lora.enabled=false picks the full fine-tuning lr
    except RaceError as exc:
        return exc
    msgs = validate(cfg)
    return RaceError(*msgs) if msgs else cfg


# --- writing the sweep folder ------------------------------------------------------------------

def _plan_identity(data: Any) -> Any:
    """What names a plan in plan.json: its jobs' ids and overrides in order, or for a race (a mapping with
    "race") the schedule and every job to the cap, the ones written and the reserve alike, in any order."""
    if isinstance(data, dict):
        rows = list(data.get("jobs") or []) + list(data.get("reserve") or [])
        return (sorted((r["job_id"], r["overrides"]) for r in rows), data.get("race"))
    return [(r["job_id"], r["overrides"]) for r in data]


def plan_document(plan: Plan, rows: list[dict]) -> Any:
    """plan.json's content: the rows (a fixed design, as always), or for a race {"jobs": the first look's rows,
    "race": the schedule, "reserve": the later seeds' rows} (race_cli/plan/race_plan.py)."""
    if plan.race is None:
        return rows
    cache: dict = {}
    return {"jobs": rows, "race": plan.race.to_json(), "reserve": [j.row(cache) for j in plan.reserve]}


def write_sweep(plan: Plan, sweep_dir: str | os.PathLike) -> bool:
    """Write the sweep folder of docs/files.md atomically; False when it already holds this plan.

    The folder is built under a temporary name beside the target and renamed into place, so
    an interrupted write leaves nothing. An existing folder with the same jobs is kept as it is
    (its status files carry progress); one with different jobs is refused.
    """
    import yaml

    from race_cli.io import atomic_write_json, read_json
    from race_cli.status import pending_status, write_status

    sweep_dir = Path(sweep_dir)
    rows = plan.rows()
    if sweep_dir.exists():
        existing = plan_json(sweep_dir)
        if not existing.is_file():
            if sweep_dir.is_dir() and not any(sweep_dir.iterdir()):
                sweep_dir.rmdir()
            else:
                raise RaceError(f"{sweep_dir} exists and is not a race sweep (no plan.json). "
                                "Choose another --out / --sweep-dir, or remove the folder.")
        else:
            try:
                same = _plan_identity(read_json(existing)) == _plan_identity(plan_document(plan, rows))
            except (ValueError, KeyError, TypeError):
                same = False
            if same:
                return False
            raise RaceError(f"{sweep_dir} already holds a different plan (other jobs or overrides). "
                            "Choose another --out / --sweep-dir, or remove the folder to replan.")

    sweep_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{sweep_dir.name}.", suffix=".tmp", dir=sweep_dir.parent))
    try:
        from race_cli.io import umask_mode

        os.chmod(tmp, umask_mode(directory=True))  # mkdtemp makes 0700; the sweep follows the umask
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        multirun = {
            "overrides": plan.typed,
            "grid": {"name": plan.grid["name"], "description": plan.grid["description"]},
            "axes": plan.axes,
            "num_jobs": len(plan.jobs),
            "budget_flops": sorted({j.config["budget"]["flops"] for j in plan.jobs}),
            "created": created,
        }
        # libyaml's emitter when PyYAML has it: the same text as safe_dump (73 composed configs of three
        # grids compared byte for byte), several times faster, which a 100,000-job sweep's configs need
        dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
        dump = lambda data, **kw: yaml.dump(data, Dumper=dumper, **kw)
        multirun_yaml(tmp).write_text(dump(multirun, sort_keys=False), encoding="utf-8")
        atomic_write_json(plan_json(tmp), plan_document(plan, rows))
        _write_csv(plan_csv(tmp), rows)
        for job in plan.jobs:
            folder = job_dir(tmp, job.job_id)
            hydra_dir(folder).mkdir(parents=True)
            job_config(folder).write_text(dump(job.config, sort_keys=False), encoding="utf-8")
            job_overrides(folder).write_text(dump(job.overrides), encoding="utf-8")
            write_status(folder, pending_status(job.job_id, created))
        os.replace(tmp, sweep_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return True


def _write_csv(path: Path, rows: list[dict]) -> None:
    import csv
    import io

    buf = io.StringIO()
    if rows:
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


# --- the sweep `race run` runs ----------------------------------------------------------------

def fit_problems(named: Sequence[tuple[str, dict]], gpu_mem: int, gpus_per_job: int) -> list[str]:
    """'Job <id>: <why and what to try>' for each job (id, composed config) whose planned peak does not fit
    `gpu_mem` per GPU with `gpus_per_job` GPUs (the memory ledger build_plan refuses a plan by): race run
    checks a sweep folder it resumes against the GPUs it will run on. Jobs equal up to their seed are planned once."""
    import json

    from race_cli.cost.memory import plan_memory
    from race_cli.plan.wall import on_gpu

    out: list[str] = []
    seen: dict[str, list[str]] = {}
    for jid, cfg in named:
        key = json.dumps({k: v for k, v in cfg.items() if k != "seed"}, sort_keys=True, default=str)
        if key not in seen:
            try:
                plan_memory(cfg, gpu_mem, vllm_installed=machine.vllm_installed(), kv_release=machine.vllm_kv_release(),
                            reward_gpu=on_gpu(cfg) and gpus_per_job >= 2)
                seen[key] = []
            except RaceError as exc:
                seen[key] = list(exc.problems)
            except (KeyError, TypeError, ValueError):  # a damaged config fails its own job (race train), not the run
                seen[key] = []
        out += [f"Job {jid}: {p}" for p in seen[key]]
    return out


def gpu_context(gpu_mem: int, gpus_per_job: int) -> str:
    """The closing line of race run's refusal: what it planned with, and that nothing ran."""
    from race_cli.cost.memory import fmt_bytes

    vllm = "importable, so rollouts are planned on it" if machine.vllm_installed() else "not installed"
    return (f"race run planned every job against the GPUs it will run on: {fmt_bytes(gpu_mem)} each (nvidia-smi), "
            f"{gpus_per_job} GPU(s) per job (--gpus-per-job), vLLM {vllm}. Nothing was written or run; change the "
            "jobs named above (or the GPUs) and rerun.")


def prepare_sweep(overrides: Sequence[str], sweep_dir: Path | None, *, yes: bool, max_jobs: int,
                  runs_root: Path = Path("runs"), say: Callable[[str], None] = print,
                  check: Callable[[list[dict]], None] | None = None, race: bool = True,
                  max_seeds: int | None = None, gpu_mem: int | None = None, gpus_per_job: int = 1) -> Path:
    """The sweep folder to run: an existing one as it is (--sweep-dir, no overrides), else the plan
    of `overrides` written (or found unchanged) at --sweep-dir or the default folder.
    `check(job configs)` may refuse the sweep (RaceError) before anything is written. `race`, `max_seeds`:
    as build_plan (an existing folder keeps the design it was planned with). `gpu_mem` (bytes per GPU, race
    run's GPUs) and `gpus_per_job`: every job, planned or found, must fit them (as `race plan` on this box
    refuses a job), or the sweep is refused naming each job and the fix, before any job runs."""
    if sweep_dir is not None and not overrides and is_sweep(sweep_dir):
        say(f"sweep: {sweep_dir} (resuming the plan already there)")
        from race_cli.folder import job_config_data

        if check is None and gpu_mem is None:
            return Path(sweep_dir)
        configs = [(p.parent.parent.name, job_config_data(p)) for p in job_configs(sweep_dir)]
        if check is not None:
            check([c for _, c in configs])
        if gpu_mem is not None:
            problems = fit_problems(configs, gpu_mem, gpus_per_job)
            if problems:
                raise RaceError(*problems, gpu_context(gpu_mem, gpus_per_job))
        return Path(sweep_dir)
    try:
        plan = build_plan(list(overrides), max_jobs=max_jobs, yes=yes, race=race, max_seeds=max_seeds,
                          gpu_mem=gpu_mem, gpus_per_job=gpus_per_job)
    except RaceError as exc:
        if gpu_mem is None or not any(" phase needs " in p for p in exc.problems):
            raise
        raise RaceError(*exc.problems, gpu_context(gpu_mem, gpus_per_job)) from None
    if check is not None:
        check([job.config for job in plan.jobs])
    from race_cli.zoo.build import refuse_unusable_cache

    refuse_unusable_cache([path for j in plan.jobs for path in  # the policy's and the reward model's
                           ((j.config.get("model") or {}).get("path"),
                            (((j.config.get("reward") or {}).get("model")) or {}).get("path"))])
    target = Path(sweep_dir) if sweep_dir is not None else default_sweep_dir(plan, runs_root)
    try:
        written = write_sweep(plan, target)
    except RaceError as exc:
        if sweep_dir is None:
            raise RaceError(*exc.problems, f"(race run names its folder after the plan; {target} should "
                            "hold this plan. Remove it, or pass --sweep-dir to run elsewhere.)") from None
        raise
    size = (f"{len(plan.jobs)} jobs" if plan.race is None else
            f"{len(plan.jobs)} jobs at the first look, up to {len(plan.jobs) + len(plan.reserve)} in a race to "
            f"{plan.race.looks[-1]} seeds")
    if plan.task_note:
        say(plan.task_note)
    say(f"sweep: {target} ({size}, {'new' if written else 'resuming'})")
    return target
