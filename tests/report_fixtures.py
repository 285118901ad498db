"""Synthetic sweep folders with a known truth, written as docs/files.md and the results
contract specify (targets, eval, eval_initial, eval_items, eval_items_initial per target;
metrics.jsonl keys eval/<target>/accuracy).

The truth: every regime has an allocation p (learning share) and, per evaluation target, an
expected accuracy acc(p, condition). Job j of that regime scores item i correct with
probability

    P(correct) = acc(p) + d_i + e_j          (no clipping needed: see the ranges below)

where d_i ~ U(-item_sd, item_sd) is item i's fixed difficulty (shared by every job of the
condition, so items pair across regimes) and e_j ~ U(-seed_sd, seed_sd) is the seed's luck.
Both have mean zero, so the population accuracy of a regime is exactly acc(p): that is the
value a confidence interval should cover. Keep acc in [0.3, 0.7], item_sd + seed_sd <= 0.3.

The starting policy (iteration 0) is the same warm start for every job of a condition: its
item scores are drawn once per (condition, target) with P = initial + d_i (same items, same
difficulties) and written into every job, as a greedy evaluation would. With `samples = k`
a per-item score is the fraction of k sampled completions that were correct (k/k ∈ [0, 1]).

Files are written with plain json.dump (not atomically): readers do not care, and the
benchmark writes 5,000 jobs.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Regime:
    group_size: int
    updates_per_batch: int
    p: float  # planned update fraction (learning share of the total FLOPs)


DEFAULT_REGIMES = [Regime(16, 1, 0.08), Regime(8, 1, 0.14), Regime(8, 2, 0.25),
                   Regime(4, 2, 0.40), Regime(4, 4, 0.60)]
DEFAULT_CONDITION = {"model": "tiny-s", "budget_flops": 1e12, "reward": "rule", "task": "arithmetic"}


def peaked(p_opt: float = 0.25, top: float = 0.6, width: float = 0.25) -> Callable[[float, dict], float]:
    """acc(p) = top - width·(ln p - ln p_opt)²: a smooth peak at p_opt (quadratic in log p)."""
    return lambda p, cond: top - width * (math.log(p) - math.log(p_opt)) ** 2


def rising(lo: float = 0.35, slope: float = 0.5) -> Callable[[float, dict], float]:
    """acc(p) = lo + slope·p: more learning is always better, optimum on the grid's upper edge."""
    return lambda p, cond: lo + slope * p


def _dump(path: Path, obj) -> None:
    path.write_text(json.dumps(obj), encoding="utf-8")


