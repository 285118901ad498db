"""Compose one job's config from conf/ and overrides, turning Hydra's errors into messages for people.

Used by every command: `race plan` composes each job of a sweep, `race train` composes (or reloads)
one. Imports Hydra lazily so `race --help` stays fast.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import os
import re
from pathlib import Path
from typing import Any, Sequence

from race_cli.config.schema import register_schema, validate
from race_cli.errors import RaceError

CONFIG_NAME = "config"


_user_dirs: list[Path] = []  # `--config-dir DIR` folders, searched before the shipped conf/ (set_config_dirs)


def conf_dir() -> Path:
    """The shipped conf/ folder: $RACE_CONF_DIR, else the copy installed inside the package (pip install .:
    setup.py ships conf/ as race_cli/conf), else the checkout's (an editable install)."""
    env = os.environ.get("RACE_CONF_DIR")
    here = Path(__file__).resolve()
    candidates = [Path(env)] if env else [here.parents[1] / "conf", here.parents[2] / "conf"]
    for path in candidates:
        if (path / f"{CONFIG_NAME}.yaml").is_file():
            return path
    raise RaceError(f"No {CONFIG_NAME}.yaml in {' or '.join(map(str, candidates))}: expected race's conf/ folder "
                    "there. Reinstall race (pip install .), or set RACE_CONF_DIR to a conf/ folder.")


def set_config_dirs(dirs: Sequence[str | os.PathLike]) -> None:
    """Search these folders (in order) before the shipped conf/: a file there adds or replaces an option
    of its group (model/, task/, reward/, grid/) or the root config.yaml (race ... --config-dir DIR)."""
    found, problems = [], []
    for d in dirs:
        path = Path(d).expanduser()
        if not path.is_dir():
            problems.append(f"--config-dir {d}: no such folder. Expected a folder holding model/, task/, reward/ "
                            "or grid/ subfolders of YAML configs (docs/own-configs.md).")
            continue
        found.append(path.resolve())
    if problems:
        raise RaceError(*problems)
    _user_dirs[:] = found


def search_dirs() -> list[Path]:
    """Where configs are looked up, first match first: the --config-dir folders, then the shipped conf/."""
    return [*_user_dirs, conf_dir()]


def config_file(group: str | None, name: str) -> Path | None:
    """The file of option `name` of `group` (None: the root config), first in the search order."""
    for base in search_dirs():
        path = (base / group if group else base) / f"{name}.yaml"
        if path.is_file():
            return path
    return None


def group_options(group: str) -> list[str]:
    """The options of a config group (model, reward, task, grid, ...): <dir>/<group>/*.yaml of every search dir."""
    names = set()
    for base in search_dirs():
        if (base / group).is_dir():
            names.update(p.stem for p in (base / group).glob("*.yaml"))
    return sorted(names)


def config_groups() -> list[str]:
    return sorted({p.name for base in search_dirs() for p in base.iterdir() if p.is_dir()})


def _all_keys(node: Any, prefix: str = "") -> list[str]:
    from omegaconf import DictConfig

    keys = []
    if isinstance(node, DictConfig):
        for k in node.keys():
            full = f"{prefix}{k}"
            keys.append(full)
            try:
                keys.extend(_all_keys(node._get_node(k), full + "."))
            except Exception:  # noqa: BLE001 - a None child has no keys
                pass
    return keys


