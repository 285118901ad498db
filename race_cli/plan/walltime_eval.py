"""The evaluation's share of a plan's time (pure, no torch).

Evaluation is never charged to the FLOP budget, but it costs wall time. `race plan` states its share
from the wall-time model (plan/wall.py: seconds per evaluation point) when every job has one; else it
bounds it from generation counts: per job,
evaluation samples points × Σ_targets items × eval.samples completions (points = the distinct
fractions of eval.at, or the eval.every evaluations of the planned T plus start and end), against
the training rollouts' T·B·G completions. A completion costs about the same to sample in either
phase (same policy, same sampler, similar lengths), and training also spends time on its updates,
so eval / (eval + training completions) is an upper bound on the evaluation's share of the job's time.
On the default grid the bound is several times the real share (docs/measurements/frontier.md).
"""

from __future__ import annotations

from typing import Any, Sequence


def eval_points(cfg: dict, iterations: int) -> int:
    """Evaluations of one job (cost/walltime.eval_points on its eval.at and eval.every)."""
    from race_cli.cost.walltime import eval_points as points

    ev = cfg.get("eval", {})
    return points(iterations, ev.get("every"), ev.get("at") or ())


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
    walls = [j.wall for j, _, _ in rows if getattr(j, "wall", None) is not None]
    if len(walls) == len(rows) and sum(w.total for w in walls) > 0:  # the wall-time model (plan/wall.py) priced it
        share = sum(w.eval for w in walls) / sum(w.total for w in walls)
        per = [w.eval / w.total for w in walls if w.total > 0]
        return (f"evaluation: {pts} evaluations per job (eval.at), {ev:,.0f} completions in all: {share:.0%} of "
                f"the planned wall time (per job {min(per):.0%}-{max(per):.0%}; the wall-time model's "
                "seconds per evaluation point), never charged to the budget.")
    return (f"evaluation: {pts} evaluations per job (eval.at), {ev:,.0f} completions in all against {tr:,.0f} "
            f"training rollouts: at most {ev / (ev + tr):.0%} of the planned time (per job at most "
            f"{min(per_job):.0%}-{max(per_job):.0%}); an upper bound from generation counts (training's updates "
            "also take time), never charged to the budget.")


def kept_policy_bytes(memory: Any) -> int | None:
    """Bytes of the final policy a job keeps (jobs/<id>/adapter/), from its memory ledger (cost/memory.py): the
    LoRA adapter in float32 (a third of its adapter-and-AdamW bytes), else the whole model's weights."""
    phases = getattr(memory, "phases", None) or {}
    for parts in phases.values():
        if "adapter_and_optimizer" in parts:
            return int(parts["adapter_and_optimizer"] // 3)
        if "policy_weights" in parts:
            return int(parts["policy_weights"])
    return None


def eval_route_line(jobs: Sequence[Any], schedule: Any) -> str | None:
    """`race plan`'s price of a race's evaluation route beside its seed route (issue 52): per finished job, the
    wall-time model's seconds per evaluated completion times the completions the evaluation look adds (each
    target scored on schedule.eval_items items, or 3x its items where the race declares none), against a new
    seed's price (one more job per regime: its planned seconds); and the size of the final policy every job
    keeps for it (adapter/). None without wall-time figures."""
    from race_cli.plan.power import planned_items
    from race_cli.tasks.targets import target_names

    rows = [j for j in jobs if j.budget is not None and getattr(j, "wall", None) is not None and j.wall.total > 0]
    if not rows or schedule is None:
        return None
    route, seed, sizes, asked = [], [], {}, set()
    for j in rows:
        c = j.config
        k = int(c.get("eval", {}).get("samples", 1))
        items = {t: int(planned_items(c, t) or 0) for t in target_names(c)}
        n_new = int(getattr(schedule, "eval_items", None) or 3 * max(items.values() or [0]))
        asked.add(n_new)
        done = eval_points(c, j.budget.iterations) * sum(items.values()) * k  # completions its evaluations sample
        per = j.wall.eval / done if done else 0.0
        route.append(sum(max(n_new - n, 0) for n in items.values()) * k * per)
        seed.append(j.wall.total)
        size = kept_policy_bytes(getattr(j, "memory", None))
        if size is not None:
            sizes[str(c.get("model", {}).get("name", "?"))] = size
    med = sorted(route)[len(route) // 2]
    seed_med = sorted(seed)[len(seed) // 2]
    n = "/".join(map(str, sorted(asked)))
    kept = ", ".join(f"{m} {b / 2**20:.2g} MiB" for m, b in sorted(sizes.items()))
    declared = "the race's evaluation look" if getattr(schedule, "eval_items", None) else "an evaluation look " \
        "(not declared: race.eval_items)"
    return (f"evaluation route: {declared} scores each finished job on {n} items per target without training, "
            f"~{med:.1f} s per job (the wall-time model's evaluation seconds, plus loading the policy), against "
            f"~{seed_med:.0f} s for each new seed (a job); kept final policies (adapter/, per job): {kept or '–'}.")
