"""Render the report: rich terminal tables, a paste-ready markdown summary, CSV and JSON.

Everything here formats values computed elsewhere; nothing is computed that a test of
rank/fit/recommend would not see.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from race_cli.io import dumps
from race_cli.report.recommend import CAVEAT, recommendation_text

MAX_LISTED = 20  # unranked jobs shown in the terminal; runs.csv has them all


def _f(v: Any, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, (float, np.floating)):
        return f"{v:.{nd}f}"
    return str(v)


def _pct(v: Any) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{100 * v:.0f}%"


def _flops(v: float) -> str:
    return "–" if not np.isfinite(v) else f"{v:.3g}"


def state_counts(jobs: pd.DataFrame) -> dict[str, int]:
    counts = jobs["state"].value_counts().to_dict()
    counts["unreadable"] = int((~jobs["readable"].astype(bool)).sum())
    return {k: int(v) for k, v in counts.items()}


def unranked(jobs: pd.DataFrame, ranked_mask: pd.Series) -> pd.DataFrame:
    """Jobs that are listed but not ranked, with why."""
    out = jobs.loc[~ranked_mask, ["sweep", "job_id", "state", "readable", "problem"]
                   + [c for c in ["error"] if c in jobs]].copy()
    why = np.where(~out["readable"].astype(bool), out["problem"],
                   np.where(out["state"] != "done", "not finished (" + out["state"] + ")",
                            "target not recorded"))
    out["why"] = why
    return out


def ranking_rows(g: pd.DataFrame) -> list[list[str]]:
    """Display cells of one condition's ranking (shared by rich and markdown)."""
    rows = []
    for _, r in g.iterrows():
        rows.append([str(r["rank"]), r["regime"] + (" ★" if r["is_best"] else ""),
                     f"{_f(r['mean'])} [{_f(r['ci_lo'])}, {_f(r['ci_hi'])}]", _f(r["p_best"], 2),
                     "yes" if r["tied_best"] else "no", _f(r.get("p", np.nan)),
                     " / ".join(_pct(r.get(f"share_{n}", np.nan)) for n in ["search", "learning", "feedback"]),
                     _pct(r.get("budget_spent", np.nan)), str(r["n_seeds"])])
    return rows


RANK_HEAD = ["rank", "regime", "mean [95% CI]", "P(best)", "≈ best", "p",
             "search / learning / feedback", "budget spent", "seeds"]


# --- terminal --------------------------------------------------------------------------


def print_report(console, jobs: pd.DataFrame, ranked_mask: pd.Series, ranking: pd.DataFrame,
                 rec: pd.DataFrame, moves: list[str], totals: dict, target: str,
                 maximize: bool) -> None:
    """Rich tables: job counts, unranked jobs, per-condition rankings, frontier, caveat."""
    from rich.panel import Panel
    from rich.table import Table

    counts = state_counts(jobs)
    console.print(f"[bold]race report[/]: {len(jobs)} jobs in {jobs['sweep'].nunique()} sweep(s) — "
                  + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + f"; target [bold]{target}[/] ({'higher' if maximize else 'lower'} is better)")
    un = unranked(jobs, ranked_mask)
    if len(un):
        t = Table(title=f"Jobs not ranked ({len(un)})", title_justify="left")
        for c in ["sweep", "job_id", "state", "why"]:
            t.add_column(c, overflow="fold")
        for _, r in un.head(MAX_LISTED).iterrows():
            t.add_row(r["sweep"], r["job_id"], r["state"], str(r["why"]) + (f" — {r['error']}" if r.get("error") else ""))
        console.print(t)
        if len(un) > MAX_LISTED:
            console.print(f"… and {len(un) - MAX_LISTED} more (all in runs.csv)")
    for cond, g in ranking.groupby("condition", sort=False):
        t = Table(title=f"{cond}  ·  {g['method'].iloc[0]}", title_justify="left")
        for h in RANK_HEAD:
            t.add_column(h, justify="left" if h == "regime" else "right")
        for row in ranking_rows(g):
            t.add_row(*row)
        console.print(t)
        r = rec[rec["condition"] == cond]
        if len(r):
            console.print(recommendation_text(r.iloc[0]))
    if len(rec) > 1:
        t = Table(title="Conditional frontier: recommended split per condition", title_justify="left")
        for h in ["condition", "best regime", "p (best)", "p* (fit or fallback)", "fit", "mean", "P(best)"]:
            t.add_column(h)
        for _, r in rec.iterrows():
            t.add_row(r["condition"], r["best_regime"], _f(r["best_p"]), _f(r.get("p_star")),
                      "fallback" if r.get("fit_fallback") else str(r.get("fit_model", "–")),
                      _f(r["best_mean"]), _f(r["best_p_best"], 2))
        console.print(t)
        for m in moves:
            console.print("• " + m)
    console.print(f"Compute: {_flops(totals['total'])} training FLOPs (model convention) — "
                  f"search {_share(totals, 'rollout')}, learning {_share(totals, 'update')}, "
                  f"feedback {_share(totals, 'reward')}; evaluation {_flops(totals['eval'])} FLOPs, not charged.")
    console.print(Panel(CAVEAT, title="caveat", border_style="yellow"))


