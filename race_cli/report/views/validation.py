"""A validation sweep's verdicts, shown: validation.md and the console section (per condition the pilot
beside the validation, its sentence, its predictions; then the summary). Reads a report/records.Validation;
computes nothing (report/validation.py does)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from race_cli.report.records import MIN_RHO_REGIMES, Validation
from race_cli.report.views.predicted import markdown_lines, print_lines
from race_cli.report.words import number as _num


def _f(v: Any, nd: int = 3) -> str:
    v = _num(v)
    return "–" if not np.isfinite(v) else f"{v:.{nd}f}"


def _g(v: Any) -> str:
    v = _num(v)
    return "–" if not np.isfinite(v) else f"{v:.3g}"


VAL_HEAD = ["role", "regime", "pilot: #  mean [95% CI]", "best share", "validation: #  mean [95% CI]", "≈ best",
            "gain: pilot → val", "seeds"]
VAL_NARROW = ["role", "regime", "pilot: #  mean [95% CI]", "validation: #  mean [95% CI]", "seeds"]


def _s(v: Any) -> str:
    v = _num(v)
    return "–" if not np.isfinite(v) else f"{v:+.3f}"


def regime_rows(t: pd.DataFrame) -> list[list[str]]:
    """Display cells of one condition's pilot-vs-validation table."""
    out = []
    for _, r in t.iterrows():
        ran = np.isfinite(_num(r.get("val_mean")))
        out.append([r["role"], r["regime"],
                    f"{r['pilot_rank']}  {_f(r['pilot_mean'])} [{_f(r['pilot_ci_lo'])}, {_f(r['pilot_ci_hi'])}]",
                    _f(r["pilot_p_best"], 2),
                    (f"{int(r['val_rank'])}  {_f(r['val_mean'])} [{_f(r['val_ci_lo'])}, {_f(r['val_ci_hi'])}]"
                     if ran else "not run yet"),
                    ("yes" if r["val_tied_best"] else "no") if ran else "–",
                    f"{_s(r.get('pilot_gain'))} → {_s(r.get('val_gain'))}",
                    str(int(r["val_n_seeds"])) if ran else "0"])
    return out


def markdown(res: Validation) -> str:
    """validation.md: per condition the table and its sentence, then the summary."""
    from race_cli.report.views.render import md_table

    p = res.pilot
    out = ["# RACE validation: did the pilot's call hold?", "",
           f"Pilot: `{p.get('sweep', '?')}` (target `{res.target}`). The test: best − control in the "
           "validation, a paired difference (items paired; seed variance pooled over the validation's "
           "regimes of one reward system) with its 95% interval (each variance part at its own degrees of "
           "freedom); confirmed when the interval lies above "
           f"{res.margin:g}, reversed when below zero, else not separated (no verdict with one seed "
           "per regime unless a seed sd is assumed). Rank correlation "
           f"(Spearman's ρ) only with at least {MIN_RHO_REGIMES} validated regimes. Gain: the "
           "improvement over the starting policy (iteration 0).", "", res.design, ""]
    for c in res.conditions:
        t = res.regimes[res.regimes["condition"] == c["condition"]]
        out += [f"## {c['condition']}", "", md_table(VAL_HEAD, regime_rows(t)), "", c["sentence"], ""]
        out += markdown_lines(t, res.predictors.get(c["condition"]))
    for sk in res.skipped:
        out += [f"- skipped: {sk}"]
    out += ["## Summary", "", res.summary, ""]
    return "\n".join(out)


def print_validation(console, res: Validation) -> None:
    from rich.panel import Panel
    from rich.table import Table

    from race_cli.report.views.render import NARROW

    head = VAL_HEAD if console.width >= NARROW else VAL_NARROW
    keep = [VAL_HEAD.index(h) for h in head]
    console.print(f"[bold]Validation[/] of pilot {res.pilot.get('sweep', '?')} on {res.target}: "
                  "the pilot's prediction next to what happened")
    if res.design:
        console.print(res.design, highlight=False)
    for c in res.conditions:
        t = Table(title=f"{c['condition']}  ·  {c['verdict']}", title_justify="left")
        for i in keep:
            t.add_column(VAL_HEAD[i], justify="left" if VAL_HEAD[i] in ("role", "regime") else "right",
                         overflow="fold")
        for r in regime_rows(res.regimes[res.regimes["condition"] == c["condition"]]):
            t.add_row(*[r[i] for i in keep])
        console.print(t)
        console.print(c["sentence"], highlight=False)
        print_lines(console, res.regimes[res.regimes["condition"] == c["condition"]], res.predictors.get(c["condition"]))
    for sk in res.skipped:
        console.print(f"skipped: {sk}", highlight=False)
    console.print(Panel(res.summary, title="was the pilot's call confirmed?", border_style="yellow"))
