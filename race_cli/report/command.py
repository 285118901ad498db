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

Compute, then show: report/build.py computes the Report from the ReportOptions cli.py built; this
module is the shell around it (check every output path, draw the figures, write the files atomically,
print the console: report/views/). Imports neither torch nor transformers; matplotlib only when
plots are drawn.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from race_cli.errors import RaceError
from race_cli.io import atomic_write_text
from race_cli.report.build import Report, ReportOptions, build_report
from race_cli.report.table import maximize_target  # noqa: F401 - a name tests import from here


def _refuse_link(out_dir: Path, sweep: Path) -> None:
    from race_cli.io import LinkRefused, inside

    try:
        inside(out_dir, sweep)
    except LinkRefused as exc:
        raise RaceError(f"{exc.filename}: {exc.strerror}. race report writes only inside the sweep and never through "
                        "a link (docs/security.md). Remove the link, or give --out DIR for the report.") from None


def check_out_paths(out_dir: Path, names) -> None:
    """Refuse (RaceError, nothing written) when a folder stands where the report writes or removes a file:
    every path is checked before the first is written, so a refusal leaves the old report whole."""
    if out_dir.exists() and not out_dir.is_dir():
        return  # mkdir names the file in the way (the one message for a file where a folder is needed)
    folders = [out_dir / n for n in sorted(names) if (out_dir / n).is_dir() and not (out_dir / n).is_symlink()]
    if folders:
        raise RaceError(f"{', '.join(map(str, folders))}: a folder where race report writes a file. Nothing was "
                        "written.", "Move or remove that folder, or give --out DIR for the report, then rerun.")


def _draw(rep: Report, out_dir: Path) -> list[str]:
    """Draw the figures into a temp folder, then move them in (nothing half-written); their names."""
    from race_cli.report.views import joint as JV
    from race_cli.report.views import frontier as F
    from race_cli.report.views.plots import regime_styles, write_plots

    front = rep.frontier
    tmp = Path(tempfile.mkdtemp(dir=out_dir, prefix=".plots."))
    try:
        # one colour and marker per regime in every figure, built once
        styles = regime_styles(list(rep.ranking["regime"]) + list(front.table.get("regime", [])))
        figs = write_plots(tmp, rep, styles=styles)
        if len(front.table):
            figs += F.write_plots(tmp, front, styles)
        figs += JV.write_joint_plot(tmp, rep.joint)
        for f in figs:
            os.replace(tmp / f, out_dir / f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return figs


def write_files(rep: Report) -> tuple[dict[str, str], list[str], dict[str, str]]:
    """Write the report's files under rep.out_dir (figures, tables, summary.md, report.json and a validation
    sweep's files); a file an earlier report left that this one does not write is removed (it would
    mislead). Sets rep.files; returns (main texts, figure names, validation texts)."""
    from race_cli.report import views as VW

    out_dir = rep.out_dir
    if rep.options.out is None:  # under the sweep: a report/ planted as a link must not send the files elsewhere
        _refuse_link(out_dir, rep.options.sweep_dirs[0])
    check_out_paths(out_dir, VW.touched_names(rep))
    out_dir.mkdir(parents=True, exist_ok=True)
    figs = _draw(rep, out_dir) if rep.options.plots else []
    for stale in VW.figure_names() - set(figs):
        (out_dir / stale).unlink(missing_ok=True)
    texts = VW.file_texts(rep, figs)
    for stale in ("frontier.csv", "joint.csv"):
        if stale not in texts:
            (out_dir / stale).unlink(missing_ok=True)
    vtexts = VW.validation_texts(rep)
    for name, text in (texts | vtexts).items():
        atomic_write_text(out_dir / name, text)
    rep.files = list(texts) + figs + list(vtexts)
    return texts, figs, vtexts


def run_report(options: ReportOptions, console=None) -> Report:
    """`race report`: build the report, write its files, show it (--format table: on `console`, a rich
    Console of the terminal by default; otherwise that file's text on stdout). RaceError on bad input,
    before anything is written. Returns the Report (rep.files: what was written)."""
    from race_cli.quantile_cache import kept

    with kept():  # the statistics' quantiles of earlier reports, from the race cache (race_cli/quantile_cache.py)
        rep = build_report(options)
    texts, figs, vtexts = write_files(rep)
    main = list(texts) + figs
    if options.fmt == "table":
        if console is None:
            from rich.console import Console

            console = Console()
        from race_cli.report.views import print_console

        print_console(rep, console, main, list(vtexts))
    else:
        from race_cli.report.views import write_stdout

        write_stdout(rep, texts, main, vtexts, sys.stdout, sys.stderr)
    for note in rep.notes:
        sys.stderr.write(note + "\n")
    return rep


def report(options: ReportOptions) -> int:
    """Rank the allocation regimes of finished sweeps; return the exit code (0, or 2 on bad input)."""
    try:
        run_report(options)
    except RaceError as e:
        from rich.console import Console

        err = Console(stderr=True)
        err.print("[bold red]race report:[/] " + "\n".join(e.problems), highlight=False)
        return e.exit_code
    return 0


def print_report_top(sweep: Path, say) -> None:
    """What `race run` ends on: the report built and written, then the findings, the top of each condition's
    ranking and where the full report is (report/views.print_top). A report problem never hides the run's
    own result (it is said as a warning)."""
    try:
        from rich.console import Console

        from race_cli.quantile_cache import kept
        from race_cli.report.views import print_top

        with kept():  # as run_report
            rep = build_report(ReportOptions((sweep,)))
        write_files(rep)
        for note in rep.notes:
            sys.stderr.write(note + "\n")
        # the terminal's own width, COLUMNS where set, else rich's 80 (a pipe, a log): a narrow table then
        print_top(rep, Console(), say)
    except RaceError as exc:
        say("report not written: " + " ".join(exc.problems) + f" (race report {sweep} to retry)")
    except Exception as exc:  # noqa: BLE001 - the run's result must still be printed
        say(f"report failed ({type(exc).__name__}: {exc}); the jobs are unaffected: race report {sweep}")