def _explain(exc: Exception, override: str | None, known_keys: list[str]) -> str:
    """One readable message for a Hydra/OmegaConf composition error."""
    text = str(exc)
    if "Ambiguous value" in text:
        return (f"'{override}' is a sweep, but this command runs ONE job. Preview or run sweeps with "
                "race plan / race run; here give a single value.")
    m = re.search(r"Could not find '([^/']+)/([^']+)'", text)
    if m:
        group, option = m.groups()
        opts = group_options(group)
        near = difflib.get_close_matches(option, opts, n=1)
        hint = f" Did you mean {group}={near[0]}?" if near else ""
        return f"Unknown {group} option '{option}'. Available: {', '.join(opts)}.{hint}"
    m = re.search(r"Could not (?:override|append to|delete from) '([^']+)'", text) or re.search(
        r"Key '([^']+)' (?:not in|is not in struct)", text)
    if m:
        key = m.group(1)
        near = difflib.get_close_matches(key, known_keys, n=1, cutoff=0.6)
        hint = f" Did you mean '{near[0]}'?" if near else " Use +KEY=VALUE only for keys the schema allows."
        return f"Unknown config key '{key}'.{hint} (race flops / race plan --format json show every key.)"
    cause = exc.__cause__ or exc
    ctext = str(cause).split("\n")[0]
    if "Value" in ctext and ("could not be converted" in ctext or "is not a valid" in ctext) or "Invalid value" in ctext:
        key = override.split("=", 1)[0].lstrip("+~") if override else "a value"
        m = re.search(r"full_key: (\S+)", str(cause))
        key = m.group(1) if m else key
        from race_cli.config.domains import domains_by_key

        dom = domains_by_key().get(key)
        expected = dom.describe() if dom is not None else "a value of the schema's type (see race_cli/config/schema.py)"
        return f"Wrong type for {key}: {ctext}. Expected {expected}."
    if override:
        return f"Cannot apply override '{override}': {ctext}"
    return ctext


def check_group_choices(overrides: Sequence[str]) -> None:
    """Group choices (model=, reward=, task=, grid=) name options of conf/<group>/ only; each key once.

    Hydra would follow a relative path out of the config folder (model=../../../tmp/x) and
    `hydra.*` overrides could change its search path: both are refused, so a config can only
    come from the user's conf/ (docs/security.md).
    """
    groups = set(config_groups())
    problems = []
    first: dict[str, str] = {}
    for text in overrides:
        key, sep, value = str(text).partition("=")
        key = key.lstrip("+~").split("@", 1)[0].strip()
        if key in first:
            problems.append(f"'{text}': {key} is already set by '{first[key]}'. Give each key once.")
        first.setdefault(key, str(text))
        if key == "hydra" or key.startswith("hydra.") or key.startswith("hydra/"):
            problems.append(f"'{text}': Hydra's own settings cannot be overridden here; race reads configs "
                            "from its conf/ folder only.")
        elif sep and key in groups and (any(c in value for c in "/\\") or value.strip().startswith(".")):
            problems.append(f"'{text}': {key}= takes the name of an option in conf/{key}/ "
                            f"({', '.join(group_options(key))}), not a path. To use your own file, put it "
                            f"in DIR/{key}/ and give its name with --config-dir DIR (docs/own-configs.md).")
    if problems:
        raise RaceError(*problems)


def compose(overrides: Sequence[str] = (), derive: bool = True) -> Any:
    """Compose and validate one job config; raises RaceError listing every problem.

    `derive`: fill the settings the job takes from its task, model and targets (config/derive.py);
    False leaves them null for a caller that applies more overrides first (plan/build.py)."""
    from hydra import compose as hydra_compose

    register_schema()
    overrides = list(overrides)
    from race_cli.config.sweep import parse_override

    problems = []
    for text in overrides:  # grammar, range and integer-size errors: one line naming the override
        try:
            parse_override(text)
        except RaceError as exc:
            problems.extend(exc.problems)
    if problems:
        raise RaceError(*problems)
    check_group_choices(overrides)
    with _hydra():
        try:
            cfg = hydra_compose(CONFIG_NAME, overrides=overrides)
        except Exception as exc:  # noqa: BLE001 - Hydra raises many types; we explain each one
            base = hydra_compose(CONFIG_NAME, overrides=[])
            keys = _all_keys(base)
            bad = _first_bad_override(overrides, exc)
            raise RaceError(_explain(exc, bad, keys)) from None
    cfg = _under_schema(cfg, "the composed config")
    problems = []
    if derive:  # the typed config takes the derived values in place (each checked by its type)
        from race_cli.config.derive import derive as derive_keys, read_config_json

        problems = derive_keys(cfg, read_config_json)
    problems += [p for p in validate(cfg) if p not in problems]
    if problems:
        raise RaceError(*problems)
    return cfg


