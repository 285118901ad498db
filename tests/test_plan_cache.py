"""What `race plan` keeps between runs (its composed configs and the race price's simulated races) is what it
would compute: a kept copy is used only for the same inputs, and any change to a config file, an override,
the seed sd or the schedule computes afresh (race_cli/config/compose.compose_plain,
race_cli/plan/race_price._simulated_seeds)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RACE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("RACE_COMPOSE_CACHE", raising=False)
    monkeypatch.delenv("RACE_PRICE_CACHE", raising=False)
    return tmp_path / "cache"


def _fresh(overrides):
    from omegaconf import OmegaConf

    from race_cli.config.compose import compose

    return OmegaConf.to_container(compose(list(overrides), derive=False), resolve=True)


def test_a_kept_composition_is_the_composition(cache):
    from race_cli.config.compose import compose_plain

    first = compose_plain(["model=tiny-m", "reward=prm"])
    kept = list((cache / "compose").glob("*.json"))
    assert len(kept) == 1 and json.loads(kept[0].read_text())["config"] == first
    assert compose_plain(["model=tiny-m", "reward=prm"]) == first == _fresh(["model=tiny-m", "reward=prm"])
    # types survive the JSON copy: an int stays an int, a float (0.0) a float
    again = compose_plain(["model=tiny-m", "reward=prm"])
    assert type(again["grpo"]["group_size"]) is int and type(again["grpo"]["weight_decay"]) is float
    compose_plain(["model=tiny-s", "reward=prm"])  # other overrides: another entry
    assert len(list((cache / "compose").glob("*.json"))) == 2


def test_a_changed_config_file_composes_afresh(cache, tmp_path):
    from race_cli.config.compose import _inputs_digest, compose_plain, set_config_dirs

    own = tmp_path / "own"
    (own / "model").mkdir(parents=True)
    src = Path(__file__).resolve().parents[1] / "conf" / "model" / "tiny-s.yaml"
    text = src.read_text()
    (own / "model" / "mine.yaml").write_text(text)
    try:
        set_config_dirs([own])
        before = compose_plain(["model=mine"])
        (own / "model" / "mine.yaml").write_text(text.replace("name: tiny-s", "name: mine-2"))
        _inputs_digest.cache_clear()  # a new process reads the files again
        after = compose_plain(["model=mine"])
    finally:
        set_config_dirs([])
        _inputs_digest.cache_clear()
    assert before["model"]["name"] == "tiny-s" and after["model"]["name"] == "mine-2"
    assert len(list((cache / "compose").glob("*.json"))) == 2


def test_off_keeps_nothing_and_a_damaged_entry_is_composed_again(cache, monkeypatch):
    from race_cli.config import compose as C

    monkeypatch.setenv("RACE_COMPOSE_CACHE", "off")
    C.compose_plain(["model=tiny-s"])
    assert not (cache / "compose").exists()
    monkeypatch.delenv("RACE_COMPOSE_CACHE")
    path = C._compose_cache_path(["model=tiny-s"])
    path.parent.mkdir(parents=True)
    for text in ("not json", "[]", json.dumps({"overrides": ["model=other"], "config": {"x": 1}})):
        path.write_text(text)
        assert C.compose_plain(["model=tiny-s"]) == _fresh(["model=tiny-s"])


def test_a_kept_race_price_is_the_simulated_one(cache, monkeypatch):
    from race_cli.plan import race_price as RP
    from race_cli.plan.build import build_plan

    monkeypatch.setenv("RACE_CPU_PROBE", "off")
    plan = build_plan(["model=tiny-s"], race=True)
    regs = RP._regimes(plan)
    direct = RP.simulate_seeds(regs, plan.race, 0.02, 0.05, np.random.default_rng(0), 6)
    first = RP._simulated_seeds(regs, plan.race, 0.02, 0.05, 0, 6)
    assert len(list((cache / "race-price").glob("*.json"))) == 1
    kept = RP._simulated_seeds(regs, plan.race, 0.02, 0.05, 0, 6)
    assert np.array_equal(direct, first) and np.array_equal(first, kept) and kept.dtype.kind == "i"
    RP._simulated_seeds(regs, plan.race, 0.03, 0.05, 0, 6)  # another seed sd: simulated, kept apart
    assert len(list((cache / "race-price").glob("*.json"))) == 2
    monkeypatch.setenv("RACE_PRICE_CACHE", "off")
    assert np.array_equal(RP._simulated_seeds(regs, plan.race, 0.02, 0.05, 1, 6),
                          RP.simulate_seeds(regs, plan.race, 0.02, 0.05, np.random.default_rng(1), 6))
    assert len(list((cache / "race-price").glob("*.json"))) == 2
