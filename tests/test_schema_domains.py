"""Walk every field of the config schema: each declares a domain, and race plan enforces it.

For every field of race_cli/config/schema.py (read from the dataclasses, so a field added later
is walked too): values just outside its domain, of the wrong type, or null where null is not
allowed are refused with a message that names the field and states its domain; values inside it
(the bounds themselves where closed) pass. The bulk goes through the function `race plan` uses for
every job (typed override on the composed config, then `validate`), in-process; a handful go
through a real `race plan` subprocess for the exit code, the one line and no folder left behind.
"""

from __future__ import annotations

import copy
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.config.domains import Domain, domains, field_problems
from race_cli.config.schema import validate
from race_cli.config.sweep import apply_value, schema_types
from race_cli.errors import RaceError

ROOT = Path(__file__).resolve().parents[1]
DOMAINS = domains()
LEAVES = [k for k, dom in DOMAINS.items() if dom is None or dom.kind != "section"]


@pytest.fixture(scope="module")
def bases():
    """The composed default config (reward=rule) and one with reward=prm, for keys under reward.model."""
    from omegaconf import OmegaConf

    from race_cli.config.compose import compose

    rule = OmegaConf.to_container(compose(["grid=none"]), resolve=True)
    prm = OmegaConf.to_container(compose(["grid=none", "reward=prm"]), resolve=True)
    return {"rule": rule, "prm": prm}


