"""Value domains of the config schema: what each key may hold, declared beside the key, checked in one place.

Every field of race_cli/config/schema.py is declared with `d(default, DOMAIN)` (or
`d(factory=..., domain=DOMAIN)`): its type, bounds, allowed values, and whether null is
allowed. `field_problems(cfg)` checks every field of a composed config against its domain
and returns one message per bad value, naming the key, the value and the domain:

    grpo.group_size=5000 is out of range: expected at most 4096 (an integer from 2 to 4096).

Rules that relate two keys (vLLM's LoRA ranks, max_model_len vs max_new_tokens, ...) are not
domains; they live in schema.CROSS_FIELD_RULES. tests/test_schema_domains.py walks every field:
a field declared without a domain fails it, and values just outside each domain must be refused.
Pure Python, no Hydra import: `race plan` calls it for every job.
"""

from __future__ import annotations

import math
import re
from dataclasses import MISSING, dataclass, field
from typing import Any, Callable, Optional

INT_LIMIT = 2**31 - 1  # no integer setting is meaningful beyond this; larger ones are typos
PATH_MAX = 4096  # Linux's PATH_MAX: a longer path cannot be opened (ENAMETOOLONG)


@dataclass(frozen=True)
class Domain:
    """The values one config key may hold."""

    kind: str  # int | float | str | bool | list | dict | section | any
    lo: Optional[float] = None  # lower bound (numbers), inclusive unless lo_open
    hi: Optional[float] = None  # upper bound (numbers), inclusive unless hi_open
    lo_open: bool = False
    hi_open: bool = False
    choices: tuple = ()  # the only values allowed (str keys), empty = any within the other limits
    null: bool = False  # null (None) allowed
    special: tuple = ()  # extra literal values besides the kind's (micro_batch_size: "auto")
    min_len: int = 0  # str: characters; list / dict: items
    max_len: Optional[int] = None
    pattern: Optional[str] = None  # str: a regular expression the whole value matches
    item: Optional["Domain"] = None  # list / dict: the domain of each item (dict: of each value)
    what: str = ""  # plain words for the pattern (e.g. "auto, cpu, cuda or cuda:N")

    # --- in words -----------------------------------------------------------------------------
    def describe(self) -> str:
        """The domain in words, e.g. 'an integer from 2 to 4096' or 'null or a number in (0, 1]'."""
        if self.kind == "int":
            text = _int_range(self)
        elif self.kind == "float":
            text = _float_range(self)
        elif self.kind == "bool":
            text = "true or false"
        elif self.kind == "str":
            if self.choices:
                text = "one of " + ", ".join(self.choices)
            elif self.what:
                text = self.what
            else:
                text = _length_words("a string", self.min_len, self.max_len, "characters")
        elif self.kind == "list":
            text = _length_words("a list", self.min_len, self.max_len, "items")
            if self.item is not None:
                text += f" of {_plural(self.item.describe())}"
        elif self.kind == "dict":
            text = _length_words("a mapping", self.min_len, self.max_len, "entries")
            if self.item is not None:
                text += f" whose values are {_plural(self.item.describe())}"
        elif self.kind == "section":
            text = "a section of keys"
        else:
            text = "any plain value (finite numbers, strings, lists, mappings)"
        if self.special:
            text = " or ".join(repr(s) for s in self.special) + " or " + text
        return ("null or " + text) if self.null else text

    # --- checking -----------------------------------------------------------------------------
    def problem(self, key: str, value: Any) -> Optional[str]:
        """None when `value` is in the domain, else one message naming the key, the value and the domain."""
        if value is None:
            return None if self.null else f"{key} cannot be null: expected {self.describe()}."
        if self.special and value in self.special and not isinstance(value, bool):
            return None
        kind = self.kind
        if kind == "section":
            return None if hasattr(value, "keys") else f"{key}={_show(value)} is a value, but {key} is a section."
        if kind == "bool":
            return None if isinstance(value, bool) else _wrong(key, value, self)
        if kind in ("int", "float"):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind == "int" and
                                                                                   not isinstance(value, int)):
                return _wrong(key, value, self)
            if isinstance(value, float) and not math.isfinite(value):
                return f"{key}={value!r} is not a finite number: expected {self.describe()}."
            return _bound_problem(key, value, self)
        if kind == "str":
            if not isinstance(value, str):
                return _wrong(key, value, self)
            if self.choices:
                return None if value in self.choices else f"{key}={_show(value)} is not one of {', '.join(self.choices)}."
            if len(value) < self.min_len or (self.max_len is not None and len(value) > self.max_len):
                return f"{key} is {len(value)} characters long: expected {self.describe()}."
            if self.pattern is not None and not re.fullmatch(self.pattern, value):
                return f"{key}={_show(value)} is not valid: expected {self.describe()}."
            return None
        if kind in ("list", "dict"):
            if kind == "list" and not isinstance(value, (list, tuple)) and not _is_seq(value):
                return _wrong(key, value, self)
            if kind == "dict" and not hasattr(value, "items"):
                return _wrong(key, value, self)
            n = len(value)
            if n < self.min_len or (self.max_len is not None and n > self.max_len):
                return f"{key} has {n} {'items' if kind == 'list' else 'entries'}: expected {self.describe()}."
            if self.item is not None:
                pairs = enumerate(value) if kind == "list" else value.items()
                for k, v in pairs:
                    sub = f"{key}[{k}]" if kind == "list" else f"{key}.{k}"
                    if kind == "dict":
                        bad_key = KEY_TEXT.problem(f"a key of {key}", k)
                        if bad_key:
                            return bad_key
                    p = self.item.problem(sub, v)
                    if p:
                        return p
            return None
        return _any_problem(key, value)

    # --- for the schema-walking test --------------------------------------------------------
    def outside(self) -> list[Any]:
        """Values just outside the domain (and of the wrong type), each of which `problem` refuses."""
        out: list[Any] = []
        if not self.null and self.kind != "section":
            out.append(None)
        if self.kind == "int":
            out += ["abc", 1.5, True]
            if self.lo is not None:
                out.append(int(self.lo) - 1)
            out.append(int(self.hi) + 1 if self.hi is not None else INT_LIMIT + 1)
        elif self.kind == "float":
            out += ["abc", True, float("inf"), float("nan")]
            for bound, is_open, step in ((self.lo, self.lo_open, -1), (self.hi, self.hi_open, +1)):
                if bound is not None:
                    out.append(float(bound) if is_open else _next(float(bound), step))
        elif self.kind == "bool":
            out += ["maybe", 2]
        elif self.kind == "str":
            out += [[1, 2]]  # a number typed for a string is its text (Hydra, OmegaConf): not a wrong type
            if self.choices:
                out.append("not-a-choice")
            else:
                if self.max_len is not None:
                    out.append("x" * (self.max_len + 1))
                if self.min_len > 0:
                    out.append("")
        elif self.kind == "list":
            out += ["abc"]
            if self.max_len is not None:
                out.append([self.item.inside()[0] if self.item else 0] * (self.max_len + 1))
            if self.min_len > 0:
                out.append([])
            if self.item is not None and self.item.outside():
                out.append([self.item.outside()[-1]])
        elif self.kind == "dict":
            out += ["abc"]
            if self.item is not None and self.item.outside():
                out.append({"x": self.item.outside()[-1]})
        return out

    def inside(self) -> list[Any]:
        """Values inside the domain (its bounds where closed), each of which `problem` accepts."""
        vals: list[Any] = [None] if self.null else []
        vals += list(self.special)
        if self.kind == "int":
            lo = int(self.lo) if self.lo is not None else -INT_LIMIT
            hi = int(self.hi) if self.hi is not None else INT_LIMIT
            vals += sorted({lo, hi, min(max(lo, 1), hi)})
        elif self.kind == "float":
            lo = self.lo if self.lo is not None else -1e30
            hi = self.hi if self.hi is not None else 1e30
            vals += [_next(lo, +1) if self.lo_open else float(lo), _next(hi, -1) if self.hi_open else float(hi)]
        elif self.kind == "bool":
            vals += [True, False]
        elif self.kind == "str":
            vals += list(self.choices) if self.choices else [_sample_text(self)]
        elif self.kind == "list":
            vals += [[self.item.inside()[-1]] * max(self.min_len, 1) if self.item else [1]]
        elif self.kind == "dict":
            vals += [{}] if self.min_len == 0 else []
        return vals


