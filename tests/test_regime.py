"""race_cli/regime.py: one rule for "a regime is a job's overrides less its seed's", and one condition key."""

from __future__ import annotations

from race_cli.plan_file import regime_of
from race_cli.regime import condition_key, is_seed, override_key, regime_key


def test_the_seed_is_set_with_or_without_hydras_add_prefixes():
    assert [is_seed(t) for t in ("seed=3", "+seed=3", "++seed=3")] == [True, True, True]
    # not the seed: another key that starts alike, a nested seed, and a delete (config/sweep refuses deleting keys,
    # so a job never carries one; kept in the regime, composing it fails with Hydra's own message)
    assert [is_seed(t) for t in ("seed_sd=1", "task.eval_seed=3", "~seed=3", "~seed")] == [False] * 4
    assert [override_key(t) for t in ("++model=tiny-s", "+reward=prm", "grpo.group_size=4")] == [
        "model", "reward", "grpo.group_size"]


def test_a_regime_is_the_overrides_less_the_seeds_in_their_order():
    assert regime_key(["model=tiny-s", "+seed=3", "grpo.group_size=4"]) == ("model=tiny-s", "grpo.group_size=4")
    assert regime_key(["++seed=0", "reward=rule"]) == regime_key(["reward=rule", "seed=1"]) == ("reward=rule",)
    # a plan row's string (values may hold spaces: eval.targets=['a', 'b']) is the same key, joined
    row = {"overrides": "eval.targets=['arithmetic', 'arithmetic-hard'] model=tiny-s seed=1"}
    assert regime_of(row) == "eval.targets=['arithmetic', 'arithmetic-hard'] model=tiny-s"


def test_plan_counts_regimes_and_conditions_by_the_one_rule():
    """The default grid (model x G x mu x reward, 16 regimes in 4 conditions of model x reward) planned with
    seed=0,1 or ++seed=0,1: the same 16 regimes of 2 seeds, 4 per condition, in every count race plan makes."""
    from race_cli.plan.build import build_plan, one_seed_regimes
    from race_cli.plan.power import plan_power
    from race_cli.plan.race_plan import regimes_per_condition

    for seeds in ("seed=0,1", "++seed=0,1"):
        jobs = build_plan([seeds], race=False).jobs
        assert len(jobs) == 32 and len({regime_key(j.overrides) for j in jobs}) == 16, seeds
        assert one_seed_regimes(jobs) == 0 and regimes_per_condition(jobs) == 4, seeds
        assert {(p.seeds, p.regimes) for p in plan_power(jobs, 0.02)} == {(2, 4)}, seeds
        # grid=tiny's 8e11 FLOPs on its arithmetic task, with the model= and reward= its axes type
        assert {condition_key(j.config) for j in jobs} == {(m, 8e11, r, "arithmetic") for m in ("tiny-s", "tiny-m")
                                                          for r in ("rule", "prm")}, seeds
        assert all(regime_of({"overrides": " ".join(j.overrides)}) == " ".join(regime_key(j.overrides)) for j in jobs)
