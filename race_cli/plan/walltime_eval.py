"""The evaluation's share of a plan's time, before a wall-time model exists (pure, no torch).

Evaluation is never charged to the FLOP budget, but it costs wall time. Without a measured
wall-time model of the phases, `race plan` estimates its share from generation counts: per job,
evaluation samples points × Σ_targets items × eval.samples completions (points = the distinct
fractions of eval.at, or the eval.every evaluations of the planned T plus start and end), against
the training rollouts' T·B·G completions. A completion costs about the same to sample in either
phase (same policy, same sampler, similar lengths), and training also spends time on its updates,
so eval / (eval + training completions) is an upper bound on the evaluation's share of the job's time.
Measured on the default grid (docs/embedded-study.md): the bound is 2-5x the real share.
"""

from __future__ import annotations

import math
from typing import Any, Sequence


def eval_points(cfg: dict, iterations: int) -> int:
    """Evaluations of one job: the distinct fractions of eval.at with the start and the end, plus eval.every's."""
    ev = cfg.get("eval", {})
    fr = {float(f) for f in (ev.get("at") or [])} | {0.0, 1.0}
    every = ev.get("every")
    extra = (iterations // int(every)) if every else 0
    return len(fr) + extra  # eval.every points that coincide with a fraction are counted twice (an upper bound)


def job_generations(job: Any) -> tuple[int, float]:
    """(evaluation completions, training completions) of one planned job."""
    from race_cli.plan.power import planned_items
    from race_cli.tasks.targets import target_names

    c = job.config
    k = int(c.get("eval", {}).get("samples", 1))
    items = sum(planned_items(c, t) or 0 for t in target_names(c))
    pl = job.budget
    prompts = (pl.iterations - (1 if pl.last_prompts else 0)) * c["grpo"]["prompts_per_iter"] + (pl.last_prompts or 0)
    return eval_points(c, pl.iterations) * items * k, float(prompts * c["grpo"]["group_size"])


def eval_share_line(jobs: Sequence[Any]) -> str | None:
    """One sentence for `race plan`: evaluations per job and the evaluation's share (an upper bound)."""
    rows = [(j, *job_generations(j)) for j in jobs if j.budget is not None]
    if not rows:
        return None
    ev = sum(e for _, e, _ in rows)
    tr = sum(t for _, _, t in rows)
    points = sorted({eval_points(j.config, j.budget.iterations) for j, _, _ in rows})
    per_job = [e / (e + t) for _, e, t in rows if e + t > 0]
    pts = f"{points[0]}" if len(points) == 1 else f"{points[0]}-{points[-1]}"
    return (f"evaluation: {pts} evaluations per job (eval.at), {ev:,.0f} completions in all against {tr:,.0f} "
            f"training rollouts: at most {ev / (ev + tr):.0%} of the planned time (per job at most "
            f"{min(per_job):.0%}-{max(per_job):.0%}); an upper bound from generation counts (training's updates "
            "also take time; no wall-time model yet), never charged to the budget.")
