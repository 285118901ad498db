"""Every console table and help text readable at 80 columns, as in a pipe (COLUMNS=80).

A table is checked by what it was given: every word of every cell and header (numbers included)
must appear whole on one line of that table as the console drew it, and no line may pass 80
columns. A cell folded mid-number ("+0.02" / "7") or cut short ("prm:tiny-…") fails. Tables are
caught at `Console.print` on the consoles that write to the terminal (stdout or stderr), so the
quiet consoles a command renders into for its own files are not mistaken for output.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

WIDTH = 80


@pytest.fixture
def printed(monkeypatch):
    """Record (console width, table) for each rich Table printed to stdout or stderr."""
    from rich.console import Console
    from rich.table import Table

    seen: list[tuple[int, Table]] = []
    original = Console.print

    def spy(self, *objects, **kw):
        if self.file in (sys.stdout, sys.stderr) or getattr(self, "_h34_terminal", False):
            seen.extend((self.width, o) for o in objects if isinstance(o, Table))
        return original(self, *objects, **kw)

    monkeypatch.setattr(Console, "print", spy)
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    return seen


def _plain(cell) -> str:
    from rich.text import Text

    if isinstance(cell, Text):
        return cell.plain
    return Text.from_markup(str(cell)).plain


def _cells(table) -> list[str]:
    out = []
    for col in table.columns:
        out.append(_plain(col.header))
        out.extend(_plain(c) for c in col._cells)
    return out


def broken(seen) -> list[str]:
    """Each word of a cell that its table did not draw whole on one line, and each line over WIDTH."""
    from rich.console import Console

    problems = []
    assert seen, "no table was printed to the terminal"
    for width, table in seen:
        assert width <= WIDTH, f"a table printed at {width} columns"
        buf = StringIO()
        Console(file=buf, width=width, color_system=None).print(table)
        lines = buf.getvalue().splitlines()
        problems += [f"line of {len(line)} columns: {line}" for line in lines if len(line) > WIDTH]
        for cell in _cells(table):
            for word in cell.split():
                if len(word) < WIDTH - 4 and not any(word in line for line in lines):
                    problems.append(f"{word!r} (cell {cell!r}) is broken in:\n" + "\n".join(lines[:12]))
    return problems


def _lines_over(text: str) -> list[str]:
    return [line for line in text.splitlines() if len(line) > WIDTH]


# --- the commands ------------------------------------------------------------------------


def test_race_plan_at_80_columns(printed):
    from typer.testing import CliRunner

    from race_cli.cli import app

    res = CliRunner().invoke(app, ["plan"], env={"COLUMNS": str(WIDTH)})
    assert res.exit_code == 0, res.output
    assert not _lines_over(res.output), _lines_over(res.output)[:5]
    assert not broken(printed), broken(printed)[:3]
    from race_cli.plan.build import build_plan

    assert all(j.job_id in res.output for j in build_plan([]).jobs) and "planned wall time" in res.output


@pytest.fixture(scope="module")
def pilot(tmp_path_factory) -> Path:
    from report_fixtures import DEFAULT_CONDITION, build_sweep, peaked

    root = tmp_path_factory.mktemp("w") / "pilot"
    return build_sweep(root, acc=peaked(0.25, top=0.6), seeds=(0, 1), n_items=150,
                       conditions=[DEFAULT_CONDITION, dict(DEFAULT_CONDITION, reward="prm")])


def test_race_report_and_race_runs_end_at_80_columns(pilot, printed, tmp_path):
    from rich.console import Console

    from race_cli.report.build import ReportOptions
    from race_cli.report.command import print_report_top, run_report

    console = Console(file=StringIO(), width=WIDTH)
    console._h34_terminal = True  # what `race report` prints (it prints to stdout)
    run_report(ReportOptions([pilot], plots=False, bootstrap=200, out=tmp_path / "r"), console=console)
    text = console.file.getvalue()
    assert not _lines_over(text), _lines_over(text)[:5]
    n_report = len(printed)
    assert n_report >= 3  # the two conditions' rankings, the joint comparison
    print_report_top(pilot, print)  # race run's end, in a pipe with COLUMNS=80 (its sentences are plain lines)
    assert len(printed) > n_report
    assert not broken(printed), broken(printed)[:3]


def test_race_runs_end_in_a_pipe_without_columns_fits_80(pilot, printed, monkeypatch, capsys):
    """`race run > log` (or `| tee`) with COLUMNS unset and no terminal anywhere: rich's 80 columns, the
    narrow table (it used to widen a pipe to 140 columns)."""
    import os

    from race_cli.report.command import print_report_top

    monkeypatch.delenv("COLUMNS", raising=False)

    def no_terminal(fd=None):
        raise OSError("not a terminal")

    monkeypatch.setattr(os, "get_terminal_size", no_terminal)
    capsys.readouterr()
    said: list[str] = []
    print_report_top(pilot, said.append)  # tables and headings to the console, the plain sentences to `say`
    out = capsys.readouterr().out
    assert "top of the ranking" in out and not _lines_over(out), _lines_over(out)[:5]
    assert printed and not broken(printed), broken(printed)[:3]
    # the sentences (joint comparison, where the full report is) fold between words at the same 80 columns;
    # only a single word longer than that (a deep tmp path) may stand alone on a longer line
    assert any(x.startswith("joint comparison, ") for x in said) and any(x.startswith("full report: ") for x in said)
    long = [line for x in said for line in x.splitlines() if len(line) > WIDTH and len(line.split()) > 1]
    assert not long, long[:3]


@pytest.fixture
def validation(tmp_path):
    """A pilot, its validation sweep (race validate, 2 seeds) and the validation's finished jobs."""
    import test_validate as TV

    from race_cli.plan.validate import validate_main

    pilot = TV.make_pilot(tmp_path / "pilot")
    val = validate_main(pilot, scale=2, seeds=2, out=tmp_path / "val")  # prints its preview
    prov = json.loads((val / "provenance.json").read_text())
    regimes = {v["regime"] for c in prov["conditions"] for v in c["validated"]}
    TV.run_validation(val, {"rule": {r: 0.5 + 0.05 * i for i, r in enumerate(sorted(regimes))}})
    return val


