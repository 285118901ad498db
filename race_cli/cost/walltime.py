"""Planned wall time of a job and of a grid, from per-phase throughput. Pure (no torch, no files).

    rates = cpu_rates("tiny-s")                         # the CPU defaults (CPU_RATES), or calibrate(...)
    t = job_seconds(planned_flops, rates, iterations=T, eval_every=100)   # JobTime: seconds per phase
    grid_seconds([t.total for t in times], slots=2)     # the pool's longest-first schedule over its slots

A job's wall time is its setup (process start, model load, files: `overhead_s`), each budgeted
phase's planned model FLOPs divided by that phase's achieved FLOP/s, and its evaluation points
(start, every eval.every iterations, end) at a measured cost each. The FLOP/s are what a ledger
records (`actual.flops` / `actual.seconds`, docs/files.md), so a finished sweep calibrates them
(`calibrate`, `race plan --calibrate-from SWEEP`).

CPU defaults (CPU_RATES) were measured on the default grid (conf/grid/tiny.yaml) with the update
skipping zero-advantage rows, one thread per job, two workers on two cores, on an idle machine
(benchmarks/rate_probe.py): see docs/design.md "Planned wall time". GPU figures are stated assumptions per GPU kind
(GPU_KINDS): the update and the reward model run at an assumed share of the matmul peak; the
rollout is memory-bound, each decode step reading the weights once at an assumed share of the
memory bandwidth, for the longest completion of the batch. A vLLM job whose engine sleeps at
level 1 also pays each iteration to copy vLLM's weights to pinned host memory and back
(`sleep_seconds`, at the stated host-link rates of HOST_LINK; `HostLink.measured` calibrates them
from a run's sleep and wake seconds, as scripts/gpu_smoke.py prints them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

PHASES = ("rollout", "update", "reward")


@dataclass(frozen=True)
class Rates:
    """Achieved throughput of one model's job on one kind of machine."""

    flops_per_s: Mapping[str, float]  # phase -> model-convention FLOP/s (rollout, update, reward)
    eval_s: float  # seconds per evaluation point (every target)
    overhead_s: float  # per job: start, imports, model load, checkpoints and files (wall - phases - eval)
    source: str  # where the figures come from (shown with the estimate)
    eval_assumed: bool = False  # eval_s was not measured for this model (job_seconds then prices evaluation
    # by its completions at the rollout's seconds per completion)
    eval_completions: float | None = None  # completions per evaluation point eval_s was measured at (None:
    # unknown, eval_s is used as it is); job_seconds scales eval_s to a job's own completions per point


# Measured on the default grid (see the module docstring): model-convention FLOP/s per phase, seconds per
# evaluation point (arithmetic + arithmetic-hard, 400 items x 2 samples each, common random numbers), setup
# seconds per job, read by benchmarks/rate_probe.py --from from runs of the default grid on one reference
# machine (docs/measurements/walltime.md). These are the rates of two jobs sharing two cores, as the default
# runs them (a lone job runs faster). Machines differ, so a plan on CPU scales them by a short probe of its
# own machine (plan/cpu_probe.py), and `race plan --calibrate-from` replaces them with a finished sweep's.
DEFAULT_EVAL_COMPLETIONS = 2 * 400 * 2  # the default grid's evaluation point: 2 targets x 400 items x 2 samples
CPU_SOURCE = "the reference machine's CPU rates (docs/measurements/walltime.md)"
CPU_RATES: dict[str, Rates] = {
    "tiny-s": Rates({"rollout": 4.01e9, "update": 1.43e10, "reward": 1.18e10}, eval_s=2.44, overhead_s=4.1,
                    source=CPU_SOURCE, eval_completions=DEFAULT_EVAL_COMPLETIONS),
    "tiny-m": Rates({"rollout": 7.43e9, "update": 2.50e10, "reward": 1.28e10}, eval_s=4.85, overhead_s=1.8,
                    source=CPU_SOURCE, eval_completions=DEFAULT_EVAL_COMPLETIONS),
}


@dataclass(frozen=True)
class GpuKind:
    """Stated assumptions for one GPU kind (datasheet peaks, assumed achieved shares)."""

    name: str
    bf16_flops: float  # dense bf16 matmul peak, FLOP/s
    hbm_bytes_per_s: float  # memory bandwidth, bytes/s
    matmul_share: float = 0.35  # achieved share of the peak in the update and the reward forward (an assumption)
    bandwidth_share: float = 0.6  # achieved share of the bandwidth in a decode step (an assumption)
    eval_s: float = 30.0  # seconds per evaluation point (an assumption: vLLM, a few hundred items)
    overhead_s: float = 120.0  # per job: model load, vLLM start (an assumption)
    memory_bytes: int = 0  # device memory as nvidia-smi reports it (memory.total), for `race plan --gpu`


