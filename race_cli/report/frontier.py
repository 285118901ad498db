"""The frontier across budgets from one pilot: rankings at every equal-FLOP checkpoint.

Every job evaluates at the same fractions f of its budget C (eval.at; summary.json's
`eval_points`: the first iteration boundary at or past f·C, with the FLOPs spent there and
per-item scores). The learning rate is constant after warm-up, so a job's state after spending
f·C stands in for a job whose whole budget was f·C: one pilot holds a ranking at every checkpoint
budget. This module

- reads the checkpoints (`read_checkpoints`, the only function here that opens files);
- `sweep_at(data, cps, f)`: the sweep as if every job had ended at fraction f — the same
  SweepData the ranking reads (eval/<target> and per-item scores of that checkpoint, the start
  unchanged), so any ranking or comparison runs at a checkpoint budget unchanged (issue 28's
  joint comparison calls this);
- `frontier_table`: the ranking (race_cli/report/rank.py, stats.py: seed + item noise,
  familywise ≈ best) at every checkpoint budget, one long table;
- `best_per_budget`, `winner_changes`: the best regime per budget with its interval, and the
  budgets at which the winner changes, stated only when the change is beyond noise: the new
  winner was distinguishably worse than the best at the earlier budget, and the old winner is
  distinguishably worse at the later one (both familywise ≈ best calls at 5%).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from race_cli import folder
from race_cli.report.table import SweepData, _item_block


@dataclass
class Checkpoints:
    """Per job, its evaluation points by budget fraction (0 = the start, 1 = the end)."""

    points: dict[tuple[str, str], dict[float, dict]] = field(default_factory=dict)  # (sweep, job_id) -> f -> point

    @property
    def fractions(self) -> list[float]:
        return sorted({f for p in self.points.values() for f in p})


def _points_of(summary: dict) -> dict[float, dict]:
    """summary.json's eval_points -> {fraction: {"flops", "iteration", "accuracy", "items"}}; the first
    point that covers a fraction stands for it. Malformed entries raise ValueError/TypeError/KeyError."""
    out: dict[float, dict] = {}
    for pt in summary.get("eval_points") or []:
        fr = [float(f) for f in pt["at"]]
        if not fr:
            continue  # an eval.every point: not a scheduled budget fraction
        body = {"flops": float(pt["flops"]), "iteration": int(pt["iteration"]),
                "accuracy": {str(t): float(v) for t, v in (pt.get("accuracy") or {}).items()},
                "items": _item_block(pt.get("items"), "eval_points.items")}
        for f in fr:
            if not 0.0 <= f <= 1.0:
                raise ValueError(f"eval_points.at {f} is not a budget fraction in [0, 1]")
            out.setdefault(f, body)
    return out


def read_checkpoints(sweep_dirs: list[Path], jobs: pd.DataFrame) -> tuple[Checkpoints, list[str]]:
    """The eval_points of every done, readable job; (checkpoints, one problem line per job whose
    points could not be read — those jobs are left out of the frontier, not of the ranking)."""
    by_name = {Path(d).resolve().name: Path(d) for d in sweep_dirs}
    cps, problems = Checkpoints(), []
    ok = jobs[(jobs["state"] == "done") & jobs["readable"].astype(bool)]
    for sweep, job_id in zip(ok["sweep"], ok["job_id"]):
        path = folder.summary_file(folder.jobs_dir(by_name[sweep]) / job_id)
        try:
            pts = _points_of(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError, TypeError, KeyError,
                AttributeError) as e:
            problems.append(f"{sweep}/{job_id}: eval_points unreadable ({type(e).__name__}: {e})")
            continue
        if pts:
            cps.points[(sweep, job_id)] = pts
    return cps, problems


# --- the sweep at one checkpoint ------------------------------------------------------------


def sweep_at(data: SweepData, cps: Checkpoints, fraction: float) -> SweepData:
    """The sweep as if every job had stopped at budget fraction `fraction`.

    jobs: eval/<target> is the checkpoint's score (NaN where the job has no point there, so it is
    not ranked at this budget), `flops_at` the FLOPs it had spent, `checkpoint_fraction` the
    fraction; items: the checkpoint's per-item scores; items_initial unchanged (the start).
    """
    jobs = data.jobs.copy()
    items: dict = {}
    cols = {f"eval/{t}": np.full(len(jobs), np.nan) for t in data.targets}
    spent = np.full(len(jobs), np.nan)
    for row, (sweep, job_id) in enumerate(zip(jobs["sweep"], jobs["job_id"])):
        pt = cps.points.get((sweep, job_id), {}).get(fraction)
        if pt is None:
            continue
        spent[row] = pt["flops"]
        for t, v in pt["accuracy"].items():
            if f"eval/{t}" in cols:
                cols[f"eval/{t}"][row] = v
        for t, v in pt["items"].items():
            items[(sweep, job_id, t)] = v
    for c, v in cols.items():
        jobs[c] = v
    jobs["flops_at"] = spent
    jobs["checkpoint_fraction"] = fraction
    return replace(data, jobs=jobs, items=items)


# --- rankings at every checkpoint budget ------------------------------------------------------

KEEP = ["condition", "target", "job_condition", "regime", "mean", "ci_lo", "ci_hi", "tied_best", "is_best",
        "rank", "gain", "gain_ci_lo", "gain_ci_hi", "beats_start", "p", "p_policy", "n_seeds", "n_items",
        "seed_noise"]


def frontier_table(data: SweepData, cps: Checkpoints, targets: list[str], by: list[str],
                   n_boot: int = 1000, seed: int = 0, maximize: dict[str, bool] | None = None) -> pd.DataFrame:
    """The ranking at every checkpoint budget f > 0: one row per (condition, fraction, regime) with
    `fraction`, `budget_at` (f · the condition's budget C) and `flops_at` (mean FLOPs spent there)."""
    from race_cli.report.rank import rank_all, rankable

    parts = []
    for i, f in enumerate(x for x in cps.fractions if x > 0):
        d = sweep_at(data, cps, f)
        for k, t in enumerate(targets):
            if not rankable(d.jobs, t).any():
                continue
            r = rank_all(d, t, by, n_boot=n_boot, seed=seed + 1000 * (i + 1) + k,
                         maximize=(maximize or {}).get(t, True))
            if not len(r):
                continue
            spent = d.jobs[rankable(d.jobs, t)].groupby(by, dropna=False)["flops_at"].mean() if by else None
            r = r[[c for c in KEEP + by if c in r]].copy()
            r["fraction"] = f
            if "budget_flops" in r:
                r["budget_at"] = f * r["budget_flops"].astype(float)
            if spent is not None:
                key = pd.MultiIndex.from_frame(r[by].astype(object)) if len(by) > 1 else r[by[0]]
                r["flops_at"] = spent.reindex(key).to_numpy(float)
            parts.append(r)
    if not parts:
        return pd.DataFrame()
    out = pd.concat(parts, ignore_index=True)
    return out.sort_values(["condition", "fraction", "rank", "regime"], kind="stable").reset_index(drop=True)


def best_per_budget(fr: pd.DataFrame) -> pd.DataFrame:
    """Per (condition, fraction): the best regime, its score and interval, its gain over the start
    and whether it beats it, and the regimes ≈ best (indistinguishable from it, familywise 5%)."""
    rows = []
    for (cond, f), g in fr.groupby(["condition", "fraction"], sort=True):
        b = g[g["is_best"].astype(bool)].iloc[0]
        tied = [r for r, t, best in zip(g["regime"], g["tied_best"], g["is_best"]) if t and not best]
        rows.append({"condition": cond, "target": b["target"], "fraction": f,
                     "budget_at": b.get("budget_at", np.nan), "flops_at": b.get("flops_at", np.nan),
                     "best_regime": b["regime"], "mean": b["mean"], "ci_lo": b["ci_lo"], "ci_hi": b["ci_hi"],
                     "gain": b["gain"], "gain_ci_lo": b["gain_ci_lo"], "gain_ci_hi": b["gain_ci_hi"],
                     "beats_start": bool(b["beats_start"]), "best_p": b.get("p", np.nan),
                     "tied": ", ".join(tied), "n_regimes": len(g)})
    return pd.DataFrame(rows)


def _fmt_flops(v: float) -> str:
    return f"{v:.3g}" if np.isfinite(v) else "–"


def winner_changes(fr: pd.DataFrame) -> list[str]:
    """Sentences for the budgets at which the best regime changes beyond noise (see the module
    docstring); a change within noise is not stated."""
    out = []
    for cond, g in fr.groupby("condition", sort=False):
        fracs = sorted(g["fraction"].unique())
        for a, b in zip(fracs, fracs[1:]):
            ga, gb = g[g["fraction"] == a].set_index("regime"), g[g["fraction"] == b].set_index("regime")
            wa, wb = ga.index[ga["is_best"].astype(bool)][0], gb.index[gb["is_best"].astype(bool)][0]
            if wa == wb or wb not in ga.index or wa not in gb.index:
                continue
            if not bool(ga.loc[wb, "tied_best"]) and not bool(gb.loc[wa, "tied_best"]):
                ca = ga["budget_at"].iloc[0] if "budget_at" in ga else np.nan
                cb = gb["budget_at"].iloc[0] if "budget_at" in gb else np.nan
                out.append(f"{cond}: the best regime changes from {wa} (best at {a:g}·C = {_fmt_flops(ca)} FLOPs) "
                           f"to {wb} (best at {b:g}·C = {_fmt_flops(cb)} FLOPs); each is distinguishably worse "
                           f"than the best at the other budget (familywise 5%).")
    return out


def stable_sentence(fr: pd.DataFrame, changes: list[str]) -> list[str]:
    """Per condition without a stated change: whether its point winner moved within noise or stayed."""
    changed = {c.split(": the best regime changes")[0] for c in changes}
    out = []
    for cond, g in fr.groupby("condition", sort=False):
        if cond in changed:
            continue
        winners = list(dict.fromkeys(g.loc[g["is_best"].astype(bool), "regime"]))
        if len(winners) == 1:
            out.append(f"{cond}: {winners[0]} is the best regime at every checkpoint budget.")
        else:
            out.append(f"{cond}: the point-best regime moves ({' → '.join(winners)}), but no change is beyond "
                       "noise: at each step the new and the old best are ≈ best at one of the two budgets.")
    return out
