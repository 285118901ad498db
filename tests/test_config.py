"""Every shipped config composes against the schema; bad values are refused with clear messages."""

from __future__ import annotations

import pytest
from omegaconf import OmegaConf

from race_cli.config.compose import compose, conf_dir, config_groups, group_options, load_job_config
from race_cli.errors import RaceError


def test_every_group_option_composes_and_validates():
    assert {"model", "reward", "task", "grid"} <= set(config_groups())
    for group in config_groups():
        for option in group_options(group):
            cfg = compose([f"{group}={option}"])
            if group == "model":
                assert cfg.model.name == option


def test_every_config_file_opens_with_a_purpose_line():
    for path in conf_dir().rglob("*.yaml"):
        first = path.read_text().splitlines()[0]
        assert first.startswith("# ") and len(first) > 20, f"{path} should open with a one-line purpose comment"


def test_model_groups_carry_real_qwen_shapes():
    # Qwen2.5-7B-Instruct config.json: hidden 3584, 28 layers, 28 heads, 4 kv heads, mlp 18944, vocab 152064.
    arch = compose(["model=qwen2.5-7b"]).model.arch
    assert (arch.hidden_size, arch.num_hidden_layers, arch.num_attention_heads, arch.num_key_value_heads,
            arch.intermediate_size, arch.vocab_size) == (3584, 28, 28, 4, 18944, 152064)


@pytest.mark.parametrize("override, fragment", [
    ("grpo.group_size=abc", "Wrong type for grpo.group_size"),
    ("grpo.group_size=1", "grpo.group_size=1 is out of range"),
    ("grpo.group_sise=4", "Did you mean 'grpo.group_size'"),
    ("model=tiny-x", "Available: qwen2.5-0.5b"),
    ("+grpo.foo=1", "Unknown config key 'grpo.foo'"),
    ("rollout.backend=tgi", "rollout.backend='tgi' is not one of auto, lean, hf, vllm"),
    ("rollout.top_p=1.5", "rollout.top_p=1.5 is out of range"),
    # vLLM's LoRAConfig accepts max_lora_rank in (8, 16, 32, 64, ...): 12 would crash it at start-up
    ("rollout.backend=vllm lora.r=12", "lora.r=12 is not a rank vLLM accepts"),
    ("lora.r=4", "lora.r=4 is not a rank vLLM accepts (rollout.backend=auto"),  # auto may pick vLLM on a GPU
    ("rollout.backend=vllm lora.enabled=false", "LoRA adapters only"),
    ("rollout.gpu_memory_utilization=1.2", "rollout.gpu_memory_utilization=1.2 is out of range"),
    ("rollout.max_model_len=10", "rollout.max_model_len=10 is out of range"),
    ("model.trust_remote_code=true", "model.revision is not set"),
    ("reward=prm-7b reward.model.trust_remote_code=true reward.model.revision=null", "reward.model.revision is not set"),
])
def test_bad_values_are_refused(override, fragment):
    with pytest.raises(RaceError) as err:
        compose(override.split())
    assert fragment in str(err.value)


def test_several_problems_are_reported_at_once():
    with pytest.raises(RaceError) as err:
        compose(["grpo.lr=0", "budget.flops=-1"])
    assert len(err.value.problems) == 2


def test_saved_job_config_reloads_under_the_schema(tmp_path):
    cfg = compose(["model=tiny-m", "grpo.group_size=4"])
    path = tmp_path / "config.yaml"
    path.write_text(OmegaConf.to_yaml(cfg))
    again = load_job_config(path)
    assert again.grpo.group_size == 4 and again.model.name == "tiny-m"
    path.write_text(OmegaConf.to_yaml(cfg).replace("group_size: 4", "group_size: four"))
    with pytest.raises(RaceError, match="group_size"):
        load_job_config(path)


def test_a_sweep_given_to_a_single_job_command_is_explained():
    with pytest.raises(RaceError, match="runs ONE job"):
        compose(["grpo.group_size=4,8"])


def test_vllm_ranks_and_remote_code_pass_when_allowed():
    assert compose(["rollout.backend=hf", "lora.r=12"]).lora.r == 12  # HF sampling takes any rank
    assert compose(["rollout.backend=vllm", "lora.r=32"]).lora.r == 32
    pinned = compose(["model.trust_remote_code=true", "model.revision=" + "a" * 40])
    assert pinned.model.trust_remote_code and pinned.model.revision == "a" * 40


