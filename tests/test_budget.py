"""race_cli.cost.budget: the backend rule, the solver, the typed Ledger and shares; plan and job agree."""

from __future__ import annotations

import math
import statistics

import pytest
from omegaconf import OmegaConf

from race_cli.cost import budget as B
from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Flops
from race_cli.plan.build import build_plan, write_sweep

TINY = Arch(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=128, vocab_size=257)


def spec(**kw) -> B.IterationSpec:
    base = dict(policy=TINY, lora=None, prompts=8, group_size=4, updates_per_batch=1, beta=0.0,
                grad_checkpointing=False, share_prefix=False, padded=True, reward=None, reward_head="token",
                prompt_tokens=40.0, completion_tokens=30.0, max_new_tokens=48)
    return B.IterationSpec(**(base | kw))


# --- the backend rule --------------------------------------------------------------------------------


@pytest.mark.parametrize("requested, gpu, vllm, expected", [
    ("auto", True, True, "vllm"), ("auto", True, False, "lean"), ("auto", False, True, "lean"),
    ("auto", False, False, "lean"), ("hf", True, True, "hf"), ("lean", True, True, "lean"), ("vllm", False, False, "vllm"),
])
def test_resolve_backend(requested, gpu, vllm, expected):
    assert B.resolve_backend(requested, on_gpu=gpu, vllm_installed=vllm) == expected


def test_auto_never_picks_vllm_for_full_fine_tuning():
    assert B.resolve_backend("auto", on_gpu=True, vllm_installed=True, lora=False) == "lean"


def test_unknown_backend_is_refused():
    with pytest.raises(RaceError, match="auto, lean, hf or vllm"):
        B.resolve_backend("sglang", on_gpu=True, vllm_installed=True)


# --- the solver ----------------------------------------------------------------------------------------


def test_prompts_that_fit_is_the_largest_fitting_count():
    costs = [0, 3, 5, 9, 9, 14, 20]  # nondecreasing, as an iteration's cost in its prompts
    for remaining in [0, 2, 3, 4, 9, 13, 14, 100]:
        brute = max(b for b in range(7) if costs[b] <= remaining)
        assert B.prompts_that_fit(remaining, costs.__getitem__, 6) == brute


def test_solve_full_iterations_then_a_smaller_last_one():
    s = spec()
    full = B.total(s.cost())
    one = B.total(s.cost(1))
    assert one == pytest.approx(full / 8, rel=1e-12)  # every phase is linear in the prompts (one group each)
    plan = B.solve(s, 10 * full + 3.5 * one, max_iterations=1000)
    # by hand: 10 full iterations, then 3.5 prompts' worth left -> a last iteration of 3 prompts
    assert (plan.full_iterations, plan.last_prompts, plan.iterations, plan.capped) == (10, 3, 11, False)
    assert plan.prompts == 83
    led = plan.ledger()
    assert led["flops"]["total"] == pytest.approx(10 * full + 3 * one, rel=1e-12)
    assert led["tokens"]["prompt"] == 83 * 4 * 40.0 and led["tokens"]["completion"] == 83 * 4 * 30.0
    assert led["flops"]["total"] / plan.budget == pytest.approx((10 * 8 + 3) / (10 * 8 + 3.5), rel=1e-12)


def test_solve_exact_fit_has_no_smaller_iteration_and_the_cap_wins():
    s = spec()
    full = B.total(s.cost())
    assert (B.solve(s, 4 * full, 100).iterations, B.solve(s, 4 * full, 100).last_prompts) == (4, 0)
    capped = B.solve(s, 50.9 * full, max_iterations=5)
    assert (capped.iterations, capped.last_prompts, capped.capped) == (5, 0, True)  # no extra iteration past the cap
    short = B.solve(s, 0.9 * full, 100)
    assert short.full_iterations == 0 and "smaller than one iteration" in B.check_fits(short)
    assert B.check_fits(B.solve(s, full, 100)) is None


def test_vllm_shares_the_prefix_and_costs_less_rollout():
    hf, vllm = spec().cost(), spec(share_prefix=True).cost()
    assert vllm["rollout"].model < hf["rollout"].model and vllm["update"] == hf["update"]


def test_worst_case_takes_the_cap_and_the_longest_prompt():
    s = spec()
    assert s.worst_case(3, 50) == B.total(s.cost(3, prompt_len=50, completion_len=48))
    assert s.worst_case(3, 50) > B.total(s.cost(3))


# --- shares and the ledger -------------------------------------------------------------------------


def test_shares_use_p_and_nan_when_nothing_was_spent():
    sh = B.shares({"rollout": 2.0, "update": 6.0, "reward": 2.0, "total": 999.0})  # total is ignored
    assert sh == {"search": 0.2, "learning": 0.6, "feedback": 0.2, "p": 0.6}
    empty = B.shares({"rollout": 0.0, "update": 0.0, "reward": 0.0})
    assert set(empty) == {"search", "learning", "feedback", "p"} and all(math.isnan(v) for v in empty.values())


