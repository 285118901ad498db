"""The configuration schema: typed dataclasses registered with Hydra's ConfigStore, each field with its domain.

`conf/config.yaml` lists `schema` first in its defaults, so every composed job config is
checked against these types: `grpo.group_size=abc` fails with a type error and unknown keys
fail. Each field is declared `name: type = d(default, DOMAIN)`: DOMAIN (race_cli/config/domains.py)
says which values the key may hold (bounds, choices, null allowed, lengths). `validate()` checks
every field against its domain, then the rules that relate two keys (CROSS_FIELD_RULES, listed
at the end of this file), and returns every problem at once; `race plan` and `race train` call
it before anything is printed or written. Field comments are the documentation of each key
(their units and typical values).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from race_cli.config.domains import (INT_LIMIT, PATH_MAX, AnyPlain, Bool, Choice, Int, ListOf, MapOf, Real, Section,
                                     Text, d, field_problems, register_root)

SEED_MAX = 2**32 - 1  # numpy's np.random.seed takes 0 .. 2**32 - 1
NAME = Text(1, 100)  # short names that end up in job ids, reports and file names
PATH = Text(1, PATH_MAX)  # a file, folder, hub id or zoo:<name>: longer cannot be opened
OPT_PATH = Text(1, PATH_MAX, null=True)
REVISION = Text(1, 200, null=True)  # a hub branch, tag or commit sha
TOKENS = 1_048_576  # the longest sequence any setting may ask for (an H200 holds ~1e6-token batches)
ITEMS = 10_000_000  # the most items any evaluation or task split may hold


@dataclass
class ArchConf:
    """Architecture numbers the FLOP ledger needs (names as in transformers' Qwen2Config)."""

    hidden_size: int = d(64, Int(1, 65536))  # d
    num_hidden_layers: int = d(2, Int(1, 1024))  # L
    num_attention_heads: int = d(4, Int(1, 4096))  # h
    num_key_value_heads: int = d(2, Int(1, 4096))  # h_kv (grouped-query attention)
    intermediate_size: int = d(128, Int(1, 1_048_576))  # f, MLP width
    vocab_size: int = d(257, Int(1, 16_777_216))  # V
    head_dim: Optional[int] = d(None, Int(1, 4096, null=True))  # d_h; None means hidden_size / num_attention_heads
    tie_word_embeddings: bool = d(False, Bool())  # one V x d matrix for the embedding and the head (memory ledger only)


ARCH_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
             "vocab_size", "head_dim", "tie_word_embeddings")  # the ArchConf fields, read from a config.json too


@dataclass
class LrConf:
    """The model family's learning rates, one per adapter choice: grpo.lr null takes the one of lora.enabled."""

    lora: Optional[float] = d(None, Real(0.0, 1.0, lo_open=True, null=True))  # with lora.enabled=true
    full: Optional[float] = d(None, Real(0.0, 1.0, lo_open=True, null=True))  # full fine-tuning (lora.enabled=false)


@dataclass
class ModelConf:
    name: str = d("tiny-s", NAME)  # short name used in job ids and reports
    path: str = d("zoo:tiny-s", PATH)  # HF id, local folder, or zoo:<name> (built offline on first use)
    arch: Optional[ArchConf] = d(None, Section(null=True))  # None = read from the model's config.json (config/derive.py)
    lr: LrConf = d(factory=LrConf, domain=Section())  # this family's learning rates (grpo.lr null takes one)
    budget_flops: Optional[float] = d(None, Real(0.0, 1e30, lo_open=True, null=True))  # a budget of this model's scale: budget.flops null takes it
    dtype: str = d("auto", Choice("auto", "float32", "bfloat16", "float16"))  # auto = bf16 on GPU, fp32 on CPU
    revision: Optional[str] = d(None, REVISION)  # hub commit to load (pin it for hub ids); ignored for local folders
    trust_remote_code: bool = d(False, Bool())  # runs code from the model repository: only with a revision pinned