def render(value) -> str:
    """A Python value as the override text a user would type."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ("nan" if math.isnan(value) else
                                                         ("inf" if value > 0 else "-inf"))
    if isinstance(value, str):
        return "''" if value == "" else value
    if isinstance(value, list):
        return "[" + ",".join(render(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{render(v)}" for k, v in value.items()) + "}"
    return str(value)


def plan_problems(base: dict, key: str, value) -> list[str]:
    """What race plan says about `key=value` on top of `base`: the typed override, then validate."""
    cfg = copy.deepcopy(base)
    try:
        apply_value(cfg, f"{key}={render(value)}", schema_types())
    except RaceError as exc:
        return exc.problems
    return validate(cfg)


def base_for(bases: dict, key: str) -> dict:
    return bases["prm"] if key.startswith("reward.model.") or key == "reward.type" else bases["rule"]


def test_every_field_declares_a_domain():
    missing = [k for k, dom in DOMAINS.items() if dom is None]
    assert not missing, (f"fields without a domain: {missing}; declare them with d(default, DOMAIN) "
                         "(race_cli/config/domains.py)")
    assert len(LEAVES) > 100  # the walk really walks the schema (120 fields on 2026-12-01)


def test_a_field_without_a_domain_is_found():
    """The walk reads field metadata, so a plain `x: int = 3` shows up as a field with no domain."""
    from dataclasses import dataclass

    from race_cli.config.domains import Int, d

    @dataclass
    class Probe:
        declared: int = d(1, Int(0, 9))
        forgotten: int = 3

    assert domains(Probe) == {"declared": Int(0, 9), "forgotten": None}


def test_every_default_lies_in_its_domain(bases):
    for name, base in bases.items():
        assert field_problems(base) == [], name
        assert validate(base) == [], name


@pytest.mark.parametrize("key", LEAVES)
def test_values_just_outside_a_fields_domain_are_refused_naming_field_and_domain(bases, key):
    dom: Domain = DOMAINS[key]
    assert dom is not None, f"{key} has no domain"
    outside = dom.outside()
    assert outside, f"{key}: its domain refuses nothing ({dom.describe()})"
    for value in outside:
        problems = plan_problems(base_for(bases, key), key, value)
        assert problems, f"{key}={render(value)[:80]} was accepted; domain: {dom.describe()}"
        text = " ".join(problems)
        assert key in text, (value, text)
        stated = [dom.describe()] + ([dom.item.describe()] if dom.item is not None else [])
        assert any(s in text for s in stated), (value, text)  # every refusal states the domain (or its item's)


@pytest.mark.parametrize("key", LEAVES)
def test_values_inside_a_fields_domain_pass_it(bases, key):
    dom: Domain = DOMAINS[key]
    for value in dom.inside():
        problems = plan_problems(base_for(bases, key), key, value)
        own = [p for p in problems if p.startswith((f"{key}=", f"{key} ", f"Wrong type for {key}"))
               and "is out of range: expected" in p and dom.describe() in p]
        assert not own and not any("Wrong type" in p for p in problems), (value, problems)
        cfg = copy.deepcopy(base_for(bases, key))
        apply_value(cfg, f"{key}={render(value)}", schema_types())
        assert field_problems(cfg) == [], (value, field_problems(cfg))


SAMPLES = {"eval.targets": [["gsm8k"]], "eval.max_items_by_target": [{"arithmetic": 5}],  # names, not any string
           "lora.r": [8, 32]}  # ranks vLLM accepts (rollout.backend=auto may sample with vLLM)
COMPANION = {"model.trust_remote_code": ["model.revision=abc123"],
             "reward.model.trust_remote_code": ["reward.model.revision=abc123"]}


def test_a_value_inside_each_domain_plans(bases):
    """For every field, some value other than the default plans (validate returns nothing): the domain is
    not so narrow that only the default fits. Cross-field rules may refuse a bound; then another inside
    value (the other bound, or the middle) must plan."""
    stuck = []
    for key in LEAVES:
        dom = DOMAINS[key]
        base = base_for(bases, key)
        default = _get(base, key)
        tried = [v for v in SAMPLES.get(key, []) + dom.inside() + _middle(dom) if v != default]
        if not tried:
            continue
        if key in COMPANION:  # a value that needs another key set with it (a cross-field rule)
            base = copy.deepcopy(base)
            for text in COMPANION[key]:
                apply_value(base, text, schema_types())
        if not any(plan_problems(base, key, v) == [] for v in tried):
            stuck.append((key, [(render(v)[:20], plan_problems(base, key, v)[:1]) for v in tried]))
    assert not stuck, stuck


def _middle(dom: Domain) -> list:
    if dom.kind == "int" and dom.lo is not None and dom.hi is not None:
        return [int(dom.lo) + 1] if dom.lo + 1 <= dom.hi else []
    if dom.kind == "float" and dom.lo is not None and dom.hi is not None:
        return [(dom.lo + dom.hi) / 2, dom.lo + (dom.hi - dom.lo) * 1e-3]
    return []


def _get(cfg: dict, key: str):
    node = cfg
    for part in key.split("."):
        node = node[part]
    return node


def test_cross_field_rules_are_listed_in_one_place():
    from race_cli.config import schema

    names = [r.__name__ for r in schema.CROSS_FIELD_RULES]
    assert len(names) == len(set(names)) and "vllm_problems" in names and "update_group_rule" in names


# --- through the real command ------------------------------------------------------------------

def _race(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "race_cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120)


CASES = [  # (override, the one line race plan prints for it)
    ("lora.dropout=1.5", "lora.dropout=1.5 is out of range: expected less than 1 (a number in [0, 1))"),
    ("threads=-1", "threads=-1 is out of range: expected at least 0 (an integer from 0 to 4096)"),
    ("task.path=" + "a" * 100_000, "task.path is 100000 characters long: expected null or a string of 1 to 4096"),
    ("eval.at=[0,2]", "eval.at[1]=2.0 is out of range: expected at most 1"),
]
PARSE_CASES = [
    ("seed=range(0,10,0)", "'seed=range(0,10,0)': range() step must not be zero"),
    ("seed=" + "9" * 10_000, "an integer has more digits than Python converts"),
]


@pytest.mark.parametrize("cases", [CASES, PARSE_CASES], ids=["domains", "parse"])
def test_race_plan_refuses_out_of_domain_values_one_line_each(tmp_path, cases):
    """One subprocess per group (race plan reports every problem at once): exit 2, one line per bad
    override, no traceback, no folder."""
    res = _race("plan", "grid=none", *[o for o, _ in cases], "--out", "S", cwd=tmp_path)
    assert res.returncode == 2, res.stderr[-2000:]
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == len(cases), res.stderr[-3000:]
    for _, fragment in cases:  # in the schema's order, one line each
        assert sum(fragment in line for line in lines) == 1, (fragment, [ln[:200] for ln in lines])
    assert "Traceback" not in res.stderr and list(tmp_path.iterdir()) == []


def test_race_train_refuses_a_100000_character_task_path_with_exit_2(tmp_path):
    res = _race("train", "task=jsonl", "task.path=" + "p" * 100_000, "--out", "J", cwd=tmp_path)
    assert res.returncode == 2 and "task.path is 100000 characters long" in res.stderr, res.stderr[-2000:]
    assert "Traceback" not in res.stderr and list(tmp_path.iterdir()) == []
