"""The statistics' quantiles kept across processes, in the race cache.

stats/quantiles.py (the studentized range: a 50-step bisection over a quadrature) and stats/gatekeeping.py
(Dunnett's many-to-one: a root search over a quadrature) keep every quantile they compute in a plain dict,
MEMO, for the process. A report of the default run needs about 800 of them: a third of its CPU time, the
same values every time the sweep is reported again. `kept()` fills those dicts from the race cache before a
command and adds what the command computed after it, so the stats stay pure (no files) and the shell keeps
their tables, as the plan keeps its compositions and race prices.

The file is named by a digest of what computes the values (the two modules' source, numpy's and scipy's
versions): a changed formula never reads an old value, and each value read is the float the code would
compute (JSON keeps a float's shortest repr, which reads back to the same bits). It is data: entries of the
wrong shape or type are dropped, a broken file is ignored (then recomputed), and the newest MAX_ENTRIES of
each table are kept. RACE_QUANTILE_CACHE=off neither reads nor writes it.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

CACHE_ENV = "RACE_QUANTILE_CACHE"
MAX_ENTRIES = 20_000  # per table, the newest kept: ~1 MB of JSON, read in ~30 ms; a report adds a few hundred
_MAX_BYTES = 32 * 2**20


def _memos() -> dict[str, tuple[dict, int]]:
    """{table name: (its MEMO, the number of key fields)}."""
    from race_cli.stats import gatekeeping, quantiles

    return {"range": (quantiles.MEMO, 3), "dunnett": (gatekeeping.MEMO, 4)}


def cache_path() -> Path | None:
    """This code's file under the race cache, or None when RACE_QUANTILE_CACHE=off."""
    if os.environ.get(CACHE_ENV, "").strip().lower() == "off":
        return None
    import hashlib

    import numpy
    import scipy

    from race_cli.io import cache_root

    stats = Path(__file__).resolve().parent / "stats"
    h = hashlib.sha256(f"numpy {numpy.__version__} scipy {scipy.__version__}\0".encode())
    for name in ("quantiles.py", "gatekeeping.py"):
        h.update(name.encode() + b"\0" + (stats / name).read_bytes())
    return cache_root() / "quantiles" / f"{h.hexdigest()[:32]}.json"


_NUMBER = (int, float)  # type() in it: JSON's numbers, bool excluded


def _entries(data, n_key: int) -> dict[tuple, float]:
    """Valid [key..., value] rows of one table as {key: value}: numbers, an integer k second; others dropped
    (a JSON 3 for a df of 3.0 is the same dict key)."""
    if not isinstance(data, list):
        return {}
    return {tuple(row[:-1]): float(row[-1]) for row in data[-MAX_ENTRIES:]
            if type(row) is list and len(row) == n_key + 1 and type(row[1]) is int
            and all(type(x) in _NUMBER for x in row)}


def _read(path: Path) -> dict[str, dict[tuple, float]]:
    from race_cli.io import loads_bounded, read_bounded

    try:
        data = loads_bounded(read_bounded(path, _MAX_BYTES), str(path))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {name: _entries(data.get(name), n_key) for name, (_, n_key) in _memos().items()}


def load(path: Path | None) -> int:
    """Fill the stats' MEMO dicts from the file (a value the process already has is kept); the entries read."""
    if path is None:
        return 0
    got = _read(path)
    for name, (memo, _) in _memos().items():
        for key, value in got.get(name, {}).items():
            memo.setdefault(key, value)
    return sum(len(t) for t in got.values())


def save(path: Path | None, known: int) -> None:
    """Write the file again, the process's entries added to the file's own, when the process has more than
    the `known` entries it read (another process's additions since are kept: read again, then merged)."""
    memos = _memos()
    if path is None or sum(len(m) for m, _ in memos.values()) <= known:
        return
    import json

    from race_cli.io import atomic_write_text

    on_disk = _read(path)
    rows = {}
    for name, (memo, _) in memos.items():
        merged = {**on_disk.get(name, {}), **memo}
        rows[name] = [[*key, value] for key, value in list(merged.items())[-MAX_ENTRIES:]  # the file's, then ours
                      if all(isinstance(x, (int, float)) for x in key) and isinstance(value, float)]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(rows, separators=(",", ":")), durable=False)
    except OSError:
        pass  # a read-only or full cache: the next process computes them again


@contextmanager
def kept() -> Iterator[None]:
    """Around a command: the stats' quantiles from the race cache before it, its new ones into the cache after
    it (also when it stops on an error: every value computed is valid)."""
    try:
        path = cache_path()
    except (OSError, RuntimeError):  # no home folder to find the cache in: nothing kept
        path = None
    known = load(path)
    try:
        yield
    finally:
        save(path, known)

