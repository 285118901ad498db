"""The rankings written out: rich terminal tables, a paste-ready markdown summary (summary.md), report.json.

Everything here formats values computed elsewhere (the Report, report/build.py); nothing is computed that a
test of rank/fit/recommend would not see. Each condition's recommendation is put into words here
(`recommendation_text`), the findings' lines printed as report/findings.py wrote them.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd

from race_cli.fmt import pct
from race_cli.fmt import pm as _pm
from race_cli.io import dumps
from race_cli.report.records import Target, Totals
from race_cli.report.words import CAVEAT, NOT_TESTABLE, direction
from race_cli.report.words import signed as _signed

MAX_LISTED = 20  # unranked jobs shown in the terminal; runs.csv has them all


def _f(v: Any, nd: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    if isinstance(v, (float, np.floating)):
        return f"{v:.{nd}f}"
    return str(v)


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


def gain_cell(r: pd.Series | dict) -> str:
    """'+0.050 [+0.010, +0.090]', or '–' without a starting evaluation."""
    g = r.get("gain", np.nan)
    if not np.isfinite(g):
        return "–"
    lo, hi = r.get("gain_ci_lo", np.nan), r.get("gain_ci_hi", np.nan)
    return _signed(g) + (f" [{_signed(lo)}, {_signed(hi)}]" if np.isfinite(lo) else " (no interval)")


def ranking_rows(g: pd.DataFrame) -> list[list[str]]:
    """Display cells of one condition's ranking (shared by rich and markdown)."""
    return [ranking_cells(r) for r in g.to_dict("records")]


def call_cell(r: Any, key: str) -> str:
    """'yes' / 'no' for a call of one row (tied_best: "≈ best", beats_start: "> start"), or '–' where none was
    made: one seed per regime (not testable: every regime then stays "≈ best" and none "> start", which says
    nothing) or, for "> start", no gain measured."""
    testable = r.get("testable", r.get("seed_noise", True))
    if not bool(testable) or (key == "beats_start" and not np.isfinite(r.get("gain", np.nan))):
        return "–"
    return "yes" if r[key] else "no"


def ranking_cells(r: dict) -> list[str]:
    """Display cells of one ranking row ({column: value}, as DataFrame.to_dict("records") gives them)."""
    beats = call_cell(r, "beats_start")
    return [str(r["rank"]), r["regime"] + (" ★" if r["is_best"] else ""),
            f"{_f(r['mean'])} [{_f(r['ci_lo'])}, {_f(r['ci_hi'])}]",
            _f(r.get("start", np.nan)), gain_cell(r), beats, _f(r["p_best"], 2),
            call_cell(r, "tied_best"), _f(r.get("p", np.nan)),
            _f(r.get("p_policy", np.nan)),
            " / ".join(pct(r.get(f"share_{n}", np.nan), 0) for n in ["search", "learning", "feedback"]),
            _f(r.get("informative_share", np.nan), 2),
            pct(r.get("budget_spent", np.nan), 0), str(r["n_seeds"])]


RANK_HEAD = ["rank", "regime", "final [95% CI]", "start", "gain [95% CI]", "> start", "best share",
             "≈ best", "p", "policy split", "search / learning / feedback", "informative", "budget spent", "seeds"]
# The console leaves out the best share: beside "≈ best" a share of 1.00 for one regime and 0.00 for a regime
# that is also "≈ best" reads as certainty it is not (summary.md and ranking.csv keep it, with its caveat).
CONSOLE_LEFT_OUT = ("best share",)
NARROW = 120  # a console narrower than this (a pipe is 80) gets NARROW_HEAD; the files have all
NARROW_HEAD = ["rank", "regime", "final ± 95%", "gain ± 95%", "> start", "≈ best"]
NARROW_NOTE = ("Narrow console: start, p, policy split, shares, informative share, budget spent, seeds and "
               "the best share are in summary.md and ranking.csv.")


def console_columns(head: list[str], left_out: tuple[str, ...] = CONSOLE_LEFT_OUT) -> list[int]:
    """Indices of `head` the console shows (the rest stay in the files)."""
    return [i for i, h in enumerate(head) if h not in left_out]


