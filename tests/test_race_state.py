"""race_states / needed_seeds on a hand-built sweep folder (tests/report_fixtures.py), read as `race report`
and `race run` read it: the file contract of a raced sweep (look, seeds, alpha_spent, state, active,
next_seeds, margin) and that jobs added for later looks never change an earlier look's decision."""

from __future__ import annotations

import json

import numpy as np
import pytest

from report_fixtures import Regime, build_sweep, write_job
from race_cli.report.race import needed_seeds, race_states
from race_cli.report.table import read_sweeps
from race_cli.stats.race import Schedule

REGS = [Regime(4, 1, 0.1), Regime(4, 2, 0.3), Regime(4, 4, 0.6)]
CONDS = [{"model": m, "budget_flops": 1e12, "reward": "rule", "task": "arithmetic"} for m in ("a", "b")]
SCHEDULE = Schedule((2, 3, 4), alpha=0.05, margin=0.08)


def _acc(p: float, cond: dict) -> float:
    if cond["model"] == "a":  # 0.35 / 0.45 / 0.60: gaps of 0.15 and more, 300 items: a winner at 2 seeds
        return 0.3 + 0.5 * p
    return 0.5 + 0.06 * (p == 0.1)  # μ=1 ahead by 0.06: an open call at 2 seeds


@pytest.fixture()
def sweep(tmp_path):
    return build_sweep(tmp_path, acc=_acc, conditions=CONDS, regimes=REGS, seeds=(0, 1), seed_sd=0.02, samples=4,
                       rng_seed=0, item_sd=0.1, n_items=300)


def _by_model(states):
    return {s.condition_values["model"]: s for s in states}


def _add(root, model: str, regs: list[Regime], seed: int, rng) -> None:
    """One more finished job per regime, scored on the condition's items against its start."""
    data = read_sweeps([root])
    key = next(k for k in data.items_initial if k[1].startswith(f"{model}_"))
    start = data.items_initial[key][1]
    cond = next(c for c in CONDS if c["model"] == model)
    for reg in regs:
        p = _acc(reg.p, cond) + rng.uniform(-0.1, 0.1, len(start)) + rng.uniform(-0.03, 0.03)
        scores = {"arithmetic": rng.binomial(4, p) / 4}
        write_job(root / "jobs", cond, reg, seed, scores, rng, start={"arithmetic": start})


def test_first_look_states_and_contract(sweep):
    states = race_states(read_sweeps([sweep]), SCHEDULE)
    assert [s.target for s in states] == ["arithmetic", "arithmetic"]
    st = _by_model(states)
    a, b = st["a"], st["b"]
    # a: μ=4 truly 0.15 above μ=2 and 0.25 above μ=1 (300 items × 4 samples, seed sd 0.02): the winner at look 0
    assert a.state == "winner" and a.best == "μ=4" and a.look == 0
    assert a.seeds == {"μ=1": 2, "μ=2": 2, "μ=4": 2}
    assert a.alpha_spent == pytest.approx(0.05 / 3)  # Bonferroni: α/3 at each of 3 looks
    assert a.active == () and a.next_seeds is None and a.margin == 0.08
    assert set(a.dropped) == {"μ=1", "μ=2"} and all(v == (0, "μ=4") for v in a.dropped.values())
    assert a.condition == "model=a budget_flops=1e+12 reward=rule task=arithmetic target=arithmetic"
    # b: a 0.06 gap at 2 seeds is open: every regime waits for look 1's third seed
    assert b.state == "continue" and b.look == 1 and b.next_seeds == 3
    assert b.active == ("μ=1", "μ=2", "μ=4") and b.alpha_spent == pytest.approx(0.05 / 3)
    assert b.seeds == {"μ=1": 2, "μ=2": 2, "μ=4": 2}  # what each has done towards look 1
    # the regime columns as the ranking names regimes: those that vary (G is 4 everywhere)
    assert b.active_values == ({"updates_per_batch": 1}, {"updates_per_batch": 2}, {"updates_per_batch": 4})
    j = json.loads(json.dumps(b.to_json()))  # the file contract survives JSON
    assert {"look", "seeds", "alpha_spent", "state", "active", "next_seeds", "margin"} <= set(j)
    assert j["active"] == ["μ=1", "μ=2", "μ=4"] and j["next_seeds"] == 3
    need = needed_seeds(states)
    cond_b = sorted(CONDS[1].items())
    assert need == {tuple(cond_b + [("updates_per_batch", mu)]): 3 for mu in (1, 2, 4)}