_MiB = 2**20
GPU_KINDS: dict[str, GpuKind] = {  # datasheet peaks (SXM parts); memory.total as nvidia-smi prints it
    "A100": GpuKind("A100", bf16_flops=312e12, hbm_bytes_per_s=2.0e12, memory_bytes=81920 * _MiB),
    "A100-80GB": GpuKind("A100-80GB", bf16_flops=312e12, hbm_bytes_per_s=2.0e12, memory_bytes=81920 * _MiB),
    "A100-40GB": GpuKind("A100-40GB", bf16_flops=312e12, hbm_bytes_per_s=1.555e12, memory_bytes=40960 * _MiB),
    "H100": GpuKind("H100", bf16_flops=989e12, hbm_bytes_per_s=3.35e12, memory_bytes=81559 * _MiB),
    "H200": GpuKind("H200", bf16_flops=989e12, hbm_bytes_per_s=4.8e12, memory_bytes=143771 * _MiB),
    "L40S": GpuKind("L40S", bf16_flops=362e12, hbm_bytes_per_s=0.86e12, memory_bytes=46068 * _MiB),
    "A10": GpuKind("A10", bf16_flops=125e12, hbm_bytes_per_s=0.6e12, memory_bytes=23028 * _MiB),
}
MAX_GPUS = 4096  # `--gpu KINDxN`: more GPUs than this is a typo


@dataclass(frozen=True)
class GpuSpec:
    """`race plan --gpu H100x8`: the device the plan is for (instead of the one detected here)."""

    kind: GpuKind
    count: int = 1

    def describe(self) -> str:
        return f"{self.count} {self.kind.name}"


def parse_gpu(text: str) -> GpuSpec:
    """'H100' -> 1 H100, 'H200x8' -> 8 H200, 'a100-80gb x2' -> 2 A100-80GB; an unknown kind or a count
    outside 1..MAX_GPUS raises ValueError naming the known kinds (the CLI turns it into exit 2)."""
    import re

    known = ", ".join(GPU_KINDS)
    m = re.fullmatch(r"\s*(.+?)(?:\s*[x×*]\s*(\d+))?\s*", str(text), flags=re.IGNORECASE)
    name = m.group(1).upper() if m else ""
    if not m or name not in GPU_KINDS:
        raise ValueError(f"--gpu {text!r}: unknown GPU kind {name or text!r}. Known kinds: {known}; add xN "
                         "for N of them (e.g. --gpu H100x8).")
    count = int(m.group(2)) if m.group(2) else 1
    if not 1 <= count <= MAX_GPUS:
        raise ValueError(f"--gpu {text!r}: expected 1 to {MAX_GPUS} GPUs (e.g. --gpu {name}x8).")
    return GpuSpec(GPU_KINDS[name], count)


def gpu_kind(name: str | None) -> GpuKind | None:
    """The GpuKind whose name appears in a device name such as 'NVIDIA H100 80GB HBM3' (None: not known)."""
    if not name:
        return None
    upper = name.upper()
    for key in sorted(GPU_KINDS, key=len, reverse=True):
        if key in upper:
            return GPU_KINDS[key]
    return None


def cpu_rates(model: str) -> Rates:
    """The measured CPU figures of `model`; a model not measured gets the largest measured one's, marked assumed."""
    if model in CPU_RATES:
        return CPU_RATES[model]
    base = CPU_RATES["tiny-m"]
    return Rates(base.flops_per_s, base.eval_s, base.overhead_s, source=f"assumed: {model} not measured, tiny-m's rates",
                 eval_assumed=True)


def scaled(rates: Rates, speed: float, source: str) -> Rates:
    """`rates` on a machine `speed` times as fast as the one they were measured on: every phase's FLOP/s
    times `speed`, evaluation and setup seconds divided by it (race_cli/plan/cpu_probe.py measures it)."""
    if not (math.isfinite(speed) and speed > 0):
        raise ValueError(f"speed {speed!r}: expected a positive factor")
    return Rates({p: f * speed for p, f in rates.flops_per_s.items()}, rates.eval_s / speed, rates.overhead_s / speed,
                 source=source, eval_assumed=rates.eval_assumed, eval_completions=rates.eval_completions)


