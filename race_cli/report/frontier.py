"""The frontier across budgets from one pilot: rankings at every equal-FLOP checkpoint.

Every job evaluates at the same fractions f of its budget C (eval.at; summary.json's
`eval_points`: the first iteration boundary at or past f·C, with the FLOPs spent there and
per-item scores). The learning rate is constant after warm-up, so a job's state after spending
f·C stands in for a job whose whole budget was f·C: one pilot holds a ranking at every checkpoint
budget. This module

- reads the checkpoints (`read_checkpoints`, the only function here that opens files);
- `sweep_at(data, cps, f)`: the sweep as if every job had ended at fraction f — the same
  SweepData the ranking reads (eval/<target> and per-item scores of that checkpoint, the start
  unchanged), so any ranking or comparison runs at a checkpoint budget unchanged (the
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
from race_cli.fmt import g3 as _fmt_flops
from race_cli.io import read_json
from race_cli.report.records import Frontier
from race_cli.report.table import SweepData, _item_block


@dataclass
class Checkpoints:
    """Per job, its evaluation points by budget fraction (0 = the start, 1 = the end)."""

    points: dict[tuple[str, str], dict[float, dict]] = field(default_factory=dict)  # (sweep, job_id) -> f -> point

    @property
    def fractions(self) -> list[float]:
        return sorted({f for p in self.points.values() for f in p})


def _points_of(eval_points: list | None) -> dict[float, dict]:
    """summary.json's eval_points -> {fraction: {"flops", "iteration", "accuracy", "items"}}; the first
    point that covers a fraction stands for it. Malformed entries raise ValueError/TypeError/KeyError."""
    out: dict[float, dict] = {}
    for pt in eval_points or []:
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


def read_checkpoints(sweep_dirs: list[Path], jobs: pd.DataFrame,
                     eval_points: dict | None = None) -> tuple[Checkpoints, list[str]]:
    """The eval_points of every done, readable job; (checkpoints, one problem line per job whose
    points could not be read — those jobs are left out of the frontier, not of the ranking).
    eval_points: the summaries' eval_points already read (SweepData.eval_points); a job without an
    entry there is read from its summary.json."""
    by_name = {Path(d).resolve().name: Path(d) for d in sweep_dirs}
    cps, problems = Checkpoints(), []
    ok = jobs[(jobs["state"] == "done") & jobs["readable"].astype(bool)]
    for sweep, job_id in zip(ok["sweep"], ok["job_id"]):
        try:
            if eval_points is not None and (sweep, job_id) in eval_points:
                pts = _points_of(eval_points[(sweep, job_id)])
            else:
                path = folder.summary_file(folder.jobs_dir(by_name[sweep]) / job_id)
                pts = _points_of(read_json(path).get("eval_points"))  # bounded: a sweep's files are data
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
    and whether it beats it, and the regimes ≈ best (not shown worse than it, familywise 5%)."""
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


def winner_changes(fr: pd.DataFrame) -> list[str]:
    """Sentences for the budgets at which the best regime changes beyond noise (see the module
    docstring); a change within noise is not stated.

    Walking up the budgets, the standing winner W is the best at the budgets A since the last
    stated change; at a later budget b with another best W_b, the change is stated when W is not
    ≈ best at b and W_b was not ≈ best at some a in A (the latest such a is quoted); W_b then
    stands. A change through budgets where the two tie is stated between budgets where each led
    clearly, or not at all."""
    out = []
    for cond, g in fr.groupby("condition", sort=False):
        by_f = {f: gf.set_index("regime") for f, gf in g.groupby("fraction", sort=True)}
        fracs = sorted(by_f)
        win = {f: by_f[f].index[by_f[f]["is_best"].astype(bool)][0] for f in fracs}
        standing, since = win[fracs[0]], [fracs[0]]
        for b in fracs[1:]:
            wb = win[b]
            if wb == standing:
                since.append(b)
                continue
            if standing not in by_f[b].index or bool(by_f[b].loc[standing, "tied_best"]):
                continue
            clear = [a for a in since if wb in by_f[a].index and not bool(by_f[a].loc[wb, "tied_best"])]
            if not clear:
                continue
            a = clear[-1]
            ca = by_f[a]["budget_at"].iloc[0] if "budget_at" in by_f[a] else np.nan
            cb = by_f[b]["budget_at"].iloc[0] if "budget_at" in by_f[b] else np.nan
            out.append(f"{cond}: the best regime changes from {standing} (best at {a:g}·C = {_fmt_flops(ca)} "
                       f"FLOPs) to {wb} (best at {b:g}·C = {_fmt_flops(cb)} FLOPs); each is distinguishably "
                       f"worse than the best at the other budget (familywise 5%).")
            standing, since = wb, [b]
    return out


def stable_sentence(fr: pd.DataFrame, changes: list[str]) -> list[str]:
    """Per condition without a stated change: whether its point winner moved within noise or stayed."""
    changed = {c.split(": the best regime changes")[0] for c in changes}
    out = []
    for cond, g in fr.groupby("condition", sort=False):
        if cond in changed:
            continue
        best = g[g["is_best"].astype(bool)].sort_values("fraction")
        seq = [r for i, r in enumerate(best["regime"]) if i == 0 or r != best["regime"].iloc[i - 1]]
        if len(seq) == 1:
            out.append(f"{cond}: {seq[0]} is the best regime at every checkpoint budget.")
        else:
            path = " → ".join(f"{r} ({f:g}·C)" for r, f in zip(best["regime"], best["fraction"]))
            out.append(f"{cond}: the point-best regime moves ({path}), but no change is beyond noise: each "
                       "new best was ≈ best where the old one led, or the old one ≈ best where the new one leads.")
    return out


def frontier_report(sweep_dirs: list[Path], data: SweepData, targets: list[str], by: list[str],
                    n_boot: int, seed: int, maximize: dict[str, bool]) -> Frontier:
    """Everything the report shows of the frontier (report/records.Frontier); empty tables when no job
    recorded checkpoints (older sweeps)."""
    cps, problems = read_checkpoints(sweep_dirs, data.jobs, data.eval_points)
    fr = frontier_table(data, cps, targets, by, n_boot=n_boot, seed=seed, maximize=maximize)
    if not len(fr):
        return Frontier(table=fr, best=pd.DataFrame(), sentences=[], problems=problems, checkpoints=cps)
    best = best_per_budget(fr)
    changes = winner_changes(fr)
    return Frontier(table=fr, best=best, sentences=changes + stable_sentence(fr, changes), problems=problems,
                    checkpoints=cps)