@dataclass
class LoraConf:
    enabled: bool = d(True, Bool())  # False = full fine-tuning
    r: int = d(16, Int(1, 65536))  # adapter rank
    alpha: int = d(32, Int(1, 1_048_576))  # scaling alpha / r
    dropout: float = d(0.0, Real(0.0, 1.0, hi_open=True))  # dropout on the adapter input; 1 would drop everything
    target_modules: list[str] = d(
        factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        domain=ListOf(Text(1, 200), min_len=1, max_len=256))


@dataclass
class GrpoConf:
    prompts_per_iter: int = d(8, Int(1, 65536))  # B, prompts sampled per iteration
    group_size: int = d(8, Int(2, 4096))  # G, completions per prompt (search); >= 2: GRPO normalises within a group
    updates_per_batch: int = d(1, Int(1, 1024))  # mu, gradient passes per rollout batch (learning)
    lr: Optional[float] = d(None, Real(0.0, 1.0, lo_open=True, null=True))  # None = model.lr.lora or model.lr.full, by lora.enabled
    weight_decay: float = d(0.0, Real(0.0, 1.0))  # AdamW decoupled weight decay
    warmup_iters: int = d(0, Int(0, 100_000_000))  # linear lr warm-up, in iterations
    clip_eps: float = d(0.2, Real(0.0, 1.0, lo_open=True, hi_open=True))  # PPO/GRPO ratio clip epsilon
    beta: float = d(0.0, Real(0.0, 100.0))  # KL penalty to the reference (base model, adapter disabled); 0 = no reference forward
    scale_rewards: bool = d(True, Bool())  # divide advantages by the group's std (False = Dr. GRPO)
    loss_agg: str = d("token", Choice("token", "sequence"))  # token = mean over all completion tokens; sequence = mean per sequence, then over sequences
    skip_zero_advantage: bool = d(True, Bool())  # beta = 0 only: rows of advantage exactly 0 run no update pass (same loss and gradient); with beta > 0 every row stays (its KL has a gradient)
    expected_informative_share: Optional[float] = d(None, Real(0.0, 1.0, lo_open=True, null=True))  # planning: share of rows the update runs on; None = the measured default of the reward type (cost/budget.py INFORMATIVE_SHARE)
    max_grad_norm: float = d(1.0, Real(0.0, 1e6))  # gradient clipping; 0 = off
    update_group_size: Optional[int] = d(None, Int(2, 4096, null=True))  # m <= G completions per prompt the update keeps (rollout down-sampling); None = G
    downsample: str = d("max_variance", Choice("max_variance", "random"))  # which m of the G: max_variance (PODS, arXiv 2504.13818) | random
    grad_checkpointing: bool = d(False, Bool())  # recompute activations in backward (executed FLOPs +1 forward)
    micro_batch_size: Any = d("auto", Int(0, 1_048_576, special=("auto",)))  # sequences per forward/backward; 0 = the whole batch; auto = the largest that fits the device (memory ledger; CPU: 16)


@dataclass
class RolloutConf:
    backend: str = d("auto", Choice("auto", "lean", "hf", "vllm"))  # auto | lean | hf | vllm (auto: vllm when installed and on GPU, else lean)
    max_new_tokens: Optional[int] = d(None, Int(1, TOKENS, null=True))  # completion cap, tokens; None = task.max_new_tokens
    temperature: float = d(1.0, Real(0.0, 100.0, lo_open=True))  # sampling temperature (0 would be greedy: not a GRPO rollout)
    top_p: float = d(1.0, Real(0.0, 1.0, lo_open=True))  # nucleus sampling mass
    expected_completion_tokens: Optional[float] = d(None, Real(0.0, TOKENS, lo_open=True, null=True))  # planning estimate of the mean completion; None = task.expected_completion_tokens, else max_new_tokens
    gpu_memory_utilization: Optional[float] = d(None, Real(0.0, 1.0, lo_open=True, hi_open=True, null=True))  # vLLM only: GPU fraction for its weights + KV cache; None = sized from the plan (rollout_vllm.memory_fraction)
    max_model_len: Optional[int] = d(None, Int(2, 16 * TOKENS, null=True))  # vLLM only: longest prompt+completion, tokens; None = the task's longest prompt + max_new_tokens