def gpu_rates(kind: GpuKind, *, weight_bytes: float, decode_steps: float, rollout_flops: float) -> Rates:
    """GPU rates of one job's iteration: the update and reward at `matmul_share` of the peak; the rollout as
    `decode_steps` memory-bound steps of `weight_bytes` each (the batch decodes together), or its matmuls at
    the peak share, whichever is slower; expressed as the FLOP/s that makes `rollout_flops` take that long."""
    matmul = kind.bf16_flops * kind.matmul_share
    step_s = weight_bytes / (kind.hbm_bytes_per_s * kind.bandwidth_share)
    rollout_s = max(decode_steps * step_s, rollout_flops / matmul)
    rollout = rollout_flops / rollout_s if rollout_s > 0 else matmul
    return Rates({"rollout": rollout, "update": matmul, "reward": matmul}, eval_s=kind.eval_s,
                 overhead_s=kind.overhead_s, source=f"assumed: {kind.name}, {kind.matmul_share:.0%} of matmul peak, "
                                                    f"decode at {kind.bandwidth_share:.0%} of memory bandwidth",
                 eval_assumed=True)


def eval_points(iterations: int, every: int | None = None, at: Sequence[float] = ()) -> int:
    """Evaluations a job of T iterations runs: at the start and the end, at each distinct budget
    fraction of eval.at, and every `every` iterations when eval.every is set (an every-point that
    falls on a fraction is counted twice: an upper bound by at most a few points)."""
    points = len({float(f) for f in at} | {0.0, 1.0})
    if not every or iterations <= 0:
        return points
    every = max(1, int(every))
    return points + iterations // every - (1 if iterations % every == 0 else 0)  # inside points; the end is counted


@dataclass(frozen=True)
class JobTime:
    """Planned wall seconds of one job, per part."""

    phases: Mapping[str, float]  # rollout, update, reward
    eval: float
    overhead: float
    source: str
    sleep: float = 0.0  # vLLM level-1 sleep: weights to the host and back, every iteration (see sleep_seconds)

    @property
    def total(self) -> float:
        return sum(self.phases.values()) + self.eval + self.overhead + self.sleep


def job_seconds(planned_flops: Mapping[str, float], rates: Rates, *, iterations: int, eval_every: int | None = None,
                eval_at: Sequence[float] = (), generations: tuple[float, float] | None = None) -> JobTime:
    """Planned wall seconds of a job whose planned model FLOPs per phase are `planned_flops`.

    generations: (completions per evaluation point, training rollout completions). With rates that were
    not measured for this model (`rates.eval_assumed`), an evaluation point is priced as that many
    completions at the rollout's own seconds per completion — a fixed seconds-per-point figure
    measured on a tiny model says nothing about 1,319 GSM8K items on a 7B policy. With rates measured at
    `rates.eval_completions` completions per point, eval_s is scaled to the job's own (200 greedy items
    cost an eighth of the default's 1,600 completions)."""
    phases = {}
    for p in PHASES:
        f = float(planned_flops.get(p) or 0.0)
        r = float(rates.flops_per_s.get(p) or 0.0)
        phases[p] = f / r if f > 0 and r > 0 else 0.0
    per_point = rates.eval_s
    if generations is not None and rates.eval_assumed and generations[1] > 0:
        per_point = phases["rollout"] * generations[0] / generations[1]
    elif generations is not None and rates.eval_completions and generations[0] > 0:
        per_point = rates.eval_s * generations[0] / rates.eval_completions
    return JobTime(phases, per_point * eval_points(iterations, eval_every, eval_at), rates.overhead_s, rates.source)


# --- vLLM's sleep cycle ------------------------------------------------------------------------


@dataclass(frozen=True)
class HostLink:
    """Effective device<->host rates of vLLM's level-1 sleep (weights copied into freshly pinned host
    memory) and wake-up (copied back), bytes per second."""

    sleep_bytes_per_s: float
    wake_bytes_per_s: float
    source: str

    @classmethod
    def measured(cls, weight_bytes: float, sleep_s: float, wake_s: float, source: str = "measured") -> "HostLink":
        """The rates a run showed: `weight_bytes` moved each way in `sleep_s` and `wake_s` seconds."""
        return cls(weight_bytes / sleep_s, weight_bytes / wake_s, source)


# Measured in a vLLM PR 48337 comment (Qwen3-8B + LoRA on an A100, ~16.4e9 bytes of bf16 weights): level-1
# sleep 10.57 s, wake 2.19 s; most of the sleep is allocating and pinning host buffers, so these are effective
# rates, not the PCIe link's. Calibrate with HostLink.measured from scripts/gpu_smoke.py's sleep/wake seconds.
HOST_LINK = HostLink(16.4e9 / 10.57, 16.4e9 / 2.19, "assumed: Qwen3-8B level-1 sleep 10.57 s, wake 2.19 s (vLLM PR 48337)")


