"""Expand Hydra sweep syntax into concrete jobs, fast, without importing torch.

`race plan model=tiny-s,tiny-m grpo.group_size=range(4,17,4) +reward=glob(r*)` reads like
`python app.py --multirun ...`: comma lists, `range()`, `glob()` over a group's options,
`+key=`. Two forms are refused because plan and run would disagree (`shuffle(...)`: a new
order every time) or because they cannot be enumerated (`interval(...)`: a continuous range
for optimising sweepers).

Speed: composing with Hydra costs tens of milliseconds per call, so a 1,000-job grid cannot compose
every job. Hydra composes once per distinct choice of config groups (model, reward, task, ...);
every other override is applied to a plain-dict copy, with the schema's types enforced here
(`apply_value`). tests/test_plan.py::test_fast_path_equals_hydra_composition checks that both paths
give the same config.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import functools
import hashlib
import itertools
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Sequence

from race_cli.errors import RaceError


@dataclass
class Axis:
    """One swept (or fixed) key with its values, each already rendered as an override string."""

    key: str  # e.g. "grpo.group_size" or "model"
    prefix: str  # "", "+" or "++" as typed
    values: list[str]  # the value part of each override, e.g. ["4", "8"]
    swept: bool = True

    def overrides(self) -> list[str]:
        return [f"{self.prefix}{self.key}={v}" for v in self.values]


@dataclass
class Sweep:
    """The parsed command line: swept axes and fixed overrides, in the order typed."""

    axes: list[Axis] = field(default_factory=list)
    fixed: list[str] = field(default_factory=list)  # non-sweep overrides, as typed

    def product(self) -> list[list[str]]:
        lists = [a.overrides() for a in self.axes]
        return [list(combo) for combo in itertools.product(*lists)] if lists else [[]]


def range_size(start: float, stop: float, step: float) -> int:
    """How many values Hydra's range(start, stop, step) yields, computed, never enumerated."""
    if step == 0 or not all(map(math.isfinite, (start, stop, step))):
        return 0
    return max(0, math.ceil((stop - start) / step))


def _same_values(key: str, values: list[str], types: dict[str, Any] | None) -> tuple[str, str] | None:
    """The first two values of an axis that are one value once typed (seed=0,00; G=4,4.0 for an int key)."""
    tp = (types or {}).get(key)
    seen: dict[Any, str] = {}
    for v in values:
        try:
            typed = coerce(key, _parse_value(f"{key}={v}")[1], tp) if tp is not None else v
            marker = (type(typed).__name__, repr(typed)) if not isinstance(typed, (list, dict)) else repr(typed)
        except (RaceError, Exception):  # noqa: BLE001 - a wrong type is reported when the job is composed
            marker = v
        if marker in seen:
            return seen[marker], v
        seen[marker] = v
    return None


