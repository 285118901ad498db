"""Ship prebuilt zoo entries with the package: build them from their recipes, copy them under race_cli/zoo/weights/.

    python scripts/ship_zoo.py                  # the entries the default grid needs: tiny-s, tiny-m, tiny-prm
    python scripts/ship_zoo.py tiny-l           # others too

Run it after changing a recipe in race_cli/zoo/recipes.py (the folder name carries the recipe hash,
so a stale shipped copy is never used: the cache then builds from the recipe instead). Older
shipped copies of the same entry are removed. `race zoo --verify NAME` checks that a rebuild from
the recipe equals the shipped weights bit for bit.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path


def main(names: list[str]) -> int:
    import os

    from race_cli import zoo
    from race_cli.zoo.build import SHIPPED, shipped_dir

    with tempfile.TemporaryDirectory(prefix="race-ship-") as cache:
        os.environ["RACE_CACHE"] = cache  # build from the recipes, never from an older shipped copy
        for name in names:
            built = zoo.build(name, force=True)
            dest = shipped_dir(name)
            for old in SHIPPED.glob(f"{name}-*"):
                shutil.rmtree(old)
            shutil.copytree(built, dest)
            for f in dest.iterdir():
                f.chmod(0o644)
            size = sum(f.stat().st_size for f in dest.iterdir())
            print(f"shipped zoo:{name} -> {dest.relative_to(Path.cwd()) if dest.is_relative_to(Path.cwd()) else dest} "
                  f"({size / 1e6:.2f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["tiny-s", "tiny-m", "tiny-prm"]))