def _share(totals: dict, ph: str) -> str:
    return _pct(totals[ph] / totals["total"]) if totals["total"] > 0 else "–"


# --- markdown ----------------------------------------------------------------------------


def md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")
    lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def markdown_summary(jobs: pd.DataFrame, ranked_mask: pd.Series, ranking: pd.DataFrame,
                     rec: pd.DataFrame, moves: list[str], totals: dict, target: str,
                     maximize: bool, n_boot: int, plots: list[str]) -> str:
    """summary.md: the compute reported as the paper asks, rankings, fits, the caveat."""
    counts = state_counts(jobs)
    out = ["# RACE pilot-grid report", "",
           f"Sweeps: {', '.join(sorted(jobs['sweep'].unique()))}. Jobs: {len(jobs)} ("
           + ", ".join(f"{k} {v}" for k, v in counts.items()) + f"). Target: `{target}` "
           f"({'higher' if maximize else 'lower'} is better).", "",
           "## Compute", "",
           f"Total training compute: **{_flops(totals['total'])} FLOPs** (model convention: causal "
           f"attention pairs, no recompute), split search (rollout) {_share(totals, 'rollout')}, "
           f"learning (policy updates) {_share(totals, 'update')}, feedback (reward) "
           f"{_share(totals, 'reward')}. Evaluation used {_flops(totals['eval'])} FLOPs, not "
           f"charged to the budgets ({_flops(totals['budget'])} FLOPs budgeted in all).", "",
           "## Rankings", "",
           f"Intervals: {n_boot} bootstrap draws over evaluation items (paired across regimes) and "
           "seeds, 95% percentile. P(best): fraction of draws in which the regime is best. "
           "≈ best: the paired 95% interval of the gap to the best regime reaches zero.", ""]
    from race_cli.report.recommend import compute_totals

    for cond, g in ranking.groupby("condition", sort=False):
        t = compute_totals(jobs[jobs["condition"] == cond]) if "condition" in jobs else None
        flops = (f"Training compute of this condition's readable jobs: {_flops(t['total'])} FLOPs "
                 f"(search {_share(t, 'rollout')}, learning {_share(t, 'update')}, feedback "
                 f"{_share(t, 'reward')}).") if t else ""
        out += [f"### {cond}", "", flops, "", md_table(RANK_HEAD, ranking_rows(g)), ""]
        r = rec[rec["condition"] == cond]
        if len(r):
            out += [recommendation_text(r.iloc[0]), ""]
    if moves:
        out += ["## Conditional frontier", ""] + [f"- {m}" for m in moves] + [""]
    un = unranked(jobs, ranked_mask)
    if len(un):
        out += [f"## Jobs not ranked ({len(un)})", "",
                md_table(["sweep", "job", "state", "why"],
                         [[r["sweep"], r["job_id"], r["state"], r["why"]] for _, r in un.head(200).iterrows()]), ""]
    if plots:
        out += ["## Figures", ""] + [f"![{p}]({p})" for p in plots] + [""]
    out += [f"> **Caveat.** {CAVEAT}", ""]
    return "\n".join(out)


# --- machine formats -------------------------------------------------------------------


def to_json(jobs: pd.DataFrame, ranking: pd.DataFrame, rec: pd.DataFrame, fits: dict,
            moves: list[str], totals: dict, target: str) -> str:
    """Everything in one JSON document (NaN becomes null)."""
    recs = lambda df: json.loads(df.to_json(orient="records")) if len(df) else []
    doc = {"target": target, "caveat": CAVEAT, "totals": totals, "jobs": recs(jobs),
           "ranking": recs(ranking), "recommendations": recs(rec),
           "fits": {k: {kk: vv for kk, vv in vars(v).items() if kk not in ("curve_p", "curve_y")}
                    for k, v in fits.items()},
           "frontier": moves}
    return dumps(doc)