def parse_sweep(overrides: Sequence[str], group_options: dict[str, list[str]], *,
                max_values: int | None = None, too_many: str = "Narrow the range.") -> Sweep:
    """Parse overrides with Hydra's own grammar; refuse what cannot be planned.

    `max_values` bounds every axis BEFORE it is expanded (range(0,1e9) is counted, never
    enumerated); an axis whose values repeat once typed (seed=0,00 or seed=1,1: one run under two
    ids, counted as two seeds) is refused."""
    from hydra.core.override_parser.types import ChoiceSweep, Glob, IntervalSweep, RangeSweep
    from hydra.errors import HydraException

    sweep = Sweep()
    problems = []
    first: dict[str, str] = {}  # key -> the override that set it first
    for text in overrides:
        try:
            ov = parse_override(text)
        except RaceError as exc:
            problems.extend(exc.problems)
            continue
        key = ov.get_key_element()
        prefix = key[: len(key) - len(key.lstrip("+~"))]
        bare = key[len(prefix):]
        if bare in first:  # Hydra would keep the last one while the job ids name both
            problems.append(f"'{text}': {bare} is already set by '{first[bare]}'. Give each key once; to sweep "
                            f"more values, list them in one override ({bare}=a,b,c).")
            continue
        first[bare] = text
        if prefix.startswith("~"):  # swept or not: a job needs every key of the schema (Axis takes "", + or ++)
            problems.append(f"'{text}': deleting keys is not supported; every key of the schema is needed.")
            continue
        value = ov.value()
        if not ov.is_sweep_override():
            sweep.fixed.append(text)
            continue
        if isinstance(value, IntervalSweep):
            problems.append(f"'{text}': interval() is a continuous range for optimising sweepers and cannot be "
                            "enumerated into jobs. Use a list (a,b,c) or range(start,stop,step).")
            continue
        if getattr(value, "shuffle", False):
            problems.append(f"'{text}': shuffle() gives a new order on every call, so race plan and race run "
                            "would disagree. Drop shuffle(); the pool already orders jobs longest first.")
            continue
        if isinstance(value, Glob):
            if bare not in group_options:
                problems.append(f"'{text}': glob() selects options of a config group ({', '.join(group_options)}); "
                                f"'{bare}' is not a group.")
                continue
            values = value.filter(group_options[bare])
        elif isinstance(value, (ChoiceSweep, RangeSweep)):
            if isinstance(value, RangeSweep):
                bad = _range_problem(text, value)
                if bad:
                    problems.append(bad)
                    continue
                n = range_size(float(value.start), float(value.stop), float(value.step))
                if max_values is not None and n > max_values:
                    problems.append(f"'{text}' expands to {n} values, more than the maximum of {max_values} jobs "
                                    f"(counted, not expanded). {too_many}")
                    continue
            try:
                values = list(ov.sweep_string_iterator())
            except (HydraException, ValueError, TypeError, OverflowError) as exc:
                problems.append(f"Cannot expand override '{_short(text)}': {_first_line(exc)}. " + _GRAMMAR)
                continue
        else:  # pragma: no cover - the grammar has no other sweep types
            problems.append(f"'{text}': unsupported sweep type {type(value).__name__}.")
            continue
        if not values:
            problems.append(f"'{text}' expands to no values: the sweep would be empty. "
                            + (f"Options of '{bare}': {', '.join(group_options[bare])}." if bare in group_options else ""))
            continue
        values = [str(v) for v in values]
        same = _same_values(bare, values, _types_or_none())
        if same is not None:
            what = "seed" if bare == "seed" else "value"
            problems.append(f"'{text}': {same[0]} and {same[1]} are the same {what}, so two jobs would be one run "
                            f"counted twice. Give each {bare} once.")
            continue
        sweep.axes.append(Axis(bare, prefix, values))
    if problems:
        raise RaceError(*problems)
    return sweep


_GRAMMAR = "Expected KEY=VALUE, KEY=a,b,c, KEY=range(start,stop,step) or GROUP=glob(pattern)."


def _short(text: str, n: int = 80) -> str:
    """An override as it can be quoted in a message: a 100,000-character one is cut, with its length."""
    return text if len(text) <= n else f"{text[:n]}... ({len(text)} characters)"


def _first_line(exc: BaseException) -> str:
    line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return line[:200]


MAX_OVERRIDE_CHARS = 200_000  # the longest override race parses (a path is at most 4096; grids list a few values)


def parse_override(text: str) -> Any:
    """One override parsed with Hydra's grammar; every way that fails (bad grammar, an integer longer
    than Python converts, a grammar recursion) becomes one RaceError line naming the override."""
    from hydra.errors import HydraException

    if len(text) > MAX_OVERRIDE_CHARS:
        raise RaceError(f"Override '{_short(text)}' is longer than the {MAX_OVERRIDE_CHARS} characters race parses: "
                        "expected KEY=VALUE with a value of the key's domain (a path is at most 4096 characters).")
    try:
        (ov,) = _parser().parse_overrides([text])
    except (HydraException, ValueError, TypeError, OverflowError, RecursionError) as exc:
        why = _first_line(exc)
        if "Exceeds the limit" in why and "digits" in why:
            why = "an integer has more digits than Python converts (4300); no setting needs more than 10 digits"
        raise RaceError(f"Cannot parse override '{_short(text)}': {why}. " + _GRAMMAR) from None
    return ov


def _range_problem(text: str, value: Any) -> str | None:
    """range(start, stop, step) that cannot be enumerated: a zero step, a non-finite or non-numeric bound."""
    try:
        start, stop, step = float(value.start), float(value.stop), float(value.step)
    except (TypeError, ValueError, OverflowError):
        return f"'{_short(text)}': range() takes numbers (range(start, stop, step)). " + _GRAMMAR
    if not all(map(math.isfinite, (start, stop, step))):
        return f"'{_short(text)}': range() bounds and step must be finite numbers, e.g. seed=range(0,10)."
    if step == 0:
        return f"'{_short(text)}': range() step must not be zero, e.g. seed=range(0,10,2)."
    return None


# --- typed application of one override to a plain-dict config ------------------------------------

