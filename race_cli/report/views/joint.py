"""The joint comparison (report/joint.py's Joint record) written out: terminal, summary.md, report.json, joint.png.

Formats values computed in joint.py; computes nothing a test of joint.py would not see. matplotlib is
imported inside `write_joint_plot` only.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from race_cli.fmt import pm as _pm
from race_cli.fmt import value as _fmt
from race_cli.report.records import Joint
from race_cli.report.views.render import NARROW  # an 80-column console (a pipe) gets the narrow table

JOINT_PLOT = "joint.png"
JOINT_CSV = "joint.csv"
HEAD = ["rank", "regime", "final [95% CI]", "start", "gain [95% CI]", "> start", "≈ best", "best share",
        "feedback", "iterations", "seeds"]
NARROW_HEAD = ["rank", "regime", "final ± 95%", "gain ± 95%", "≈ best"]
INTRO = ("Every job at one budget spent the same FLOPs, so all (model, reward, G, μ) of a budget and target are "
         "ranked together here: intervals and ≈ best as in the rankings above, with the seed variance pooled per "
         "reward system over the joint condition's regimes and items paired across models and rewards; start and "
         "gain are over each regime's own model's starting policy. The sentences of one joint condition share a "
         "familywise 5% through a gatekept sequence: size and feedback start with 2.5% each, on the allocation-by-"
         "allocation claim (two sizes, or two reward systems, at the same remaining knobs, averaged over the "
         "allocations both ran); a claim shown passes its share on to best against best and to the gains, and a "
         "pair's last claims to the other pairs; a claim whose gate stays shut is not tested. Best against best "
         "picks each side's best from up to k regimes: a side is named ahead only when one of its regimes beats "
         "every regime of the other side, at Dunnett's many-to-one critical value over its k regimes "
         "(docs/report.md).")


ACROSS_INTRO = ("Across budgets: at each budget (a sweep's own, or its jobs' equal-FLOP checkpoints: eval.at) the "
                "size and feedback answers, each interval at the level its joint condition's gatekept sequence gave "
                "it; the rankings "
                "and every sentence of the checkpoint budgets are in summary.md.")


def _final(rk: pd.DataFrame) -> pd.Series:
    """The joint conditions at a sweep's own budgets (not a checkpoint of longer jobs)."""
    return rk["checkpoint"].astype(float) >= 1.0 if "checkpoint" in rk else pd.Series(True, index=rk.index)


def _f(v, nd: int = 3) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{v:.{nd}f}"


def _s(v) -> str:
    return "–" if v is None or not np.isfinite(v) else f"{v:+.3f}"


def rows(g: pd.DataFrame, narrow: bool) -> list[list[str]]:
    from race_cli.report.views.render import call_cell  # "–" where one seed per regime made no call

    out = []
    for _, r in g.iterrows():
        name = r["regime"] + (" ★" if r["is_best"] else "")
        tied = call_cell(r, "tied_best")
        if narrow:
            out.append([str(r["rank"]), name, _pm(r["mean"], r["ci_lo"], r["ci_hi"]),
                        _pm(r["gain"], r["gain_ci_lo"], r["gain_ci_hi"], True), tied])
            continue
        beats = call_cell(r, "beats_start")
        gain = "–" if not np.isfinite(r["gain"]) else (
            f"{_s(r['gain'])} [{_s(r['gain_ci_lo'])}, {_s(r['gain_ci_hi'])}]")
        fb = "–" if not np.isfinite(r["share_feedback"]) else f"{100 * r['share_feedback']:.0f}%"
        it = "–" if not np.isfinite(r["iterations"]) else f"{r['iterations']:.0f}"
        out.append([str(r["rank"]), name, f"{_f(r['mean'])} [{_f(r['ci_lo'])}, {_f(r['ci_hi'])}]",
                    _f(r["start"]), gain, beats, tied, _f(r["p_best"], 2), fb, it, str(r["n_seeds"])])
    return out


def _sentences_of(joint: Joint, name: str) -> list[str]:
    s = joint.sentences
    return list(s.loc[s["joint"] == name, "text"]) if len(s) else []


def _noise_line(g: pd.DataFrame) -> str:
    line = f"Noise: {g['method'].iloc[0]}."
    if not bool(g["seed_noise"].iloc[0]):
        line += " One seed per regime: intervals cover evaluation noise only, not training (seed) noise."
    return line


def print_joint(console, joint: Joint) -> None:
    """The joint section in the terminal: per joint condition its ranking and sentences."""
    from rich.table import Table

    for n in joint.notes:
        console.print("• " + n, highlight=False)
    if not len(joint.ranking):
        return
    console.rule("[bold]joint comparison: every model, reward and split at the same budget")
    console.print(INTRO, highlight=False)
    narrow = console.width < NARROW
    finals = joint.ranking[_final(joint.ranking)]
    for name, g in finals.groupby("joint", sort=False):
        t = Table(title=f"{name}  ·  {_noise_line(g)}", title_justify="left")
        for h in NARROW_HEAD if narrow else HEAD:
            t.add_column(h, justify="left" if h == "regime" else "right", overflow="fold")
        for row in rows(g, narrow):
            t.add_row(*row)
        console.print(t)
        for s in _sentences_of(joint, name):
            console.print("• " + s, highlight=False)
    if joint.across or len(finals) < len(joint.ranking):
        console.print(ACROSS_INTRO, highlight=False)
        for a in joint.per_budget:
            console.print("• " + a["text"], highlight=False)
    for a in joint.across:
        console.print("• " + a["text"], highlight=False)
    if narrow:
        console.print(f"Narrow console: start, > start, best share, feedback share, iterations and seeds of the "
                      f"joint ranking are in summary.md and {JOINT_CSV}.", highlight=False)