# --- composed configs kept between runs -------------------------------------------------------------
# A plan composes once per distinct group choice (model=, reward=, task=, ...), and a Hydra composition costs
# ~0.1 s on the 2-core dev machine, with ~0.3 s of imports (docs/measurements/plan-speed.md). The composed,
# schema-checked, underived config is plain data, a pure function of the group overrides, the YAML files of
# every search dir and the code that reads them: kept under the race cache (RACE_CACHE, else ~/.cache/race)
# in compose/<key>.json, where the key hashes all of those, so a changed file, folder, override, schema or
# Hydra version composes afresh. RACE_COMPOSE_CACHE=off composes every time; an unreadable or unwritable
# cache is the same as none. Failed compositions are never kept: their messages come from Hydra each time.
COMPOSE_CACHE_ENV = "RACE_COMPOSE_CACHE"
COMPOSE_CACHE_VERSION = 1
_CODE = ("schema.py", "domains.py", "compose.py")  # race_cli/config files whose change changes a composition


@functools.lru_cache(maxsize=8)
def _inputs_digest(dirs: tuple[Path, ...]) -> str:
    """A hash of everything a composition reads but its overrides: every YAML file of the search dirs
    (relative path and content), race's schema code, and the Hydra and OmegaConf versions."""
    import hashlib
    from importlib import metadata

    h = hashlib.sha256(f"v{COMPOSE_CACHE_VERSION}".encode())
    for name in ("hydra-core", "omegaconf"):
        try:
            h.update(f"{name}={metadata.version(name)}".encode())
        except metadata.PackageNotFoundError:
            h.update(f"{name}=?".encode())
    here = Path(__file__).resolve().parent
    for name in _CODE:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    for i, d in enumerate(dirs):
        for path in sorted(d.rglob("*.yaml")):
            h.update(f"{i}:{path.relative_to(d).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    return h.hexdigest()


def _compose_cache_path(overrides: Sequence[str]) -> Path | None:
    import hashlib
    import json

    if os.environ.get(COMPOSE_CACHE_ENV, "").strip().lower() == "off":
        return None
    from race_cli.io import cache_root

    try:
        digest = _inputs_digest(tuple(search_dirs()))
    except OSError:
        return None
    key = hashlib.sha256((digest + json.dumps(list(overrides))).encode()).hexdigest()[:32]
    return cache_root() / "compose" / f"{key}.json"


def compose_plain(overrides: Sequence[str] = ()) -> dict:
    """compose(overrides, derive=False) as plain data (OmegaConf.to_container, resolved), read from the race
    cache where these exact inputs were composed before (see above), else composed and kept there."""
    import json

    path = _compose_cache_path(overrides)
    if path is not None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("overrides") == list(overrides) and isinstance(
                    data.get("config"), dict):
                return data["config"]
        except (OSError, ValueError):
            pass
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose(list(overrides), derive=False), resolve=True)
    if path is not None:
        from race_cli.io import atomic_write_text

        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps({"overrides": list(overrides), "config": cfg}), durable=False)
        except (OSError, TypeError, ValueError):
            pass  # a read-only cache, or a value JSON cannot hold: composed each time
    return cfg


def derive_settings(data: Any) -> None:
    """Fill the settings a job takes from its task, model and targets (race_cli/config/derive.py) into a
    composed config (a plain dict or the typed DictConfig), in place; RaceError lists what cannot be filled."""
    from race_cli.config.derive import derive, read_config_json

    problems = derive(data, read_config_json)
    if problems:
        raise RaceError(*problems)


