"""The memory model: peak device bytes of one GRPO job, per phase, from its config alone (no torch).

    from race_cli.cost.memory import job_memory
    m = job_memory(cfg_dict, device_bytes=80 * GiB)   # m.peak, m.phase, m.micro_batch, m.phases

Beside the FLOP formulas (flops.py) and with the same architecture numbers: L layers, d hidden,
q = h·d_h query width, k = h_kv·d_h key/value width, f MLP width, V vocabulary, r LoRA rank,
b bytes per weight element (2 for bf16). A phase's peak is what lives on the device at its
high-water mark:

| phase   | resident                                    | transient at the peak                        |
|---------|---------------------------------------------|----------------------------------------------|
| rollout | policy weights, trainable state, PRM weights| KV cache of N·(P+C) positions + sampling     |
| update  | same                                        | activations of one micro-batch + log-probs   |
| reward  | same                                        | one PRM forward of reward.batch_size rows    |

The per-token activation bytes are counted from the tensors autograd saves in one HF Qwen2
decoder layer (SDPA attention, grouped-query K/V repeated to h heads, PEFT LoRA whose
adapters run in float32 on a bf16 base — PEFT's default upcast); `race mem --audit`
(memory_audit.py) measures the real code on fake tensors and checks these figures within 15%.

- full fine-tuning saves per layer and token: 2 RMSNorms (float32 input 4d, rsqrt 4, the bf16
  normalised copy 2d for the weight's gradient), the q/k/v and MLP inputs (2d each), q after
  RoPE and the repeated K, V (2q each), the attention output (2q) and its log-sum-exp (4h),
  gate, up, SiLU and product (2f each): 16d + 8q + 8f + 4h + 8 bytes;
- LoRA (frozen bf16 base): no normalised copies, but each adapter saves its input cast to
  float32 (4d for q, k, v, gate, up; 4q for o; 4f for down) and its rank-r output (4r):
  28d + 12q + 10f + 4h + 28r + 8 bytes;
- gradient checkpointing keeps only each layer's input (2d) and recomputes one layer at a time;
- no padding mask: the update re-packs each row to start at column 0 and runs plain causal
  attention (engine/logprobs.completion_logprobs);
- log-probs run in blocks of `block_rows(V)` rows (engine/grpo.py), on the real completion
  tokens only: their backward holds
  about 2b + 16 bytes per (row, vocabulary) element (bf16 logits, their float32 copy,
  the softmax and its gradient in float32, the bf16 gradient), the no-grad forward 2b + 4.

The optimizer is AdamW: two states in the trainable parameters' dtype (float32 LoRA adapters;
full fine-tuning in the model dtype), plus a gradient each. Micro-batching changes no FLOPs (the
same tokens run, in pieces).

Every process that touches the GPU holds a CUDA context (`CUDA_CONTEXT_BYTES`, outside any
allocator): one for the training process, a second for vLLM's engine-core process (its V1
engine runs the model in a child process, VLLM_ENABLE_V1_MULTIPROCESSING=1 by default).

The lean sampler (engine/rollout_lean.py `read_weights`) builds new q|k|v and gate|up matrices for
every layer at each call and keeps them through the call (`fused_weights` in its rollout phase;
about 7.9 GiB for a 7B policy in bf16; float32 LoRA maps merged with their adapters are new
matrices too).

vLLM and the trainer coexist on one device through two allocators that do not share blocks:

| phase   | trainer (PyTorch's caching allocator)           | vLLM (its cumem pool)                       |
|---------|-------------------------------------------------|---------------------------------------------|
| rollout | resident + gradients (its cache released first) | awake: gpu_memory_utilization x device      |
| reward  | resident + gradients + one PRM forward          | asleep: `VLLM_ASLEEP_BYTES`                 |
| update  | resident + one micro-batch's activations        | asleep: `VLLM_ASLEEP_BYTES`                 |

Sleep (level 1) moves vLLM's weights to host memory and frees its KV cache; what stays is its
memory outside the cumem pool (CUDA-graph pool, sampler buffers: at most its headroom). Where
the release has it (vLLM 0.33: `sleep(level=0)` + `release_kv_cache_memory()`), the job can
instead free only the KV cache and keep the weights on the device (`sleep_mode` "kv_cache"):
no copy to pinned host memory and back each iteration, at the price of the weights (and one
LoRA slot) beside the update. `choose_sleep_mode` takes it when the job still fits without
gradient checkpointing that level-1 sleep would not need (a smaller micro-batch changes no
FLOPs, checkpointing adds a forward); otherwise level 1, whose host copy `pinned_host_bytes`
counts and whose transfer seconds cost/walltime.py `sleep_seconds` prices.

With two GPUs per job (`reward_gpu`: engine/setup.reward_device puts the PRM on the second one)
the PRM's weights and forward live on that GPU (phase `reward_gpu`), not on the policy's. The
trainer's allocator keeps the update's high-water mark cached after the update; vLLM's wake_up
cannot use those blocks, so the job releases them (gc + torch.cuda.empty_cache,
engine/rollout_vllm.release_cached_memory) before every wake. `MemSpec.release_between_phases`
is that step: without it the rollout phase also holds `trainer_cache` (the update's transient).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from race_cli.cost.budget import job_backend
from race_cli.cost.flops import LAYER_MATRICES, Arch
from race_cli.errors import RaceError

GiB = 2**30
LOGIT_BLOCK = 256 * 151_936  # logits (rows x vocabulary) alive at once in the log-probs: 256 rows at Qwen2.5's V
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
HEADROOM = 0.9  # plan to use at most this share of the device (allocator fragmentation, buffers)
VLLM_HEADROOM_BYTES = 2 * GiB  # vLLM's activations, CUDA graphs and sampler buffers beyond weights + KV cache
CUDA_CONTEXT_BYTES = 512 * 2**20  # one process's CUDA context (CUDA 12, lazy module loading: ~0.3-0.6 GiB on H100/H200)
VLLM_ASLEEP_BYTES = VLLM_HEADROOM_BYTES  # vLLM's memory outside its cumem pool, kept while asleep (level 1)
VLLM_MIN_FRACTION = 0.05  # rollout_vllm never asks vLLM for less than this share of the device
VLLM_KV_MARGIN = 1.1  # the block allocator's rounding on weights + KV cache
SLEEP_MODES = ("kv_cache", "weights")  # release only the KV cache (weights stay) | level 1 (weights to host)


# --- parameters ------------------------------------------------------------------------------------


def _widths(a: Arch) -> tuple[int, int]:
    """(q, k): the query width h·d_h and the key/value width h_kv·d_h (the output sizes of Arch.matrices)."""
    m = a.matrices()
    return m["q_proj"][1], m["k_proj"][1]


def layer_params(a: Arch) -> int:
    """Weights of one decoder layer: projections (+ q/k/v biases) and two RMSNorm scales."""
    q, k = _widths(a)
    return sum(i * o for i, o in a.matrices().values()) + (q + 2 * k) + 2 * a.hidden_size


def model_params(a: Arch, *, tied: bool = False, head_outputs: int | None = None) -> int:
    """All weights: embedding, layers, final norm and the head (V outputs, or `head_outputs` for a classifier)."""
    d, V = a.hidden_size, a.vocab_size
    head = d * (head_outputs if head_outputs is not None else V)
    return V * d + a.num_hidden_layers * layer_params(a) + d + (0 if tied and head_outputs is None else head)


def lora_params(a: Arch, r: int, targets: tuple[str, ...] = LAYER_MATRICES) -> int:
    """Adapter weights: r·(d_in + d_out) per adapted matrix per layer."""
    shapes = a.matrices()
    return a.num_hidden_layers * sum(r * sum(shapes[t]) for t in targets if t in shapes)


# --- activations -----------------------------------------------------------------------------------


def layer_activation_bytes(a: Arch, lora_r: int | None) -> int:
    """Bytes autograd saves per token in one decoder layer (see the module docstring), bf16 weights."""
    d, f, h = a.hidden_size, a.intermediate_size, a.num_attention_heads
    q, k = _widths(a)
    kv_saved = q if a.num_attention_heads > a.num_key_value_heads else k  # repeat_kv copies K, V to h heads
    attn = 4 * q + 4 * kv_saved + 4 * h  # q after RoPE, K, V, output (2 bytes each) + float32 log-sum-exp
    if lora_r:
        return 28 * d + attn + 4 * q + 10 * f + 28 * lora_r + 8
    return 16 * d + attn + 8 * f + 8


def layer_backward_bytes(a: Arch) -> int:
    """Gradient temporaries per token while one layer runs backward (float32 hidden grads, MLP grads)."""
    return 12 * a.hidden_size + 6 * a.intermediate_size


def block_rows(vocab: int) -> int:
    """Rows per log-prob block (engine/grpo.py uses this): as many as keep [rows, V] within LOGIT_BLOCK, >= 1."""
    return max(1, LOGIT_BLOCK // max(int(vocab), 1))


def logprob_bytes(rows: int, vocab: int, dtype_bytes: int, *, grad: bool) -> int:
    """Peak bytes of the chunked log-probs of `rows` positions (one block of `block_rows(V)` at a time)."""
    block = min(rows, block_rows(vocab))
    return block * vocab * ((2 * dtype_bytes + 16) if grad else (dtype_bytes + 4))


def kv_cache_bytes(a: Arch, tokens: int, dtype_bytes: int) -> int:
    """K and V of every layer for `tokens` cached positions."""
    _, k = _widths(a)
    return 2 * a.num_hidden_layers * k * dtype_bytes * tokens


def inference_layer_bytes(a: Arch, lora_r: int | None = None) -> int:
    """Per-token transient of one layer's no-grad forward: the MLP's gate, up, SiLU, product, residuals
    (+ the float32 copy of the down projection's input that a LoRA adapter makes)."""
    d, f = a.hidden_size, a.intermediate_size
    q, k = _widths(a)
    return 8 * f + 4 * q + 4 * k + 8 * d + (4 * f if lora_r else 0)


# --- one job ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemSpec:
    """What a job's memory depends on (read from its composed config by `spec_from_config`)."""

    arch: Arch
    tied: bool = False  # tie_word_embeddings (Qwen2.5 0.5B-3B): one V x d matrix for input and head
    dtype_bytes: int = 2  # policy weights (bf16 on GPU)
    lora_r: int | None = 16  # None = full fine-tuning
    lora_targets: tuple[str, ...] = LAYER_MATRICES
    sequences: int = 64  # N = B·G completions per iteration
    prompt_len: int = 150  # padded prompt length, tokens
    completion_len: int = 48  # max_new_tokens
    micro_batch: int = 64  # sequences per forward/backward
    grad_checkpointing: bool = False
    updates_per_batch: int = 1
    beta: float = 0.0
    backend: str = "hf"  # hf | lean | vllm (the backend `rollout.backend` resolves to on the planned device)
    group_size: int = 1  # G: the lean backend prefills one row per group (sequences / G rows)
    vllm_fraction: float | None = None  # vLLM's gpu_memory_utilization; None = sized as rollout_vllm.memory_fraction
    reward: Arch | None = None  # the PRM's architecture (None = rule reward)
    reward_head: int | None = 2  # classifier outputs, or None for an LM head (token / logprob formats)
    reward_batch: int = 16
    reward_len: int = 0  # tokens the PRM reads per sequence (template + question + completion)
    release_between_phases: bool = True  # vLLM only: the trainer's cache is emptied before every wake_up
    eval_completion_len: int = 0  # the evaluation's completion cap when larger (vLLM's max_model_len holds it)
    sleep_mode: str = "weights"  # vLLM only: "kv_cache" (weights stay on the device) or "weights" (level 1)
    reward_gpu: bool = False  # the PRM on a second GPU (engine/setup.reward_device with 2+ GPUs per job)
    expected_completion_len: int = 0  # rollout.expected_completion_tokens: vLLM's smallest KV cache (0: no cap)


@dataclass
class JobMemory:
    """Peak device bytes of one job: per phase, with the parts that make up each."""

    phases: dict[str, dict[str, int]] = field(default_factory=dict)  # phase -> part -> bytes
    micro_batch: int = 0
    grad_checkpointing: bool = False
    device_bytes: int | None = None  # the vLLM reservation scales with it
    vllm_fraction: float | None = None  # vLLM only: the gpu_memory_utilization the plan sized (None: not vLLM)
    sleep_mode: str | None = None  # vLLM only: "kv_cache" or "weights" (see choose_sleep_mode)
    pinned_host_bytes: int = 0  # host memory level-1 sleep pins for vLLM's weights (0 otherwise)
    sleep_weight_bytes: int = 0  # bytes each level-1 sleep moves to the host and each wake back (0 otherwise)
    vllm_capped: bool = False  # vLLM's fraction was cut to the room beside the trainer (vllm_room_fraction)

    def total(self, phase: str) -> int:
        return sum(self.phases[phase].values())

    @property
    def peak(self) -> int:
        return max(self.total(p) for p in self.phases)

    @property
    def phase(self) -> str:
        return max(self.phases, key=self.total)


def resident_bytes(s: MemSpec) -> dict[str, int]:
    """What lives on the device through every phase: weights, trainable state, the PRM."""
    out = {"policy_weights": model_params(s.arch, tied=s.tied) * s.dtype_bytes}
    if s.lora_r:
        n = lora_params(s.arch, s.lora_r, s.lora_targets)
        out["adapter_and_optimizer"] = n * (4 + 8)  # float32 weights and AdamW's two states
    else:
        n = model_params(s.arch, tied=s.tied)
        out["optimizer"] = n * 2 * s.dtype_bytes  # two AdamW states in the model dtype
        if s.beta > 0:
            out["reference_weights"] = n * s.dtype_bytes  # full FT keeps a frozen copy for the KL
    if s.reward is not None and not s.reward_gpu:  # on its own GPU it is charged there (phase reward_gpu)
        out["reward_weights"] = model_params(s.reward, head_outputs=s.reward_head) * s.dtype_bytes
    return out


def reward_gpu_bytes(s: MemSpec) -> dict[str, int]:
    """The second GPU of a two-GPU job: the PRM's weights, its forward and its process's CUDA context."""
    return {"reward_weights": model_params(s.reward, head_outputs=s.reward_head) * s.dtype_bytes,
            **reward_bytes(s), "cuda_context": CUDA_CONTEXT_BYTES}


def grad_bytes(s: MemSpec) -> int:
    """The gradients: alive from backward until the next pass's zero_grad (so through rollout and reward)."""
    if s.lora_r:
        return lora_params(s.arch, s.lora_r, s.lora_targets) * 4
    return model_params(s.arch, tied=s.tied) * s.dtype_bytes


def update_bytes(s: MemSpec, micro_batch: int, grad_checkpointing: bool) -> dict[str, int]:
    """Transient bytes of one micro-batch's forward + backward (the update's high-water mark).

    The gradients are set to None before each pass: at the peak (backward's start, all
    activations alive) only the head's own gradient exists yet (full fine-tuning), and by the
    time all gradients exist the activations are gone.
    """
    a, S, n = s.arch, s.prompt_len + s.completion_len, micro_batch
    tokens, L = n * S, a.num_hidden_layers
    layer = layer_activation_bytes(a, s.lora_r)
    head = logprob_bytes(n * s.completion_len, a.vocab_size, s.dtype_bytes, grad=True)
    back = tokens * layer_backward_bytes(a)
    outside = tokens * 4 * a.hidden_size  # embeddings' output, the final norm (float32), the hidden slice
    if not s.lora_r:
        head += a.vocab_size * a.hidden_size * s.dtype_bytes  # the head's weight gradient, first to appear
    if grad_checkpointing:
        saved = tokens * L * 2 * a.hidden_size
        during = max(head, tokens * layer + back)  # one layer recomputed, then its backward
    else:
        saved = tokens * L * layer
        during = max(head, back)
    return {"activations": saved + outside, "backward_or_logprobs": max(during, grad_bytes(s) - saved - outside)}


def logprob_forward_bytes(s: MemSpec, micro_batch: int) -> int:
    """The no-grad log-prob forward (old policy when mu > 1, reference when beta > 0)."""
    tokens = micro_batch * (s.prompt_len + s.completion_len)
    body = tokens * inference_layer_bytes(s.arch, s.lora_r)  # while a layer runs
    head = tokens * 4 * s.arch.hidden_size + logprob_bytes(micro_batch * s.completion_len, s.arch.vocab_size,
                                                           s.dtype_bytes, grad=False)  # hidden states + one block
    return max(body, head)


def vllm_weight_bytes(a: Arch, dtype_bytes: int, lora_r: int | None,
                      lora_targets: tuple[str, ...] = LAYER_MATRICES) -> int:
    """vLLM's copy of the policy: every weight (untied worst case: embedding and head apart) and one
    LoRA slot, in the model dtype; what level-1 sleep copies to pinned host memory."""
    weights = model_params(a) * dtype_bytes
    if lora_r:
        weights += lora_params(a, lora_r, lora_targets) * dtype_bytes
    return weights


def vllm_need(a: Arch, *, dtype_bytes: int, lora_r: int | None, lora_targets: tuple[str, ...] = LAYER_MATRICES,
              sequences: int, max_model_len: int) -> int:
    """Bytes vLLM needs: its weights + a KV cache holding every sequence at max_model_len, +10%, + its headroom.
    One function for the plan (`vllm_need_bytes`) and the job (rollout_vllm.memory_fraction)."""
    kv = kv_cache_bytes(a, sequences * max_model_len, dtype_bytes)
    return int((vllm_weight_bytes(a, dtype_bytes, lora_r, lora_targets) + kv) * VLLM_KV_MARGIN + VLLM_HEADROOM_BYTES)


def vllm_fraction(need_bytes: float, device_bytes: int) -> float:
    """The gpu_memory_utilization vLLM is started with for `need_bytes`: their share of the device, at least
    VLLM_MIN_FRACTION, rounded to 3 decimals (vLLM then reserves exactly fraction x device)."""
    return round(max(need_bytes / device_bytes, VLLM_MIN_FRACTION), 3)


def vllm_need_bytes(s: MemSpec) -> int:
    """What the job's vLLM engine needs when rollout.gpu_memory_utilization is null (`vllm_need` of the
    job's batch at its max_model_len), before the fraction's floor and rounding."""
    return vllm_need(s.arch, dtype_bytes=s.dtype_bytes, lora_r=s.lora_r, lora_targets=s.lora_targets,
                     sequences=s.sequences, max_model_len=s.prompt_len + max(s.completion_len, s.eval_completion_len))


def fused_weight_bytes(s: MemSpec) -> int:
    """The lean sampler's per-call copies (engine/rollout_lean.py read_weights): q|k|v and gate|up of every
    layer concatenated (weights + q/k/v biases); with float32 LoRA weights, the targeted o and down
    maps merged with their adapters (`merged`) are new matrices as well."""
    q, k = _widths(s.arch)
    d, f, L = s.arch.hidden_size, s.arch.intermediate_size, s.arch.num_hidden_layers
    per_layer = d * (q + 2 * k) + (q + 2 * k) + 2 * d * f
    if s.lora_r and s.dtype_bytes == 4:
        per_layer += q * d * ("o_proj" in s.lora_targets) + f * d * ("down_proj" in s.lora_targets)
    return L * per_layer * s.dtype_bytes


def vllm_reserved_bytes(s: MemSpec, device_bytes: int | None) -> int:
    """vLLM's reservation while awake: gpu_memory_utilization x the device (vLLM requests exactly that),
    the fraction set by hand or `vllm_fraction` of what it needs (the job's own rule)."""
    if device_bytes is None:
        return 0
    fraction = s.vllm_fraction if s.vllm_fraction is not None else vllm_fraction(vllm_need_bytes(s), device_bytes)
    return int(fraction * device_bytes)


def rollout_bytes(s: MemSpec, device_bytes: int | None) -> dict[str, int]:
    """KV cache and sampling of one rollout batch (HF generate or lean), or vLLM's reservation.

    lean holds the same B·G-row KV cache as HF generate but prefills one row per group
    (engine/rollout_lean.py) and holds its fused weights; its prefill term is modelled, not audited
    (the audit covers HF)."""
    if s.backend == "vllm":  # awake; the trainer keeps its resident state and gradients beside it
        return {"vllm_reserved": vllm_reserved_bytes(s, device_bytes)}
    tokens = s.sequences * (s.prompt_len + s.completion_len)
    N, V = s.sequences, s.arch.vocab_size
    rows = s.sequences // max(s.group_size, 1) if s.backend == "lean" else s.sequences  # lean: one per group
    prefill = rows * s.prompt_len * inference_layer_bytes(s.arch, s.lora_r)
    out = {"kv_cache": kv_cache_bytes(s.arch, tokens, s.dtype_bytes),
           "kv_growth": kv_cache_bytes(s.arch, tokens, s.dtype_bytes) // s.arch.num_hidden_layers,  # one layer's cat
           "sampling_or_prefill": max(N * V * (s.dtype_bytes + 4 * 3), prefill)}
    if s.backend == "lean":
        out["fused_weights"] = fused_weight_bytes(s)
    return out


def reward_layer_bytes(a: Arch) -> int:
    """Per-token peak of one decoder layer in the PRM's scoring forward (no grad, no KV cache): inside the
    MLP, SiLU(gate), up and their product (2f each), beside the layer's input and residual stream and the
    attention output (4d + 4q), and a few ids and norm scalars (40). Fitted to memory_audit.measure_reward
    on four shapes (6f + 8d + 33 measured where q = d) and checked by its audit cases."""
    q, _ = _widths(a)
    return 6 * a.intermediate_size + 4 * a.hidden_size + 4 * q + 40


def reward_bytes(s: MemSpec) -> dict[str, int]:
    """One PRM forward over reward_batch sequences (no grad, no KV cache: rewards/prm.score_logits passes
    use_cache=False): a layer's transient, the [n, S, S] boolean causal mask, the head's scores."""
    if s.reward is None:
        return {}
    n, S = s.reward_batch, s.reward_len
    out = n * S * (s.reward_head if s.reward_head is not None else s.reward.vocab_size) * (s.dtype_bytes + 4)
    return {"reward_forward": n * S * reward_layer_bytes(s.reward) + n * S * S + out}


def job_memory(s: MemSpec, device_bytes: int | None = None) -> JobMemory:
    """The job's planned peak per phase at its micro-batch and checkpointing setting."""
    res = resident_bytes(s)
    mb = s.micro_batch
    upd = update_bytes(s, mb, s.grad_checkpointing)
    if s.updates_per_batch > 1 or s.beta > 0:  # the no-grad forwards before the passes, their log-probs kept
        upd = dict(upd)
        upd["old_ref_logprobs"] = s.sequences * s.completion_len * 4 * (int(s.updates_per_batch > 1) + int(s.beta > 0))
    grads = {"gradients": grad_bytes(s)}
    phases = {"rollout": res | grads | rollout_bytes(s, device_bytes), "update": res | upd}
    if s.reward is not None:
        phases["reward"] = res | grads | ({} if s.reward_gpu else reward_bytes(s))
    nograd = res | {"logprob_forward": logprob_forward_bytes(s, mb)}
    if sum(nograd.values()) > sum(phases["update"].values()):
        phases["update"] = nograd
    fraction = mode = None
    pinned = moved = 0
    capped = False
    if s.backend == "vllm":
        phases = coexist_with_vllm(s, phases)
        mode = s.sleep_mode
        if mode == "weights":
            moved = pinned = vllm_weight_bytes(s.arch, s.dtype_bytes, s.lora_r, s.lora_targets)
        if device_bytes:
            room = vllm_room_fraction(s, phases["rollout"], device_bytes)
            if room is not None:
                phases["rollout"]["vllm_reserved"], capped = int(room * device_bytes), True
            fraction = round(phases["rollout"]["vllm_reserved"] / device_bytes, 3)
    for phase in phases.values():  # the training process's own context, in every phase
        phase["cuda_context"] = CUDA_CONTEXT_BYTES
    if s.reward is not None and s.reward_gpu:
        phases["reward_gpu"] = reward_gpu_bytes(s)
    return JobMemory(phases, mb, s.grad_checkpointing, device_bytes, fraction, mode, pinned, moved, capped)


def vllm_room_fraction(s: MemSpec, rollout: dict[str, int], device_bytes: int) -> float | None:
    """vLLM's fraction cut to the room the trainer leaves it in the rollout phase, or None (no cut).

    The job's rule (`vllm_need_bytes`) sizes vLLM's KV cache for every one of the B·G sequences at
    max_model_len at once, the worst case. When that does not fit beside the trainer (its resident state,
    gradients, a PRM on the same GPU), vLLM gets what is left within HEADROOM instead, provided the cache
    still holds every sequence at the expected completion length (rollout.expected_completion_tokens): vLLM
    then runs as many sequences at once as its blocks hold and queues (or recomputes) the rest, which changes
    the rollout's seconds, never its tokens or FLOPs. Only where the fraction is the job's own (not set by
    hand); None when the full cache fits, or when even the expected lengths would not (then refused)."""
    if s.vllm_fraction is not None or not s.expected_completion_len:
        return None
    others = sum(v for k, v in rollout.items() if k != "vllm_reserved") + CUDA_CONTEXT_BYTES  # + the trainer's
    room = math.floor((device_bytes * HEADROOM - others) / device_bytes * 1000) / 1000  # vLLM takes 3 decimals
    if rollout["vllm_reserved"] <= room * device_bytes:
        return None
    floor = vllm_need(s.arch, dtype_bytes=s.dtype_bytes, lora_r=s.lora_r, lora_targets=s.lora_targets,
                      sequences=s.sequences, max_model_len=s.prompt_len + s.expected_completion_len)
    return room if room * device_bytes >= floor and room >= VLLM_MIN_FRACTION else None


def vllm_note(cfg: dict, mem: JobMemory) -> str | None:
    """One line on a vLLM job's engine: its fraction, how many sequences its KV cache holds at full length, and
    where the plan cut it to the room beside the trainer (vllm_room_fraction); None for other backends."""
    if mem.vllm_fraction is None or not mem.device_bytes or "vllm_reserved" not in mem.phases.get("rollout", {}):
        return None
    s = spec_from_config(cfg, vllm_installed=True)
    full = s.prompt_len + max(s.completion_len, s.eval_completion_len)
    kv = ((mem.phases["rollout"]["vllm_reserved"] - VLLM_HEADROOM_BYTES) / VLLM_KV_MARGIN
          - vllm_weight_bytes(s.arch, s.dtype_bytes, s.lora_r, s.lora_targets))
    held = min(s.sequences, max(0, int(kv // (kv_cache_bytes(s.arch, 1, s.dtype_bytes) * full))))
    text = (f"vLLM: gpu_memory_utilization {mem.vllm_fraction:.3f}, a KV cache for {held} of the {s.sequences} "
            f"sequences at full length ({full} tokens)")
    if mem.vllm_capped:
        whole = vllm_fraction(vllm_need_bytes(s), mem.device_bytes)
        text += (f"; cut from {whole:.3f} to the room the trainer leaves: every sequence still fits at its expected "
                 f"length ({s.prompt_len + s.expected_completion_len} tokens, {s.expected_completion_len} of them "
                 "completion), and vLLM queues the last ones when nearly all run to the cap (the rollout's tokens and "
                 "FLOPs are unchanged)")
    return text + "."


def coexist_with_vllm(s: MemSpec, phases: dict[str, dict[str, int]]) -> dict:
    """The phases as they share the device with a vLLM engine (the table in the module docstring).

    vLLM's engine-core process holds its own CUDA context throughout; asleep (reward, update) it
    keeps VLLM_ASLEEP_BYTES. Awake (rollout), it holds its whole reservation, and the trainer holds
    its resident state and gradients, plus, unless its cache is released before the wake
    (`release_between_phases`), every block the update left cached in its allocator.
    """
    out = {}
    for name, parts in phases.items():
        parts = dict(parts) | {"vllm_context": CUDA_CONTEXT_BYTES}
        if name != "rollout":
            parts["vllm_asleep"] = VLLM_ASLEEP_BYTES
            if s.sleep_mode == "kv_cache":  # only the KV cache was released: the weights stay beside the update
                parts["vllm_weights"] = vllm_weight_bytes(s.arch, s.dtype_bytes, s.lora_r, s.lora_targets)
        out[name] = parts
    if not s.release_between_phases:  # the update's blocks stay cached in the trainer's allocator
        def trainer(parts):
            return sum(v for k, v in parts.items() if not k.startswith("vllm_"))
        high = max(trainer(p) for n, p in out.items() if n != "rollout")
        out["rollout"]["trainer_cache"] = max(0, high - trainer(out["rollout"]))
    return out


def choose_sleep_mode(s: MemSpec, device_bytes: int, *, kv_release: bool, auto: bool) -> str:
    """How a vLLM job frees the device for its update: "kv_cache" (release the KV cache only, the weights
    stay; needs a vLLM with release_kv_cache_memory, `kv_release`) when the job still fits that way
    without gradient checkpointing level-1 sleep would not need (`auto`: a micro-batch the fit may
    shrink; else the configured one), otherwise "weights" (level 1: weights to pinned host memory)."""
    if s.backend != "vllm" or not kv_release:
        return "weights"
    kept, moved = replace(s, sleep_mode="kv_cache"), replace(s, sleep_mode="weights")
    if auto:
        a, b = fit(kept, device_bytes), fit(moved, device_bytes)
        return "kv_cache" if a is not None and (b is None or a.grad_checkpointing <= b.grad_checkpointing) else "weights"
    return "kv_cache" if job_memory(kept, device_bytes).peak <= device_bytes * HEADROOM else "weights"


def fit(s: MemSpec, device_bytes: int, headroom: float = HEADROOM) -> JobMemory | None:
    """The largest micro-batch that fits `device_bytes`, without checkpointing when it can; None if none fits.

    Tries checkpointing only when not even one sequence fits without it (checkpointing costs
    one more forward per update, charged to executed FLOPs).
    """
    limit = device_bytes * headroom
    for ckpt in ([s.grad_checkpointing] if s.grad_checkpointing else [False, True]):
        lo, hi = 0, s.sequences
        while lo < hi:  # largest mb with peak <= limit (peak grows with mb)
            mid = (lo + hi + 1) // 2
            if job_memory(replace(s, micro_batch=mid, grad_checkpointing=ckpt), device_bytes).peak <= limit:
                lo = mid
            else:
                hi = mid - 1
        if lo >= 1:
            return job_memory(replace(s, micro_batch=lo, grad_checkpointing=ckpt), device_bytes)
    return None


# --- from a composed config -------------------------------------------------------------------------


def spec_from_config(cfg: dict, *, device_is_gpu: bool = True, vllm_installed: bool = False,
                     reward_gpu: bool = False) -> MemSpec:
    """The MemSpec of a composed job config (plain dict); micro_batch 'auto'/0 = the whole batch.

    `rollout.backend: auto` plans vLLM when it is installed and the device is a GPU (as the job
    will choose, budget.job_backend), else lean.
    """
    m, g, r, t, ro = cfg["model"], cfg["grpo"], cfg["reward"], cfg["task"], cfg["rollout"]
    dtype = m.get("dtype", "auto")
    dtype_bytes = DTYPE_BYTES.get(dtype, 2 if device_is_gpu else 4)
    n = int(g["prompts_per_iter"]) * int(g["group_size"])
    mb = g.get("micro_batch_size", 0)
    mb = n if mb in (0, "auto", None) else min(int(mb), n)
    prompt = int(t.get("max_prompt_tokens") or math.ceil(2 * float(t["prompt_tokens"])))
    reward = reward_head = None
    reward_len = 0
    if r["type"] == "prm":
        rm = r["model"]
        reward = Arch.from_config(rm["arch"])
        reward_head = int(rm.get("num_labels") or 2) if rm.get("format") == "classifier" else None
        reward_len = prompt + int(ro["max_new_tokens"]) + len(str(rm.get("template") or "")) // 2
    lora = cfg["lora"]
    return MemSpec(arch=Arch.from_config(m["arch"]), tied=bool(m["arch"].get("tie_word_embeddings", False)),
                   dtype_bytes=dtype_bytes, lora_r=int(lora["r"]) if lora["enabled"] else None,
                   lora_targets=tuple(lora["target_modules"]), sequences=n, prompt_len=prompt,
                   completion_len=int(ro["max_new_tokens"]), micro_batch=mb,
                   grad_checkpointing=bool(g.get("grad_checkpointing", False)),
                   updates_per_batch=int(g["updates_per_batch"]), beta=float(g.get("beta", 0.0)),
                   backend=job_backend(cfg, on_gpu=device_is_gpu, vllm_installed=vllm_installed),
                   group_size=int(g["group_size"]),
                   vllm_fraction=ro.get("gpu_memory_utilization"), reward=reward,
                   reward_head=reward_head, reward_batch=int(r.get("batch_size") or 16), reward_len=reward_len,
                   eval_completion_len=int((cfg.get("eval") or {}).get("max_new_tokens") or 0),
                   reward_gpu=bool(reward_gpu and reward is not None),
                   expected_completion_len=int(ro.get("expected_completion_tokens") or 0))


def plan_memory(cfg: dict, device_bytes: int | None, *, vllm_installed: bool, kv_release: bool = True,
                reward_gpu: bool = False) -> JobMemory:
    """The job's memory plan: `micro_batch_size: auto` resolved against `device_bytes` when known.

    `vllm_installed`: the machine's answer (race_cli.machine.vllm_installed), for `rollout.backend: auto`.
    `kv_release`: whether the vLLM the job will run can release only its KV cache (machine.vllm_kv_release);
    the sleep mode is chosen from it (`choose_sleep_mode`). `reward_gpu`: the PRM gets its own GPU.
    Raises RaceError naming the phase and what to change when the job cannot fit.
    """
    s = spec_from_config(cfg, device_is_gpu=device_bytes is not None, vllm_installed=vllm_installed,
                         reward_gpu=reward_gpu)
    auto = cfg["grpo"].get("micro_batch_size") == "auto"
    if device_bytes is None:
        return job_memory(s)
    s = replace(s, sleep_mode=choose_sleep_mode(s, device_bytes, kv_release=kv_release, auto=auto))
    if auto:
        got = fit(s, device_bytes)
        if got is not None:
            return got
        worst = job_memory(replace(s, micro_batch=1, grad_checkpointing=True), device_bytes)
    else:
        worst = job_memory(s, device_bytes)
        if worst.peak <= device_bytes * HEADROOM:
            return worst
    raise RaceError(cannot_fit(cfg, worst, device_bytes, auto))


def cannot_fit(cfg: dict, mem: JobMemory, device_bytes: int, auto: bool) -> str:
    """One message: which phase overflows, by how much, its largest parts, and what to change."""
    phase = mem.phase
    parts = sorted(mem.phases[phase].items(), key=lambda kv: -kv[1])[:3]
    what = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in parts)
    hints = []
    if not auto:
        hints.append("set grpo.micro_batch_size=auto (or a smaller number)")
    if not mem.grad_checkpointing:
        hints.append("grpo.grad_checkpointing=true")
    names = [k for k, _ in parts]
    if "reward_weights" in names:
        if phase != "reward_gpu":  # on one GPU with the policy: a second GPU takes it
            hints.append("--gpus-per-job 2 (the reward model on each job's second GPU)")
        hints.append("a smaller reward model or reward=rule")
    if "optimizer" in names:
        hints.append("lora.enabled=true (adapter states instead of full fine-tuning's)")
    if "policy_weights" in names:
        hints.append("a smaller model")
    if "kv_cache" in names or "sampling_or_prefill" in names:
        hints.append("rollout.backend=vllm (HF generate prefills all B*G rows at once), or fewer rollout tokens "
                     "(grpo.prompts_per_iter, grpo.group_size, rollout.max_new_tokens)")
    if "reward_forward" in names:
        hints.append("a smaller reward.batch_size")
    if "vllm_reserved" in names:
        hints.append("a lower rollout.gpu_memory_utilization" if cfg["rollout"].get("gpu_memory_utilization")
                     else "fewer rollout tokens (vLLM's KV cache holds grpo.prompts_per_iter x grpo.group_size "
                          "sequences of the task's longest prompt + rollout.max_new_tokens)")
        hints += ["a smaller model", "rollout.backend=lean (no second copy of the weights)"]
    if "fused_weights" in names:
        hints.append("rollout.backend=hf (no fused copies of the weights)")
    hints.append("a device with more memory (--gpu-mem)")
    at = (f" at micro-batch {mem.micro_batch}{' with' if mem.grad_checkpointing else ' without'} gradient checkpointing"
          if phase == "update" else "")
    if phase != "update":
        hints = [h for h in hints if "micro_batch" not in h and "grad_checkpointing" not in h]
    hints = list(dict.fromkeys(hints))  # each once
    return (f"the {phase} phase needs {fmt_bytes(mem.total(phase))}{at}, more than "
            f"{HEADROOM:.0%} of {fmt_bytes(device_bytes)} (largest parts: {what}). Try: {'; '.join(hints)}.")


def memory_row(mem: JobMemory | None) -> dict:
    """The plan's memory columns (plan.csv / plan.json / the table)."""
    if mem is None:
        return {}
    row = {"micro_batch_size": mem.micro_batch, "grad_checkpointing": mem.grad_checkpointing,
           "planned_peak_bytes": mem.peak, "peak_phase": mem.phase}
    if mem.vllm_fraction is not None:
        row["gpu_memory_utilization"] = mem.vllm_fraction
    if mem.sleep_mode is not None:
        from race_cli.cost.walltime import sleep_seconds

        row["vllm_sleep_mode"] = mem.sleep_mode
        row["vllm_sleep_seconds_per_iteration"] = sleep_seconds(mem.sleep_weight_bytes)
        row["pinned_host_bytes"] = mem.pinned_host_bytes
    return row


# --- host memory: what level-1 sleep pins ---------------------------------------------------------------

HOST_WARN_SHARE = 0.5  # warn when a node's pinned copies take more than this share of its RAM
HOST_REFUSE_SHARE = 0.9  # refuse (local GPUs only) above this share: pinned pages cannot be swapped out


@dataclass(frozen=True)
class HostCheck:
    text: str | None  # the plan's line (None: no job pins host memory)
    refuse: bool = False
    warn: bool = False


def pinned_host_check(pinned: list[int], *, gpus_per_node: int, ram: int | None, local: bool) -> HostCheck:
    """Pinned host memory of vLLM's level-1 sleep: per job, and per node as the pool fills it (one job per
    GPU: the `gpus_per_node` largest copies at once), against the node's RAM (`ram`; `local`: the jobs run
    on this machine, so its RAM is the node's and an overflow is refused rather than warned)."""
    if not any(pinned):
        return HostCheck(None)
    n = max(1, gpus_per_node)
    node = sum(sorted(pinned, reverse=True)[:n])
    text = (f"pinned host memory (vLLM level-1 sleep): up to {fmt_bytes(max(pinned))} per job, "
            f"{fmt_bytes(node)} per node at {n} job(s) at once")
    if ram is None:
        return HostCheck(text + " (node RAM unknown)")
    share = node / ram
    text += f", {share:.0%} of {'this' if local else 'a'} node's {fmt_bytes(ram)} RAM"
    if share > HOST_REFUSE_SHARE and local:
        return HostCheck(text + f": more than {HOST_REFUSE_SHARE:.0%}. Run fewer jobs per node, smaller models, or a "
                         "vLLM that releases only its KV cache (0.33: the weights then stay on the GPU).", refuse=True)
    if share > HOST_WARN_SHARE:
        return HostCheck("warning: " + text + f" (over {HOST_WARN_SHARE:.0%}: the node may swap or refuse the "
                         "pinned copies)", warn=True)
    return HostCheck(text)


# --- sizes and devices -------------------------------------------------------------------------------


def fmt_bytes(n: float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 else f"{n / 2**20:.1f} MiB"


_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9, "t": 10**12,
          "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


MAX_DEVICE_BYTES = 2**50  # 1 PiB: --gpu-mem beyond this is a typo (or inf)


def parse_size(text: str) -> int:
    """'80GiB', '24GB', '141g', '8e10' -> bytes; RaceError with the accepted forms otherwise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-zA-Z]*)\s*", str(text))
    unit = m.group(2).lower() if m else None
    if not m or unit not in _UNITS:
        raise RaceError(f"--gpu-mem {text!r} is not a size: expected a number with a unit such as 80GiB, 24GB or "
                        "141GiB (GiB = 2^30 bytes, GB = 10^9).")
    size = float(m.group(1)) * _UNITS[unit]
    if not 2**20 <= size < MAX_DEVICE_BYTES:  # 1e400GB is inf; nothing near a PiB (or under a MiB) is one device
        raise RaceError(f"--gpu-mem {text!r} is out of range: expected the memory of one device, at least 1 MiB "
                        f"and at most {MAX_DEVICE_BYTES // 2**40} TiB (e.g. 80GiB).")
    return int(size)
