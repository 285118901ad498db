"""The configuration schema: typed dataclasses registered with Hydra's ConfigStore.

`conf/config.yaml` lists `schema` first in its defaults, so every composed job config is
checked against these types: `grpo.group_size=abc` fails with a type error, unknown keys
fail, and `validate()` adds the range checks types cannot express (`group_size >= 2`).
Field comments are the documentation of each key (their units and typical values).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional


@dataclass
class ArchConf:
    """Architecture numbers the FLOP ledger needs (names as in transformers' Qwen2Config)."""

    hidden_size: int = 64  # d
    num_hidden_layers: int = 2  # L
    num_attention_heads: int = 4  # h
    num_key_value_heads: int = 2  # h_kv (grouped-query attention)
    intermediate_size: int = 128  # f, MLP width
    vocab_size: int = 257  # V
    head_dim: Optional[int] = None  # d_h; None means hidden_size / num_attention_heads
    tie_word_embeddings: bool = False  # one V x d matrix for the embedding and the head (memory ledger only)


@dataclass
class ModelConf:
    name: str = "tiny-s"  # short name used in job ids and reports
    path: str = "zoo:tiny-s"  # HF id, local folder, or zoo:<name> (built offline on first use)
    arch: ArchConf = field(default_factory=ArchConf)
    dtype: str = "auto"  # auto = bf16 on GPU, fp32 on CPU; or float32 / bfloat16 / float16
    revision: Optional[str] = None  # hub commit to load (pin it for hub ids); ignored for local folders
    trust_remote_code: bool = False  # runs code from the model repository: only with a revision pinned


@dataclass
class LoraConf:
    enabled: bool = True  # False = full fine-tuning
    r: int = 16  # adapter rank
    alpha: int = 32  # scaling alpha / r
    dropout: float = 0.0
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )


@dataclass
class GrpoConf:
    prompts_per_iter: int = 8  # B, prompts sampled per iteration
    group_size: int = 8  # G, completions per prompt (search)
    updates_per_batch: int = 1  # mu, gradient passes per rollout batch (learning)
    lr: float = 1e-3  # LoRA lr; ~10x a full fine-tuning lr
    weight_decay: float = 0.0
    warmup_iters: int = 0  # linear lr warm-up, in iterations
    clip_eps: float = 0.2  # PPO/GRPO ratio clip epsilon
    beta: float = 0.0  # KL penalty to the reference (base model, adapter disabled); 0 = no reference forward
    scale_rewards: bool = True  # divide advantages by the group's std (False = Dr. GRPO)
    loss_agg: str = "token"  # token = mean over all completion tokens; sequence = mean per sequence, then over sequences
    skip_zero_advantage: bool = True  # beta = 0 only: rows of advantage exactly 0 run no update pass (same loss and gradient); with beta > 0 every row stays (its KL has a gradient)
    expected_informative_share: Optional[float] = None  # planning: share of rows the update runs on; None = the measured default of the reward type (cost/budget.py INFORMATIVE_SHARE)
    max_grad_norm: float = 1.0  # gradient clipping; 0 = off
    grad_checkpointing: bool = False  # recompute activations in backward (executed FLOPs +1 forward)
    micro_batch_size: Any = 0  # sequences per forward/backward; 0 = the whole batch; auto = the largest that fits the device (memory ledger)


@dataclass
class RolloutConf:
    backend: str = "auto"  # auto | lean | hf | vllm (auto: vllm when installed and on GPU, else lean)
    max_new_tokens: int = 48  # completion cap, tokens
    temperature: float = 1.0
    top_p: float = 1.0
    expected_completion_tokens: Optional[float] = 33.0  # planning estimate of the mean completion (tiny-s: 33.2); None = max_new_tokens
    gpu_memory_utilization: Optional[float] = None  # vLLM only: GPU fraction for its weights + KV cache; None = sized from the plan (rollout_vllm.memory_fraction)
    max_model_len: Optional[int] = None  # vLLM only: longest prompt+completion, tokens; None = the task's longest prompt + max_new_tokens