def test_hub_models_are_pinned_and_run_no_remote_code():
    import re

    for option in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"):
        m = compose([f"model={option}"]).model
        assert re.fullmatch(r"[0-9a-f]{40}", m.revision) and not m.trust_remote_code, option
    prm = compose(["reward=prm-7b"]).reward.model
    assert re.fullmatch(r"[0-9a-f]{40}", prm.revision) and prm.trust_remote_code is False


def _leaves(node, prefix=""):
    """{'grpo.lr': 1e-3, ...} for every scalar or list under a nested dict."""
    out = {}
    for key, value in node.items():
        if isinstance(value, dict):
            out |= _leaves(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_schema_defaults_equal_conf_config_yaml():
    """One source of defaults: every value conf/config.yaml sets is also the schema's default."""
    from race_cli.config.schema import RaceConfig

    root = OmegaConf.to_container(OmegaConf.load(conf_dir() / "config.yaml"))  # YAML as Hydra reads it (3.0e11 a float)
    root.pop("defaults")
    schema = _leaves(OmegaConf.to_container(OmegaConf.structured(RaceConfig)))
    given = _leaves(root)
    assert len(given) >= 25  # the file sets most keys; this compares them all
    differ = {k: (v, schema.get(k, "missing")) for k, v in given.items() if schema.get(k, "missing") != v}
    assert differ == {}, f"conf/config.yaml value vs schema default: {differ}"
    # and what a job gets with no overrides is that value too (grid=none: no grid axes), before the null keys
    # are taken from the task and model (race_cli/config/derive.py; tests/test_derived_settings.py)
    cfg = OmegaConf.to_container(compose(["grid=none"], derive=False), resolve=True)
    assert {k: v for k, v in _leaves(cfg).items() if k in given} == given


# --- issue 36: the fast paths of large sweeps give what Hydra gives ------------------------------------

@pytest.mark.parametrize("text", ["seed=0", "seed=123", "seed=-0", "seed=+5", "+seed=7", "seed=00", "seed=012",
                                  "seed=1_000", "grpo.group_size=8", "a.b_c.d=99999999999999999", "seed= 1",
                                  "seed=1e3", "x-y=3", "seed=" + "9" * 19])
def test_plain_integer_overrides_parse_as_hydra_parses_them(text):
    from race_cli.config.sweep import _parse_value, _plain, parse_override

    ov = parse_override(text)
    expected = (ov.get_key_element().lstrip("+"), _plain(ov.value()))
    _parse_value.cache_clear()
    got = _parse_value(text)
    assert got == expected and type(got[1]) is type(expected[1])


def test_jobs_equal_up_to_their_seed_share_one_regime_and_plan_as_if_composed_alone():
    """build_plan composes and budgets a regime once and gives each seed its own config: every job's
    config equals its own full composition, and its budget its own solve."""
    from omegaconf import OmegaConf

    from race_cli.config.compose import compose
    from race_cli.cost.budget import plan_budget
    from race_cli.plan.build import build_plan

    plan = build_plan(["grid=none", "grpo.group_size=4,8", "seed=0,7"])
    assert len(plan.jobs) == 4
    for job in plan.jobs:
        alone = OmegaConf.to_container(compose(job.overrides), resolve=True)
        assert job.config == alone, job.overrides
        assert plan_budget(alone, job.backend).ledger() == job.budget.ledger()
    seeds = sorted((j.config["grpo"]["group_size"], j.config["seed"]) for j in plan.jobs)
    assert seeds == [(4, 0), (4, 7), (8, 0), (8, 7)]


def test_a_large_plan_says_how_far_it_is():
    from race_cli.plan.build import PROGRESS_JOBS, _Progress

    lines: list[str] = []
    p = _Progress(PROGRESS_JOBS + 2000, lines.append)
    p.last = -10.0  # as if the last line were long ago
    for _ in range(PROGRESS_JOBS + 2000):
        p.tick()
        p.last = min(p.last, -10.0)
    p.done()
    assert lines[0].startswith(f"\rplanning {PROGRESS_JOBS + 2000} jobs: ") and "%" in lines[0]
    assert lines[-1].startswith(f"\rplanned {PROGRESS_JOBS + 2000} jobs in ")
    assert _Progress(100, lines.append).on is False