def markdown(joint: Joint) -> list[str]:
    """summary.md lines of the joint section (none when there is nothing to compare across)."""
    from race_cli.report.views.render import md_table

    notes = [f"- {n}" for n in joint.notes] + ([""] if joint.notes else [])
    if not len(joint.ranking):
        return (["## Joint comparison", ""] + notes) if notes else []
    out = ["## Joint comparison: every model, reward and split at the same budget", "", INTRO, ""] + notes
    for name, g in joint.ranking.groupby("joint", sort=False):
        out += [f"### {name}", "", _noise_line(g), "", md_table(HEAD, rows(g, narrow=False)), ""]
        out += [f"- {s}" for s in _sentences_of(joint, name)] + [""]
    if joint.across or joint.per_budget:
        out += ["### Across budgets", "", ACROSS_INTRO.replace(" in summary.md", " above"), ""]
        out += [f"- {a['text']}" for a in joint.per_budget] + [""]
        out += [f"- {a['text']}" for a in joint.across] + [""]
    out += [f"![{JOINT_PLOT}]({JOINT_PLOT})", ""] if joint.plotted else []
    return out


def to_json(joint: Joint) -> dict:
    recs = lambda df: json.loads(df.to_json(orient="records")) if len(df) else []
    return {"ranking": recs(joint.ranking), "sentences": recs(joint.sentences), "notes": joint.notes,
            "across": json.loads(pd.DataFrame(joint.across).to_json(orient="records")) if joint.across else [],
            "per_budget": joint.per_budget}


def write_joint_plot(out_dir, joint: Joint) -> list[str]:
    """joint.png, per target: with several budgets, the best regime of each (model, reward) against the
    budget, one line each, 95% intervals shaded; with one budget and known model sizes, the best regime
    of each reward against the model size (linear parameters), one line per reward. Returns the file
    names written."""
    rk = joint.ranking
    if not len(rk):
        return []
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = joint.sizes
    targets = list(dict.fromkeys(rk["target"]))
    fig, axes = plt.subplots(1, len(targets), figsize=(5.4 * len(targets), 4.2), squeeze=False)
    for ax, target in zip(axes.flat, targets):
        g = rk[rk["target"] == target]
        by_size = g["budget"].nunique() == 1 and g["model"].nunique() > 1 and set(g["model"]) <= set(sizes)
        lines = (list(dict.fromkeys(g["reward"])) if by_size else list(dict.fromkeys(zip(g["model"], g["reward"]))))
        for i, key in enumerate(lines):
            sel = g[g["reward"] == key] if by_size else g[(g["model"] == key[0]) & (g["reward"] == key[1])]
            xcol = sel["model"].map(sizes).astype(float) if by_size else sel["budget"]
            sel = sel.assign(x=xcol.to_numpy(float))
            best = sel.loc[sel.groupby("x")["mean"].idxmax()].sort_values("x")
            x = best["x"].to_numpy(float)
            color = plt.get_cmap("tab10")(i % 10)
            name = str(key) if by_size else f"{key[0]} · {key[1]}"
            ax.plot(x, best["mean"], "-" if i % 2 == 0 else "--", marker="o", color=color, label=name)
            ax.fill_between(x, best["ci_lo"], best["ci_hi"], color=color, alpha=0.15)
            if len(x) == 1:
                ax.errorbar(x, best["mean"], yerr=[best["mean"] - best["ci_lo"], best["ci_hi"] - best["mean"]],
                            color=color, capsize=4, ls="none")
            for xi, yi, reg in zip(x, best["mean"], best["regime"]):  # which regime is the best there
                ax.annotate(reg.split(" · ")[-1], (xi, yi), textcoords="offset points", xytext=(5, 4),
                            fontsize=6, color=color)
        ax.set_xscale("log")
        if by_size:
            ms = sorted(set(g["model"]), key=lambda m: sizes[m])
            ax.set_xticks([sizes[m] for m in ms], [f"{m}\n{sizes[m] / 1e3:.0f}k params" if sizes[m] < 1e6 else
                                                   f"{m}\n{sizes[m] / 1e6:.0f}M params" for m in ms])
            ax.set_xlabel(f"policy size (linear parameters) at {_fmt(float(g['budget'].iloc[0]))} FLOPs per job")
            ax.set_title(f"{target}: best regime per reward, by model size", fontsize=9)
        else:
            budgets = sorted(set(g["budget"].astype(float)))
            ax.set_xticks(budgets, [_fmt(b) for b in budgets])  # one decade or less: log ticks would be empty
            ax.set_xlabel("FLOPs per job (budgets and equal-FLOP checkpoints)")
            ax.set_title(f"{target}: best regime per (model, reward), by budget", fontsize=9)
        ax.minorticks_off()
        ax.set_ylabel(f"{target} score at that budget (95% CI)")
        ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    fig.suptitle("Joint comparison at equal FLOPs: model size and feedback", fontsize=11)
    fig.tight_layout()
    fig.savefig(out_dir / JOINT_PLOT, dpi=120)
    plt.close(fig)
    joint.plotted = True
    return [JOINT_PLOT]