@dataclass
class RewardModelConf:
    name: str = d("tiny-prm", NAME)
    path: str = d("zoo:tiny-prm", PATH)  # HF id, local folder, or zoo:<name>
    arch: Optional[ArchConf] = d(None, Section(null=True))  # None = read from the model's config.json (config/derive.py)
    format: str = d("classifier", Choice("classifier", "token", "logprob"))  # classifier (Qwen2.5-Math-PRM) | token (Math-Shepherd) | logprob (calibrated LM log-probs)
    num_labels: int = d(2, Int(1, 64))  # classifier head outputs (2: softmax p(label 1); 1: sigmoid)
    template: str = d("{question}\n{completion}", Text(1, 65536))  # the text the PRM reads
    step_tag: Optional[str] = d(None, Text(1, 100, null=True))  # appended after each step and read there (e.g. <extra_0>); None = read at the separator
    step_joiner: Optional[str] = d(None, Text(0, 100, null=True))  # joins tagged steps; None = the separator (or nothing if the tag ends with it)
    good_token: str = d("+", Text(1, 100))  # token format: p(good) / (p(good) + p(bad)) at the tag
    bad_token: str = d("-", Text(1, 100))
    revision: Optional[str] = d(None, REVISION)  # hub commit to load (pin it for hub ids); ignored for local folders
    trust_remote_code: bool = d(False, Bool())  # never needed for Qwen2.5-Math-PRM (its head is built here); only with a revision


@dataclass
class RewardConf:
    type: str = d("rule", Choice("rule", "prm"))  # rule (answer check, ~0 FLOPs) | prm (process reward model)
    model: Optional[RewardModelConf] = d(None, Section(null=True))  # the reward model, for type=prm
    aggregate: str = d("min", Choice("min", "prod", "last", "mean"))  # prm: per-step scores -> reward: min | prod | last | mean
    outcome_weight: float = d(0.0, Real(0.0, 1.0))  # prm: weight of the rule-based outcome reward mixed in
    step_separator: str = d("\n", Text(1, 100))
    batch_size: int = d(64, Int(1, 65536))  # prm scoring batch
    use_math_verify: bool = d(False, Bool())  # rule: use math-verify when installed (MATH-style answers)


@dataclass
class TaskConf:
    name: str = d("arithmetic", Choice("arithmetic", "gsm8k", "jsonl"))  # the training task (race_cli/tasks/targets.py)
    path: Optional[str] = d(None, OPT_PATH)  # gsm8k: folder/JSONL (None = the packaged copy, hub = openai/gsm8k); jsonl: file or hf:<id>
    num_eval: Optional[int] = d(200, Int(1, ITEMS, null=True))  # held-out items of the task's own target; None = the whole split
    num_train: Optional[int] = d(None, Int(1, INT_LIMIT, null=True))  # None = all (gsm8k, jsonl) / an unbounded stream (arithmetic)
    prompt_tokens: float = d(40.0, Real(0.0, TOKENS, lo_open=True))  # planning estimate of the mean prompt length, tokens
    max_new_tokens: Optional[int] = d(None, Int(1, TOKENS, null=True))  # the completion cap this task's answers need (rollout.max_new_tokens null takes it)
    expected_completion_tokens: Optional[float] = d(None, Real(0.0, TOKENS, lo_open=True, null=True))  # planning estimate of its mean completion; None = the cap
    min_ops: int = d(2, Int(1, 64))  # arithmetic: operations per problem
    max_ops: int = d(3, Int(1, 64))
    max_operand: int = d(99, Int(1, 1_000_000_000))
    eval_seed: int = d(1234, Int(0, SEED_MAX))  # the held-out set depends only on this: same items in every job
    # jsonl only (race_cli/tasks/jsonl.py):
    eval_path: Optional[str] = d(None, OPT_PATH)  # held-out rows from this file (or hf:<id>); None = hold out num_eval rows of path
    question_field: str = d("question", Text(1, 200))  # the row field holding the question
    answer_field: str = d("answer", Text(1, 200))  # the row field holding the gold answer
    answer_format: str = d("raw", Choice("raw", "hashes", "boxed"))  # raw (the field is the answer) | hashes ('... #### 42') | boxed (last \boxed{})
    grader: str = d("number", Choice("number", "math", "math-verify", "math-normalizer"))  # number ('#### N' prompts) | math | math-verify | math-normalizer (\boxed{} prompts)
    label: Optional[str] = d(None, Text(1, 100, null=True))  # target name in eval/<label>/accuracy; None = the file's stem
    split_train: str = d("train", Text(1, 200))  # hf: split names
    split_eval: str = d("test", Text(1, 200))


