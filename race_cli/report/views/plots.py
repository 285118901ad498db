"""PNG figures of a report; matplotlib is imported inside `write_plots` only (Agg backend).

- shares.png    stacked compute shares (search / learning / feedback) per job, from the actual
                ledger, with the planned learning share marked; per regime when jobs are many;
- response.png  target against update fraction p per condition (a condition includes its
                target): regime means with 95% intervals, the starting level, the chosen
                response fit, the recommended point and the p* interval of a fit;
- curves.png    eval/<target>/accuracy against training FLOPs spent, one colour per regime,
                with the starting policy's level (iteration 0) as a dashed line;
- frontier.png  the recommended p of every condition (only when there are several).

Every figure of a report draws a regime in one colour and marker (`regime_styles`, built once from
the regimes' names, also passed to the frontier figure), and legends list regimes in that order.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

PLOT_NAMES = ("shares.png", "response.png", "curves.png", "frontier.png")
MAX_PANELS = 12  # conditions drawn per figure
MAX_JOB_BARS = 60  # above this, shares are drawn per regime


MAX_LEGEND = 10  # up to this many regimes, the legend names them all; beyond, only the best 3
MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # 7 markers x 10 colours: 70 distinct styles


def _named(n: int) -> int:
    return n if n <= MAX_LEGEND else 3


def _natural(text: str) -> tuple:
    """'G=16 μ=1' after 'G=8 μ=2': numbers inside a regime's name compare as numbers."""
    import re

    return tuple((0, float(t), "") if re.fullmatch(r"\d+(\.\d+)?", t) else (1, 0.0, t)
                 for t in re.split(r"(\d+(?:\.\d+)?)", str(text)) if t)


def regime_styles(regimes) -> dict[str, tuple]:
    """One (colour, marker) per regime name, built once per report and used by every panel and figure:
    a regime keeps its colour wherever it appears. The order (and the legends') is the regimes' own,
    numbers compared as numbers (G=4 before G=8 before G=16), never a condition's ranking."""
    from matplotlib import colormaps

    tab = colormaps["tab10"]
    names = sorted(dict.fromkeys(str(r) for r in regimes), key=_natural)
    return {r: (tab(i % 10), MARKERS[i % len(MARKERS)]) for i, r in enumerate(names)}


def _legend_order(regimes, styles: dict, keep: int) -> list[str]:
    """The `keep` regimes to name (the first `keep` of the ranking: the best), listed in the style map's order."""
    chosen = set(list(regimes)[:keep])
    return [r for r in styles if r in chosen]


def _more(n: int) -> str | None:
    return f"best {_named(n)} of {n} regimes named" if n > MAX_LEGEND else None


def _wrap(title: str, width: int = 60) -> str:
    """A condition label broken into lines that fit above one panel."""
    import textwrap

    return "\n".join(textwrap.wrap(title, width)) or title


def _grid(plt, n: int, w: float = 4.6, h: float = 3.4):
    cols = min(3, n)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes.flat


