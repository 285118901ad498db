"""Predictions at --at-budget from each regime's compute curve, shown (console, summary.md). Reads the
predictions table report/curve.predictions computed; computes nothing."""

from __future__ import annotations

import pandas as pd

from race_cli.report.records import MAX_EXTRAPOLATION


PRED_HEAD = ["rank", "regime", "predicted [95% CI]", "≈ best", "best share", "× observed", "A", "C_mid", "B"]


def prediction_rows(g: pd.DataFrame) -> list[list[str]]:
    return [[str(r.rank) + (" ★" if r.is_best else ""), r.regime, f"{r.predicted:.3f} [{r.pred_lo:.3f}, {r.pred_hi:.3f}]",
             "yes" if r.tied_best else "no", f"{r.p_best:.2f}", f"{r.extrapolation:.2f}" + (" ⚠" if r.warning else ""),
             f"{r.a:.3f}", f"{r.c_mid:.3g}", f"{r.b:.2f}"] for r in g.itertuples()]


PRED_INTRO = ("Each regime's compute curve R(C) = R0 + (A − R0)/(1 + (C_mid/C)^B), fitted to its equal-FLOP "
              "checkpoints (R0 the condition's start), predicts its score at the budget; intervals from "
              "{n} refits on draws that resample items and add seed noise (correlated across checkpoints as the "
              "seeds' trajectories are). ≈ best: the gap to the predicted best is within its studentized-range "
              "bound (familywise 5% over all pairs). best share: a ranking score, not a probability. × observed: "
              "the budget over the largest compute measured; ⚠ where the intervals' measured coverage falls below "
              "90%: beyond {k:g}x, beyond 1x unless the refits establish the bend, or a fit the checkpoints do not "
              "identify (benchmarks/bench_curve.py).")


def markdown_section(pred: pd.DataFrame, n_boot: int) -> list[str]:
    from race_cli.report.views.render import md_table

    out = [f"## Predicted at {pred['budget'].iloc[0]:.3g} FLOPs (compute curves)", "",
           PRED_INTRO.format(n=n_boot, k=MAX_EXTRAPOLATION), ""]
    for cond, g in pred.groupby("condition", sort=False):
        out += [f"#### {cond}", "", md_table(PRED_HEAD, prediction_rows(g)), ""]
        out += [f"- ⚠ {', '.join(gw['regime'])}: {w}." for w, gw in g[g["warning"].astype(bool)].groupby("warning")]
        out += [""]
    return out


def print_section(console, pred: pd.DataFrame, n_boot: int) -> None:
    from rich.table import Table

    console.rule(f"[bold]predicted at {pred['budget'].iloc[0]:.3g} FLOPs")
    console.print(PRED_INTRO.format(n=n_boot, k=MAX_EXTRAPOLATION), highlight=False)
    for cond, g in pred.groupby("condition", sort=False):
        t = Table(title=f"{cond} at {g['budget'].iloc[0]:.3g} FLOPs", title_justify="left")
        for h in PRED_HEAD:
            t.add_column(h, justify="left" if h == "regime" else "right", overflow="fold")
        for row in prediction_rows(g):
            t.add_row(*row)
        console.print(t)
        for w, gw in g[g["warning"].astype(bool)].groupby("warning"):
            console.print(f"[bold yellow]warning[/] ({', '.join(gw['regime'])}): {w}", highlight=False)