def write_job(jobs_dir: Path, cond: dict, reg: Regime, seed: int, scores: dict[str, np.ndarray],
              rng: np.random.Generator, feedback: float = 0.0, iterations: int = 10,
              eval_every: int = 5, start: dict[str, np.ndarray] | None = None) -> str:
    """Write status, overrides, ledger, metrics and summary of one finished job; return its id.

    scores / start: {target: per-item scores in [0, 1]} at the end / at iteration 0 (same
    items); start None leaves the iteration-0 blocks out (an older job).
    """
    jid = (f"{cond['model']}_G{reg.group_size}_mu{reg.updates_per_batch}_{cond['reward']}"
           f"_C{cond['budget_flops']:.0e}_s{seed}")
    d = jobs_dir / jid
    (d / ".hydra").mkdir(parents=True, exist_ok=True)
    overrides = [f"model={cond['model']}", f"grpo.group_size={reg.group_size}",
                 f"grpo.updates_per_batch={reg.updates_per_batch}", f"reward={cond['reward']}",
                 f"budget.flops={cond['budget_flops']:g}", f"task={cond['task']}", f"seed={seed}"]
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    C = float(cond["budget_flops"])
    spent = float(rng.uniform(0.90, 0.99))  # fraction of the budget actually used
    p_act = reg.p + float(rng.uniform(-0.004, 0.004))  # actual ledger drifts from the plan
    total = spent * C
    actual = {"update": p_act * total, "reward": feedback * total}
    actual["rollout"] = total - actual["update"] - actual["reward"]
    actual["total"] = total
    planned = {"update": reg.p * C, "reward": feedback * C, "total": C}
    planned["rollout"] = C - planned["update"] - planned["reward"]
    _dump(d / "ledger.json", {
        "convention": "model", "budget_flops": C,
        "planned": {"iterations": iterations + 1, "flops": planned, "executed_flops": planned,
                    "tokens": {"prompt": 1000, "completion": 4000}},
        "actual": {"iterations": iterations, "flops": actual, "executed_flops": actual,
                   "tokens": {"prompt": 900, "completion": 3700},
                   "seconds": {"rollout": 6.0, "update": 3.0, "reward": 0.1, "total": 9.1}},
        "eval": {"flops": 0.1 * C, "executed_flops": 0.12 * C, "seconds": 2.0, "runs": 3}})
    targets = list(scores)
    final = {t: float(v.mean()) for t, v in scores.items()}
    initial = {t: float(v.mean()) for t, v in (start or {}).items()}
    lines = []
    for it in range(iterations + 1):
        frac = it / iterations
        row = {"iteration": it, "train/reward_mean": 0.3 + 0.2 * frac, "train/loss": 0.1,
               "flops/rollout": frac * actual["rollout"], "flops/update": frac * actual["update"],
               "flops/reward": frac * actual["reward"], "flops/total": frac * total,
               "time/rollout": 0.6, "time/update": 0.3, "time/reward": 0.01,
               "tokens/prompt": 90, "tokens/completion": 370}
        if (it % eval_every == 0 and (it > 0 or start is not None)) or it == iterations:
            for t in targets:
                i0 = initial.get(t, final[t])
                row[f"eval/{t}/accuracy"] = i0 + (final[t] - i0) * frac
        lines.append(json.dumps(row))
    (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    shares = {"search": actual["rollout"] / total, "learning": actual["update"] / total,
              "feedback": actual["reward"] / total, "p": actual["update"] / total}
    items = lambda block: {t: {"ids": [f"{t}-eval-{i}" for i in range(len(v))],
                               "scores": [float(x) for x in v]} for t, v in block.items()}
    summary = {
        "job_id": jid, "state": "done", "stop_reason": "budget", "condition": cond,
        "knobs": {"group_size": reg.group_size, "updates_per_batch": reg.updates_per_batch,
                  "prompts_per_iter": 8, "iterations": iterations},
        "seed": seed, "overrides": overrides, "targets": targets, "eval": final,
        "eval_items": items(scores),
        "shares": shares, "planned_shares": shares, "flops": actual,
        "seconds": {"rollout": 6.0, "update": 3.0, "reward": 0.1, "eval": 2.0, "total": 11.1}}
    if start is not None:
        summary["eval_initial"] = initial
        summary["eval_items_initial"] = items(start)
    _dump(d / "summary.json", summary)
    _dump(d / "status.json", {"job_id": jid, "state": "done", "attempts": 1,
                              "created": "2026-11-30T05:40:00Z", "started": "2026-11-30T05:41:00Z",
                              "finished": "2026-11-30T05:42:00Z", "host": "node1", "device": "cpu",
                              "pid": 1, "exit_code": 0, "stop_reason": "budget", "error": "",
                              "log_tail": ""})
    return jid


def _score(prob: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """Per-item scores: 0/1 for one sample, else the fraction of `samples` draws correct."""
    if samples == 1:
        return (rng.random(len(prob)) < prob).astype(float)
    return rng.binomial(samples, prob) / samples


def simulate_scores(accs: list[float], n_seeds: int, n_items: int, item_sd: float, seed_sd: float,
                    rng: np.random.Generator, samples: int = 1,
                    d_items: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """In-memory version of the truth above: (regime_of_job [J], scores [J, n_items] in [0, 1]).

    d_items: the items' difficulties (drawn here when not given).
    """
    if d_items is None:
        d_items = rng.uniform(-item_sd, item_sd, n_items)  # item difficulty, shared (paired)
    regime, rows = [], []
    for r, a in enumerate(accs):
        for _ in range(n_seeds):
            prob = a + d_items + rng.uniform(-seed_sd, seed_sd)
            assert prob.min() >= 0 and prob.max() <= 1, "fixture ranges would clip"
            rows.append(_score(prob, samples, rng))
            regime.append(r)
    return np.array(regime), np.vstack(rows)


Acc = Callable[[float, dict], float]


def build_sweep(root: Path, acc: Acc | None = None,
                conditions: list[dict] | None = None, regimes: list[Regime] | None = None,
                seeds: tuple[int, ...] = (0, 1, 2), n_items: int = 200, item_sd: float = 0.2,
                seed_sd: float = 0.03, rng_seed: int = 0, feedback: dict[str, float] | None = None,
                iterations: int = 10, targets: dict[str, Acc] | None = None,
                initial: float | Callable[[dict, str], float] | None = 0.3,
                samples: int = 1) -> Path:
    """Write a finished sweep under `root` whose truth is acc(p, condition); return root.

    targets: {name: acc} for several evaluation targets (default {"arithmetic": acc});
    initial: the starting policy's accuracy (a number, or f(condition, target)); None writes
    jobs without an iteration-0 evaluation.
    """
    targets = targets or {"arithmetic": acc or peaked()}
    conditions = conditions or [DEFAULT_CONDITION]
    regimes = regimes or DEFAULT_REGIMES
    feedback = feedback or {"rule": 0.0, "prm": 0.15}
    rng = np.random.default_rng(rng_seed)
    jobs_dir = root / "jobs"
    jobs_dir.mkdir(parents=True, exist_ok=True)
    plan = []
    for cond in conditions:
        per_target = {}
        for t, f in targets.items():
            d_items = rng.uniform(-item_sd, item_sd, n_items)
            reg_of_job, sc = simulate_scores([f(r.p, cond) for r in regimes], len(seeds), n_items,
                                             item_sd, seed_sd, rng, samples, d_items)
            st = None
            if initial is not None:
                a0 = initial(cond, t) if callable(initial) else initial
                st = _score(np.clip(a0 + d_items, 0, 1), samples, rng)  # one warm start, one eval
            per_target[t] = (reg_of_job, sc, st)
        reg_of_job = next(iter(per_target.values()))[0]
        for j, ri in enumerate(reg_of_job):
            reg, s = regimes[ri], seeds[j % len(seeds)]
            scores = {t: v[1][j] for t, v in per_target.items()}
            start = None if initial is None else {t: v[2] for t, v in per_target.items()}
            jid = write_job(jobs_dir, cond, reg, s, scores, rng,
                            feedback=feedback.get(cond["reward"], 0.0), iterations=iterations,
                            start=start)
            plan.append({"job_id": jid, **cond, "group_size": reg.group_size,
                         "updates_per_batch": reg.updates_per_batch, "seed": s})
    _dump(root / "plan.json", plan)
    return root


def add_unfinished(root: Path) -> dict[str, str]:
    """Add a failed, a pending and a corrupt-summary job; return {job_id: expected state}."""
    jobs = root / "jobs"
    out = {}
    for jid, state in [("tiny-s_G2_mu1_rule_failed", "failed"), ("tiny-s_G2_mu1_rule_pending", "pending")]:
        (jobs / jid / ".hydra").mkdir(parents=True)
        (jobs / jid / ".hydra" / "overrides.yaml").write_text(
            "- model=tiny-s\n- grpo.group_size=2\n- reward=rule\n- budget.flops=1e12\n- seed=0\n")
        _dump(jobs / jid / "status.json", {"job_id": jid, "state": state, "attempts": 1,
                                           "error": "CUDA out of memory" if state == "failed" else ""})
        out[jid] = state
    # a finished job whose summary.json was torn: listed as unreadable, never ranked
    rng = np.random.default_rng(99)
    jid = write_job(jobs, DEFAULT_CONDITION, Regime(2, 8, 0.9), 7, {"arithmetic": np.ones(10)}, rng)
    (jobs / jid / "summary.json").write_text('{"job_id": "tor')
    out[jid] = "done"
    return out
