"""Atomic file writes and small JSON helpers: a crash leaves every file either old or new, never half.

Sweep folders may come from someone else (docs/security.md), so writes and reads here do not
follow what a folder's author planted: appends open with O_NOFOLLOW (a log.txt or metrics.jsonl
that is a symbolic link is refused, never appended through), an atomic write renames over a
link instead of writing through it, and `inside(path, root)` refuses a folder on the way from
the sweep's root to a file that is a link. Reads of job files are bounded (`read_bounded`): a
regular file of at most a limit, so a link to /dev/zero or a 50 GB file is an error, not a hang.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any, Iterable, Iterator

MAX_JOB_FILE = 256 * 2**20  # bytes: the largest job file race reads back (metrics.jsonl of a long run is ~MBs)
MAX_JSON_DEPTH = 64  # race's own files nest at most ~6 deep
MAX_JSON_VALUES = 16_000_000  # commas + brackets of one document: a 100,000-job plan.json has ~4M; 256 MB of
# `[],` would parse into ~85M Python lists (GBs), so a document past this is refused before it is parsed


class LinkRefused(OSError):
    """A path under a sweep is (or passes through) a symbolic link, or is not a regular file."""


def cache_root() -> Path:
    """The per-user race cache (the zoo, the CPU probe, the plan's compositions and race prices): $RACE_CACHE,
    else ~/.cache/race. Here, at the bottom, so that config/ and plan/ can name it without importing zoo/."""
    return Path(os.environ.get("RACE_CACHE") or Path.home() / ".cache" / "race").expanduser()


def hub_cache_has(repo_id: str) -> bool:
    """Whether any folder huggingface_hub may take as its cache holds the model repo `repo_id` (Org/Name).

    The library's cache is HF_HUB_CACHE, else the legacy HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, HF_HOME
    defaulting to $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface; these are checked all, a superset: False
    means try_to_load_from_cache finds nothing, said without importing the library (~0.15 s of a plan)."""
    cache = os.path.join(os.path.expanduser("~"), ".cache")
    hf_home = os.getenv("HF_HOME", os.path.join(os.getenv("XDG_CACHE_HOME", cache), "huggingface"))
    roots = [os.getenv("HF_HUB_CACHE"), os.getenv("HUGGINGFACE_HUB_CACHE"), os.path.join(hf_home, "hub"),
             os.path.join(cache, "huggingface", "hub")]
    folder = "models--" + repo_id.replace("/", "--")  # the library's folder of a model repo
    return any(os.path.isdir(os.path.join(os.path.expandvars(os.path.expanduser(r)), folder)) for r in roots if r)


def inside(path: str | os.PathLike, root: str | os.PathLike) -> Path:
    """`path`, after checking that it lies under `root` and that no folder between them (and not
    the path itself) is a symbolic link; LinkRefused otherwise. Components that do not exist
    yet are fine (they will be created as folders, not followed)."""
    path, root = Path(os.path.abspath(path)), Path(os.path.abspath(root))
    try:
        rel = path.relative_to(root)
    except ValueError:
        raise LinkRefused(errno.EXDEV, f"it is outside the sweep folder {root}", str(path)) from None
    here = root
    for part in rel.parts:
        here = here / part
        try:
            st = here.lstat()
        except FileNotFoundError:
            break
        if stat.S_ISLNK(st.st_mode):
            raise LinkRefused(errno.ELOOP, "it is a symbolic link in a sweep folder", str(here))
    return path


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
    that costs milliseconds on a VM disk, so files rewritten every iteration pass False and are made
    durable at checkpoints (see engine/job.py)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.parent.is_symlink():  # mkstemp would write into the link's target
        raise LinkRefused(errno.ELOOP, "it is a symbolic link in a sweep folder", str(path.parent))
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
    kind = type(x)
    if kind is str or kind is int or kind is bool or x is None:  # most of a report: already plain
        return x
    if kind is float:
        return x if math.isfinite(x) else None
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


def _dumps_slow(x: Any, level: int) -> str:
    """`x` as `json.dumps(_jsonable(x), indent=2)` writes it nested `level` containers deep: every
    newline in that output is structural (strings escape theirs), so indenting the subtree is
    prefixing each newline with the outer levels' indent."""
    text = json.dumps(_jsonable(x), indent=2)
    return text.replace("\n", "\n" + "  " * level) if level and "\n" in text else text


_SCALARS = frozenset({str, int, float, bool, type(None)})  # the types the C encoder writes as _jsonable leaves them
_CONTAINERS = (dict, list, tuple)
_leaf_encoders: dict[int, json.JSONEncoder] = {}  # level -> the C encoder for a container of scalars there


def _leaf_encoder(level: int) -> json.JSONEncoder:
    """json's C encoder (indent=None), writing the items of a container `level` deep one to a line
    as indent=2 would: the item separator carries the newline and the indent. allow_nan=False and no
    `default`, so NaN, inf and anything not plain JSON (numpy scalars) raise instead of being written."""
    enc = _leaf_encoders.get(level)
    if enc is None:
        enc = _leaf_encoders[level] = json.JSONEncoder(
            check_circular=False, allow_nan=False, separators=(",\n" + "  " * (level + 1), ": "))
    return enc


def _encode(x: Any, level: int, out: list[str]) -> None:
    """Append `x`, `level` containers deep, to `out`, byte for byte as `_dumps_slow(x, level)` would.

    A dict or list whose items are all plain scalars (a report record) is written by json's C
    encoder, unwalked; one holding containers is walked here, item by item. Anything else (numpy
    scalars, NaN, non-str keys, subclasses of dict or list) goes the slow way: `_jsonable`, then
    json's Python encoder."""
    kind = type(x)
    if kind is dict or kind is list or kind is tuple:
        if not x:
            out.append("{}" if kind is dict else "[]")
            return
        if kind is dict and set(map(type, x)) != {str}:  # _jsonable's str(k) is not json's key rule
            out.append(_dumps_slow(x, level))
            return
        items = x.values() if kind is dict else x
        types = set(map(type, items))
        inner = "\n" + "  " * (level + 1)
        if types <= _SCALARS or not any(issubclass(t, _CONTAINERS) for t in types):
            try:
                text = _leaf_encoder(level).encode(x)
            except (TypeError, ValueError):  # NaN, inf, numpy scalars: the slow way
                out.append(_dumps_slow(x, level))
                return
            out += (text[0], inner, text[1:-1], "\n", "  " * level, text[-1])
            return
        out.append("{" if kind is dict else "[")
        sep = inner
        if kind is dict:
            for k, v in x.items():
                out += (sep, encode_basestring_ascii(k), ": ")
                _encode(v, level + 1, out)
                sep = "," + inner
        else:
            for v in x:
                out.append(sep)
                _encode(v, level + 1, out)
                sep = "," + inner
        out += ("\n", "  " * level, "}" if kind is dict else "]")
        return
    if kind in _SCALARS:  # a scalar beside containers
        try:
            out.append(_leaf_encoder(level).encode(x))
            return
        except ValueError:  # NaN, inf
            pass
    out.append(_dumps_slow(x, level))  # numpy scalars, subclasses of dict, list, tuple


def dumps(obj: Any) -> str:
    """`obj` as `json.dumps(_jsonable(obj), indent=2) + "\n"` writes it (numpy scalars as numbers,
    NaN and inf as null), byte for byte; most of it at C speed (json's C encoder only runs without
    indent, so `_encode` gives it the containers of scalars; tests/test_io_json.py compares the two)."""
    out: list[str] = []
    _encode(obj, 0, out)
    out.append("\n")
    return "".join(out)


def atomic_write_json(path: str | os.PathLike, obj: Any, durable: bool = True) -> None:
    atomic_write_text(path, dumps(obj), durable)


def read_bounded(path: str | os.PathLike, limit: int = MAX_JOB_FILE) -> bytes:
    """The bytes of a regular file of at most `limit` bytes, opened without following a link.

    A link, a device (/dev/zero), a FIFO or a larger file raises LinkRefused / ValueError instead
    of hanging or filling memory. FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused(errno.ELOOP, "it is a symbolic link in a sweep folder", str(path)) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise LinkRefused(errno.EINVAL, "it is not a regular file", str(path))
        if st.st_size > limit:
            raise ValueError(f"{path} is {st.st_size} bytes, more than the {limit} race reads back")
        chunks, size = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit:  # grew while being read
                raise ValueError(f"{path} is more than the {limit} bytes race reads back")
        return b"".join(chunks)
    finally:
        os.close(fd)


# Bytes of a JSON document that matter for its nesting depth: brackets outside strings. The
# translation maps both kinds of bracket to one (depth does not care which) and deletes the rest.
_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def load_yaml(text: str) -> Any:
    """YAML as plain data: a safe loader only (no tags, no objects), libyaml's where PyYAML was built with it."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader

def json_depth(data: bytes, limit: int = MAX_JSON_DEPTH) -> int:
    """Nesting depth of a valid JSON document's containers (`[1]` is 1, `{"a": [1]}` 2), counted on
    its bytes at C speed; any depth past `limit` reads as limit + 1 (the count stops there).

    Strings are cut out first (a bracket inside a string does not nest): split at the quotes when
    the document has no backslash, else a regular expression that knows escapes. What remains is
    reduced to its brackets, and each pass of `replace(b"[]", b"")` removes exactly the innermost
    level (a pair formed by a removal is not matched again in the same pass), so the number of
    passes is the depth; at most limit + 1 passes over at most the file's size."""
    outside = b"".join(data.split(b'"')[::2]) if b"\\" not in data else _STRING.sub(b"", data)
    brackets = outside.translate(_BRACKETS, _NOT_BRACKETS)
    depth = 0
    while brackets and depth <= limit:
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):  # unbalanced (not valid JSON): what nested so far
            break
        brackets, depth = shorter, depth + 1
    return depth