def condition_heading(cond: str, g: pd.DataFrame) -> str:
    """'tiny-m rule … · method; noise': the line that opens a condition, before its note and its table."""
    noise = g["noise"].iloc[0] if "noise" in g else ""
    method = g["method"].iloc[0] if "method" in g else ""
    return cond + (f"  ·  {method}" if method else "") + (f"; {noise}" if noise else "")


def narrow_rows(g: pd.DataFrame) -> list[list[str]]:
    """NARROW_HEAD cells of one condition's ranking: what fits 80 columns."""
    rows = []
    for _, r in g.iterrows():
        beats = call_cell(r, "beats_start")
        rows.append([str(r["rank"]), r["regime"] + (" ★" if r["is_best"] else ""),
                     _pm(r["mean"], r["ci_lo"], r["ci_hi"]),
                     _pm(r.get("gain", np.nan), r.get("gain_ci_lo", np.nan), r.get("gain_ci_hi", np.nan), True),
                     beats, call_cell(r, "tied_best")])
    return rows


def noise_note(first: pd.Series | dict) -> str | None:
    """The sentence a one-seed condition prints wherever its intervals appear, else None.
    first: the condition's first ranking row."""
    if "seed_noise" in first and not bool(first["seed_noise"]):
        return "Intervals above: one seed per regime, so they cover evaluation noise only, not training (seed) noise."
    return None


def _records_by_condition(df: pd.DataFrame) -> dict[str, list[dict]]:
    """{condition: its rows as {column: value} dicts, in table order}, from one to_dict of the whole table
    (a DataFrame per condition, and a row Series per row, cost seconds on 800 conditions)."""
    out: dict[str, list[dict]] = {}
    for r in df.to_dict("records") if "condition" in df else []:
        out.setdefault(r["condition"], []).append(r)
    return out


def _rows_by_condition(df: pd.DataFrame) -> dict:
    """{condition: its rows}, grouped once (a boolean mask per condition is O(conditions²))."""
    return dict(tuple(df.groupby("condition", sort=False))) if "condition" in df and len(df) else {}


def _by_target(ranking: pd.DataFrame, targets: tuple[Target, ...]):
    """(target, that target's ranking rows) in the order the targets were given (records.Target)."""
    for t in targets:
        yield t, ranking[ranking["target"] == t.name]


def _target_line(t: Target, g: pd.DataFrame) -> str:
    n_cond = g["condition"].nunique()
    n_learn = int(g.groupby("condition", sort=False)["beats_start"].any().sum()) if "beats_start" in g else 0
    return (f"Target {t.name} ({direction(t.maximize)}): "
            f"{n_cond} condition(s); in {n_learn} of them at least one regime beats its start.")


def recommendation_text(rec: pd.Series | dict, higher: bool) -> str:
    """One paragraph per condition, for the terminal and summary.md; it names its target.
    rec: one row of the recommendations (a Series, or a {column: value} record); higher: higher is better on
    its target (the winner's curse pulls the best's score back down, or up for a loss)."""
    t = rec["target"]
    lo, hi = rec.get("best_sel_lo", np.nan), rec.get("best_sel_hi", np.nan)
    if isinstance(lo, float) and np.isfinite(lo) and rec.get("n_regimes", 1) > 1:  # the winner's interval
        ci = f" [{lo:.3f}, {hi:.3f}] (simultaneous over the {rec['n_regimes']} regimes, as it was picked as the best)"
    else:
        ci = (f" [{rec['best_ci_lo']:.3f}, {rec['best_ci_hi']:.3f}]"
              if np.isfinite(rec["best_ci_lo"]) else " (no interval: one seed, no per-item scores)")
    gain = ""
    if np.isfinite(rec.get("best_gain", np.nan)):
        gci = (f" [{rec['best_gain_ci_lo']:+.3f}, {rec['best_gain_ci_hi']:+.3f}]"
               if np.isfinite(rec["best_gain_ci_lo"]) else "")
        gain = f", gain over its start {rec['best_gain']:+.3f}{gci}"
    s = f"Target {t}: "
    s += ("pilot-best regime" if rec.get("learned") else
          "no regime beats its start, so there is no pilot-best regime; the highest final score is")
    split = rec.get("best_p_policy", np.nan)
    split = f", policy split {split:.3f}" if isinstance(split, float) and np.isfinite(split) else ""
    s += f" {rec['best_regime']} (p = {rec['best_p']:.3f}{split}), {t} {rec['best_mean']:.3f}{ci}{gain}"
    if not rec.get("seed_noise", True) and np.isfinite(rec["best_ci_lo"]):
        s += f" (intervals cover evaluation noise only: one seed per regime; ≈ best and > start {NOT_TESTABLE})"
    elif not rec.get("testable", True):
        s += f"; ≈ best {NOT_TESTABLE}"
    else:  # the familywise ≈ best set, as the table's column says it (the best share stays in the files)
        s += "; " + _best_set(rec)
    s += ". "
    drop = rec.get("expected_drop", np.nan)
    if rec.get("learned") and isinstance(drop, float) and np.isfinite(drop) and rec["n_regimes"] > 1:
        s += (f"As the best of {rec['n_regimes']} noisy estimates it is expected to drop by about {drop:.3f} "
              f"when run again (winner's curse): about {rec['best_mean'] - (drop if higher else -drop):.3f}. ")
    if rec.get("learned") and rec.get("n_beat_start", 0) < rec["n_regimes"]:
        s += f"{rec['n_beat_start']} of {rec['n_regimes']} regimes beat their start. "
    if isinstance(rec.get("fit_text"), str):
        s += rec["fit_text"] + " "
    if rec.get("learned"):
        s += f"Worth validating for {t}: {rec['validate']}."
    elif not rec.get("testable", True):
        s += (f"{NOT_TESTABLE.capitalize()} for {t}: run two or more seeds per regime (or assume the spread with "
              "`race report --assume-seed-sd X`) before choosing what to validate.")
    else:
        s += (f"Nothing is worth validating for {t} until a regime beats its start: give the jobs "
              "more budget or an easier task, or score more evaluation items.")
    return s


