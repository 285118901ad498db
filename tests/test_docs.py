"""The docs hold together: the index lists every page, every relative link resolves, every docs/ path the
code names exists, and docs/config.md says what the schema says."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

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
