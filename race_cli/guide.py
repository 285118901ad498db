"""`race docs [PAGE]`: race's guides wherever race is installed, so every `docs/<page>.md` a help text or an
error message names can be read from a pip install as well as from a checkout.

    race docs                # the index (docs/README.md) and the list of pages
    race docs commands       # docs/commands.md; also `race docs docs/commands.md`, `race docs commands.md`
    race docs gpu --path     # where the page is on this machine

A checkout reads its own docs/; `pip install .` ships the same pages inside the package as race_cli/docs
(setup.py copies them at build time, as it copies conf/). No I/O but reading one page.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from race_cli.errors import RaceError

HERE = Path(__file__).resolve().parent


def docs_dir(candidates: list[Path] | None = None) -> Path:
    """The installed copy (race_cli/docs, a wheel) or the checkout's docs/ (an editable install)."""
    for path in candidates or [HERE / "docs", HERE.parent / "docs"]:
        if (path / "README.md").is_file():
            return path
    raise RaceError("race's guides are not installed here (no race_cli/docs/ and no docs/ beside the package). "
                    "Read them in the race repository's docs/ folder, or reinstall race (pip install .).")


def pages(root: Path) -> list[str]:
    """Every page, as `race docs` names it: 'commands', 'measurements/walltime'."""
    return sorted(p.relative_to(root).with_suffix("").as_posix() for p in root.rglob("*.md"))


def find_page(name: str | None, root: Path) -> Path:
    """The file of a page given as 'commands', 'commands.md' or 'docs/commands.md' (the index for None);
    RaceError naming the pages (and the nearest) for anything else, paths out of the folder included."""
    key = (name or "README").strip().removeprefix("./").removeprefix("docs/").removesuffix(".md")
    known = pages(root)
    if key in known:
        return root / f"{key}.md"
    near = difflib.get_close_matches(key, known, n=1)
    raise RaceError(f"No page {name!r} in race's docs." + (f" Did you mean {near[0]!r}?" if near else "")
                    + f" Pages: {', '.join(known)}.")
