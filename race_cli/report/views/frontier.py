"""The frontier across budgets, shown: the best regime per checkpoint budget (console, summary.md) and the
two figures (frontier_budget.png, isoflop.png). Reads a report/records.Frontier; computes nothing
(report/frontier.py does). matplotlib is imported inside `write_plots` only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from race_cli.fmt import g3 as _fmt_flops
from race_cli.fmt import pm as _pm
from race_cli.report.records import Frontier


PLOTS = ("frontier_budget.png", "isoflop.png")
HEAD = ["budget", "fraction", "FLOPs spent", "best regime", "score [95% CI]", "gain [95% CI]", "> start",
        "≈ best"]


def _ci(v, lo, hi, signed: bool = False) -> str:
    if not np.isfinite(v):
        return "–"
    f = (lambda x: f"{x:+.3f}") if signed else (lambda x: f"{x:.3f}")
    return f"{f(v)} [{f(lo)}, {f(hi)}]" if np.isfinite(lo) else f(v)


def best_rows(g: pd.DataFrame) -> list[list[str]]:
    return [[_fmt_flops(r.budget_at), f"{r.fraction:g}", _fmt_flops(r.flops_at), r.best_regime,
             _ci(r.mean, r.ci_lo, r.ci_hi), _ci(r.gain, r.gain_ci_lo, r.gain_ci_hi, True),
             "yes" if r.beats_start else "no", r.tied or "–"] for r in g.itertuples()]


NARROW_HEAD = ["budget", "best regime", "score ± 95%", "gain ± 95%", "> start", "≈ best"]


def narrow_rows(g: pd.DataFrame) -> list[list[str]]:
    return [[_fmt_flops(r.budget_at), r.best_regime, _pm(r.mean, r.ci_lo, r.ci_hi),
             _pm(r.gain, r.gain_ci_lo, r.gain_ci_hi, True), "yes" if r.beats_start else "no", r.tied or "–"]
            for r in g.itertuples()]


INTRO = ("Every job was evaluated at the same fractions of its budget (eval.at: the first iteration at or "
         "past f·C), so each checkpoint ranks the regimes at budget f·C — read as what a pilot of that budget "
         "would have found, since the learning rate is constant after warm-up. Intervals and ≈ best as in the "
         "rankings (seed + item noise, familywise 5%); a change of winner is stated only when each winner is "
         "distinguishably worse than the best at the other budget.")


def markdown_section(front: Frontier) -> list[str]:
    """summary.md's frontier section: per condition the best regime per budget, then the sentences."""
    from race_cli.report.views.render import md_table

    best, sentences = front.best, front.sentences
    out = ["## Frontier across budgets", "", INTRO, ""]
    for cond, g in best.groupby("condition", sort=False):
        out += [f"#### {cond}", "", md_table(HEAD, best_rows(g)), ""]
    out += [f"- {s}" for s in sentences] + [""]
    return out


def print_section(console, front: Frontier) -> None:
    """The frontier section on the console (the narrow table below 120 columns)."""
    from rich.table import Table

    best, sentences = front.best, front.sentences
    console.rule("[bold]frontier across budgets")
    console.print(INTRO, highlight=False)
    for cond, g in best.groupby("condition", sort=False):
        from race_cli.report.views.render import NARROW

        t = Table(title=f"best regime per budget: {cond}", title_justify="left")
        narrow = console.width < NARROW  # an 80-column terminal or a pipe: the columns that fit, none cut
        for h in NARROW_HEAD if narrow else HEAD:
            t.add_column(h, justify="left" if h in ("best regime", "≈ best") else "right", overflow="fold")
        for row in narrow_rows(g) if narrow else best_rows(g):
            t.add_row(*row)
        console.print(t)
    for s in sentences:
        console.print("• " + s, highlight=False)


def write_plots(out_dir: Path, front: Frontier, styles: dict | None = None) -> list[str]:
    """frontier_budget.png: per condition, every regime's score against the checkpoint budget with its
    95% interval, the best per budget marked; isoflop.png: per condition, score against the update
    fraction p, one curve per checkpoint budget (IsoFLOP-style). matplotlib imported here only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from race_cli.report.views.plots import MAX_PANELS, _finish, _grid, _wrap, regime_styles

    fr, best = front.table, front.best
    styles = styles or regime_styles(fr["regime"])  # the report's map: a regime's colour in every figure
    conds = list(dict.fromkeys(fr["condition"]))[:MAX_PANELS]
    fig, axes = _grid(plt, len(conds))
    for ax, cond in zip(axes, conds):
        g = fr[fr["condition"] == cond]
        for reg in [r for r in styles if r in set(g["regime"])]:  # legend in the regimes' order
            gr = g[g["regime"] == reg].sort_values("fraction")
            x = gr["budget_at"].to_numpy(float) if "budget_at" in gr else gr["fraction"].to_numpy(float)
            color, marker = styles[reg]
            ax.plot(x, gr["mean"], marker=marker, ms=3, label=reg, color=color)
            ax.fill_between(x, gr["ci_lo"].astype(float), gr["ci_hi"].astype(float), alpha=0.12, color=color)
        b = best[best["condition"] == cond]
        ax.scatter(b["budget_at"], b["mean"], marker="*", s=90, color="black", zorder=5, label="best")
        ax.set_xscale("log")
        ax.set_xlabel("checkpoint budget (training FLOPs)")
        ax.set_ylabel("score")
        ax.set_title(_wrap(cond), fontsize=8)
        ax.legend(fontsize=6)
        ax.grid(alpha=0.3)
    _finish(plt, fig, "Frontier across budgets: every regime at every checkpoint budget (95% intervals)",
            out_dir / PLOTS[0])
    written = [PLOTS[0]]
    if "p" in fr and fr["p"].notna().any():
        fig, axes = _grid(plt, len(conds))
        for ax, cond in zip(axes, conds):
            g = fr[fr["condition"] == cond]
            fracs = sorted(g["fraction"].unique())
            for k, f in enumerate(fracs):
                gf = g[g["fraction"] == f].sort_values("p")
                c = plt.get_cmap("viridis")(k / max(len(fracs) - 1, 1))
                ax.errorbar(gf["p"], gf["mean"], yerr=[gf["mean"] - gf["ci_lo"], gf["ci_hi"] - gf["mean"]],
                            marker="o", ms=3, capsize=2, color=c, label=f"{f:g}·C")
            ax.set_xlabel("update fraction p")
            ax.set_ylabel("score")
            ax.set_title(_wrap(cond), fontsize=8)
            ax.legend(fontsize=6, title="budget", title_fontsize=6)
            ax.grid(alpha=0.3)
        _finish(plt, fig, "IsoFLOP view: score against the allocation variable, one curve per budget",
                out_dir / PLOTS[1])
        written.append(PLOTS[1])
    return written