@dataclass
class RewardModelConf:
    name: str = "tiny-prm"
    path: str = "zoo:tiny-prm"  # HF id, local folder, or zoo:<name>
    arch: ArchConf = field(default_factory=ArchConf)
    format: str = "classifier"  # classifier (Qwen2.5-Math-PRM) | token (Math-Shepherd) | logprob (calibrated LM log-probs)
    num_labels: int = 2  # classifier head outputs
    template: str = "{question}\n{completion}"  # the text the PRM reads
    step_tag: Optional[str] = None  # appended after each step and read there (e.g. <extra_0>); None = read at the separator
    step_joiner: Optional[str] = None  # joins tagged steps; None = the separator (or nothing if the tag ends with it)
    good_token: str = "+"  # token format: p(good) / (p(good) + p(bad)) at the tag
    bad_token: str = "-"
    revision: Optional[str] = None  # hub commit to load (pin it for hub ids); ignored for local folders
    trust_remote_code: bool = False  # never needed for Qwen2.5-Math-PRM (its head is built here); only with a revision


@dataclass
class RewardConf:
    type: str = "rule"  # rule (answer check, ~0 FLOPs) | prm (process reward model)
    model: Optional[RewardModelConf] = None  # the reward model, for type=prm
    aggregate: str = "min"  # prm: per-step scores -> reward: min | prod | last | mean
    outcome_weight: float = 0.0  # prm: weight of the rule-based outcome reward mixed in
    step_separator: str = "\n"
    batch_size: int = 64  # prm scoring batch
    use_math_verify: bool = False  # rule: use math-verify when installed (MATH-style answers)


@dataclass
class TaskConf:
    name: str = "arithmetic"  # the training task: arithmetic | gsm8k | jsonl (race_cli/tasks/targets.py)
    path: Optional[str] = None  # gsm8k: folder/JSONL (None = the packaged copy, hub = openai/gsm8k); jsonl: file or hf:<id>
    num_eval: Optional[int] = 200  # held-out items of the task's own target; None = the whole split
    num_train: Optional[int] = None  # None = all (gsm8k, jsonl) / an unbounded stream (arithmetic)
    prompt_tokens: float = 40.0  # planning estimate of the mean prompt length, tokens
    min_ops: int = 2  # arithmetic: operations per problem
    max_ops: int = 3
    max_operand: int = 99
    eval_seed: int = 1234  # the held-out set depends only on this: same items in every job
    # jsonl only (race_cli/tasks/jsonl.py):
    eval_path: Optional[str] = None  # held-out rows from this file (or hf:<id>); None = hold out num_eval rows of path
    question_field: str = "question"  # the row field holding the question
    answer_field: str = "answer"  # the row field holding the gold answer
    answer_format: str = "raw"  # raw (the field is the answer) | hashes ('... #### 42') | boxed (last \boxed{})
    grader: str = "number"  # number ('#### N' prompts) | math | math-verify | math-normalizer (\boxed{} prompts)
    label: Optional[str] = None  # target name in eval/<label>/accuracy; None = the file's stem
    split_train: str = "train"  # hf: split names
    split_eval: str = "test"


@dataclass
class BudgetConf:
    flops: float = 3.0e11  # C, total training FLOPs per job (model convention)
    free_knob: str = "iterations"  # the knob the solver sets to spend C
    max_iterations: int = 100000  # cap on T, in the plan and the job: stop after this many (stop reason "iterations")


@dataclass
class EvalConf:
    at: list[float] = field(default_factory=lambda: [0.0, 0.125, 0.25, 0.5, 0.75, 1.0])  # budget fractions: evaluate at the first iteration boundary at or past each (0 = start, 1 = end; both always run); never charged to the budget
    every: Optional[int] = None  # also evaluate every K iterations; null = only at eval.at (the grids use eval.at)
    greedy: bool = True  # with samples = 1: greedy decoding; false = one sample at the eval temperature
    batch_size: int = 200  # prompts per generate call
    targets: list[str] = field(default_factory=list)  # arithmetic | arithmetic-hard | gsm8k | math500 | a jsonl label; [] = the task's own
    samples: int = 1  # k completions per item; k > 1 samples at the eval temperature, item score = fraction correct
    temperature: Optional[float] = None  # sampling temperature at evaluation; None = rollout.temperature
    max_items: Optional[int] = None  # first N items of every target (a subset for small runs); None = all
    max_items_by_target: dict[str, int] = field(default_factory=dict)  # per-target N overriding max_items, e.g. {math500: 50}
    max_new_tokens: Optional[int] = None  # completion cap at evaluation; None = rollout.max_new_tokens, raised to what a target needs


