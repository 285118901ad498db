"""The design of a validation: fresh evaluation items and the seeds per condition by power (no torch).

race_cli/plan/validate.py builds the validation sweep; this module decides two things about it.

- Fresh items: the validation evaluates on task.eval_seed = the pilot's + 1 (`fresh_eval_seed`);
  `eval_freshness` builds the validated target's items under both seeds and counts the questions the
  two sets share (a target whose set does not depend on the eval seed, such as GSM8K's test set, is
  reused, and said to be).
- Seeds by power: `plan_all_seeds` pools the pilot's seed variance over its conditions of one reward
  system (stats/variance, as the report pools), takes each condition's best − control variance parts
  (stats/validation_power.pair_parts), and sizes the seeds with stats/validation_power: the fewest whose
  planned test, simulated through the report's own interval, confirms the gap to detect with the
  target power — expected over the pilot's uncertainty about its own variance estimates, rather than
  with them taken as the truth — at most max_seeds. plan/validate_preview.print_power_plan shows the
  plan per condition.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from race_cli import folder
from race_cli.errors import RaceError


def _finite(v: Any) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return math.nan
    return v if math.isfinite(v) else math.nan


# --- fresh evaluation items ------------------------------------------------------------------


def pilot_eval_seed(pilot: Path, job_ids: list[str]) -> int:
    """task.eval_seed of the pilot's jobs: from a job's composed config (folder.job_config), else its
    overrides, else the schema's default."""
    from race_cli.config.schema import TaskConf

    for jid in job_ids:
        jd = folder.job_dir(pilot, jid)
        try:
            import yaml

            cfg = yaml.safe_load(folder.job_config(jd).read_text(encoding="utf-8"))
            return int(cfg["task"]["eval_seed"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError, ImportError):
            pass
        try:
            for line in folder.job_overrides(jd).read_text(encoding="utf-8").splitlines():
                key, _, value = line.strip().lstrip("- ").strip("'\"").partition("=")
                if key.lstrip("+~") == "task.eval_seed":
                    return int(value)
        except (OSError, ValueError):
            pass
    return int(TaskConf().eval_seed)


def fresh_eval_seed(pilot_seed: int) -> int:
    """The validation's task.eval_seed: the pilot's + 1 (deterministic, so the same validation is planned
    twice alike; a set of its own, see eval_freshness)."""
    return int(pilot_seed) + 1


def eval_freshness(config: dict, pilot_seed: int, target: str) -> dict:
    """Do a validation job's evaluation items differ from the pilot's? Builds the target's items under
    the validation job's config and under the same config with the pilot's eval seed, and counts the
    questions they share: {"n_items", "shared", "fresh", "note"}. Targets whose item set does not depend
    on task.eval_seed (gsm8k test, math500, a jsonl eval file) come out shared: the validation then
    reuses the pilot's items, and says so."""
    import copy

    from omegaconf import OmegaConf

    from race_cli.tasks.targets import build_targets, build_task

    task = config.get("task") or {}
    if str(task.get("path") or "").startswith("hf:") or str(task.get("eval_path") or "").startswith("hf:"):
        return {"n_items": None, "shared": None, "fresh": None,
                "note": "not checked (a hub dataset): whether task.eval_seed changes its items depends on it"}

    def questions(cfg: dict) -> list[str]:
        c = OmegaConf.create(cfg)
        c.eval.targets = [target]
        (t,) = build_targets(c, build_task(c))
        return [it.question for it in t.items]

    try:
        mine = questions(config)
        old = copy.deepcopy(config)
        old["task"]["eval_seed"] = pilot_seed
        theirs = set(questions(old))
    except (RaceError, OSError, ValueError, KeyError) as e:
        return {"n_items": None, "shared": None, "fresh": None, "note": f"not checked ({type(e).__name__})"}
    shared = sum(q in theirs for q in mine)
    fresh = shared == 0
    note = (f"{len(mine)} fresh items (none of the pilot's)" if fresh else
            f"{shared} of {len(mine)} items are the pilot's: this target's item set does not depend on "
            "task.eval_seed, so the validation reuses the pilot's items (item × regime luck that helped pick "
            "the winner can carry over)" if shared == len(mine) else
            f"{shared} of {len(mine)} items are also the pilot's")
    return {"n_items": len(mine), "shared": shared, "fresh": fresh, "note": note}


# --- seeds by power ----------------------------------------------------------------------------


def pilot_noise(data: Any, sweep: str, cjobs: list[dict], regimes: list[str], target: str) -> Any:
    """The pilot's variance model of one condition (stats/variance.Noise over `regimes`, in that order,
    the condition's own until pooled), from its finished jobs' per-item scores (job means where a job
    kept none); None when a regime has no finished job."""
    import numpy as np

    from race_cli.report.rank import _item_matrix
    from race_cli.stats.variance import noise_of

    done = [j for j in cjobs if j.get("state") == "done" and j.get("regime") in regimes]
    if {j["regime"] for j in done} != set(regimes):
        return None
    codes = np.array([regimes.index(j["regime"]) for j in done])
    keys = [(sweep, str(j["job_id"])) for j in done]
    scores, _, _ = _item_matrix(keys, target, data.items)
    if scores is None:
        scores = np.array([_finite(j.get(f"eval/{target}")) for j in done])
        if not np.isfinite(scores).all():
            return None
    return noise_of(codes, scores, len(regimes))


def plan_seeds(noise: Any, regimes: list[str], best: str, ctl: str, n_validated: int, pool_df: float | None,
               *, power: float, gap: float | None, max_seeds: int, seeds: int | None, margin: float,
               maximize: bool, control: str) -> dict:
    """One condition's seed plan from the pilot's pooled variance model: the gap to detect (given, or the
    pilot's best − control gap less its selection bias), the seeds whose planned test (the report's,
    simulated: stats/validation_power) confirms it with `power` (or the fixed `seeds`), and the gap
    those seeds confirm. pool_df: the validation's seed pool's total df (None: this condition's own)."""
    import numpy as np

    from race_cli.stats.validation_power import pair_parts
    from race_cli.stats import validation_power as VP
    from race_cli.stats.draws import draws_of

    i, j = regimes.index(best), regimes.index(ctl)
    pp = pair_parts(noise, i, j)
    point = noise.point
    draws = draws_of(noise, 1000, np.random.default_rng(0))
    observed = float((1.0 if maximize else -1.0) * (point[i] - point[j]))
    _, bias, _ = VP.shrunk_gap(point, draws, maximize, second=control)  # lowest: the same, best − lowest
    target_gap = float(gap) if gap is not None else max(0.0, observed - bias)
    parts_of = lambda n: VP.planned_parts(pp, n, n_validated, pool_df)
    if seeds is not None and seeds < 2:
        sp = VP.SeedPlan(seeds, target_gap, math.nan, math.nan, math.nan, 0.0, False)
    elif seeds is not None:
        sp = VP.plan_at(parts_of, seeds, target_gap, power, margin)
    else:
        sp = VP.seeds_for_power(parts_of, target_gap, power, max_seeds, margin)
    return {"seeds": sp.seeds, "by": "fixed (--seeds)" if seeds is not None else f"power {power:g}",
            "gap": target_gap, "gap_source": "--gap" if gap is not None else
            f"the pilot's best − {control} gap {observed:+.3f} less its selection bias {bias:.3f}",
            "observed_gap": observed, "selection_bias": bias, "power": power,
            "power_at_gap": sp.power_at_gap, "detectable_gap": sp.detectable, "se": sp.se,
            "df_seed": sp.df_seed, "capped": sp.capped, "max_seeds": max_seeds, "pool_df": pool_df,
            "parts": {"item_var": pp.item_var, "seed_var": list(pp.seed_var), "resid_var": pp.resid_var,
                      "n_items": pp.n_items, "prior_d0": pp.prior_d0, "seed_df": pp.seed_df,
                      "item_df": pp.item_df, "item_resid": pp.item_resid}}


def plan_all_seeds(conditions: list[dict], noises: dict[str, tuple[Any, list[str]]], target: str, *,
                   power: float, gap: float | None, max_seeds: int, seeds: int | None, margin: float,
                   control: str) -> None:
    """Set entry["power_plan"] of every condition. The pilot's noises are pooled by reward system (the
    report's pools); the validation's own seed pool (its regimes of one reward) has
    Σ_conditions n_validated·(n − 1) df, which depends on the seeds chosen: a few fixed-point passes."""
    from race_cli.report.table import maximize_target
    from race_cli.report.validation import pool_key
    from race_cli.stats.variance import fit_pools

    keyed = [(e, pool_key(e["values"])) for e in conditions if noises[e["condition"]][0] is not None]
    pools = fit_pools([noises[e["condition"]][0] for e, _ in keyed], [k for _, k in keyed]) if keyed else {}
    pooled = {e["condition"]: noises[e["condition"]][0].pooled(pools[k]) for e, k in keyed}
    for e in conditions:
        nz = pooled.get(e["condition"])
        if nz is None or not nz.has_seed_noise:
            if seeds is None:
                why = ("a regime has no finished job with scores" if nz is None else
                       "the pilot ran one seed per regime, so its seed variance is unknown")
                raise RaceError(f"{e['condition']}: cannot size the validation by power: {why}.",
                                "Give the seed count yourself, e.g. --seeds 4 (one seed per regime gives no "
                                "verdict: 2 or more).")
    key_of = {e["condition"]: pool_key(e["values"]) for e in conditions}
    n_of = {e["condition"]: seeds or 2 for e in conditions}
    for _ in range(4):
        totals: dict[str, float] = {}
        for e in conditions:
            k = key_of[e["condition"]]
            totals[k] = totals.get(k, 0.0) + len(e["validated"]) * (n_of[e["condition"]] - 1)
        for e in conditions:
            nz = pooled.get(e["condition"])
            if nz is None or not nz.has_seed_noise:
                e["power_plan"] = {"seeds": seeds, "by": "fixed (--seeds)",
                                   "note": "no pilot seed variance: power not computed"}
                continue
            regs = noises[e["condition"]][1]
            e["power_plan"] = plan_seeds(nz, regs, e["validated"][0]["regime"], e["control"], len(e["validated"]),
                                         totals[key_of[e["condition"]]] or None, power=power, gap=gap,
                                         max_seeds=max_seeds, seeds=seeds, margin=margin,
                                         maximize=maximize_target(target), control=control)
            sd = [float(v) ** 0.5 for v in e["power_plan"]["parts"]["seed_var"]]
            e["power_plan"]["seed_pool"] = {"key": key_of[e["condition"]], "job_sd": sd,
                                            "pilot_df": pools[key_of[e["condition"]]].df_total}
        new = {e["condition"]: int(e["power_plan"]["seeds"]) for e in conditions}
        if new == n_of:
            break
        n_of = new