def test_ledger_adds_and_round_trips_exactly():
    led = B.Ledger()
    led.add("rollout", Flops(1.5, 2.0), 0.25)
    led.add("update", Flops(3.0, 4.5), 1.0)
    led.add("rollout", Flops(0.5, 1.0), 0.25)
    led.add_eval(Flops(3.0, 3.5), 0.5, target="arithmetic", items=200)  # one evaluation point, two targets
    led.add_eval(Flops(4.0, 4.5), 1.5, target="arithmetic-hard", items=200)
    led.end_eval()
    led.iterations, led.prompts = 2, 11
    assert led.spent() == 5.0 and led.shares()["p"] == 0.6
    actual = led.actual()
    assert actual["flops"] == {"rollout": 2.0, "update": 3.0, "reward": 0.0, "total": 5.0}
    assert actual["executed_flops"]["total"] == 7.5 and actual["seconds"]["rollout"] == 0.5
    assert led.eval_json() == {"flops": 7.0, "executed_flops": 8.0, "seconds": 2.0, "runs": 1, "targets": {
        "arithmetic": {"flops": 3.0, "executed_flops": 3.5, "seconds": 0.5, "items": 200},
        "arithmetic-hard": {"flops": 4.0, "executed_flops": 4.5, "seconds": 1.5, "items": 200}}}
    import json

    assert B.Ledger.from_json(json.loads(json.dumps(led.to_json()))) == led
    with pytest.raises(RaceError, match="phase 'eval' is unknown"):
        led.add("eval", Flops(1.0, 1.0), 0.0)


# --- the plan on the default grid --------------------------------------------------------------------


def test_every_default_grid_job_spends_98_to_100_percent():
    used = [r["budget_used"] for r in build_plan([]).rows()]
    assert len(used) == 32 and all(0.98 <= u <= 1.0 for u in used), used
    assert statistics.median(used) > 0.99


# --- plan and job agree ------------------------------------------------------------------------------

MACHINES = {"gpu+vllm": (True, True), "gpu": (True, False), "cpu": (False, False)}


@pytest.mark.parametrize("grid", ["tiny", "pilot"])
def test_plan_and_job_setup_compute_the_same_T_and_planned_ledger(grid, tmp_path, monkeypatch):
    """For every job and backend, on stubbed machines: the plan's row equals what Job.setup computes.

    The job side reloads each job's saved .hydra/config.yaml, as `race train --job-dir` does, and
    calls engine.setup.budget_plan with the device Job.setup would resolve (cuda:0 or cpu).
    """
    from race_cli import machine  # the one place plan and job probe the machine
    from race_cli.config.compose import load_job_config
    from race_cli.engine import setup as S

    seen = set()
    for backend in ("hf", "lean", "vllm", "auto"):
        sweep = tmp_path / backend
        saved = None
        for host, (gpu, vllm) in MACHINES.items():
            monkeypatch.setattr(machine, "gpu_visible", lambda device, gpu=gpu: gpu)
            monkeypatch.setattr(machine, "vllm_installed", lambda vllm=vllm: vllm)  # plan and job ask the same probe
            lora = ["lora.enabled=true"] if backend == "vllm" else []  # vLLM samples LoRA policies only
            plan = build_plan([f"grid={grid}", f"rollout.backend={backend}", *lora])
            if saved is None:
                write_sweep(plan, sweep)
                saved = {j.job_id: OmegaConf.to_container(load_job_config(sweep / "jobs" / j.job_id / ".hydra" /
                                                                          "config.yaml"), resolve=True)
                         for j in plan.jobs}
            lora_policy = grid == "pilot" or backend == "vllm"  # grid=tiny fine-tunes fully
            expected = ("vllm" if backend == "vllm" or (backend == "auto" and gpu and vllm and lora_policy)
                        else "lean" if backend in ("lean", "auto") else "hf")
            for job in plan.jobs:
                job_backend, job_plan = S.budget_plan(saved[job.job_id], "cuda:0" if gpu else "cpu")
                assert job.backend == job_backend == expected, (job.job_id, host)
                assert job_plan.iterations == job.iterations and job_plan.last_prompts == job.budget.last_prompts
                assert job_plan.ledger() == job.planned(), (job.job_id, backend, host)
                seen.add((job.job_id, expected, job.iterations, job.planned()["flops"]["rollout"]))
    # the backend matters: with vLLM's shared prefix the rollout is planned cheaper for every job
    by_backend = {}
    for jid, be, _, rollout in seen:
        by_backend.setdefault(jid, {})[be] = rollout
    assert all(r["vllm"] < r["hf"] and r["lean"] < r["hf"] for r in by_backend.values())


# --- rollout down-sampling: rollout and reward for G, the update for m -------------------------------


def test_downsampling_charges_rollout_and_reward_for_g_and_the_update_for_m():
    """One rule for plan and job: iteration_flops with update_group_size m. Hand arithmetic: the update
    is linear in the rows it keeps, so m = 2 of G = 8 costs 2/8 of the m = G update (reference forward
    included, beta > 0); rollout and the reward model's forward are those of all G."""
    prm = Arch(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
               intermediate_size=64, vocab_size=257)
    full = spec(group_size=8, beta=0.1, reward=prm).cost()
    down = spec(group_size=8, beta=0.1, reward=prm, update_group_size=2).cost()
    assert down["rollout"] == full["rollout"] and down["reward"] == full["reward"]
    assert down["update"].model == pytest.approx(full["update"].model * 2 / 8, rel=1e-12)
    assert down["update"].executed == pytest.approx(full["update"].executed * 2 / 8, rel=1e-12)
    # the worst case (the live stop rule) charges the m rows too
    s = spec(group_size=8, update_group_size=2)
    assert s.worst_case(3, 50) < spec(group_size=8).worst_case(3, 50)
    # and the composed config carries m into the plan's spec (race plan and the job call iteration_spec)
    cfg = _cfg(**{"grpo.group_size": 8, "grpo.update_group_size": 2})
    assert B.iteration_spec(cfg, "lean").update_group_size == 2
    assert B.iteration_spec(_cfg(**{"grpo.group_size": 8}), "lean").update_group_size is None
    with pytest.raises(RaceError, match="update_group_size"):
        spec(group_size=4, update_group_size=5).cost()


def _cfg(**overrides) -> dict:
    from race_cli.config.compose import compose

    return OmegaConf.to_container(compose(["grid=none", *(f"{k}={v}" for k, v in overrides.items())]), resolve=True)
