"""The planned wall time of every job of a plan, and how many run at once (race_cli/cost/walltime.py).

    slots, source = plan_wall(plan.jobs, rates=None)   # sets job.wall (walltime.JobTime) and job.gpus

CPU jobs use, first found: `rates` (a finished sweep's, plan/measured.sweep_rates: race plan
--calibrate-from); the rates this machine's own latest sweep of that model measured with as many workers
(plan/learned.py); the reference CPU rates of their model (walltime.CPU_RATES) scaled by a cached probe of
this machine (plan/cpu_probe.py). They run on one single-thread worker per core,
at most one per job (the pool's rule, pool/local.default_workers). GPU jobs use the stated
assumptions of the GPU kind nvidia-smi names (walltime.GPU_KINDS; H100 when it names none known),
one job per visible GPU. `race plan --gpu H100x8` plans for 8 H100s instead of what is detected here
(GpuSpec): the kind's rates and memory, one job per GPU. `--gpus-per-job N` (as `race run` takes it)
gives every GPU job N GPUs: N× its GPU-hours, count // N jobs at once; with N ≥ 2 the PRM sits on the
job's second GPU (engine/setup.reward_device), which cost/memory.plan_memory charges there. The rates
stay one GPU's: nothing in a job splits the policy's work across GPUs.
"""

from __future__ import annotations

from typing import Sequence

from race_cli import machine
from race_cli.cost import walltime
from race_cli.cost.flops import Arch
from race_cli.plan.walltime_eval import job_generations


def cpu_workers(cores: int, n_jobs: int) -> int:
    """race run's default CPU workers: one single-thread worker per core, no more than jobs
    (pool/local.default_workers; tests/test_walltime.py checks they agree)."""
    return max(1, min(cores, n_jobs))


def _weight_bytes(cfg: dict) -> float:
    """Bytes one decode step reads: every weight of the policy in bf16 (2 bytes)."""
    a = Arch.from_config(cfg["model"]["arch"])
    return 2.0 * (a.n_body + 2 * a.n_head)  # layers, embedding and head


def on_gpu(config: dict, gpu: walltime.GpuSpec | None = None) -> bool:
    """Whether the job runs on a GPU: on the `race plan --gpu` device unless it asks for device=cpu,
    else on this machine's (machine.gpu_visible)."""
    if gpu is not None:
        return config["device"] != "cpu"
    return machine.gpu_visible(config["device"])


def plan_wall(jobs: Sequence, rates: dict | None = None, gpu: walltime.GpuSpec | None = None,
              gpus_per_job: int = 1) -> tuple[int, str]:
    """Set each job's planned wall time; returns (slots, where the rates come from). `gpu` (race plan
    --gpu KINDxN) plans for that device and count instead of the one detected here; `gpus_per_job`:
    GPUs each GPU job holds (its GPU-hours, how many run at once)."""
    on = [on_gpu(j.config, gpu) for j in jobs]
    kind = None
    if any(on):
        kind = gpu.kind if gpu is not None else walltime.gpu_kind(machine.gpu_name()) or walltime.GPU_KINDS["H100"]
    sources = set()
    cpu_slots = cpu_workers(machine.cpu_cores(), len(jobs))
    learned = None  # {model: Rates} this machine's finished sweeps measured (plan/learned.py), read at most once
    speed = None  # this machine against the CPU rates' reference (plan/cpu_probe.py), probed at most once
    for job, job_on_gpu in zip(jobs, on):
        c, b = job.config, job.budget
        model = c["model"]["name"]
        if rates and model in rates:
            r = rates[model]
        elif job_on_gpu:
            per = b.per_iteration["rollout"].model if b.per_iteration else 0.0
            r = walltime.gpu_rates(kind, weight_bytes=_weight_bytes(c), decode_steps=float(c["rollout"]["max_new_tokens"]),
                                   rollout_flops=per)
        else:
            if learned is None:
                from race_cli.plan.learned import machine_rates

                learned = machine_rates(cpu_slots)
            if model in learned:
                r = learned[model]
            else:
                if speed is None:
                    from race_cli.plan.cpu_probe import machine_speed

                    speed = machine_speed()
                base = walltime.cpu_rates(model)
                r = walltime.scaled(base, speed.factor, speed.source if base.source == walltime.CPU_SOURCE
                                    else f"{base.source}; {speed.source}")
        planned = {p: f.model for p, f in b.flops().items()}
        ev, train = job_generations(job)
        points = walltime.eval_points(b.iterations, c["eval"].get("every"), c["eval"].get("at") or ())
        job.wall = walltime.job_seconds(planned, r, iterations=b.iterations, eval_every=c["eval"].get("every"),
                                        eval_at=c["eval"].get("at") or (), generations=(ev / max(points, 1), train))
        mem = getattr(job, "memory", None)
        if mem is not None and getattr(mem, "sleep_weight_bytes", 0):  # vLLM level-1 sleep: weights out and back
            from dataclasses import replace

            job.wall = replace(job.wall, sleep=b.iterations * walltime.sleep_seconds(mem.sleep_weight_bytes))
        job.gpus = gpus_per_job if job_on_gpu else 0
        sources.add(r.source)
    if sum(on):
        slots = max(1, (gpu.count if gpu is not None else max(1, len(machine.visible_gpus()))) // gpus_per_job)
    else:
        slots = cpu_slots
    return slots, "; ".join(sorted(sources))