@contextlib.contextmanager
def _hydra():
    """Hydra initialised on the search dirs: the --config-dir folders first, then the shipped conf/
    (Hydra's initialize_config_dir takes one folder, so the others are prepended to its search path)."""
    from hydra._internal.hydra import Hydra
    from hydra._internal.utils import create_config_search_path
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    path = create_config_search_path(str(conf_dir()))
    for d in reversed(_user_dirs):
        path.prepend("race --config-dir", f"file://{d}")
    Hydra.create_main_hydra2(task_name="race", config_search_path=path)
    try:
        yield
    finally:
        GlobalHydra.instance().clear()


@functools.lru_cache(maxsize=1)
def _schema() -> Any:
    """The typed schema as an OmegaConf node, built once: merge copies it, nothing here writes to it."""
    from omegaconf import OmegaConf

    from race_cli.config.schema import RaceConfig

    return OmegaConf.structured(RaceConfig)


def _under_schema(cfg: Any, where: str) -> Any:
    """Merge into the typed schema: catches keys added with +KEY that the schema does not know."""
    from omegaconf import OmegaConf

    schema = _schema()
    unknown = _unknown_keys(schema, cfg)
    if unknown:
        known = _all_keys(schema)
        msgs = []
        for key in unknown:
            near = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
            msgs.append(f"Unknown config key '{key}' in {where}." + (f" Did you mean '{near[0]}'?" if near else
                        " Only keys listed in race_cli/config/schema.py are allowed."))
        raise RaceError(*msgs)
    try:
        return OmegaConf.merge(schema, cfg)
    except Exception as exc:  # noqa: BLE001
        msg = str(exc).splitlines()[0]
        m = re.search(r"full_key: (\S+)", str(exc))
        key = m.group(1) if m else "a key"
        raise RaceError(f"{where} does not match the config schema at {key}: {msg}. "
                        "Only keys listed in race_cli/config/schema.py are allowed.") from None


def _unknown_keys(schema: Any, cfg: Any, prefix: str = "") -> list[str]:
    """Keys of cfg the schema lacks; free-form dict fields (grid.axes, grid.fixed) take any key."""
    from omegaconf import DictConfig

    if not isinstance(cfg, DictConfig) or not isinstance(schema, DictConfig):
        return []
    if schema._metadata.object_type in (None, dict):  # a plain dict field
        return []
    out = []
    for k in cfg.keys():
        if k not in schema:
            out.append(f"{prefix}{k}")
            continue
        sub = schema._get_node(k)
        if isinstance(sub, DictConfig) and sub._is_none():
            continue  # Optional dataclass field left None (reward.model): its own merge checks it
        out.extend(_unknown_keys(sub, cfg._get_node(k), f"{prefix}{k}."))
    return out


def _first_bad_override(overrides: list[str], exc: Exception) -> str | None:
    text = str(exc)
    for o in overrides:
        if o in text:
            return o
    key_m = re.search(r"'([^']+)'", text)
    if key_m:
        for o in overrides:
            if o.split("=", 1)[0].lstrip("+~") == key_m.group(1):
                return o
    return None


MAX_JOB_CONFIG_BYTES = 4 * 2**20  # a composed config is a few KB
MAX_JOB_CONFIG_NODES = 100_000  # values after YAML aliases are expanded (an alias bomb stops here)


def _plain_data(data: Any, path: Path) -> None:
    """Refuse what would make a config file more than data: OmegaConf interpolations and resolvers
    (`${oc.env:SECRET}` reads the environment; any `${...}` is evaluated when the config is used),
    and trees too large or deep to be a composed config. RaceError names the key, never a value
    such an expression would produce."""
    seen, stack = 0, [(data, "")]
    while stack:
        node, at = stack.pop()
        seen += 1
        if seen > MAX_JOB_CONFIG_NODES or at.count(".") > 32:
            raise RaceError(f"{path} is too large or too deeply nested to be a job config race wrote. "
                            "Replan the job (race plan --out DIR) instead of running this file.")
        if isinstance(node, dict):
            for k, v in node.items():
                key = f"{at}.{k}" if at else str(k)
                if "${" in str(k):
                    raise RaceError(f"{path}: key {str(k)[:60]!r} holds an interpolation; files in a sweep folder are "
                                    "data, and race does not evaluate them. Replan the job (race plan --out DIR).")
                stack.append((v, key))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, str) and "${" in node:
            raise RaceError(f"{path}: {at} holds an interpolation ({node[:60]!r}); files in a sweep folder are data, "
                            "and race does not evaluate interpolations or resolvers in them (docs/security.md). Put "
                            "the plain value there, or replan the job (race plan --out DIR).")