def _best_set(rec: pd.Series | dict) -> str:
    """The ≈ best decision (familywise 5%) in words: whether the best stands alone or among others."""
    others = int(rec.get("n_tied", 1)) - 1
    if rec.get("n_regimes", 1) <= 1:
        return "the only regime ranked"
    if others <= 0:
        return "every other regime is shown worse (familywise 5%): it alone is ≈ best"
    return f"≈ best together with {others} other regime(s) not shown worse than it (familywise 5%)"


# --- terminal --------------------------------------------------------------------------


def print_findings(console, lines: list[str]) -> None:
    """The findings section (report/findings.py): a rule, then its lines as they are."""
    if not lines:
        return
    console.rule(f"[bold]{lines[0]}", align="left")
    for line in lines[1:]:
        console.print(line, highlight=False)


def print_report(console, rep, joint=None) -> None:
    """The Report `rep` (report/build.py) in rich tables: job counts, the findings, unranked jobs, one section
    per target with its conditions' rankings (each opened by the no-gain sentence when no regime beats its
    start), the joint comparison (`joint(console)` prints it), the frontier, the caveat. rep.options.full
    False: the counts, the findings and where the rest is (race report --full prints it)."""
    from rich.panel import Panel
    from rich.table import Table

    jobs, ranked_mask, ranking, rec, moves, totals = rep.jobs, rep.ranked, rep.ranking, rep.recommendations, \
        rep.moves, rep.totals
    targets, diffs, findings, full = rep.targets, rep.target_differences, rep.findings, rep.options.full

    counts = state_counts(jobs)
    console.print(f"[bold]race report[/]: {len(jobs)} jobs in {jobs['sweep'].nunique()} sweep(s) — "
                  + ", ".join(f"{k} {v}" for k, v in counts.items())
                  + f"; target(s): [bold]{', '.join(t.name for t in targets)}[/]")
    print_findings(console, findings or [])
    if not full:
        return
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
    rec_of = _rows_by_condition(rec)
    for target, gt in _by_target(ranking, targets):
        console.rule(f"[bold]target: {target.name}")
        console.print(_target_line(target, gt), highlight=False)
        for cond, g in gt.groupby("condition", sort=False):
            r = rec_of.get(cond, rec.iloc[:0])
            # heading, then this condition's note, then its table: a note printed above a table's own
            # title reads as the foot of the table before it
            console.print(f"[bold]{condition_heading(cond, g)}[/]", highlight=False)
            if len(r) and r.iloc[0]["no_gain"]:
                console.print(f"[bold yellow]{r.iloc[0]['no_gain']}[/]", highlight=False)
            t = Table()
            narrow = console.width < NARROW
            keep = list(range(len(NARROW_HEAD))) if narrow else console_columns(RANK_HEAD)
            head = NARROW_HEAD if narrow else RANK_HEAD
            for i in keep:
                t.add_column(head[i], justify="left" if head[i] == "regime" else "right", overflow="fold")
            for row in narrow_rows(g) if narrow else ranking_rows(g):
                t.add_row(*[row[i] for i in keep])
            console.print(t)
            if noise_note(g.iloc[0]):
                console.print(noise_note(g.iloc[0]), highlight=False)
            if len(r):
                console.print(recommendation_text(r.iloc[0], target.maximize), highlight=False)
    if joint is not None:
        joint(console)
    if len(rec) > 1:
        t = Table(title="Conditional frontier: recommended split per condition", title_justify="left")
        head = ["condition", "best regime", "beats start", "policy split", "p", "p* [95% CI] (fit or fallback)",
                "fit", "final", "best share"]
        keep = [0, 1, 3, 5, 7] if console.width < NARROW else console_columns(head)
        for i in keep:
            t.add_column(head[i], overflow="fold")
        for _, r in rec.iterrows():
            row = [r["condition"], r["best_regime"], "yes" if r["learned"] else "no" if r.get("testable", True) else "–",
                   _f(r.get("best_p_policy", np.nan)), _f(r["best_p"]), _pstar(r),
                   "fallback" if r.get("fit_fallback") else str(r.get("fit_model", "–")),
                   _f(r["best_mean"]), _f(r["best_p_best"], 2)]
            t.add_row(*[row[i] for i in keep])
        console.print(t)

        for m in moves:
            console.print("• " + m, highlight=False)
    for d in diffs or []:
        console.print("• " + d, highlight=False)
    if console.width < NARROW and len(ranking):
        console.print(NARROW_NOTE, highlight=False)
    console.print(f"Compute: {_flops(totals.total)} training FLOPs (model convention) — "
                  f"search {_share(totals, 'rollout')}, learning {_share(totals, 'update')}, "
                  f"feedback {_share(totals, 'reward')}; evaluation {_flops(totals.eval)} FLOPs, not charged.")
    console.print(Panel(CAVEAT, title="caveat", border_style="yellow"))