@dataclass
class CheckpointConf:
    every: int = 10  # checkpoint every K iterations and at the end


@dataclass
class GridConf:
    """A named pilot grid: sweep axes (Hydra sweep strings) and overrides applied to every job."""

    name: str = "none"
    description: str = ""
    axes: dict[str, str] = field(default_factory=dict)  # e.g. {"grpo.group_size": "4,8"}
    fixed: dict[str, Any] = field(default_factory=dict)  # e.g. {"budget.flops": 2e12}


@dataclass
class RaceConfig:
    model: ModelConf = field(default_factory=ModelConf)
    lora: LoraConf = field(default_factory=LoraConf)
    grpo: GrpoConf = field(default_factory=GrpoConf)
    rollout: RolloutConf = field(default_factory=RolloutConf)
    reward: RewardConf = field(default_factory=RewardConf)
    task: TaskConf = field(default_factory=TaskConf)
    budget: BudgetConf = field(default_factory=BudgetConf)
    eval: EvalConf = field(default_factory=EvalConf)
    checkpoint: CheckpointConf = field(default_factory=CheckpointConf)
    grid: GridConf = field(default_factory=GridConf)
    seed: int = 0
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    logger: str = "none"  # none | tensorboard | wandb (offline): metrics.jsonl is always written and is the source of truth
    threads: int = 0  # torch CPU threads; 0 = leave torch's default


# LoRA ranks vLLM accepts as max_lora_rank (vllm/config: LoRAConfig's possible_max_ranks, the same
# in every version of the `vllm` extra's range); vLLM refuses others when the engine starts.
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)

_registered = False


def register_schema() -> None:
    """Register RaceConfig as `schema` in Hydra's ConfigStore (once per process)."""
    global _registered
    if _registered:
        return
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="schema", node=RaceConfig)
    _registered = True


# --- range checks the type system cannot express -------------------------------------------------

CHOICES = {
    "rollout.backend": ("auto", "lean", "hf", "vllm"),
    "reward.type": ("rule", "prm"),
    "reward.aggregate": ("min", "prod", "last", "mean"),
    "grpo.loss_agg": ("token", "sequence"),
    "task.name": ("arithmetic", "gsm8k", "jsonl"),
    "task.answer_format": ("raw", "hashes", "boxed"),
    "task.grader": ("number", "math", "math-verify", "math-normalizer"),
    "logger": ("none", "tensorboard", "wandb"),
    "budget.free_knob": ("iterations",),
    "model.dtype": ("auto", "float32", "bfloat16", "float16"),
}


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
        if node is None:
            break
    return node


INT_LIMIT = 2**31 - 1  # no integer setting is meaningful beyond this; larger ones are typos
UPPER = {  # sizes beyond these are typos that would only exhaust memory (an H200 holds ~1e6-token batches)
    "grpo.group_size": 4096, "grpo.prompts_per_iter": 65536, "grpo.updates_per_batch": 1024,
    "rollout.max_new_tokens": 1_048_576, "lora.r": 65536, "task.num_eval": 10_000_000,
}