# --- constructors: the vocabulary schema.py declares its fields with ---------------------------

def Int(lo: Optional[int] = None, hi: Optional[int] = INT_LIMIT, *, null: bool = False, special: tuple = ()) -> Domain:
    return Domain("int", lo=lo, hi=hi, null=null, special=special)


def Real(lo: Optional[float] = None, hi: Optional[float] = None, *, lo_open: bool = False, hi_open: bool = False,
         null: bool = False) -> Domain:
    return Domain("float", lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, null=null)


def Choice(*options: str, null: bool = False) -> Domain:
    return Domain("str", choices=tuple(options), null=null)


def Bool() -> Domain:
    return Domain("bool")


def Text(min_len: int = 1, max_len: int = 200, *, null: bool = False, pattern: Optional[str] = None,
         what: str = "") -> Domain:
    return Domain("str", min_len=min_len, max_len=max_len, null=null, pattern=pattern, what=what)


def ListOf(item: Domain, min_len: int = 0, max_len: int = 256) -> Domain:
    return Domain("list", item=item, min_len=min_len, max_len=max_len)


def MapOf(item: Optional[Domain], max_len: int = 256) -> Domain:
    return Domain("dict", item=item, max_len=max_len)


def Section(*, null: bool = False) -> Domain:
    return Domain("section", null=null)