def _pstar(r: pd.Series) -> str:
    lo, hi = r.get("p_star_lo", np.nan), r.get("p_star_hi", np.nan)
    ci = f" [{_f(lo)}, {_f(hi)}]" if lo is not None and np.isfinite(lo) and not r.get("fit_fallback") else ""
    return _f(r.get("p_star")) + ci


def _share(totals: Totals, ph: str) -> str:
    share = totals.share(ph)
    return "–" if share is None else pct(share, 0)


# --- markdown ----------------------------------------------------------------------------


def md_table(head: list[str], rows: list[list[str]]) -> str:
    esc = lambda s: str(s).replace("|", "\\|")
    lines = ["| " + " | ".join(map(esc, head)) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(map(esc, r)) + " |" for r in rows]
    return "\n".join(lines)


def markdown_summary(rep, plots: list[str], sections: list[str] | None = None,
                     joint: list[str] | None = None) -> str:
    """summary.md of the Report `rep`: the findings first (report/findings.py), then the compute reported as
    the paper asks, one section of rankings per target, the joint comparison (`joint`: its lines), fits, the
    frontier and more `sections`, the `plots` linked, the caveat: the order a reader drills down."""
    jobs, ranked_mask, ranking, rec, moves, totals = rep.jobs, rep.ranked, rep.ranking, rep.recommendations, \
        rep.moves, rep.totals
    targets, n_boot, diffs, findings = rep.targets, rep.options.bootstrap, rep.target_differences, rep.findings
    counts = state_counts(jobs)
    out = ["# RACE pilot-grid report", "",
           f"Sweeps: {', '.join(sorted(jobs['sweep'].unique()))}. Jobs: {len(jobs)} ("
           + ", ".join(f"{k} {v}" for k, v in counts.items()) + "). Targets: "
           + ", ".join(f"`{t.name}` ({direction(t.maximize)})" for t in targets)
           + ".", ""]
    if findings:
        out += [f"## {findings[0]}", "", "```text"] + findings[1:] + ["```", ""]
    out += ["## Compute", "",
           f"Total training compute: **{_flops(totals.total)} FLOPs** (model convention: causal "
           f"attention pairs, no recompute), split search (rollout) {_share(totals, 'rollout')}, "
           f"learning (policy updates) {_share(totals, 'update')}, feedback (reward) "
           f"{_share(totals, 'reward')}. Evaluation used {_flops(totals.eval)} FLOPs, not "
           f"charged to the budgets ({_flops(totals.budget)} FLOPs budgeted in all).", "",
           "## Rankings", "",
           "Intervals: 95% t intervals whose variance adds each regime's evaluation-item noise and "
           "the training (seed) noise, pooled over the sweep's regimes of one reward system and moderated per "
           "regime (the pool and its df are printed with each condition; docs/report.md; their "
           "coverage is measured by benchmarks/bench_calibration.py). final: the regime's score at the "
           "end. start: its starting policy's score (iteration-0 evaluation, same items). gain: the "
           "improvement over the start (final − start; start − final for a lower-is-better target), "
           "items paired. > start: the gain is above zero after Holm's correction over the "
           "condition's regimes (familywise 2.5%, one-sided). ≈ best: the gap to the best is not "
           "shown above zero by the studentized-range step-down over the condition's regimes (REGWQ, "
           "familywise 5%): not shown worse. best share: the share of "
           f"{n_boot} draws (items resampled, seed noise added) in which the regime is best (the "
           "CSV's p_best) — a ranking score, not a calibrated probability of being best: with two "
           "seeds it is overconfident (its reliability table is in docs/report.md). "
           "p: learning / total FLOPs; policy split: learning / (search + learning), comparable "
           "across reward systems.", ""]
    by_cond = totals.by_condition
    rec_of = _records_by_condition(rec)
    for target, gt in _by_target(ranking, targets):
        out += [f"### Target: {target.name}", "", _target_line(target, gt), ""]
        for cond, rows in _records_by_condition(gt).items():
            jc = rows[0]["job_condition"] if "job_condition" in rows[0] else cond
            t = by_cond.get(jc, Totals()) if "condition" in jobs else None
            flops = (f"Training compute of this condition's readable jobs: {_flops(t.total)} FLOPs "
                     f"(search {_share(t, 'rollout')}, learning {_share(t, 'update')}, feedback "
                     f"{_share(t, 'reward')}).") if t else ""
            r = rec_of.get(cond, [])
            out += [f"#### {cond}", ""]
            if r and r[0]["no_gain"]:
                out += [f"**{r[0]['no_gain']}**", ""]
            out += [flops, "", md_table(RANK_HEAD, [ranking_cells(x) for x in rows]), ""]
            if noise_note(rows[0]):
                out += [f"*{noise_note(rows[0])}*", ""]
            if r:
                out += [recommendation_text(r[0], target.maximize), ""]
    out += joint or []  # the joint comparison's section (views/joint.py)
    if moves or diffs:
        out += ["## Conditional frontier", ""] + [f"- {m}" for m in moves] + [""]
    if diffs:
        out += ["Where the best regime differs between targets:", ""] + [f"- {d}" for d in diffs] + [""]
    out += list(sections or [])  # more sections (the frontier across budgets: report/frontier.py)
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


def to_json(rep, extra: dict | None = None, joint: dict | None = None) -> str:
    """The Report `rep` in one JSON document (NaN becomes null), `extra` keys after its own, `joint` the joint
    section's document. `target` is the ranked target when there is one, else null; `targets` lists them all."""
    jobs, ranking, rec, fits, moves, totals = rep.jobs, rep.ranking, rep.recommendations, rep.fits, rep.moves, \
        rep.totals
    targets, diffs = [t.name for t in rep.targets], rep.target_differences
    recs = lambda df: json.loads(df.to_json(orient="records")) if len(df) else []
    doc = {"target": targets[0] if len(targets) == 1 else None, "targets": list(targets),
           "caveat": CAVEAT, "totals": totals.to_json(), "jobs": recs(jobs),
           "ranking": recs(ranking), "recommendations": recs(rec),
           "fits": {f.condition: {k: v for k, v in vars(f.fit).items() if k not in ("curve_p", "curve_y")}
                    for f in fits},
           "frontier": moves, "target_differences": list(diffs or []),
           "joint": joint or {"ranking": [], "sentences": [], "across": []}}
    doc.update({k: recs(v) if isinstance(v, pd.DataFrame) else v for k, v in (extra or {}).items()})
    return dumps(doc)