def _number_problems(node: Any, prefix: str = "") -> list[str]:
    """Non-finite floats and integers beyond INT_LIMIT anywhere in the config (inf, nan, 1e400, 10**30)."""
    import math

    out = []
    try:
        items = list(node.items()) if hasattr(node, "items") else []
    except Exception:  # noqa: BLE001 - an unresolvable node is reported by the schema merge
        return out
    for k, v in items:
        key = f"{prefix}{k}"
        if isinstance(v, bool):
            continue
        if isinstance(v, float) and not math.isfinite(v):
            out.append(f"{key}={v!r} is not a finite number: expected e.g. {key}=1e12.")
        elif isinstance(v, int) and abs(v) > INT_LIMIT:
            out.append(f"{key}={v} is too large: expected an integer of at most {INT_LIMIT}.")
        elif hasattr(v, "items"):
            out.extend(_number_problems(v, key + "."))
    return out


def validate(cfg: Any) -> list[str]:
    """Every range problem of one composed config, as messages (empty list = valid)."""
    problems: list[str] = _number_problems(cfg)
    if problems:  # the range checks below would compare infinities and overflow
        return problems

    def need(key: str, ok: bool, expected: str) -> None:
        if not ok:
            problems.append(f"{key}={_get(cfg, key)!r} is out of range: expected {expected}.")

    need("grpo.group_size", _get(cfg, "grpo.group_size") >= 2, "an integer >= 2 (GRPO normalises within a group)")
    need("grpo.prompts_per_iter", _get(cfg, "grpo.prompts_per_iter") >= 1, "an integer >= 1")
    need("grpo.updates_per_batch", _get(cfg, "grpo.updates_per_batch") >= 1, "an integer >= 1")
    need("grpo.lr", _get(cfg, "grpo.lr") > 0, "a positive learning rate such as 1e-3")
    need("grpo.clip_eps", 0 < _get(cfg, "grpo.clip_eps") < 1, "a value in (0, 1), typically 0.2")
    need("grpo.beta", _get(cfg, "grpo.beta") >= 0, "a KL coefficient >= 0")
    eis = _get(cfg, "grpo.expected_informative_share")
    need("grpo.expected_informative_share", eis is None or 0 < eis <= 1,
         "null (the measured default) or a share in (0, 1], e.g. 0.5 for rule rewards at G=4")
    mbs = _get(cfg, "grpo.micro_batch_size")
    need("grpo.micro_batch_size", mbs == "auto" or (isinstance(mbs, int) and not isinstance(mbs, bool) and mbs >= 0),
         "auto (the largest that fits the device), 0 (whole batch) or a positive size")
    need("rollout.max_new_tokens", _get(cfg, "rollout.max_new_tokens") >= 1, "at least 1 completion token")
    need("rollout.temperature", _get(cfg, "rollout.temperature") > 0, "a sampling temperature > 0")
    need("rollout.top_p", 0 < _get(cfg, "rollout.top_p") <= 1, "a value in (0, 1]")
    ect = _get(cfg, "rollout.expected_completion_tokens")
    if ect is not None:
        need("rollout.expected_completion_tokens", 0 < ect <= _get(cfg, "rollout.max_new_tokens"),
             "a mean completion length in (0, rollout.max_new_tokens]")
    need("budget.flops", _get(cfg, "budget.flops") > 0, "a positive FLOP budget such as 1e12")
    need("lora.r", _get(cfg, "lora.r") >= 1, "a LoRA rank >= 1")
    num_eval = _get(cfg, "task.num_eval")
    need("task.num_eval", num_eval is None or num_eval >= 1, "at least one held-out item, or null for the whole split")
    need("eval.samples", _get(cfg, "eval.samples") >= 1, "at least 1 completion per item")
    temp = _get(cfg, "eval.temperature")
    need("eval.temperature", temp is None or temp > 0, "a sampling temperature > 0, or null for rollout.temperature")
    cap = _get(cfg, "eval.max_new_tokens")
    need("eval.max_new_tokens", cap is None or cap >= 1, "at least 1 completion token, or null")
    from race_cli.tasks.targets import target_problems

    problems.extend(target_problems(cfg))
    need("task.prompt_tokens", _get(cfg, "task.prompt_tokens") > 0, "a positive mean prompt length")
    every = _get(cfg, "eval.every")
    need("eval.every", every is None or every >= 1, "an integer >= 1, or null (evaluate only at eval.at)")
    at = _get(cfg, "eval.at")
    need("eval.at", at is not None and all(isinstance(f, (int, float)) and not isinstance(f, bool) and 0 <= f <= 1
                                           for f in at),
         "a list of budget fractions in [0, 1], e.g. [0, 0.25, 0.5, 0.75, 1]")
    need("checkpoint.every", _get(cfg, "checkpoint.every") >= 1, "an integer >= 1")
    for key, most in UPPER.items():
        value = _get(cfg, key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):  # None / auto: checked elsewhere
            need(key, value <= most, f"at most {most}")
    for key, options in CHOICES.items():
        value = _get(cfg, key)
        if value not in options:
            problems.append(f"{key}={value!r} is not one of {', '.join(options)}.")
    fmt = _get(cfg, "reward.model.format") if _get(cfg, "reward.model") is not None else None
    if fmt is not None and fmt not in ("classifier", "token", "logprob"):
        problems.append(f"reward.model.format={fmt!r} is not one of classifier, token, logprob.")
    if _get(cfg, "reward.type") == "prm" and _get(cfg, "reward.model") is None:
        problems.append("reward.type=prm needs reward.model (its path and architecture): use reward=prm.")
    gmu = _get(cfg, "rollout.gpu_memory_utilization")
    if gmu is not None:
        need("rollout.gpu_memory_utilization", 0 < gmu < 1, "a fraction in (0, 1) of the GPU memory for vLLM, "
             "such as 0.4, or null to size it from the plan")
    mml = _get(cfg, "rollout.max_model_len")
    if mml is not None:
        need("rollout.max_model_len", mml > _get(cfg, "rollout.max_new_tokens"),
             "more tokens than rollout.max_new_tokens (it holds the prompt and the completion), or null")
    problems += vllm_problems(cfg) + remote_code_problems(cfg)
    for key in ("model.arch", "reward.model.arch"):
        try:
            arch = _get(cfg, key)
        except (AttributeError, KeyError, TypeError):
            continue
        if arch is None:
            continue
        h, kv = _get(arch, "num_attention_heads"), _get(arch, "num_key_value_heads")
        d = _get(arch, "hidden_size")
        if kv < 1 or h < 1 or h % kv:
            problems.append(f"{key}: num_attention_heads={h} must be a multiple of num_key_value_heads={kv}.")
        elif _get(arch, "head_dim") is None and d % h:
            problems.append(f"{key}: hidden_size={d} is not divisible by num_attention_heads={h}; set head_dim.")
    return problems


