"""`race report`: read finished sweeps, rank allocation regimes, fit the response to p, write it up.

    race report runs/<sweep> [runs/<other> ...] [--target gsm8k] --format table

Reads only the files docs/files.md defines (never logs), so it runs while a sweep is still
going: unfinished jobs are listed with their state. Every evaluation target the jobs recorded
gets its own section (a condition includes its target); --target ranks one. Each regime is
shown with its gain over its starting policy (iteration 0), and a condition where no regime
beats its start says so first. Writes under <first sweep>/report/
(or --out): runs.csv, ranking.csv, recommendations.csv, joint.csv, report.json, summary.md and PNGs.
The joint section (report/joint.py) ranks every (model, reward, G, μ) of a budget together and says
in sentences whether a bigger policy or a smaller one trained longer, and which feedback, is ahead.
Imports neither torch nor transformers; matplotlib only when plots are drawn.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.io import atomic_write_text
from race_cli.report.table import CONDITION_COLS, maximize_target, read_sweeps

FORMATS = ("table", "csv", "json", "markdown")
MAX_BOOTSTRAP = 100_000
def _validate_args(sweep_dirs: list[Path], target: str | None, fmt: str, bootstrap: int) -> None:
    problems = []
    if not sweep_dirs:
        problems.append("no sweep folder given. Expected: race report runs/<sweep> [runs/<other> ...].")
    if fmt not in FORMATS:
        problems.append(f"--format {fmt!r} is not one of {', '.join(FORMATS)}.")
    if bootstrap < 100:
        problems.append(f"--bootstrap {bootstrap} is too few draws for a 95% interval; use at least 100 "
                        "(1000 is the default).")
    elif bootstrap > MAX_BOOTSTRAP:
        problems.append(f"--bootstrap {bootstrap}: at most {MAX_BOOTSTRAP} draws (1000 is the default; "
                        "more only costs time and memory).")
    if target is not None and (not target or "/" in target):
        problems.append(f"--target {target!r}: give an evaluation target's name (the <target> of "
                        "eval/<target>/accuracy), e.g. --target gsm8k; leave it out to rank every target.")
    if problems:
        raise RaceError(*problems)


def _refuse_link(out_dir: Path, sweep: Path) -> None:
    from race_cli.io import LinkRefused, inside

    try:
        inside(out_dir, sweep)
    except LinkRefused as exc:
        raise RaceError(f"{exc.filename}: {exc.strerror}. race report writes only inside the sweep and never through "
                        "a link (docs/security.md). Remove the link, or give --out DIR for the report.") from None


def _check_target(jobs, target: str, targets: list[str]) -> None:
    col = f"eval/{target}"
    if col in jobs and ((jobs["state"] == "done") & jobs[col].notna()).any():
        return
    counts = ", ".join(f"{k} {v}" for k, v in jobs["state"].value_counts().items())
    if targets:
        raise RaceError(f"no finished job recorded eval/{target} (jobs: {counts}).",
                        f"Targets the jobs recorded: {', '.join(targets)}; try --target {targets[0]}.")
    raise RaceError(f"no finished job recorded any evaluation target (jobs: {counts}).",
                    "Expected summary.json with an `eval` block in jobs/<job_id>/; run `race run` to "
                    "finish the sweep, then report again.")


def _check_by(jobs, by: list[str], knob_cols: list[str]) -> None:
    known = list(dict.fromkeys(CONDITION_COLS + knob_cols + [c for c in ("seed",) if c in jobs]))
    bad = [c for c in by if c not in jobs.columns or c == "seed"]
    if bad:
        raise RaceError(f"--by {', '.join(bad)}: not a column a condition can be grouped by.",
                        f"Expected some of: {', '.join(c for c in known if c != 'seed')}.")


def _nothing_to_rank(jobs, target: str) -> list[str]:
    """Why no job can be ranked: the states and unreadable files, a line each."""
    lines = [f"no job can be ranked by {target}: a ranked job is done, readable, and recorded eval/{target}."]
    for state, n in jobs["state"].value_counts().items():
        lines.append(f"{n} job(s) {state}")
    problems = jobs.loc[~jobs["readable"].astype(bool), "problem"].value_counts()
    for problem, n in problems.items():
        lines.append(f"{n} job(s) unreadable: {problem}")
    lines.append("Run or resume the sweep (race run --sweep-dir DIR), then report again.")
    return lines


def _targets_to_rank(jobs, target: str | None, targets: list[str]) -> list[str]:
    """--target NAME -> [NAME] (checked); no --target -> every target some finished job recorded."""
    if target is not None:
        _check_target(jobs, target, targets)
        return [target]
    done = jobs["state"] == "done"
    found = [t for t in targets if (done & jobs[f"eval/{t}"].notna()).any()]
    if not found:
        _check_target(jobs, targets[0] if targets else "accuracy", targets)
    return found


def _findings(ranking, rec, joint, jobs, sweep_dirs, targets, maximize, items) -> tuple[list[str], list]:
    """The findings lines (report/findings.py); a failure there never hides the report below it."""
    from race_cli import machine
    from race_cli.report.findings import findings

    try:
        return findings(ranking, rec, joint, jobs, [str(d) for d in sweep_dirs], targets, maximize, items=items,
                        workers=machine.cpu_cores())
    except Exception as exc:  # noqa: BLE001 - the sections below still hold every figure
        return [f"Findings: not available ({type(exc).__name__}: {exc}); the sections below have every figure."], []


def run_report(sweep_dirs: list[Path], target: str | None = None, by: list[str] | None = None,
               fmt: str = "table", out: Path | None = None, plots: bool = True,
               bootstrap: int = 1000, seed: int = 0, console=None, at_budget: str | None = None,
               assume_seed_sd: float | None = None,
               full: bool = True) -> dict:
    """Do the report; raise RaceError on bad input (before anything is written).

    target: one evaluation target to rank, or None for every target the jobs recorded.
    at_budget: predict every regime at this budget from its compute curve ('3e12' FLOPs or '3x' the
    condition's budget; report/curve.py), written to predictions.csv and shown in a section.
    full: print every section to the console (False: the findings and where the rest is; the files
    always hold everything).
    assume_seed_sd: the seed spread assumed where a condition has one seed per regime (otherwise its
    ≈ best and > start are not testable); the ranking's `noise` and `pool` columns say it was assumed.
    Returns {"out_dir", "files", "ranking", "recommendations", "fits", "jobs", "targets",
    "target_differences"}; `ranking` and `recommendations` carry a `target` column.
    """
    import numpy as np
    import pandas as pd

    from race_cli.report import recommend as R
    from race_cli.report import render
    from race_cli.report.rank import label_jobs, rank_all, rankable, regime_columns

    sweep_dirs = [Path(d) for d in sweep_dirs]
    _validate_args(sweep_dirs, target, fmt, bootstrap)
    if assume_seed_sd is not None and not (np.isfinite(assume_seed_sd) and 0 < assume_seed_sd < 1):
        raise RaceError(f"--assume-seed-sd {assume_seed_sd}: expected a seed spread on the score scale, "
                        "greater than 0 and below 1 (e.g. 0.02, the default grid's measured 0.016-0.026).")
    if at_budget is not None:
        from race_cli.report.curve import parse_at_budget

        at = parse_at_budget(at_budget)
    data = read_sweeps(sweep_dirs)
    by = list(CONDITION_COLS) if not by else [c.strip() for b in by for c in b.split(",") if c.strip()]
    _check_by(data.jobs, by, data.knob_cols)
    targets = _targets_to_rank(data.jobs, target, data.targets)
    maximize = {t: maximize_target(t) for t in targets}

    # --- compute (pure)
    ranked_by = {t: rankable(data.jobs, t) for t in targets}
    ranked = np.logical_or.reduce([m.to_numpy() for m in ranked_by.values()])
    ranked = pd.Series(ranked, index=data.jobs.index)
    if not ranked.any():
        raise RaceError(*_nothing_to_rank(data.jobs, " or ".join(targets)))
    draws: dict = {}
    parts = [rank_all(data, t, by, n_boot=bootstrap, seed=seed + i, maximize=maximize[t], draws_out=draws,
                      assume_seed_sd=assume_seed_sd)
             for i, t in enumerate(targets)]
    ranking = pd.concat([p for p in parts if len(p)], ignore_index=True)
    fits = R.fit_all(ranking, maximize, draws)
    rec = R.recommend(ranking, fits, by)
    moves = R.frontier_moves(rec, by + ["target"])
    diffs = R.target_differences(rec, ranking, by)
    totals = R.compute_totals(data.jobs)
    reg_cols = regime_columns(data.jobs[ranked], data.knob_cols, by)
    jobs = label_jobs(data.jobs, by, reg_cols)
    jobs["ranked"] = ranked
    from race_cli.report import frontier as F

    front = F.frontier_report(sweep_dirs, data, targets, by, bootstrap, seed, maximize)
    pred = None
    if at_budget is not None:
        from race_cli.report import curve as CV

        pred = CV.predictions(data, front["checkpoints"], targets, by, *at, seed=seed, maximize=maximize)
        if not len(pred):
            raise RaceError(f"--at-budget {at_budget}: no condition has per-item scores at three or more "
                            "checkpoint budgets to fit a compute curve to.",
                            "Expected jobs run with eval.at (e.g. [0, 0.25, 0.5, 0.75, 1]); rerun the pilot "
                            "with it, or report without --at-budget.")

    from race_cli.report import joint as J
    from race_cli.report import joint_view as JV

    table = J.with_checkpoints(J.joint_table(data, targets, ranked_by), data, front["checkpoints"], targets)
    joint = J.joint_compare(table, data.knob_cols, maximize,
                            J.model_sizes(sweep_dirs, data.jobs[ranked]), rec, n_boot=bootstrap, seed=seed)

    flines, settles = _findings(ranking, rec, joint, jobs, sweep_dirs, targets, maximize, data.items)

    # --- write (plots into a temp folder first, then moved in: nothing half-written)
    out_dir = Path(out) if out is not None else folder.report_dir(sweep_dirs[0])
    if out is None:  # under the sweep: a report/ planted as a link must not send the files elsewhere
        _refuse_link(out_dir, sweep_dirs[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    figs: list[str] = []
    if plots:
        from race_cli.report.plots import write_plots

        tmp = Path(tempfile.mkdtemp(dir=out_dir, prefix=".plots."))
        try:
            from race_cli.report.plots import regime_styles

            # one colour and marker per regime in every figure, built once
            styles = regime_styles(list(ranking["regime"]) + list(front["table"].get("regime", [])))
            figs = write_plots(tmp, jobs, ranking, rec, fits, data.curves, targets, reg_cols, by, styles=styles)
            if len(front["table"]):
                figs += F.write_plots(tmp, front["table"], front["best"], styles)
            figs += JV.write_joint_plot(tmp, joint)
            for f in figs:
                os.replace(tmp / f, out_dir / f)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    from race_cli.report.plots import PLOT_NAMES  # module top imports no matplotlib

    for stale in (set(PLOT_NAMES) | set(F.PLOTS) | {JV.JOINT_PLOT}) - set(figs):  # a figure from an earlier report would mislead
        (out_dir / stale).unlink(missing_ok=True)
    sections = F.markdown_section(front["best"], front["sentences"]) if len(front["best"]) else []
    if pred is not None:
        sections += CV.markdown_section(pred, CV.CURVE_DRAWS)
    md = render.markdown_summary(jobs, ranked, ranking, rec, moves, totals, targets, maximize,
                                 bootstrap, figs, diffs, sections, joint=JV.markdown(joint), findings=flines)
    doc = render.to_json(jobs, ranking, rec, fits, moves, totals, targets, diffs, joint=JV.to_json(joint),
                         extra={"budget_frontier": front["best"], "budget_frontier_notes": front["sentences"]}
                         | ({"predictions": pred} if pred is not None else {}))
    texts = {"runs.csv": jobs.to_csv(index=False), "ranking.csv": ranking.to_csv(index=False),
             "recommendations.csv": rec.to_csv(index=False), "report.json": doc, "summary.md": md}
    if len(front["table"]):
        texts["frontier.csv"] = front["table"].to_csv(index=False)
    else:  # one from an earlier report would mislead
        (out_dir / "frontier.csv").unlink(missing_ok=True)
    if pred is not None:
        texts["predictions.csv"] = pred.to_csv(index=False)
    if len(joint["ranking"]):
        texts[JV.JOINT_CSV] = joint["ranking"].to_csv(index=False)
    else:  # a joint table from an earlier report would mislead
        (out_dir / JV.JOINT_CSV).unlink(missing_ok=True)
    for name, text in texts.items():
        atomic_write_text(out_dir / name, text)
    files = list(texts) + figs

    # --- print
    if fmt == "table":
        if console is None:
            from rich.console import Console

            console = Console()
        render.print_report(console, jobs, ranked, ranking, rec, moves, totals, targets, maximize, diffs,
                            joint=lambda c: JV.print_joint(c, joint), findings=flines, full=full)
        if full and len(front["best"]):
            F.print_section(console, front["best"], front["sentences"])
        if full and pred is not None:
            CV.print_section(console, pred, CV.CURVE_DRAWS)
        if not full:
            console.print("Below the findings, summary.md has, in order: the rankings per target and condition, "
                          "the joint comparison, the frontier across budgets"
                          + (", the predictions" if pred is not None else "") + ", the figures. "
                          "race report --full prints them here.", highlight=False)
        console.print(f"Wrote {', '.join(files)} to {out_dir}")
    else:
        sys.stdout.write({"csv": texts["ranking.csv"], "json": doc, "markdown": md}[fmt])
        sys.stderr.write(f"Wrote {', '.join(files)} to {out_dir}\n")

    # --- a validation sweep (race validate wrote provenance.json): did the pilot's call hold?
    from race_cli.report.validation import report_validation

    validation = report_validation(sweep_dirs, data, out_dir, fmt, console, bootstrap, seed, assume_seed_sd)
    files += validation["files"] if validation else []
    return {"out_dir": out_dir, "files": files, "ranking": ranking, "recommendations": rec, "frontier": front,
            "findings": flines, "settles": settles,
            "predictions": pred, "fits": fits, "joint": joint, "jobs": jobs, "targets": targets,
            "target_differences": diffs, "validation": validation}


def report(sweep_dirs: list[Path], target: str | None = None, by: list[str] | None = None,
           fmt: str = "table", out: Path | None = None, plots: bool = True,
           bootstrap: int = 1000, seed: int = 0, at_budget: str | None = None,
           assume_seed_sd: float | None = None, full: bool = True) -> int:
    """Rank the allocation regimes of finished sweeps; return the exit code (0, or 2 on bad input)."""
    try:
        run_report(sweep_dirs, target, by, fmt, out, plots, bootstrap, seed, at_budget=at_budget,
                   assume_seed_sd=assume_seed_sd, full=full)
    except RaceError as e:
        from rich.console import Console

        err = Console(stderr=True)
        err.print("[bold red]race report:[/] " + "\n".join(e.problems), highlight=False)
        return e.exit_code
    return 0


# --- the top of the ranking, what `race run` prints at its end ----------------------------------------

TOP_SHOWN = 3  # regimes per condition printed at the end (the report has them all)
TOP_LEFT_OUT = ("search / learning / feedback", "budget spent", "policy split", "best share")  # only in the files


def _top_console():
    """The console `race run` ends on: a terminal's own width, COLUMNS where set, else (a pipe, a log) rich's
    80 columns, as `race report` prints: the narrow table then (the files have every column)."""
    from rich.console import Console

    return Console()


def _wrapped(text: str, width: int) -> str:
    """A sentence folded at the console's width between words (a path or a number is never split), as
    rich folds the tables above it: in a pipe without COLUMNS, 80."""
    import textwrap

    return textwrap.fill(text, width=max(width, 40), break_long_words=False, break_on_hyphens=False)


def print_report_top(sweep: Path, say) -> None:
    """The top of each condition's ranking and where the full report is; a report problem never
    hides the run's own result (it is printed as a warning). Each condition: its heading, its note
    (no regime beats its start) and its table, in that order."""
    import io

    try:
        from rich.console import Console
        from rich.table import Table

        from race_cli.report.render import NARROW, NARROW_HEAD, RANK_HEAD, condition_heading, narrow_rows, ranking_rows

        quiet = Console(file=io.StringIO(), width=160)
        res = run_report([sweep], console=quiet)
        console = _top_console()
        from race_cli.report.render import print_findings

        print_findings(console, res.get("findings") or [])  # race run's end opens with the findings
        ranking, rec = res["ranking"], res["recommendations"]
        no_gain = dict(zip(rec["condition"], rec["no_gain"])) if "no_gain" in rec else {}
        if len(ranking):
            for cond, g in ranking.groupby("condition", sort=False):
                console.print(f"[bold]top of the ranking: {condition_heading(cond, g)}[/]", highlight=False)
                if no_gain.get(cond):  # a ranking that is not a finding must not read like one
                    say(_wrapped(no_gain[cond], console.width))
                t = Table()
                if console.width < NARROW:  # an 80-column terminal: the columns that fit, none cut
                    for h in NARROW_HEAD:
                        t.add_column(h, justify="left" if h == "regime" else "right", overflow="fold")
                    for row in narrow_rows(g.head(TOP_SHOWN)):
                        t.add_row(*row)
                    console.print(t)
                    continue
                keep = [i for i, h in enumerate(RANK_HEAD) if h not in TOP_LEFT_OUT]
                for i in keep:
                    t.add_column(RANK_HEAD[i], justify="left" if RANK_HEAD[i] == "regime" else "right")
                for row in ranking_rows(g.head(TOP_SHOWN)):
                    t.add_row(*[row[i] for i in keep])
                console.print(t)
        for line in res["joint"].get("per_budget", []):  # the paper's question at the sweep's own budgets
            if line["checkpoint"] >= 1.0:
                say(_wrapped("joint comparison, " + line["text"], console.width))
        say(_wrapped(f"full report: {res['out_dir'] / 'summary.md'} (and "
                     f"{', '.join(f for f in res['files'] if f != 'summary.md')})", console.width))
    except RaceError as exc:
        say("report not written: " + " ".join(exc.problems) + f" (race report {sweep} to retry)")
    except Exception as exc:  # noqa: BLE001 - the run's result must still be printed
        say(f"report failed ({type(exc).__name__}: {exc}); the jobs are unaffected: race report {sweep}")
