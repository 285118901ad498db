"""The docs hold together: the index lists every page, every relative link resolves, every docs/ path the
code names exists, and docs/config.md says what the schema says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# pages the index names that parallel work writes (the GPU guide, the race's statistics and its measurements)
ELSEWHERE = {"gpu.md", "statistics-race.md", "measurements/race.md"}
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_the_index_lists_every_page():
    index = (DOCS / "README.md").read_text(encoding="utf-8")
    listed = set(LINK.findall(index))
    missing = [str(p.relative_to(DOCS)) for p in pages() if p.name != "README.md" and
               str(p.relative_to(DOCS)) not in listed]
    assert missing == [], f"add these to docs/README.md under their kind: {missing}"
    for kind in ("Tutorial", "How-to", "Reference", "Explanation", "Measurements"):
        assert f"## {kind}" in index
    assert ELSEWHERE <= listed


def test_every_relative_link_resolves():
    broken = []
    for page in [ROOT / "README.md", *pages()]:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            path = (page.parent / target).resolve()
            if not path.exists() and str(path.relative_to(DOCS) if path.is_relative_to(DOCS) else "") not in ELSEWHERE:
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_docs_paths_named_by_the_code_exist():
    named = set()
    for f in (ROOT / "race_cli").rglob("*.py"):
        named |= set(re.findall(r"docs/[\w/.-]+\.md", f.read_text(encoding="utf-8")))
    missing = sorted(n for n in named if not (ROOT / n).exists() and n.removeprefix("docs/") not in ELSEWHERE)
    assert missing == []
    assert "docs/commands.md" in named  # the check sees the help's pointer


def test_config_reference_is_up_to_date():
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "config_reference.py"), "--check"])
    assert done.returncode == 0, "docs/config.md is stale: run python scripts/config_reference.py"


def test_commands_reference_is_up_to_date():
    """docs/commands.md is written from the Typer app (scripts/commands_reference.py): an option added, renamed,
    removed or re-worded on the command line makes it stale, and this fails until it is regenerated."""
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "commands_reference.py"), "--check"],
                          capture_output=True, text=True)
    assert done.returncode == 0, ("docs/commands.md is stale: run python scripts/commands_reference.py"
                                  + (f" ({done.stderr.strip()})" if done.stderr.strip() else ""))


def test_commands_reference_lists_every_option_of_every_command():
    import typer

    from race_cli.cli import app

    text = (DOCS / "commands.md").read_text(encoding="utf-8")
    group = typer.main.get_command(app)
    for name, cmd in group.commands.items():
        section = text.split(f"## race {name}\n", 1)[1].split("\n## ", 1)[0]
        for p in cmd.params:
            if p.param_type_name == "option" and "--help" not in p.opts:
                assert f"`{', '.join(p.opts + p.secondary_opts)}`" in section, (name, p.opts)


QUOTED = re.compile(r"<!-- output: (.+?) -->\n```text\n(.*?)```", re.S)


def quoted_outputs(page: Path) -> list[tuple[str, list[str]]]:
    """(command, quoted lines) of each block a page marks `<!-- output: [VAR=value ...] race ... -->`."""
    return [(cmd.strip(), body.splitlines()) for cmd, body in QUOTED.findall(page.read_text(encoding="utf-8"))]


def follows(quoted: list[str], printed: list[str]) -> str | None:
    """None when the quoted lines are printed lines, in order, from any line on, a `...` line standing for any
    run of lines (else consecutive); else the first quoted line that is not there. Trailing spaces do not count."""
    printed = [line.rstrip() for line in printed]
    at, skipping = 0, True
    for line in quoted:
        if line.strip() == "...":
            skipping = True
            continue
        line = line.rstrip()
        if skipping:
            while at < len(printed) and printed[at] != line:
                at += 1
        if at >= len(printed) or printed[at] != line:
            return line
        at, skipping = at + 1, False
    return None


def test_follows_by_hand():
    assert follows(["a", "...", "d"], ["a", "b", "c", "d  "]) is None
    assert follows(["a", "c"], ["a", "b", "c"]) == "c"  # no `...`: consecutive
    assert follows(["...", "x"], ["a", "b"]) == "x"
    assert follows(["b", "c"], ["a", "b", "c"]) is None  # a quote may start anywhere


def test_the_gpu_guides_plan_is_what_race_plan_prints():
    """docs/gpu.md section 3 quotes `race plan grid=pilot --gpu H100x8` at 80 columns: the quote must be the
    command's output today (no GPU visible; the GPU rates are the H100's stated assumptions)."""
    import os
    import shlex

    blocks = quoted_outputs(DOCS / "gpu.md")
    assert [c for c, _ in blocks] == ["COLUMNS=80 race plan grid=pilot --gpu H100x8"]
    for command, quoted in blocks:
        words = shlex.split(command)
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "RACE_CPU_PROBE": "off", "PYTHONPATH": str(ROOT)}
        while "=" in words[0]:
            key, _, value = words.pop(0).partition("=")
            env[key] = value
        assert words[0] == "race"
        done = subprocess.run([sys.executable, "-m", "race_cli", *words[1:]], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=600)
        assert done.returncode == 0, done.stderr[-2000:]
        missing = follows(quoted, done.stdout.splitlines())
        assert missing is None, f"docs/gpu.md quotes a line `{command}` no longer prints: {missing!r}"


def test_every_docs_page_the_code_names_opens_with_race_docs():
    """A pip install has no docs/ folder: `race docs PAGE` reads the copy the wheel ships (setup.py puts docs/
    into race_cli/docs), so every `docs/<page>.md` a help text or message names opens by that name."""
    from race_cli.guide import docs_dir, find_page

    named = set()
    for f in (ROOT / "race_cli").rglob("*.py"):
        named |= set(re.findall(r"docs/[\w/.-]+\.md", f.read_text(encoding="utf-8")))
    root = docs_dir()
    for name in sorted(n for n in named if (ROOT / n).exists()):
        assert find_page(name, root) == (ROOT / name).resolve()


def test_race_docs_reads_an_installed_copy_and_names_the_pages(tmp_path):
    from typer.testing import CliRunner

    from race_cli.cli import app
    from race_cli.errors import RaceError
    from race_cli.guide import docs_dir, find_page, pages

    installed = tmp_path / "race_cli" / "docs"  # the wheel's layout
    (installed / "measurements").mkdir(parents=True)
    (installed / "README.md").write_text("# index\n")
    (installed / "measurements" / "walltime.md").write_text("# wall\n")
    root = docs_dir([installed, tmp_path / "nowhere"])
    assert root == installed and pages(root) == ["README", "measurements/walltime"]
    for name in ("measurements/walltime", "docs/measurements/walltime.md", "measurements/walltime.md"):
        assert find_page(name, root) == installed / "measurements" / "walltime.md"
    assert find_page(None, root) == installed / "README.md"
    for bad in ("../setup", "/etc/passwd", "walltim"):
        with pytest.raises(RaceError, match="No page"):
            find_page(bad, root)
    with pytest.raises(RaceError, match="not installed here"):
        docs_dir([tmp_path / "nowhere"])
    res = CliRunner().invoke(app, ["docs", "commands"])
    assert res.exit_code == 0 and res.output.startswith("# Commands and options")
    res = CliRunner().invoke(app, ["docs", "gpux"])
    assert res.exit_code == 2 and "Did you mean 'gpu'?" in res.output


def test_the_tutorials_findings_are_what_race_report_prints(tmp_path):
    """docs/tutorial.md quotes the findings of `race report` on the synthetic sweep scripts/tutorial_sweep.py
    writes (a known truth of the default grid's shape): the quote must be what the command prints today."""
    import os

    blocks = quoted_outputs(DOCS / "tutorial.md")
    assert [c for c, _ in blocks] == ["COLUMNS=100 race report runs/tiny-demo --no-plots"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1"}
    made = subprocess.run([sys.executable, str(ROOT / "scripts" / "tutorial_sweep.py")], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    for command, quoted in blocks:
        missing = follows(quoted, _printed(command, tmp_path).splitlines())
        assert missing is None, f"docs/tutorial.md quotes a line `{command}` no longer prints: {missing!r}"


def _printed(command: str, cwd: Path) -> str:
    """What `COLUMNS=N race ...` (a quoted block's command) prints in `cwd`, run from this checkout."""
    import os
    import shlex

    words = shlex.split(command)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OPENBLAS_NUM_THREADS": "1",
           "COLUMNS": words.pop(0).partition("=")[2]}
    done = subprocess.run([sys.executable, "-m", "race_cli", *words[1:]], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_readmes_findings_are_what_race_report_prints_for_that_run(tmp_path):
    """README.md quotes the findings of `race report` on a real default run (`race run`, 56 jobs): the quote
    must be what the command prints today for that run. tests/data/readme-run.tar.xz holds every file the
    report reads of it (scripts/readme_run.py packs a sweep so; a new run in the README means a new archive).
    The rule rich draws after the findings' title fills the terminal's width; the README shows the title."""
    import tarfile

    blocks = quoted_outputs(ROOT / "README.md")
    assert [c for c, _ in blocks] == ["COLUMNS=300 race report runs/tiny-fb84d474 --no-plots"]
    archive = ROOT / "tests" / "data" / "readme-run.tar.xz"
    assert archive.stat().st_size <= 2_000_000  # a fixture, not a run: adapters, checkpoints and logs stay out
    with tarfile.open(archive) as tar:
        tar.extractall(tmp_path / "runs", filter="data")
    for command, quoted in blocks:
        printed = [re.sub(r" ─+$", "", line.rstrip()) for line in _printed(command, tmp_path).splitlines()]
        assert printed[1].startswith("Findings: ")  # the title, once its rule is cut, is what the README shows
        missing = follows(quoted, printed)
        assert missing is None, f"README.md quotes a line `{command}` no longer prints: {missing!r}"
