"""What each zoo entry is: architecture, seed and training hyperparameters, and the hash that names its folder.

A recipe is plain data (JSON-able). Its hash (sha256 of the canonical JSON of the recipe, the
builder version, the prompt text the policy is trained on, and for the PRM the recipe of the
policy it starts from) names the cache folder `<name>-<hash12>`: change anything that changes the
weights and the entry is rebuilt into a new folder, change nothing and it is reused.
No torch here: `race plan` may read the recipes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

BUILDER_VERSION = 1  # bump when the build code changes what it produces

# The zoo's warm-start data comes from the task's "arith-train-<data_seed>" streams; the jobs' RL prompts
# come from "arith-rl-<job seed>" streams (ArithmeticTask.train_stream): RL then trains on problems the
# policy has never seen, not on ones it memorised during the warm start.
SFT_STREAM = "arith-train"
_FIXED_ARCH = {"max_position_embeddings": 256, "tie_word_embeddings": False}


def _read_conf(group: str, name: str) -> dict[str, Any]:
    """conf/<group>/<name>.yaml as a dict: the one place the tiny shapes and the task's parameters live."""
    import yaml

    from race_cli.config.compose import conf_dir

    return yaml.safe_load((conf_dir() / group / f"{name}.yaml").read_text())


def _arch(name: str) -> dict[str, Any]:
    """The architecture of tiny policy `name`: conf/model/<name>.yaml's arch plus the zoo's fixed extras."""
    return {**_read_conf("model", name)["arch"], **_FIXED_ARCH}


def _task() -> dict[str, Any]:
    """The warm-start task: conf/task/arithmetic.yaml's problem shape and eval set, a larger training pool."""
    t = _read_conf("task", "arithmetic")
    return {k: t[k] for k in ("min_ops", "max_ops", "max_operand", "num_eval", "eval_seed")} | {"num_train": 20000}


def sft_task_args(recipe: dict[str, Any], offset: int = 0) -> dict[str, Any]:
    """ArithmeticTask(**...) arguments of the data an entry is fitted on (see SFT_STREAM)."""
    return {**recipe["task"], "seed": recipe["data_seed"] + offset, "train_stream": SFT_STREAM}


_TASK = _task()

RECIPES: dict[str, dict[str, Any]] = {
    # policies: supervised warm-start on the arithmetic task, stopped inside the accuracy band
    "tiny-s": {"kind": "policy", "arch": _arch("tiny-s"), "seed": 0, "data_seed": 0, "task": _TASK,
               "fit": {"batch_size": 64, "lr": 5e-3, "warmup_steps": 30, "max_steps": 4000,
                       "band": [0.3, 0.6], "stop_at": 0.4, "monitor_every": 10}},
    # lr 5e-3 at batch 64 stalls tiny-m (docs/measurements/code.md); lr 3e-3 at batch 128 learns. It stops higher than tiny-s so that model size is an axis the study can see.
    # Data stream 1000: the one it was first built on (when a warm start "jumps" depends on the stream).
    "tiny-m": {"kind": "policy", "arch": _arch("tiny-m"), "seed": 0, "data_seed": 1000, "task": _TASK,
               "fit": {"batch_size": 128, "lr": 3e-3, "warmup_steps": 30, "max_steps": 4000,
                       "band": [0.45, 0.75], "stop_at": 0.55, "monitor_every": 10}},
    # not yet measured; the trial's 2M model stalled at 3e-3 and needed 1e-3
    "tiny-l": {"kind": "policy", "arch": _arch("tiny-l"), "seed": 0, "data_seed": 0, "task": _TASK,
               "fit": {"batch_size": 128, "lr": 2e-3, "warmup_steps": 30, "max_steps": 3000,
                       "band": [0.2, 0.5], "stop_at": 0.25, "monitor_every": 10}},
    # process reward model: a causal LM verifier from tiny-s, trained further on correct solutions and
    # calibrated on correct and corrupted steps; it reads the policy's own prompt layout (prm_fit.py)
    "tiny-prm": {"kind": "prm", "init_from": "tiny-s", "format": "logprob", "template": "policy",
                 "seed": 0, "data_seed": 0, "task": _TASK,
                 "fit": {"sft_steps": 400, "batch_size": 64, "lr": 3e-3, "warmup_steps": 10, "max_steps": 400,
                         "calib_examples": 2000, "corrupt_frac": 0.5, "num_heldout": 400, "target_auc": 0.85}},
}


def prompt_example() -> str:
    """The plain prompt of a fixed question: part of the hash, so a new prompt format rebuilds the zoo."""
    from race_cli.tasks.prompting import format_prompt

    return format_prompt("12+34-5", None, style="plain")


def policy_template() -> str:
    """The policy's plain prompt with {question} and {completion} slots, closed by the end token.

    The end token makes completeness part of the score: without it, GRPO against this PRM learned
    within 150 iterations to answer with 3 tokens the verifier found likely (accuracy 0.28 -> 0.00).
    """
    from race_cli.tasks.prompting import format_prompt

    return format_prompt("{question}", None, style="plain") + "{completion}<|endoftext|>"


def recipe_hash(name: str, recipes: dict[str, dict[str, Any]] | None = None) -> str:
    """12 hex digits naming the folder of `name` built from `recipes` (default RECIPES)."""
    recipes = RECIPES if recipes is None else recipes
    recipe = recipes[name]
    material = {"name": name, "recipe": recipe, "builder": BUILDER_VERSION, "prompt": prompt_example()}
    if recipe["kind"] == "prm":
        material["base"] = recipe_hash(recipe["init_from"], recipes)
        if recipe.get("template") == "policy":  # the text the PRM reads is part of what it is
            material["template"] = policy_template()
    text = json.dumps(material, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


def count_params(arch: dict[str, Any], head_out: int | None = None) -> int:
    """Parameters of a Qwen2 model of this shape (q/k/v biases and RMSNorm weights included).

    head_out: outputs of the head (vocab_size for a causal LM, num_labels for a classifier).
    """
    d, L, f, V = arch["hidden_size"], arch["num_hidden_layers"], arch["intermediate_size"], arch["vocab_size"]
    h, kv = arch["num_attention_heads"], arch["num_key_value_heads"]
    dh = d // h
    attn = d * h * dh + h * dh + 2 * (d * kv * dh + kv * dh) + h * dh * d  # q(+bias), k, v (+bias), o
    layer = attn + 3 * d * f + 2 * d  # + gate/up/down + two norms
    head = d * V if head_out is None else d * head_out + head_out  # lm_head (no bias) | score (with bias)
    return V * d + L * layer + d + head