def AnyPlain() -> Domain:
    return Domain("any", null=True)


KEY_TEXT = Text(1, 200)  # the keys of mapping fields (eval.max_items_by_target, grid.axes / fixed)


def d(default: Any = MISSING, domain: Optional[Domain] = None, *, factory: Optional[Callable[[], Any]] = None) -> Any:
    """A dataclass field with its domain in the field's metadata: `group_size: int = d(8, Int(2, 4096))`."""
    if domain is None:
        raise TypeError("d(...) needs a domain")
    meta = {"domain": domain}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


# --- walking a config ---------------------------------------------------------------------------

_ROOT: list[type] = []  # RaceConfig, registered by race_cli/config/schema.py (importing it here would be a cycle)


def register_root(cls: type) -> None:
    """schema.py names its root dataclass once, at import."""
    _ROOT[:] = [cls]


def domains(root: type | None = None) -> dict[str, Domain]:
    """Dotted key -> Domain for every field of the schema (sections too); a field without one is
    listed with None (tests/test_schema_domains.py fails on it)."""
    import dataclasses
    import typing

    if root is None:
        if not _ROOT:
            raise RuntimeError("race_cli.config.schema registers the schema's root; import it first")
        root = _ROOT[0]
    out: dict[str, Domain] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            key = f"{prefix}{f.name}"
            out[key] = f.metadata.get("domain")
            tp = hints[f.name]
            inner = [a for a in typing.get_args(tp) if a is not type(None)] or [tp]
            if dataclasses.is_dataclass(inner[0]):
                walk(inner[0], key + ".")

    walk(root, "")
    return out


_CACHE: dict[str, Any] = {}


def domains_by_key() -> dict[str, Domain]:
    """domains() of RaceConfig, built once per process."""
    if "by_key" not in _CACHE:
        _CACHE["by_key"] = {k: v for k, v in domains().items() if v is not None}
    return _CACHE["by_key"]


def _flat() -> list[tuple[str, tuple[str, ...], Domain]]:
    """(key, path parts, domain), parents before children; built once per process."""
    if "flat" not in _CACHE:
        _CACHE["flat"] = [(k, tuple(k.split(".")), dom) for k, dom in domains().items()]
    return _CACHE["flat"]


def _flat_by_key(keys: set[str]) -> list[tuple[str, tuple[str, ...], Domain]]:
    if "index" not in _CACHE:
        _CACHE["index"] = {k: (k, parts, dom) for k, parts, dom in _flat()}
    index = _CACHE["index"]
    return [index[k] for k in keys if k in index]


def field_problems(cfg: Any, keys: Optional[set[str]] = None) -> list[str]:
    """Every field of `cfg` (a plain dict or an OmegaConf DictConfig) checked against its domain.

    `keys`: check only these dotted keys (and nothing under a null or missing section)."""
    problems: list[str] = []
    null_sections: list[tuple[str, ...]] = []
    flat = _flat() if keys is None else [e for e in _flat_by_key(keys)]
    for key, parts, dom in flat:
        if any(parts[: len(s)] == s for s in null_sections):
            continue
        node, missing = cfg, False
        for p in parts:
            try:
                node = node[p]
            except (KeyError, TypeError, AttributeError):
                missing = True
                break
            if node is None:
                break
        if missing:
            continue
        if node is None and dom is not None and dom.kind == "section":
            null_sections.append(parts)
        if dom is None:
            continue
        msg = dom.problem(key, node if not hasattr(node, "_is_none") else _plain(node))
        if msg:
            problems.append(msg)
    return problems