@dataclass
class BudgetConf:
    flops: Optional[float] = d(None, Real(0.0, 1e30, lo_open=True, null=True))  # C, total training FLOPs per job (model convention); None = model.budget_flops
    free_knob: str = d("iterations", Choice("iterations"))  # the knob the solver sets to spend C
    max_iterations: int = d(100000, Int(1, 100_000_000))  # cap on T, in the plan and the job: stop after this many (stop reason "iterations")


@dataclass
class EvalConf:
    at: list[float] = d(factory=lambda: [0.0, 0.125, 0.25, 0.5, 0.75, 1.0], domain=ListOf(Real(0.0, 1.0), max_len=1000))  # budget fractions: evaluate at the first iteration boundary at or past each (0 = start, 1 = end; both always run); never charged to the budget
    every: Optional[int] = d(None, Int(1, 100_000_000, null=True))  # also evaluate every K iterations; null = only at eval.at (the grids use eval.at)
    greedy: bool = d(True, Bool())  # with samples = 1: greedy decoding; false = one sample at the eval temperature
    batch_size: int = d(200, Int(1, 65536))  # prompts per generate call
    targets: list[str] = d(factory=list, domain=ListOf(Text(1, 100), max_len=64))  # arithmetic | arithmetic-hard | gsm8k | math500 | a jsonl label; [] = the task's own
    samples: int = d(1, Int(1, 1024))  # k completions per item; k > 1 samples at the eval temperature, item score = fraction correct
    # completions per item at the shared start evaluation (iteration 0), every gain's floor; null = samples
    start_samples: Optional[int] = d(None, Int(1, 1024, null=True))
    temperature: Optional[float] = d(None, Real(0.0, 100.0, lo_open=True, null=True))  # sampling temperature at evaluation; None = rollout.temperature
    max_items: Optional[int] = d(None, Int(1, ITEMS, null=True))  # first N items of every target (a subset for small runs); None = all
    max_items_by_target: dict[str, int] = d(factory=dict, domain=MapOf(Int(1, ITEMS), max_len=64))  # per-target N overriding max_items, e.g. {math500: 50}
    max_new_tokens: Optional[int] = d(None, Int(1, TOKENS, null=True))  # completion cap at evaluation; None = rollout.max_new_tokens, raised to what a target needs
    sample_seed: int = d(0, Int(0, INT_LIMIT))  # evaluation sampling stream: item i's k-th sample draws from (sample_seed, target, item id, k), never the training stream


@dataclass
class CheckpointConf:
    every: int = d(10, Int(1, 100_000_000))  # checkpoint every K iterations and at the end


@dataclass
class GridConf:
    """A named pilot grid: sweep axes (Hydra sweep strings) and overrides applied to every job."""

    name: str = d("none", NAME)
    description: str = d("", Text(0, 10_000))
    axes: dict[str, str] = d(factory=dict, domain=MapOf(Text(1, 100_000)))  # e.g. {"grpo.group_size": "4,8"}
    fixed: dict[str, Any] = d(factory=dict, domain=MapOf(AnyPlain()))  # e.g. {"budget.flops": 2e12}
    race: dict[str, Any] = d(factory=dict, domain=MapOf(AnyPlain()))  # e.g. {"max_seeds": 4}; plan/race_plan.py
    seed_sd: Optional[float] = d(None, Real(0.0, 1.0, null=True))  # race plan's seed spread without --seed-sd; plan/power.py