def test_later_jobs_never_change_an_earlier_look(sweep):
    before = _by_model(race_states(read_sweeps([sweep]), SCHEDULE))
    rng = np.random.default_rng(5)
    _add(sweep, "b", REGS[:2], 2, rng)  # part of look 1: b still waits, a unchanged
    mid = _by_model(race_states(read_sweeps([sweep]), SCHEDULE))
    assert mid["a"].to_json() == before["a"].to_json()
    assert mid["b"].state == "continue" and mid["b"].look == 1 and mid["b"].seeds == {"μ=1": 3, "μ=2": 3, "μ=4": 2}
    _add(sweep, "b", REGS[2:], 2, rng)  # look 1 complete
    _add(sweep, "a", REGS, 2, rng)  # and seeds a stopped condition never asked for (another target's, say)
    _add(sweep, "a", REGS, 3, rng)
    after = _by_model(race_states(read_sweeps([sweep]), SCHEDULE))
    assert after["a"].to_json() == before["a"].to_json()  # decided at look 0 on seeds 0-1: the same record
    b = after["b"]
    # look 1 compared exactly the regimes look 0 let through, at 3 seeds each (the extra seeds of a unused),
    # and, on this fixture, named the truly better μ=1 (ahead by 0.06)
    assert b.look == 1 and b.seeds == {"μ=1": 3, "μ=2": 3, "μ=4": 3}
    assert b.alpha_spent == pytest.approx(2 * 0.05 / 3)
    assert b.state == "winner" and b.best == "μ=1" and b.next_seeds is None and needed_seeds(list(after.values())) == {}


def test_waiting_for_the_first_look(tmp_path):
    root = build_sweep(tmp_path, acc=_acc, conditions=CONDS[:1], regimes=REGS, seeds=(0,), seed_sd=0.02, samples=4,
                       rng_seed=1, item_sd=0.1, n_items=50)
    (st,) = race_states(read_sweeps([root]), SCHEDULE)
    assert st.state == "continue" and st.look == 0 and st.next_seeds == 2 and st.alpha_spent == 0.0
    assert st.seeds == {"μ=1": 1, "μ=2": 1, "μ=4": 1}


def test_the_cap_leaves_nothing_continuing(tmp_path):
    # equal regimes, 2 seeds, a one-look schedule: the cap is look 0, so every condition stops there
    root = build_sweep(tmp_path, acc=lambda p, c: 0.5, conditions=CONDS, regimes=REGS, seeds=(0, 1), seed_sd=0.03,
                       samples=4, rng_seed=2, item_sd=0.1, n_items=100)
    states = race_states(read_sweeps([root]), Schedule((2,), alpha=0.05, margin=0.08))
    assert {s.state for s in states} <= {"winner", "equivalent", "undecided", "no_gain"}
    assert all(s.next_seeds is None and s.active == () and s.alpha_spent == pytest.approx(0.05) for s in states)
    assert needed_seeds(states) == {}


def test_two_targets_need_the_most_seeds_either_asks(tmp_path):
    # target "clear" separates at 2 seeds, "close" (a 0.06 gap) stays open: the regimes need look 1's seeds
    targets = {"clear": lambda p, c: 0.3 + 0.5 * p, "close": lambda p, c: 0.5 + 0.06 * (p == 0.1)}
    root = build_sweep(tmp_path, conditions=CONDS[:1], regimes=REGS, seeds=(0, 1), seed_sd=0.02, samples=4,
                       rng_seed=0, item_sd=0.1, n_items=300, targets=targets)
    states = race_states(read_sweeps([root]), SCHEDULE)
    by_target = {s.target: s for s in states}
    assert by_target["clear"].state == "winner" and by_target["clear"].best == "μ=4"
    assert by_target["close"].state == "continue" and by_target["close"].next_seeds == 3
    assert by_target["close"].condition.endswith("target=close")
    cond = sorted(CONDS[0].items())
    assert needed_seeds(states) == {tuple(cond + [("updates_per_batch", mu)]): 3 for mu in (1, 2, 4)}
    assert race_states(read_sweeps([root]), SCHEDULE, targets=["clear"]) == [by_target["clear"]]


def test_a_running_job_sits_in_its_condition(sweep):
    """Mid-look: a look-1 job still running has no summary.json; its overrides name the model, G, μ and seed but
    leave the task (and here the budget) to the defaults. Read from its composed config, it joins its condition:
    the race waits at look 1 instead of inventing a condition of its own (task=nan) waiting at look 0."""
    rng = np.random.default_rng(5)
    _add(sweep, "b", REGS[:2], 2, rng)
    job = sweep / "jobs" / "b_mu4_rule_s2"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("- model=b\n- grpo.updates_per_batch=4\n- seed=2\n")
    (job / ".hydra" / "config.yaml").write_text(
        "model:\n  name: b\nbudget:\n  flops: 1.0e+12\nreward:\n  type: rule\ntask:\n  name: arithmetic\n"
        "grpo:\n  group_size: 4\n  updates_per_batch: 4\nseed: 2\n")
    (job / "status.json").write_text(json.dumps({"job_id": job.name, "state": "running", "attempts": 1}))
    states = race_states(read_sweeps([sweep]), SCHEDULE)
    assert len(states) == 2  # conditions a and b only
    b = _by_model(states)["b"]
    assert b.state == "continue" and b.look == 1 and b.seeds == {"μ=1": 3, "μ=2": 3, "μ=4": 2}