def interpolation_at(data: Any) -> tuple[str, str] | None:
    """(dotted key, text) of the first key or string value of a plain config tree that holds an
    OmegaConf interpolation (`${...}`), or None. Small trees only: `_plain_data` bounds a file's first."""
    stack = [(data, "")]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                key = f"{at}.{k}" if at else str(k)
                if "${" in str(k):
                    return key, str(k)
                stack.append((v, key))
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, str) and "${" in node:
            return at, node
    return None


def refuse_planted_interpolation(cfg: dict, overrides: Sequence[str]) -> None:
    """RaceError when a composed job config about to be written into a sweep folder still holds an
    interpolation (a command-line value Hydra leaves as text, e.g. task.path='${oc.env:SECRET}'):
    `race run` and `race train --job-dir` refuse such a config when they read it back (`_plain_data`),
    so `race plan` refuses it before any folder is written. Names the override, never a value the
    expression would give."""
    found = interpolation_at(cfg)
    if found is None:
        return
    at, text = found
    given = next((o for o in overrides if o.lstrip("+~").partition("=")[0] == at), None)
    raise RaceError(f"{repr(given) if given else at}: {at} holds an interpolation ({text[:60]!r}). A sweep's job "
                    "configs are plain data: race never evaluates interpolations or resolvers read back from a "
                    "sweep folder (docs/security.md), so this job could not run. Give the plain value instead "
                    "(your shell can expand a variable: task.path=\"$VAR\").")


def load_job_config(path: str | os.PathLike) -> Any:
    """Reload a job's saved .hydra/config.yaml under the schema (race train --job-dir).

    The file comes from a sweep folder, so it is read as plain YAML data (a safe loader, size
    bounded) and any OmegaConf interpolation or resolver in it is refused before OmegaConf sees
    it (`_plain_data`): only the user's own overrides and conf/ get Hydra's features."""
    from omegaconf import OmegaConf

    from race_cli.io import LinkRefused, load_yaml, read_bounded

    path = Path(path)
    if not path.is_file():
        raise RaceError(f"No job config at {path}: expected a job folder written by `race plan --out`.")
    try:
        data = load_yaml(read_bounded(path, MAX_JOB_CONFIG_BYTES).decode("utf-8"))
    except LinkRefused as exc:
        raise RaceError(f"{path}: {exc.strerror}; race reads job configs from plain files only. Replan the job "
                        "(race plan --out DIR).") from None
    except Exception as exc:  # noqa: BLE001 - YAML, size, encoding and recursion errors: not a config race wrote
        why = str(exc).strip().splitlines()[0][:160] if str(exc).strip() else type(exc).__name__
        raise RaceError(f"Cannot read {path} ({type(exc).__name__}: {why}). Expected the config race wrote; "
                        "replan the job (race plan --out DIR).") from None
    if not isinstance(data, dict):
        raise RaceError(f"{path} is not a mapping of config keys: expected the config race wrote. Replan the job "
                        "(race plan --out DIR).")
    _plain_data(data, path)
    try:
        raw = OmegaConf.create(data)
    except Exception as exc:  # noqa: BLE001
        raise RaceError(f"Cannot read {path}: {str(exc).splitlines()[0][:160]}") from None
    cfg = _under_schema(raw, str(path))
    problems = validate(cfg)
    if problems:
        raise RaceError(*(f"{path}: {p}" for p in problems))
    return cfg
