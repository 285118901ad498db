"""Atomic file writes and small JSON helpers: a crash leaves every file either old or new, never half."""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable


def _fsync_dir(path: Path) -> None:
    """fsync a folder (a rename's durability); some filesystems refuse, which is not an error."""
    try:
        fsync_file(path)
    except OSError:
        pass


def current_umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def umask_mode(directory: bool = False) -> int:
    """The mode a plain open() / mkdir() would give under the user's umask (0644 / 0755 with 022).

    tempfile.mkstemp / mkdtemp create 0600 / 0700 whatever the umask: files of a sweep would be
    unreadable to colleagues sharing a cluster, so temp files get this mode before they are renamed.
    """
    return (0o777 if directory else 0o666) & ~current_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes, durable: bool = True) -> None:
    """Write `data` to `path` through a temp file in the same folder and an atomic rename.

    A reader (or a process killed mid-write) sees the old file or the new one, never half.
    `durable` also fsyncs the file and its folder, so the new file survives a power loss too;
    that costs ~10 ms on a VM disk, so files rewritten every iteration pass False and are made
    durable at checkpoints (see engine/job.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, umask_mode())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    if durable:
        _fsync_dir(path.parent)


def atomic_write_text(path: str | os.PathLike, text: str, durable: bool = True) -> None:
    atomic_write_bytes(path, text.encode("utf-8"), durable)


def _jsonable(x: Any) -> Any:
    """Plain JSON: numpy scalars become Python numbers, non-finite floats become null."""
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):
            pass
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def dumps(obj: Any) -> str:
    return json.dumps(_jsonable(obj), indent=2, sort_keys=False) + "\n"


def atomic_write_json(path: str | os.PathLike, obj: Any, durable: bool = True) -> None:
    atomic_write_text(path, dumps(obj), durable)


def read_json(path: str | os.PathLike) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict], durable: bool = True) -> None:
    """Append whole lines; readers skip a torn last line (see read_jsonl). `durable`: fsync too."""
    text = "".join(json.dumps(_jsonable(r)) + "\n" for r in rows)
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        if durable:
            os.fsync(f.fileno())


def fsync_file(path: str | os.PathLike) -> None:
    """Make a file's (or folder's) written bytes durable, e.g. after appends made with durable=False."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every complete line of a JSONL file; a torn final line (a crash mid-append) is ignored."""
    rows = []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:  # last line without newline: torn write
                break
            raise
    return rows