def _shares(plt, jobs: pd.DataFrame, ranking: pd.DataFrame, path: Path) -> None:
    colors = {"search": "#4C72B0", "learning": "#DD8452", "feedback": "#55A868"}
    ok = jobs[jobs["readable"].astype(bool) & jobs["p"].notna()] if "p" in jobs else jobs.iloc[:0]
    if len(ok) <= MAX_JOB_BARS:
        df = ok.sort_values(["condition", "p"]) if "condition" in ok else ok.sort_values("p")
        labels = list(df["job_id"])
        planned = df["planned_share_search"].to_numpy(float) if "planned_share_search" in df else None
        title = "Compute shares per job (actual ledger)"
    else:
        if "target" in ranking:  # shares do not depend on the target: one target's rows
            ranking = ranking[ranking["target"] == ranking["target"].iloc[0]]
        conds = list(dict.fromkeys(ranking["condition"]))
        keep, rows = [], 0
        for c in conds:  # whole conditions, up to MAX_JOB_BARS bars (at least one condition)
            n = int((ranking["condition"] == c).sum())
            if keep and rows + n > MAX_JOB_BARS:
                break
            keep.append(c)
            rows += n
        df = ranking[ranking["condition"].isin(keep)].sort_values(["condition", "p"])
        labels = list(df["condition"] + " · " + df["regime"])
        planned = None
        title = f"Compute shares per regime (mean over seeds; {len(ok)} jobs)"
        if len(keep) < len(conds):
            title += f"\nfirst {len(keep)} of {len(conds)} conditions; all in ranking.csv"
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.28 * max(len(df), 1)))
    y = np.arange(len(df))
    left = np.zeros(len(df))
    for name, c in colors.items():
        v = 100 * df[f"share_{name}"].to_numpy(float)
        ax.barh(y, v, left=left, color=c, label=name, height=0.75)
        left += np.nan_to_num(v)
    if planned is not None:  # where the plan put the search | learning boundary
        ax.scatter(100 * planned, y, marker="|", s=120, color="black",
                   label="planned search | learning", zorder=3)
    ax.set_yticks(y, labels, fontsize=7)
    ax.set_ylim(len(df) - 0.5, -0.5)  # first job on top
    ax.set_xlim(0, 100)
    ax.set_xlabel("share of the job's training FLOPs (%, model convention)")
    ax.set_title(title)
    ax.legend(loc="lower right", fontsize=8, framealpha=0.9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _start_level(g: pd.DataFrame) -> float:
    """The condition's starting level: its regimes' mean start (NaN when none was recorded)."""
    v = g["start"].to_numpy(float) if "start" in g else np.array([np.nan])
    return float(np.nanmean(v)) if np.isfinite(v).any() else np.nan


def _response(plt, jobs, ranking, fits: dict, styles: dict, path: Path) -> None:
    conds = list(dict.fromkeys(ranking["condition"]))[:MAX_PANELS]
    fig, axes = _grid(plt, len(conds))
    for ax, cond in zip(axes, conds):
        g = ranking[ranking["condition"] == cond]
        target = g["target"].iloc[0]
        start = _start_level(g)
        if np.isfinite(start):
            ax.axhline(start, color="0.4", ls=":", lw=1.2, label=f"start (iteration 0): {start:.3f}")
        logx = g["p"].min() > 0 and g["p"].max() / g["p"].min() > 4
        cols = [styles[r][0] for r in g["regime"]]
        ax.vlines(g["p"], g["ci_lo"], g["ci_hi"], colors=cols, lw=1.5)  # 95% intervals
        for reg, p, m in zip(g["regime"], g["p"], g["mean"]):
            ax.scatter([p], [m], color=styles[reg][0], marker=styles[reg][1], s=30, zorder=3)
        for reg in _legend_order(g["regime"], styles, _named(len(g))):  # legend proxies, in regime order
            ax.plot([], [], ls="none", marker=styles[reg][1], color=styles[reg][0], label=reg)
        fit = fits.get(cond)
        lo, hi = float(np.nanmin(g["ci_lo"])), float(np.nanmax(g["ci_hi"]))
        if np.isfinite(start):
            lo, hi = min(lo, start), max(hi, start)
        if fit is not None and fit.curve_p:
            ax.plot(fit.curve_p, fit.curve_y, color="0.3", lw=1.5, ls="--", label=f"fit: {fit.model}")
            pad = 0.15 * max(hi - lo, 1e-3)
            ax.set_ylim(lo - pad, hi + pad)  # an unstable fit's curve must not squash the data
        if fit is not None and np.isfinite(fit.p_star):
            what = "fallback: pilot best" if fit.fallback else "fit optimum p*"
            ax.plot(fit.p_star, fit.y_star, marker="*", ms=14, color="crimson", ls="none",
                    label=f"{what} (p={fit.p_star:.2f})")
            if not fit.fallback and np.isfinite(fit.p_star_lo):
                ax.axvspan(max(fit.p_star_lo, g["p"].min() * 0.5), fit.p_star_hi, color="crimson",
                           alpha=0.08, label=f"p* 95% interval [{fit.p_star_lo:.2f}, {fit.p_star_hi:.2f}]")
        if logx:  # label the grid's own p values; log-axis default labels collide
            from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

            ax.set_xscale("log")
            ticks = []
            lp = np.log(sorted(set(np.round(g["p"].to_numpy(float), 2))))
            for v in lp:  # keep labels at least 1/6 of the log range apart
                if not ticks or v - ticks[-1] >= (lp[-1] - lp[0]) / 6:
                    ticks.append(v)
            ticks = list(np.exp(ticks))
            ax.xaxis.set_major_locator(FixedLocator(ticks))
            ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:.2f}"))
            ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("update fraction p = learning FLOPs / total")
        ax.set_ylabel(f"eval {target} (mean, 95% CI)")
        ax.set_title(_wrap(cond), fontsize=8)
        ax.legend(fontsize=6, loc="lower center", title=_more(len(g)), title_fontsize=6)
        ax.grid(alpha=0.3)
    _finish(plt, fig, "Final score against the update fraction p, per condition and target", path)