def sleep_seconds(weight_bytes: float, link: HostLink = HOST_LINK) -> float:
    """Seconds one level-1 sleep and its wake-up take for `weight_bytes` of vLLM weights (0: nothing moved,
    e.g. the KV-cache-only release, whose freeing and re-mapping is not counted)."""
    if weight_bytes <= 0:
        return 0.0
    return weight_bytes / link.sleep_bytes_per_s + weight_bytes / link.wake_bytes_per_s


def grid_seconds(job_totals: Sequence[float], slots: int) -> float:
    """Wall seconds of the grid on `slots` parallel slots, jobs handed out longest first (the pool's order,
    pool/local.longest_first): each goes to the slot that frees first."""
    free = [0.0] * max(1, int(slots))
    for t in sorted(job_totals, reverse=True):
        i = min(range(len(free)), key=free.__getitem__)
        free[i] += t
    return max(free) if job_totals else 0.0


def time_left(remaining: Sequence[float], slots: int, speed: float = 1.0) -> float:
    """Seconds until the grid is done: `remaining` holds each unfinished job's planned seconds still to run
    (a running job: planned minus what it has run, at least 0), scheduled longest first over `slots`;
    `speed` = measured / planned seconds of the jobs finished so far (1 before any)."""
    return grid_seconds([max(0.0, v) * speed for v in remaining], slots)


# --- calibration from a finished sweep ----------------------------------------------------------


@dataclass
class Measured:
    """Sums over the finished jobs of one model: FLOPs and seconds per phase, evaluation, setup."""

    flops: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in PHASES})
    seconds: dict[str, float] = field(default_factory=lambda: {p: 0.0 for p in PHASES})
    eval_seconds: float = 0.0
    eval_runs: int = 0
    eval_completions: float | None = 0.0  # summed over the runs; None once a job's is unknown
    overhead_seconds: float = 0.0
    jobs: int = 0

    def add(self, ledger: Mapping, wall_seconds: float | None, completions_per_run: float | None = None) -> None:
        """One finished job: its ledger.json, its wall seconds (status started -> finished) and the
        completions of one of its evaluation points, if known."""
        act, ev = ledger["actual"], ledger.get("eval") or {}
        runs = int(ev.get("runs") or 0)
        if completions_per_run is None or self.eval_completions is None:
            self.eval_completions = None if runs else self.eval_completions
        else:
            self.eval_completions += runs * float(completions_per_run)
        for p in PHASES:
            self.flops[p] += float(act["flops"].get(p) or 0.0)
            self.seconds[p] += float(act["seconds"].get(p) or 0.0)
        self.eval_seconds += float(ev.get("seconds") or 0.0)
        self.eval_runs += int(ev.get("runs") or 0)
        if wall_seconds is not None:
            ran = float(act["seconds"].get("total") or 0.0) + float(ev.get("seconds") or 0.0)
            self.overhead_seconds += max(0.0, wall_seconds - ran)
        self.jobs += 1

    def rates(self, fallback: Rates, source: str) -> Rates:
        """Rates from these sums; a phase with no FLOPs measured keeps the fallback's figure."""
        fps = {p: (self.flops[p] / self.seconds[p] if self.flops[p] > 0 and self.seconds[p] > 0
                   else fallback.flops_per_s[p]) for p in PHASES}
        eval_s = self.eval_seconds / self.eval_runs if self.eval_runs else fallback.eval_s
        overhead = self.overhead_seconds / self.jobs if self.jobs else fallback.overhead_s
        per_point = (self.eval_completions / self.eval_runs if self.eval_runs and self.eval_completions
                     else None if self.eval_runs else fallback.eval_completions)
        return Rates(fps, eval_s=eval_s, overhead_s=overhead, source=source,
                     eval_assumed=fallback.eval_assumed and not self.eval_runs, eval_completions=per_point)


def calibrate(measured: Mapping[str, Measured], fallback, source: str) -> dict[str, Rates]:
    """Per model: the rates a sweep measured (`fallback(model)` for phases it did not measure)."""
    return {m: meas.rates(fallback(m), f"{source} ({meas.jobs} jobs)") for m, meas in measured.items() if meas.jobs}


def fmt_duration(s: float | None) -> str:
    """90 -> '1m30s', 5400 -> '1h30m', None/NaN -> '?'."""
    if s is None or not math.isfinite(s):
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")
