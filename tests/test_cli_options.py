"""Every numeric option of every `race` command declares its range, and values outside it exit 2.

The walk reads the options from the Typer app itself (what `race <command> --help` lists), so an
option added later is checked without editing this file: an int or float option without both a
`min=` and a `max=` fails `test_every_numeric_option_declares_its_range`. Values are parsed with
Click's own `make_context` (no command body runs, nothing is written), in-process; a handful go
through a real `race` subprocess to check the exit code and that no traceback is printed.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from race_cli.cli import app

ROOT = Path(__file__).resolve().parents[1]
COMMAND = typer.main.get_command(app)
# what each command requires before the option under test (a repeated option: Click keeps the last one)
NEEDS_ARGUMENT = {"report": ["somewhere"], "validate": ["somewhere"], "evaluate": ["somewhere", "--items", "5"]}


def _kind(param) -> str:
    t = param.bare_type()
    return getattr(t, "__name__", str(t))


def numeric_options() -> list[tuple[str, object]]:
    out = []
    for name, sub in sorted(COMMAND.commands.items()):
        for p in sub.params:
            if p.param_type_name == "option" and not p.is_flag and _kind(p) in ("int", "float"):
                out.append((name, p))
    return out


OPTIONS = numeric_options()
IDS = [f"{c}{p.opts[0]}" for c, p in OPTIONS]


def parse(command: str, option: str, value: str):
    """Click's parse of `race COMMAND [ARG] OPTION VALUE`: the context's params, or the exception's message."""
    sub = COMMAND.commands[command]
    return sub.make_context(command, [*NEEDS_ARGUMENT.get(command, []), option, value])


def test_the_walk_finds_the_options_of_the_issue():
    found = {f"{c} {p.opts[0]}" for c, p in OPTIONS}
    for expected in ("report --seed", "report --bootstrap", "plan --max-jobs", "run --workers", "run --gpus-per-job",
                     "validate --scale", "validate --seeds", "validate --margin", "flops --batch"):
        assert expected in found, found


@pytest.mark.parametrize("command,param", OPTIONS, ids=IDS)
def test_every_numeric_option_declares_its_range(command, param):
    assert param.min is not None and param.max is not None, (
        f"race {command} {param.opts[0]} has no declared range: give it typer.Option(..., min=LO, max=HI)")
    assert param.min <= param.default <= param.max if param.default is not None else True


def _just_outside(param) -> list[str]:
    if _kind(param) == "int":
        return [str(int(param.min) - 1), str(int(param.max) + 1), "abc", "1.5"]
    lo, hi = float(param.min), float(param.max)
    return [repr(math.nextafter(lo, -math.inf)), repr(math.nextafter(hi, math.inf)), "abc", "inf", "nan"]


@pytest.mark.parametrize("command,param", OPTIONS, ids=IDS)
def test_values_just_outside_an_options_range_are_refused_naming_it(command, param):
    from typer._click.exceptions import BadParameter

    opt = param.opts[0]
    for value in _just_outside(param):
        with pytest.raises(BadParameter) as err:
            parse(command, opt, value)
        msg = err.value.format_message()
        assert opt in msg, (value, msg)
        assert err.value.exit_code == 2


@pytest.mark.parametrize("command,param", OPTIONS, ids=IDS)
def test_the_bounds_themselves_parse(command, param):
    opt = param.opts[0]
    for value in (param.min, param.max):
        got = parse(command, opt, str(value)).params[param.name]
        assert got == value


def test_no_help_shows_a_raw_range_and_the_useful_ones_are_in_words():
    """`race <command> --help` never prints Click's raw range ([0.5<=x<=0.999]); where the range tells the user
    something (cli.RANGE_IN_WORDS: --power's 0.5 to 0.999, not --workers' 1 to 1024) the help says it in words,
    and those words are the declared bounds. Every range is still enforced (the tests above) and named in the
    refusal."""
    from typer.testing import CliRunner

    from race_cli.cli import RANGE_IN_WORDS

    runner = CliRunner()
    shown = set()
    for command in sorted(COMMAND.commands):
        res = runner.invoke(app, [command, "--help"], env={"COLUMNS": "400"})
        assert res.exit_code == 0, res.output
        assert "<=x<=" not in res.output and "<x<" not in res.output, (command, res.output)
        for c, p in OPTIONS:
            if c == command and p.opts[0] in RANGE_IN_WORDS:
                lo = int(p.min) if _kind(p) == "int" else p.min
                hi = int(p.max) if _kind(p) == "int" else p.max
                words = f"{lo:,} to {hi:,}" if _kind(p) == "int" else f"{lo:g} to {hi:g}"
                assert RANGE_IN_WORDS[p.opts[0]] == words
                line = next(x for x in res.output.splitlines() if f" {p.opts[0]} " in x)
                assert f"({words})" in line, (command, line)
                shown.add(p.opts[0])
    assert shown == set(RANGE_IN_WORDS)  # each name in RANGE_IN_WORDS is a real option


# --- through the real command -----------------------------------------------------------------

def _race(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "race_cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args,fragment", [
    (["report", "SWEEP", "--seed", "-1"], "--seed"),  # was a numpy SeedSequence traceback
    (["plan", "grid=none", "--max-jobs", "0"], "--max-jobs"),
    (["run", "grid=none", "--workers", "100000000000"], "--workers"),
    (["validate", "SWEEP", "--scale", "1e300"], "--scale"),
])
def test_out_of_range_options_exit_2_without_a_traceback(tmp_path, args, fragment):
    (tmp_path / "SWEEP").mkdir()
    before = sorted(p.name for p in tmp_path.rglob("*"))
    res = _race(*args, cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert fragment in res.stderr and "Traceback" not in res.stderr + res.stdout, res.stderr
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


@pytest.mark.parametrize("given,seen", [(None, "1"), ("3", "3")])
def test_report_asks_for_one_blas_thread_unless_the_user_chose(given, seen):
    # set before numpy loads (it reads OPENBLAS_NUM_THREADS once, at import); a user's setting wins
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | {"PYTHONPATH": str(ROOT)}
    if given is not None:
        env["OPENBLAS_NUM_THREADS"] = given
    code = ("import os, sys, race_cli.cli as c; assert 'numpy' not in sys.modules; c._one_blas_thread(); "
            "print(os.environ.get('OPENBLAS_NUM_THREADS'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == seen