@dataclass
class RaceConfig:
    model: ModelConf = d(factory=ModelConf, domain=Section())
    lora: LoraConf = d(factory=LoraConf, domain=Section())
    grpo: GrpoConf = d(factory=GrpoConf, domain=Section())
    rollout: RolloutConf = d(factory=RolloutConf, domain=Section())
    reward: RewardConf = d(factory=RewardConf, domain=Section())
    task: TaskConf = d(factory=TaskConf, domain=Section())
    budget: BudgetConf = d(factory=BudgetConf, domain=Section())
    eval: EvalConf = d(factory=EvalConf, domain=Section())
    checkpoint: CheckpointConf = d(factory=CheckpointConf, domain=Section())
    grid: GridConf = d(factory=GridConf, domain=Section())
    seed: int = d(0, Int(0, SEED_MAX))  # training seed (torch, numpy, the prompt stream); numpy takes 0 .. 2**32 - 1
    device: str = d("auto", Text(1, 20, pattern=r"auto|cpu|cuda(:[0-9]{1,3})?", what="auto, cpu, cuda or cuda:N"))
    logger: str = d("none", Choice("none", "tensorboard", "wandb"))  # none | tensorboard | wandb (offline): metrics.jsonl is always written and is the source of truth
    threads: int = d(0, Int(0, 4096))  # torch CPU threads; 0 = leave torch's default (race run divides the cores)


register_root(RaceConfig)  # domains() walks it (config/domains.py cannot import this module back)


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


def _get(cfg: Any, dotted: str) -> Any:
    node = cfg
    for part in dotted.split("."):
        node = node[part] if isinstance(node, dict) else getattr(node, part)
        if node is None:
            break
    return node


def validate(cfg: Any) -> list[str]:
    """Every problem of one composed config, as messages (empty list = valid): each field against its
    domain, then the cross-field rules, so that one run reports every problem at once. A rule is
    written for in-domain values: where a field is out of its domain a rule that trips over its type
    is skipped (the field's own message already names the problem)."""
    problems = field_problems(cfg)
    for rule in CROSS_FIELD_RULES:
        try:
            found = rule(cfg)
        except Exception:  # only while some field is already out of its domain
            if not problems:
                raise
            continue
        problems.extend(m for m in found if m not in problems)
    return problems


# --- rules that relate two keys (a domain cannot say them) -------------------------------------
# Each rule takes a config whose every field is in its domain and returns messages. The list
# CROSS_FIELD_RULES below is the one place they are named; add a rule there, not elsewhere.

def completion_estimate_rule(cfg: Any) -> list[str]:
    """rollout.expected_completion_tokens <= rollout.max_new_tokens (a mean cannot pass the cap)."""
    problems = []
    for part in ("rollout", "task"):  # the task's own pair too: rollout's null ones take them (config/derive.py)
        ect, cap = _get(cfg, f"{part}.expected_completion_tokens"), _get(cfg, f"{part}.max_new_tokens")
        if ect is not None and cap is not None and ect > cap:
            problems.append(f"{part}.expected_completion_tokens={ect!r} is out of range: expected a mean completion "
                            f"length in (0, {part}.max_new_tokens={cap}].")
    return problems


def model_len_rule(cfg: Any) -> list[str]:
    """rollout.max_model_len > rollout.max_new_tokens (it holds the prompt and the completion)."""
    mml, cap = _get(cfg, "rollout.max_model_len"), _get(cfg, "rollout.max_new_tokens")
    if mml is not None and cap is not None and mml <= cap:
        return [f"rollout.max_model_len={mml!r} is out of range: expected more tokens than rollout.max_new_tokens="
                f"{cap} (it holds the prompt and the completion), or null."]
    return []


def update_group_rule(cfg: Any) -> list[str]:
    """grpo.update_group_size (m) <= grpo.group_size (G): the update keeps m of the G completions."""
    m, g = _get(cfg, "grpo.update_group_size"), _get(cfg, "grpo.group_size")
    if m is not None and m > g:
        return [f"grpo.update_group_size={m!r} is out of range: expected null (= grpo.group_size) or an integer in "
                f"[2, grpo.group_size={g}]: the completions per prompt the update keeps."]
    return []