@pytest.mark.parametrize("two", [False, True], ids=["one condition, --seeds 2", "two conditions by power, --gap"])
def test_race_validates_preview_at_80_columns(printed, capsys, tmp_path, two):
    import test_validate as TV

    from race_cli.plan.validate import validate_main

    if two:  # short labels (rule, prm) and the seeds sized by power for a given gap ("0.050 (--gap)")
        pilot = TV.make_pilot(tmp_path / "pilot", conditions=(TV.RULE, TV.PRM))
        validate_main(pilot, replicate=True, gap=0.05, out=tmp_path / "val")
    else:
        pilot = TV.make_pilot(tmp_path / "pilot")
        validate_main(pilot, scale=2, seeds=2, out=tmp_path / "val")
    out = capsys.readouterr()
    assert not _lines_over(out.out + out.err), _lines_over(out.out + out.err)[:5]
    assert len(printed) >= 3 and not broken(printed), broken(printed)[:3]  # the picks, the seeds, the plan
    assert "seeds per condition" in out.out and "provenance.json" in out.out  # what the narrow table leaves out


def test_the_validation_report_at_80_columns(validation, printed):
    from rich.console import Console

    from race_cli.report.build import ReportOptions
    from race_cli.report.command import run_report

    printed.clear()  # race validate's preview: test_race_validates_preview_at_80_columns
    console = Console(file=StringIO(), width=WIDTH)
    console._h34_terminal = True
    run_report(ReportOptions([validation], plots=False, bootstrap=200), console=console)
    text = console.file.getvalue()
    assert "predicted at the validation budget vs realised" in text
    assert not _lines_over(text), _lines_over(text)[:5]
    assert len(printed) >= 3  # the validation's ranking, its verdict table, the predictions
    assert not broken(printed), broken(printed)[:3]


# --- help text ---------------------------------------------------------------------------


COMMANDS = ["plan", "run", "report", "validate", "flops", "mem", "train", "zoo"]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_is_wrapped_once_at_80_columns(command):
    """A paragraph's line ends only where the next word would not fit: a docstring's own line breaks,
    kept by Rich, show as short lines followed by a word that had room."""
    from typer.testing import CliRunner

    from race_cli.cli import app

    res = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": str(WIDTH)})
    assert res.exit_code == 0, res.output
    assert not _lines_over(res.output), _lines_over(res.output)[:3]
    description = res.output.split("╭")[0].splitlines()  # the docstring, above the panels
    text_width = max(len(line.rstrip()) for line in description)
    early = []
    for line, nxt in zip(description, description[1:]):
        a, b = line.rstrip(), nxt.strip()
        if a.strip() and b and not a.strip().startswith("Usage:") and not nxt.startswith("  "):
            if len(a) + 1 + len(b.split()[0]) <= text_width:
                early.append(f"{a!r} then {b!r}")
    assert not early, early


@pytest.mark.parametrize("command", [None] + COMMANDS)
def test_help_fits_one_screen_at_80_columns(command):
    """`race --help` and each command's at 80 x 50: no line over 80 columns, nothing cut with '…', no
    choice list broken across lines, no value placeholder on a flag, and the whole flow named."""
    env = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    args = [sys.executable, "-m", "race_cli"] + ([command] if command else []) + ["--help"]
    out = subprocess.run(args, capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.rstrip("\n").splitlines()
    assert len(lines) <= 50, len(lines)
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out.stdout and "<bool>" not in out.stdout
    broken = [x for x in lines if re.search(r"<[a-z][^<>\s]*(\s|$)", x)]  # '<table|csv|mar' then 'kdown>' below
    assert not broken, broken
    if command is None:
        assert "race plan -> race run -> race report -> race validate" in out.stdout
