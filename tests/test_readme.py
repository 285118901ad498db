"""Every command the README shows (its quickstart and `## Use`) parses as written.

Each line is parsed by the Typer app itself (options, values and their ranges; no command body runs).
Then the commands that only plan or print (plan, flops, mem, zoo) run for real in a temporary folder,
and those that would train (run, train) have their overrides composed by `race plan`: their dry run.
`race report` and `race validate` name a sweep that does not exist yet, so they are parsed only.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from race_cli.cli import app

README = Path(__file__).resolve().parents[1] / "README.md"
COMMAND = typer.main.get_command(app)


def readme_commands(text: str) -> list[str]:
    """`race ...` lines of the bash blocks before the first section after `## Use`, comments dropped."""
    top = re.split(r"^## (?!Use\b)", text, flags=re.M)[0]
    blocks = re.findall(r"^```bash\n(.*?)^```", top, flags=re.M | re.S)
    return [re.split(r"\s#\s", line)[0].strip() for b in blocks for line in b.splitlines() if line.startswith("race ")]


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_the_readme_shows_the_flow():
    assert COMMANDS[0] == "race run"  # the quickstart's command, first
    shown = {c.split()[1] for c in COMMANDS}
    assert {"plan", "run", "report", "validate"} <= shown
    assert readme_commands("```bash\nrace plan  # a\nls\n```\n## Use\n```bash\nrace run x\n```\n## Next\n"
                           "```bash\nrace zoo\n```\n") == ["race plan", "race run x"]


@pytest.mark.parametrize("line", COMMANDS)
def test_every_readme_command_parses(line, tmp_path, monkeypatch):
    args = shlex.split(line)[1:]
    sub = COMMAND.commands[args[0]]
    params = sub.make_context(args[0], args[1:]).params  # raises on an unknown option or a bad value
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    if args[0] in ("plan", "flops", "mem", "zoo"):
        res = runner.invoke(app, args, env={"COLUMNS": "120"})
    elif args[0] in ("run", "train"):
        res = runner.invoke(app, ["plan", *(params["overrides"] or [])], env={"COLUMNS": "120"})
    else:
        return
    assert res.exit_code == 0, (line, res.output[-2000:])