def loads_bounded(text: str | bytes, where: str = "JSON") -> Any:
    """json.loads, with every way a hostile document breaks it turned into ValueError (a subclass:
    json.JSONDecodeError passes through): more than MAX_JSON_VALUES values (counted before parsing),
    nesting past MAX_JSON_DEPTH, Python's recursion limit, integers longer than Python converts
    (ValueError already), bytes that are not UTF-8.

    The document is parsed first (json's C parser; a torn or corrupt document raises its
    JSONDecodeError, and one nested past the recursion limit stops there), then its depth is
    counted on its bytes (`json_depth`, skipped when the document has too few brackets to be that
    deep), so a valid document deeper than the bound is refused before anything walks it."""
    if isinstance(text, bytes):
        data, text = text, text.decode("utf-8")
    else:
        data = text.encode("utf-8", "surrogatepass")
    opens = data.count(b"[") + data.count(b"{")
    if len(data) > MAX_JSON_VALUES:  # a shorter document cannot hold more commas and brackets than that
        values = data.count(b",") + opens  # an upper bound (strings included), memchr speed
        if values > MAX_JSON_VALUES:
            raise ValueError(f"{where} holds more than {MAX_JSON_VALUES:,} values ({values:,} commas and brackets): "
                             "larger than any file race writes; not read")
    try:
        obj = json.loads(text)
    except RecursionError:
        raise ValueError(f"{where} nests too deeply to read") from None
    # a document with at most MAX_JSON_DEPTH opening brackets (strings included) cannot nest deeper:
    # the count above settles a metrics line or a summary without cutting out its strings
    if opens > MAX_JSON_DEPTH and json_depth(data) > MAX_JSON_DEPTH:
        raise ValueError(f"{where} nests deeper than {MAX_JSON_DEPTH} levels")
    return obj