def _curves(plt, jobs, ranking, curves, styles: dict, path: Path) -> None:
    conds = list(dict.fromkeys(ranking["condition"]))[:MAX_PANELS]
    meta = jobs.loc[jobs["ranked"], ["sweep", "job_id", "condition", "regime"]].rename(
        columns={"condition": "job_condition"})
    c = curves.merge(meta, on=["sweep", "job_id"])  # ranked jobs only
    from matplotlib.collections import LineCollection

    fig, axes = _grid(plt, len(conds))
    for ax, cond in zip(axes, conds):
        g = ranking[ranking["condition"] == cond]
        target = g["target"].iloc[0]
        jc = g["job_condition"].iloc[0] if "job_condition" in g else cond
        regimes = list(g["regime"])
        cols = {r: styles[r][0] for r in regimes}
        cc = c[(c["job_condition"] == jc) & (c["target"] == target)].sort_values(
            ["sweep", "job_id", "flops_total"])
        start = _start_level(g)
        if np.isfinite(start):
            ax.axhline(start, color="0.4", ls="--", lw=1.2, label=f"start (iteration 0): {start:.3f}")
        segs = {r: [] for r in regimes}  # one polyline per job, one collection per regime
        for (sw, jid, reg), jc in cc.groupby(["sweep", "job_id", "regime"], sort=False):
            segs.setdefault(reg, []).append(jc[["flops_total", "value"]].to_numpy(float))
        for reg, lines in segs.items():
            if lines:
                ax.add_collection(LineCollection(lines, colors=[cols.get(reg, "0.5")], lw=1, alpha=0.8))
                pts = np.vstack(lines)
                ax.scatter(pts[:, 0], pts[:, 1], s=8, color=cols.get(reg, "0.5"),
                           marker=styles[reg][1] if reg in styles else "o")
        for reg in _legend_order(regimes, styles, _named(len(regimes))):  # legend in regime order
            ax.plot([], [], color=cols[reg], marker=styles[reg][1], ms=4, label=reg)
        ax.autoscale_view()
        ax.set_xlabel("training FLOPs spent (model convention)")
        ax.set_ylabel(f"eval {target}")
        ax.set_title(_wrap(cond), fontsize=8)
        ax.legend(fontsize=6, loc="upper left", title=_more(len(regimes)), title_fontsize=6)
        ax.grid(alpha=0.3)
    _finish(plt, fig, "Evaluation during training, one line per job, coloured by regime; "
            "dashed: the starting level", path)


def _finish(plt, fig, title: str, path: Path) -> None:
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _frontier(plt, rec: pd.DataFrame, by: list[str], path: Path) -> None:
    fig, ax = plt.subplots(figsize=(8, 1.5 + 0.5 * len(rec)))
    y = np.arange(len(rec))
    ax.scatter(rec["best_p"], y, marker="o", color="#4C72B0", label="pilot-best regime's p", zorder=3)
    if "p_star" in rec:
        fitted = (~rec["fit_fallback"].astype(bool)).to_numpy()
        ax.scatter(rec.loc[fitted, "p_star"], y[fitted], marker="*", s=150,
                   color="crimson", label="fit optimum p* (95% interval)", zorder=4)
        if "p_star_lo" in rec:
            lo, hi = rec["p_star_lo"].to_numpy(float), rec["p_star_hi"].to_numpy(float)
            ok = fitted & np.isfinite(lo)
            ax.hlines(y[ok], lo[ok], hi[ok], color="crimson", lw=1.5, zorder=3)
    vary = [c for c in by if c in rec and rec[c].nunique(dropna=False) > 1]  # what tells rows apart
    names = [" ".join(f"{c}={v:.3g}" if isinstance(v, float) else f"{c}={v}" for c, v in zip(vary, vals))
             for vals in rec[vary].itertuples(index=False)] if vary else list(rec["condition"])
    learned = rec["learned"] if "learned" in rec else [True] * len(rec)
    ax.set_yticks(y, [f"{n}\nbest: {r}" if ok else f"{n}\nno regime beats its start"
                      for n, r, ok in zip(names, rec["best_regime"], learned)], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("update fraction p = learning FLOPs / total")
    ax.set_title("Conditional frontier: the best split per condition", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_plots(out_dir: Path, rep, styles: dict | None = None) -> list[str]:
    """Draw every figure of the Report `rep` (report/build.py) into out_dir; return the file names written.
    `styles`: the report's regime -> (colour, marker) map (regime_styles; built from the ranking when not
    given). rep.jobs carries `condition` and `regime` columns for ranked jobs (build_report labels them)."""
    jobs, ranking, rec, curves, by = rep.jobs, rep.ranking, rep.recommendations, rep.curves, rep.by
    targets = [t.name for t in rep.targets]
    fits = {f.condition: f.fit for f in rep.fits}  # looked up per panel
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = styles or (regime_styles(ranking["regime"]) if "regime" in ranking else {})
    written = []
    _shares(plt, jobs, ranking, out_dir / "shares.png")
    written.append("shares.png")
    if len(ranking) and "p" in ranking:
        _response(plt, jobs, ranking, fits, styles, out_dir / "response.png")
        written.append("response.png")
    if len(curves) and curves["target"].isin(targets).any():
        _curves(plt, jobs, ranking, curves, styles, out_dir / "curves.png")
        written.append("curves.png")
    if len(rec) > 1:
        _frontier(plt, rec, by + (["target"] if "target" in rec else []), out_dir / "frontier.png")
        written.append("frontier.png")
    return written