def vllm_problems(cfg: Any) -> list[str]:
    """What vLLM would refuse at start-up, found at plan time when the backend can be vLLM (vllm or auto)."""
    backend = _get(cfg, "rollout.backend")
    if backend not in ("vllm", "auto"):
        return []
    problems = []
    r, lora = _get(cfg, "lora.r"), _get(cfg, "lora.enabled")
    if lora and r not in VLLM_LORA_RANKS:
        problems.append(f"lora.r={r} is not a rank vLLM accepts (rollout.backend={backend} can sample with vLLM): "
                        f"expected one of {', '.join(map(str, VLLM_LORA_RANKS))}; or set rollout.backend=hf.")
    if backend == "vllm" and not lora:
        problems.append("rollout.backend=vllm samples with LoRA adapters only (lora.enabled=true): full fine-tuning "
                        "would copy every weight into vLLM after each update. Use rollout.backend=hf (or auto).")
    return problems


def remote_code_problems(cfg: Any) -> list[str]:
    """trust_remote_code runs a repository's code: allowed only with an explicit revision pin."""
    problems = []
    for key in ("model", "reward.model"):
        node = _get(cfg, key)
        if node is None or not _get(node, "trust_remote_code"):
            continue
        if not _get(node, "revision"):
            problems.append(f"{key}.trust_remote_code=true runs code from {_get(node, 'path')}'s repository, but "
                            f"{key}.revision is not set: pin the commit (e.g. {key}.revision=<40-hex sha>) so the "
                            "code that runs is the code that was read, or turn trust_remote_code off.")
    return problems