# --- small helpers ------------------------------------------------------------------------------

def _plain(node: Any) -> Any:
    from omegaconf import DictConfig, ListConfig, OmegaConf

    if isinstance(node, ListConfig):
        return OmegaConf.to_container(node)
    if isinstance(node, DictConfig):
        return node if not node._is_none() else None
    return node


def _is_seq(value: Any) -> bool:
    return type(value).__name__ == "ListConfig"


def _num(x: float) -> str:
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:g}"


def _int_range(dom: Domain) -> str:
    lo, hi = dom.lo, dom.hi
    if lo is not None and hi is not None:
        return f"an integer from {_num(lo)} to {_num(hi)}"
    if lo is not None:
        return f"an integer >= {_num(lo)}"
    if hi is not None:
        return f"an integer <= {_num(hi)}"
    return "an integer"


def _float_range(dom: Domain) -> str:
    lo, hi = dom.lo, dom.hi
    if lo is not None and hi is not None:
        return f"a number in {'(' if dom.lo_open else '['}{_num(lo)}, {_num(hi)}{')' if dom.hi_open else ']'}"
    if lo is not None:
        return f"a number {'>' if dom.lo_open else '>='} {_num(lo)}"
    if hi is not None:
        return f"a number {'<' if dom.hi_open else '<='} {_num(hi)}"
    return "a finite number"


def _length_words(noun: str, lo: int, hi: Optional[int], unit: str) -> str:
    if hi is None:
        return f"{noun} of at least {lo} {unit}" if lo else noun
    return f"{noun} of {lo} to {hi} {unit}" if lo else f"{noun} of at most {hi} {unit}"


def _plural(text: str) -> str:
    for a, b in (("an integer", "integers"), ("a number", "numbers"), ("a string", "strings")):
        if text.startswith(a):
            return b + text[len(a):]
    return text


def _bound_problem(key: str, value: float, dom: Domain) -> Optional[str]:
    lo, hi = dom.lo, dom.hi
    if lo is not None and (value < lo or (dom.lo_open and value == lo)):
        need = f"{'more than' if dom.lo_open else 'at least'} {_num(lo)}"
    elif hi is not None and (value > hi or (dom.hi_open and value == hi)):
        need = f"{'less than' if dom.hi_open else 'at most'} {_num(hi)}"
    else:
        return None
    return f"{key}={_show(value)} is out of range: expected {need} ({dom.describe()})."


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:40] + f"...' ({len(str(value))} characters)"


def _wrong(key: str, value: Any, dom: Domain) -> str:
    what = "a boolean" if isinstance(value, bool) else type(value).__name__
    return f"Wrong type for {key}: {_show(value)} is {what}; expected {dom.describe()}."


def _next(x: float, direction: int) -> float:
    return math.nextafter(x, math.inf if direction > 0 else -math.inf)


def _sample_text(dom: Domain) -> str:
    if dom.pattern is not None:
        return dom.what.split(",")[0].split(" ")[0] if dom.what else "x"
    return "x" * max(dom.min_len, 1)


def _any_problem(key: str, value: Any, depth: int = 0) -> Optional[str]:
    """A free-form value (grid.fixed): plain data, finite numbers, integers within INT_LIMIT."""
    if depth > 16:
        return f"{key} nests too deeply: expected plain values."
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return None if not isinstance(value, str) or len(value) <= 100_000 else \
            f"{key} is {len(value)} characters long: expected at most 100000."
    if isinstance(value, float):
        return None if math.isfinite(value) else f"{key}={value!r} is not a finite number: expected e.g. {key}=1e12."
    if isinstance(value, int):
        return None if abs(value) <= INT_LIMIT else \
            f"{key}={value} is too large: expected an integer of at most {INT_LIMIT}."
    if hasattr(value, "items"):
        for k, v in value.items():
            p = _any_problem(f"{key}.{k}", v, depth + 1)
            if p:
                return p
        return None
    if isinstance(value, (list, tuple)) or _is_seq(value):
        for i, v in enumerate(value):
            p = _any_problem(f"{key}[{i}]", v, depth + 1)
            if p:
                return p
        return None
    return f"{key}={_show(value)} is not plain data."