def _types_or_none() -> dict[str, Any] | None:
    try:
        return _schema_types_cached()
    except Exception:  # noqa: BLE001 - the schema is race's own; without it, values compare as text
        return None


@functools.lru_cache(maxsize=1)
def _schema_types_cached() -> dict[str, Any]:
    return schema_types()


def schema_types() -> dict[str, Any]:
    """Dotted key -> declared type for every leaf and node of RaceConfig."""
    from race_cli.config.schema import RaceConfig

    out: dict[str, Any] = {}

    def walk(cls: type, prefix: str) -> None:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            tp = hints[f.name]
            key = f"{prefix}{f.name}"
            out[key] = tp
            inner = _unwrap_optional(tp)
            if dataclasses.is_dataclass(inner):
                walk(inner, key + ".")

    walk(RaceConfig, "")
    return out


def _unwrap_optional(tp: Any) -> Any:
    args = typing.get_args(tp)
    if typing.get_origin(tp) is typing.Union and type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0] if len(rest) == 1 else tp
    return tp


_INT = re.compile(r"^[+-]?\d+$")


def coerce(key: str, value: Any, tp: Any) -> Any:
    """Check `value` against the schema type `tp` the way OmegaConf would; RaceError when it can't be."""
    if type(value) is int and tp is int:  # the common case (a seed sweep), before any typing introspection
        return value
    optional = _unwrap_optional(tp) is not tp
    tp = _unwrap_optional(tp)
    if value is None:
        if optional:
            return None
        raise RaceError(f"{key} cannot be null: expected a value of type {getattr(tp, '__name__', tp)}.")
    origin = typing.get_origin(tp)
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "yes", "no", "on", "off"):
            return value.lower() in ("true", "yes", "on")
        raise RaceError(f"Wrong type for {key}: {value!r} is not a boolean. Expected true or false.")
    if tp is int:
        if isinstance(value, bool):
            raise RaceError(f"Wrong type for {key}: {value!r} is a boolean. Expected an integer.")
        if isinstance(value, int):
            return value
        if isinstance(value, str) and _INT.match(value.strip()):
            return int(value)
        raise RaceError(f"Wrong type for {key}: {value!r} is not an integer. Expected e.g. {key}=8.")
    if tp is float:
        if isinstance(value, bool):
            raise RaceError(f"Wrong type for {key}: {value!r} is a boolean. Expected a number.")
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return float(value)
        except (TypeError, ValueError):
            raise RaceError(f"Wrong type for {key}: {value!r} is not a number. Expected e.g. {key}=1e12.") from None
    if tp is str:
        if isinstance(value, (dict, list)):
            raise RaceError(f"Wrong type for {key}: expected a string, got {type(value).__name__}.")
        return value if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    if origin is list:
        if not isinstance(value, list):
            raise RaceError(f"Wrong type for {key}: expected a list such as [a,b], got {value!r}.")
        (item_tp,) = typing.get_args(tp) or (Any,)
        return [coerce(f"{key}[{i}]", v, item_tp) if item_tp is not Any else v for i, v in enumerate(value)]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise RaceError(f"Wrong type for {key}: expected a mapping such as {{a: 1}}, got {value!r}.")
        return value
    if dataclasses.is_dataclass(tp):
        raise RaceError(f"{key} is a section, not a value: set its keys ({key}.KEY=VALUE) or choose a group option.")
    return value


def apply_value(cfg: dict, text: str, types: dict[str, Any]) -> None:
    """Apply one non-group override `key=value` (or +key / ++key) to the plain-dict config in place."""
    key, value = _parse_value(text)
    value = copy.deepcopy(value)  # the cache's lists and dicts stay pristine
    if key not in types:
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        if parent in types and typing.get_origin(_unwrap_optional(types[parent])) is dict:
            node = _node(cfg, parent, key)
            node[key.rsplit(".", 1)[1]] = value
            return
        near = difflib.get_close_matches(key, list(types), n=1, cutoff=0.6)
        hint = f" Did you mean '{near[0]}'?" if near else " Only keys listed in race_cli/config/schema.py are allowed."
        raise RaceError(f"Unknown config key '{key}'.{hint}")
    leaf = key.rsplit(".", 1)[-1]
    parent = _node(cfg, key.rsplit(".", 1)[0], key) if "." in key else cfg
    try:
        parent[leaf] = coerce(key, value, types[key])
    except RaceError as exc:
        raise RaceError(*(with_domain(key, p) for p in exc.problems)) from None