def read_json(path: str | os.PathLike, limit: int = MAX_JOB_FILE) -> Any:
    """A JSON file, read with `read_bounded` and `loads_bounded` (no link, no device, no bomb)."""
    return loads_bounded(read_bounded(path, limit), str(path))


def append_jsonl(path: str | os.PathLike, rows: Iterable[dict], durable: bool = True) -> None:
    """Append whole lines; readers skip a torn last line (see read_jsonl). `durable`: fsync too.
    The file is opened with O_NOFOLLOW: a metrics.jsonl planted as a link is refused."""
    text = "".join(json.dumps(_jsonable(r)) + "\n" for r in rows)
    with open_append(path) as f:
        f.write(text.encode("utf-8"))
        f.flush()
        if durable:
            os.fsync(f.fileno())


def open_append(path: str | os.PathLike, mode: int | None = None):
    """A binary file object appending to `path` (created with the umask's mode), never through a
    link: a symbolic link at `path` raises LinkRefused. A FIFO or device is refused too."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK,
                     umask_mode() if mode is None else mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused(errno.ELOOP, "it is a symbolic link in a sweep folder", str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LinkRefused(errno.EINVAL, "it is not a regular file", str(path))
    os.set_blocking(fd, True)
    return os.fdopen(fd, "ab")


# --- disk full: one OSError, one message, whichever library was writing ------------------------

DISK_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EFBIG)  # the machine, not the command line


def os_error_from(exc: BaseException, path: str | os.PathLike | None = None) -> OSError | None:
    """The OSError a library's own exception stands for, or None: safetensors (and peft's
    save_pretrained through it) reports a full disk as SafetensorError('... os error 28' /
    'Os { code: 28, ...'), other writers as '[Errno 28] ...' inside their message."""
    import re

    if isinstance(exc, OSError) and exc.errno is not None:
        return exc
    m = re.search(r"os error (\d+)|Os \{ code: (\d+)|\[Errno (\d+)\]", str(exc))
    code = int(next(g for g in m.groups() if g)) if m else None
    if code in DISK_ERRNOS:
        return OSError(code, os.strerror(code), None if path is None else str(path))
    return None


class disk_errors:
    """`with disk_errors(path):` around a library's writes: an exception that stands for a full (or
    failing) disk leaves as the OSError it is, so every write path ends in `disk_full_message`."""

    def __init__(self, path: str | os.PathLike | None = None):
        self.path = path

    def __enter__(self) -> "disk_errors":
        return self

    def __exit__(self, kind, exc, tb) -> bool:
        if exc is None or (isinstance(exc, OSError) and exc.errno is not None) or not isinstance(exc, Exception):
            return False
        err = os_error_from(exc, self.path)
        if err is None:
            return False
        raise err from None


def disk_full_message(exc: OSError, where: str | os.PathLike | None = None, kept: str = "",
                      then: str = "") -> str:
    """The one message for a full disk (ENOSPC, EDQUOT) wherever it happens: what, where, what to do."""
    where = where if where is not None else (exc.filename or "a file")
    return (f"the disk is full ({exc.strerror or os.strerror(exc.errno or errno.ENOSPC)}) while writing {where}"
            f"{'; ' + kept if kept else ''}. Free some space, then rerun the same command{then}.")


def fsync_file(path: str | os.PathLike) -> None:
    """Make a file's (or folder's) written bytes durable, e.g. after appends made with durable=False."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def jsonl_rows(text: str, where: str = "") -> Iterator[tuple[int, str, Any]]:
    """(index, line, value) of every non-blank line of a JSONL text, each line read as `loads_bounded`
    reads a document (its bounds, its errors, named `{where}line N`). A torn final line (a crash
    mid-append: JSONDecodeError on the last line) is skipped; a corrupt line before it raises.

    A line shorter than MAX_JSON_VALUES characters cannot hold that many values, and one with at most
    MAX_JSON_DEPTH brackets cannot nest deeper: such a line (every line race writes) goes to json.loads
    directly, the rest through loads_bounded."""
    lines = text.split("\n")
    last = len(lines) - 1
    for i, line in enumerate(lines):
        if not line or line.isspace():
            continue
        try:
            if len(line) <= MAX_JSON_VALUES and line.count("{") + line.count("[") <= MAX_JSON_DEPTH:
                try:
                    value = json.loads(line)
                except RecursionError:  # the stack was deep already: loads_bounded says so
                    value = loads_bounded(line, f"{where}line {i + 1}")
            else:
                value = loads_bounded(line, f"{where}line {i + 1}")
        except json.JSONDecodeError:
            if i == last:  # last line without newline: torn write
                return
            raise
        yield i, line, value


def read_jsonl(path: str | os.PathLike) -> list[dict]:
    """Every complete line of a JSONL file; a torn final line (a crash mid-append) is ignored."""
    return [value for _, _, value in jsonl_rows(read_bounded(path).decode("utf-8"), f"{path} ")]
