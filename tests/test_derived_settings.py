"""Settings come from what they depend on: every shipped model x task x reward, under every shipped grid,
resolves the completion cap and expected length of its task, the learning rate and budget of its model
family and adapter, and each evaluation target's cap, as the table below says (each value with its source).
A grid's fixed: block carries that grid's own values and wins over them."""

from __future__ import annotations

import pytest

from race_cli.config.compose import compose, group_options
from race_cli.errors import RaceError

# task -> (completion cap, expected mean completion (None: plan at the cap), source)
TASKS = {
    "arithmetic": (48, 33.0, "the tiny trial: tiny-s measured 33.2 tokens; 48 fits a 3-op chain"),
    "gsm8k": (512, 300.0, "grid/pilot.yaml's Qwen2.5-Instruct GSM8K setting"),
    "jsonl": (512, None, "GSM8K's cap; no expected length until the user measures one (plan at the cap)"),
}
# model -> (LoRA lr, full fine-tuning lr, budget, source)
TINY = (1e-3, 1e-4, 3e11, "the tiny trial (LoRA 1e-3 learns, full FT 1e-4); 3e11: a single tiny job in a minute or two")
QWEN = (1e-5, 1e-6, 3e17, "grid/pilot.yaml's LoRA lr and budget; TRL GRPOConfig's default lr for full FT")
MODELS = {"tiny-s": TINY, "tiny-m": TINY, "tiny-l": TINY,
          "qwen2.5-0.5b": QWEN, "qwen2.5-1.5b": QWEN, "qwen2.5-3b": QWEN, "qwen2.5-7b": QWEN}
# grid -> the values its fixed: block carries (they win over the task's and the model's)
GRIDS = {
    "none": {},
    "tiny": {"lora": False, "lr": 1e-4, "budget": 8e11},  # full FT at the trial's lr (docs/embedded-study.md)
    "pilot": {"task": "gsm8k", "lr": 1e-5, "budget": 3e17, "cap": 512, "expected": 300.0},
}
# evaluation target -> completion cap its answers need (race_cli/tasks/targets.py; MATH-500's solutions
# run twice GSM8K's: mean 531 vs 293 characters in the shipped copies)
TARGET_CAPS = {"gsm8k": 512, "math500": 1024}


def test_the_table_covers_every_shipped_option():
    assert set(group_options("model")) == set(MODELS)
    assert set(group_options("task")) == set(TASKS)
    assert set(group_options("grid")) == set(GRIDS)
    assert set(group_options("reward")) == {"rule", "prm", "prm-7b"}


@pytest.fixture(scope="module")
def composed():
    """Every shipped model x task x reward composed by Hydra once (derive=False: as `race plan` composes
    the group choices of a regime before its other overrides)."""
    from omegaconf import OmegaConf

    return {(m, t, r): OmegaConf.to_container(compose([f"model={m}", f"task={t}", f"reward={r}", "grid=none"],
                                                      derive=False), resolve=True)
            for m in sorted(MODELS) for t in sorted(TASKS) for r in ("rule", "prm", "prm-7b")}


@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_every_shipped_combination_resolves_the_table(grid, composed):
    """Each combination under each grid, through the path `race plan` takes (plan/build._compose_regime:
    the grid's fixed: block less the keys given, then the derived settings, then validation)."""
    import copy

    from race_cli.config.compose import derive_settings
    from race_cli.config.schema import validate
    from race_cli.config.sweep import apply_value, schema_types
    from race_cli.plan.build import _fixed_override, load_grid

    types = schema_types()
    fixed = [_fixed_override(k, v) for k, v in load_grid(grid)["fixed"].items() if k not in ("model", "task", "reward")]
    want_grid = GRIDS[grid]
    for (model, task, reward), base in composed.items():
        cfg = copy.deepcopy(base)
        for o in fixed + (["task.path=data/x.jsonl"] if task == "jsonl" else []):
            apply_value(cfg, o, types)
        derive_settings(cfg)
        where = f"{model} {task} {reward} grid={grid}"
        assert validate(cfg) == [], where
        cap, expected, _ = TASKS[task]
        lora_lr, full_lr, budget, _ = MODELS[model]
        lora = want_grid.get("lora", True)
        assert cfg["rollout"]["max_new_tokens"] == want_grid.get("cap", cap), where
        assert cfg["rollout"]["expected_completion_tokens"] == want_grid.get("expected", expected), where
        assert cfg["lora"]["enabled"] is lora, where
        assert cfg["grpo"]["lr"] == pytest.approx(want_grid.get("lr", lora_lr if lora else full_lr)), where
        assert cfg["budget"]["flops"] == pytest.approx(want_grid.get("budget", budget)), where
        assert cfg["model"]["arch"]["hidden_size"] > 0, where
    assert len(composed) == len(MODELS) * len(TASKS) * 3