def with_domain(key: str, message: str) -> str:
    """`message` about `key`, ending with the key's domain in words (race_cli/config/domains.py)."""
    from race_cli.config.domains import domains_by_key

    dom = domains_by_key().get(key)
    if dom is None or dom.describe() in message:
        return message
    return f"{message.rstrip('.')} ({key}: {dom.describe()})."


# `key=123`: the override a large seed sweep repeats 100,000 times. Hydra's grammar reads it as the
# integer 123 (INT: [+-]? ('0' | [1-9] digits)); parsed here without the ANTLR parser (milliseconds a call),
# anything else goes through Hydra. tests/test_config.py checks both agree.
_PLAIN_INT = re.compile(r"\+?([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)=([+-]?(?:0|[1-9][0-9]{0,17}))")


@functools.lru_cache(maxsize=4096)
def _parse_value(text: str) -> tuple[str, Any]:
    """(key, plain value) of one override; cached because a grid repeats each value many times."""
    m = _PLAIN_INT.fullmatch(text)
    if m:
        return m.group(1), int(m.group(2))
    ov = parse_override(text)
    return ov.get_key_element().lstrip("+"), _plain(ov.value())


@functools.lru_cache(maxsize=1)
def _parser() -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def _node(cfg: dict, dotted: str, full: str) -> dict:
    node = cfg
    for part in dotted.split("."):
        if node.get(part) is None:
            raise RaceError(f"Cannot set {full}: {dotted} is null in this config "
                            "(e.g. reward.model under reward=rule; choose reward=prm first).")
        node = node[part]
    return node


def _plain(value: Any) -> Any:
    """Hydra parser values -> plain Python (its QuotedString etc. become str)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    return str(value)


# --- job ids ---------------------------------------------------------------------------------

_SHORT = {
    "model": "",
    "reward": "",
    "task": "",
    "grpo.group_size": "G",
    "grpo.updates_per_batch": "mu",
    "grpo.update_group_size": "m",
    "grpo.prompts_per_iter": "B",
    "grpo.lr": "lr",
    "grpo.beta": "beta",
    "lora.r": "r",
    "budget.flops": "C",
    "seed": "s",
}
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
# What job_id() and unique_ids() can produce: safe characters, no leading or trailing '.', '_' or '-'
# (so never '.', '..' or a hidden name), at most 100 + 11 + 9 characters. The same rule is checked
# when ids are read back from plan.json or a folder (check_job_id), so no id can leave jobs/.
_VALID_ID = re.compile(r"^[A-Za-z0-9+](?:[A-Za-z0-9._+-]{0,118}[A-Za-z0-9+])?$")


def is_valid_job_id(name: object) -> bool:
    """True for a string job_id() / unique_ids() could have made (a safe single folder name)."""
    return isinstance(name, str) and bool(_VALID_ID.fullmatch(name))


def check_job_id(name: object, where: str) -> str:
    """`name` when it is a valid job id, else RaceError naming `where` it came from."""
    if not is_valid_job_id(name):
        raise RaceError(f"{where}: job id {str(name)[:80]!r} is not one race writes (expected letters, digits, "
                        "'.', '_', '+', '-', at most 120 characters, no path separators or leading dots). "
                        "The file was edited or comes from elsewhere: replan the sweep into a new folder "
                        "(race plan --out DIR) instead of running this one.")
    return name


def job_id(axis_overrides: Sequence[str]) -> str:
    """Readable, filesystem-safe id from the swept overrides only, e.g. `tiny-s_G4_mu1_rule_s0`."""
    parts = []
    for text in axis_overrides:
        key, _, value = text.lstrip("+").partition("=")
        short = _SHORT.get(key, key.rsplit(".", 1)[-1] + "-")
        parts.append(f"{short}{value}")
    name = _UNSAFE.sub("-", "_".join(parts)).strip("-_.") or "job"
    if len(name) > 120:  # long ids stay unique and short enough for every filesystem
        name = name[:100].rstrip("-_.") + "_" + hashlib.sha1("\0".join(axis_overrides).encode()).hexdigest()[:10]
    return name


def unique_ids(ids: list[str], overrides: list[list[str]]) -> list[str]:
    """Make ids unique: a clash (values that sanitise alike) gets a short hash of its overrides."""
    seen: dict[str, int] = {}
    for i in ids:
        seen[i] = seen.get(i, 0) + 1
    out = []
    for i, ovs in zip(ids, overrides):
        if seen[i] > 1:
            i = f"{i}_{hashlib.sha1(chr(0).join(ovs).encode()).hexdigest()[:8]}"
        out.append(i)
    return out