def arithmetic_ops_rule(cfg: Any) -> list[str]:
    """task.min_ops <= task.max_ops."""
    lo, hi = _get(cfg, "task.min_ops"), _get(cfg, "task.max_ops")
    if lo > hi:
        return [f"task.min_ops={lo} is more than task.max_ops={hi}: expected min_ops <= max_ops."]
    return []


def prm_model_rule(cfg: Any) -> list[str]:
    """reward.type=prm needs a reward.model section."""
    if _get(cfg, "reward.type") == "prm" and _get(cfg, "reward.model") is None:
        return ["reward.type=prm needs reward.model (its path and architecture): use reward=prm."]
    return []


def targets_rule(cfg: Any) -> list[str]:
    """eval.targets and eval.max_items_by_target name known targets (the task's own is one of them)."""
    from race_cli.tasks.targets import target_problems

    return target_problems(cfg)


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


VLLM_MAX_TEMPERATURE = 2.0  # vLLM's SamplingParams refuses temperature > 2 (vllm/sampling_params.py _verify_args, 0.33)


def vllm_temperature_rule(cfg: Any) -> list[str]:
    """rollout.temperature and eval.temperature <= 2 when rollout.backend=vllm (lean and hf take any T > 0)."""
    if _get(cfg, "rollout.backend") != "vllm":
        return []
    problems = []
    for key in ("rollout.temperature", "eval.temperature"):
        t = _get(cfg, key)
        if t is not None and t > VLLM_MAX_TEMPERATURE:
            problems.append(f"{key}={t!r} is out of range for rollout.backend=vllm: vLLM refuses a temperature above "
                            f"{VLLM_MAX_TEMPERATURE:g} (expected (0, {VLLM_MAX_TEMPERATURE:g}]); lower it, or use "
                            "rollout.backend=lean or hf.")
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


def heads_rule(cfg: Any) -> list[str]:
    """Attention heads divide into key/value heads, and the hidden size into heads (unless head_dim is set)."""
    problems = []
    for key in ("model.arch", "reward.model.arch"):
        try:
            arch = _get(cfg, key)
        except (AttributeError, KeyError, TypeError):
            continue
        if arch is None:
            continue
        h, kv = _get(arch, "num_attention_heads"), _get(arch, "num_key_value_heads")
        dim = _get(arch, "hidden_size")
        if h % kv:
            problems.append(f"{key}: num_attention_heads={h} must be a multiple of num_key_value_heads={kv}.")
        elif _get(arch, "head_dim") is None and dim % h:
            problems.append(f"{key}: hidden_size={dim} is not divisible by num_attention_heads={h}; set head_dim.")
    return problems


def start_samples_rule(cfg: Any) -> list[str]:
    """eval.start_samples >= eval.samples, and sampled: a start scored on fewer samples, or greedy against
    sampled finals, would not be paired item by item with the same common random numbers."""
    k0, k = _get(cfg, "eval.start_samples"), _get(cfg, "eval.samples")
    if k0 is None:
        return []
    if k0 < k:
        return [f"eval.start_samples={k0} is below eval.samples={k}: the start would be measured worse than "
                f"every evaluation it is paired with. Expected null or at least {k}."]
    if k0 > 1 and k == 1 and _get(cfg, "eval.greedy"):
        return [f"eval.start_samples={k0} samples the start while eval.greedy=true scores every other "
                "evaluation greedily: the gain would compare two decodings. Set eval.greedy=false (and "
                "eval.samples), or leave eval.start_samples null."]
    return []


CROSS_FIELD_RULES: list[Callable[[Any], list[str]]] = [
    start_samples_rule,
    completion_estimate_rule,
    model_len_rule,
    update_group_rule,
    arithmetic_ops_rule,
    prm_model_rule,
    targets_rule,
    vllm_problems,
    vllm_temperature_rule,
    remote_code_problems,
    heads_rule,
]