def test_full_fine_tuning_takes_the_model_familys_full_lr_and_overrides_win():
    assert compose(["grid=none", "model=qwen2.5-1.5b", "lora.enabled=false"]).grpo.lr == pytest.approx(1e-6)
    assert compose(["grid=none", "model=tiny-m", "lora.enabled=false"]).grpo.lr == pytest.approx(1e-4)
    cfg = compose(["grid=none", "model=qwen2.5-1.5b", "task=gsm8k", "grpo.lr=3e-5", "rollout.max_new_tokens=256",
                   "budget.flops=1e16"])
    assert (cfg.grpo.lr, cfg.rollout.max_new_tokens, cfg.budget.flops) == (3e-5, 256, 1e16)
    # the task's expected length is a mean under its own cap: under a lower cap it is at most that cap
    assert cfg.rollout.expected_completion_tokens == 256


def test_the_readme_own_grid_pattern_plans_with_the_task_and_model_settings():
    """grid=none drops the pilot's fixed block: a Qwen model on GSM8K still plans at GSM8K's cap and a
    Qwen LoRA lr, never the tiny models' 48 tokens and 1e-3 (the sweep path: build_plan)."""
    from race_cli.plan.build import build_plan

    (job,) = build_plan(["grid=none", "model=qwen2.5-1.5b", "task=gsm8k"]).jobs
    c = job.config
    assert (c["rollout"]["max_new_tokens"], c["rollout"]["expected_completion_tokens"]) == (512, 300.0)
    assert c["grpo"]["lr"] == pytest.approx(1e-5) and c["budget"]["flops"] == pytest.approx(3e17)
    (job,) = build_plan(["grid=none", "model=qwen2.5-1.5b", "task=gsm8k", "lora.enabled=false"]).jobs
    assert job.config["grpo"]["lr"] == pytest.approx(1e-6)  # the adapter override reaches the lr


@pytest.mark.parametrize("target, cap", sorted(TARGET_CAPS.items()))
def test_each_evaluation_target_sets_its_own_cap(target, cap):
    from race_cli.engine.setup import eval_cap
    from race_cli.tasks.targets import build_targets, build_task

    cfg = compose(["grid=none", f"eval.targets=[{target}]", "eval.max_items=3"])  # arithmetic training, cap 48
    (t,) = build_targets(cfg, build_task(cfg))
    assert t.min_new_tokens == cap and eval_cap(cfg, t) == cap
    big = compose(["grid=none", f"eval.targets=[{target}]", "rollout.max_new_tokens=2048"])
    assert eval_cap(big, t) == 2048  # a larger training cap is kept


def test_a_model_or_task_without_the_settings_is_refused_with_what_to_set(tmp_path):
    from race_cli.config import compose as compose_mod

    (tmp_path / "model").mkdir()
    (tmp_path / "task").mkdir()
    (tmp_path / "model" / "bare.yaml").write_text("# a model naming no lr or budget\nname: bare\npath: zoo:tiny-s\n"
                                                  "arch: {hidden_size: 64, num_hidden_layers: 2}\n")
    (tmp_path / "task" / "bare.yaml").write_text("# a task naming no cap\nname: jsonl\npath: x.jsonl\n")
    compose_mod.set_config_dirs([tmp_path])
    try:
        with pytest.raises(RaceError) as err:
            compose(["grid=none", "model=bare", "task=bare"])
        text = "\n".join(err.value.problems)
        assert "rollout.max_new_tokens is not set" in text and "task.max_new_tokens" in text
        assert "grpo.lr is not set" in text and "model.lr.lora" in text
        assert "budget.flops is not set" in text
        ok = compose(["grid=none", "model=bare", "task=bare", "rollout.max_new_tokens=64", "grpo.lr=1e-3",
                      "budget.flops=1e12"])
        assert ok.rollout.expected_completion_tokens is None  # planned at the cap (budget.completion_estimate)
    finally:
        compose_mod.set_config_dirs([])


def test_the_plan_says_each_setting_and_where_it_came_from():
    from race_cli.plan.build import build_plan
    from race_cli.plan.render import settings_lines

    plan = build_plan(["grid=none", "model=qwen2.5-1.5b", "task=gsm8k"])
    assert settings_lines(plan) == ["settings: qwen2.5-1.5b on gsm8k: completion cap 512 (task), expected 300 "
                                    "tokens (task), lr 1e-05 (model, LoRA), budget 3e+17 (model)"]
    plan = build_plan(["grid=none", "model=qwen2.5-1.5b,qwen2.5-3b", "task=gsm8k", "grpo.lr=2e-5"])
    assert settings_lines(plan) == ["settings: qwen2.5-1.5b, qwen2.5-3b on gsm8k: completion cap 512 (task), "
                                    "expected 300 tokens (task), lr 2e-05 (set, LoRA), budget 3e+17 (model)"]
