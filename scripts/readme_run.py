"""Pack what `race report` reads of a finished sweep into one archive: the README's findings come from a real
default run, and tests/test_docs.py reports that run again from tests/data/readme-run.tar.xz and compares.

    python scripts/readme_run.py runs/tiny-<hash>             # writes tests/data/readme-run.tar.xz
    COLUMNS=300 race report runs/tiny-<hash> --no-plots       # the block README.md quotes

Kept: the sweep's multirun.yaml, plan.json, plan.csv, race.json and start-evals/, and each job's .hydra/,
status.json, summary.json (per-item scores included), ledger.json and metrics.jsonl: every file the
report opens, whole. Left out: adapters, checkpoints, logs and the old report/ (the report never reads
them; they are most of a run's size). xz keeps the default run's 55 jobs (26 MB) near 1.4 MB. The
archive is reproducible: names sorted, times, owners and modes fixed.
"""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "data" / "readme-run.tar.xz"
SWEEP_FILES = ("multirun.yaml", "plan.json", "plan.csv", "race.json")
JOB_FILES = (".hydra/config.yaml", ".hydra/overrides.yaml", "status.json", "summary.json", "ledger.json",
             "metrics.jsonl")


def members(sweep: Path) -> list[Path]:
    """The files kept, relative to the sweep's parent folder (the archive holds `<sweep name>/...`)."""
    files = [sweep / n for n in SWEEP_FILES if (sweep / n).is_file()]
    files += sorted((sweep / "start-evals").glob("*.json"))
    for job in sorted(p for p in (sweep / "jobs").iterdir() if p.is_dir()):
        files += [job / n for n in JOB_FILES if (job / n).is_file()]
    return [f.relative_to(sweep.parent) for f in files]


def pack(sweep: Path, out: Path = OUT) -> int:
    """Write the archive; returns its size in bytes."""
    out.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(out, "w:xz", preset=9) as tar:
        for rel in members(sweep):
            data = (sweep.parent / rel).read_bytes()
            info = tarfile.TarInfo(rel.as_posix())
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.stat().st_size


if __name__ == "__main__":
    if len(sys.argv) != 2 or not (Path(sys.argv[1]) / "jobs").is_dir():
        sys.exit("usage: python scripts/readme_run.py runs/tiny-<hash>   (a finished sweep folder)")
    size = pack(Path(sys.argv[1]).resolve())
    print(f"wrote {OUT} ({size / 1e6:.2f} MB)")
