"""The FLOP ledger: what one forward, train step, sampling call or GRPO iteration costs.

Pure Python (no torch), so `race plan` can budget a grid without loading a model. Every
function returns a `Flops` pair in the two conventions of docs/design.md "FLOP conventions":

- **model** FLOPs, the figure that is budgeted and reported: real tokens only, causal
  attention pairs (a prefill over s tokens attends s(s+1)/2 pairs, a decode step at
  position t attends t pairs), logits only where they are needed, no recompute. The
  backward follows docs/design.md: activation gradients cost one forward's matmuls again,
  weight gradients another one only for trainable weights, attention (two
  activation x activation matmuls) costs 2x its forward in the backward. So full
  fine-tuning is exactly 3x a forward, and LoRA is 2x the frozen base's forward plus the
  attention's extra forward plus 3x the adapters' matmuls.
- **executed** FLOPs, what the kernels run, as torch's FlopCounterMode counts them on the
  real model (transformers Qwen2 with SDPA; `race_cli.plan.flops_audit` checks it): every row padded
  to the batch's longest, the full padded_len x padded_len attention matrix (masked SDPA
  and eager both compute it), logits at every padded position unless told otherwise,
  the SDPA backward's recompute of the score matrix (its backward is 5 attention-sized
  matmuls, 2.5x the forward's 2), autograd skipping the activation gradients nobody needs
  (a frozen model's first projections read a stream that does not require grad, see
  `_lora_backward_per_token`), HF `generate`'s exact step count, and gradient
  checkpointing's recompute.

Units: FLOPs (one multiply-add = 2 FLOPs); lengths in tokens. Biases, norms,
activations, softmax, RoPE and embedding lookups are not counted (docs/design.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from race_cli.errors import RaceError

# The seven linear maps of a Qwen2 decoder layer, in the order the forward runs them.
LAYER_MATRICES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")

# Multipliers of one attention-sized matmul pass (2*h*d_h FLOPs per (query, key) pair and
# layer; a forward has two: scores and weighted values).
_ATTN_FWD = 2  # forward: Q K^T and P V
_ATTN_BWD_MODEL = 4  # dS = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q
# Executed attention backward by kernel: fused SDPA kernels (flash, memory-efficient, cuDNN,
# CPU flash) also recompute S = Q K^T (FlopCounterMode's formula); "math" is autograd through
# two bmm (eager attention, or SDPA's math fallback, which meta tensors take).
_ATTN_BWD_EXECUTED = {"fused": 5, "math": 4}


# --- architecture and adapters ------------------------------------------------------


@dataclass(frozen=True)
class Arch:
    """The shapes of a Qwen2-family decoder; field names match `transformers.Qwen2Config`."""

    hidden_size: int  # d
    num_hidden_layers: int  # L
    num_attention_heads: int  # h, query heads
    num_key_value_heads: int  # h_kv (grouped-query attention)
    intermediate_size: int  # f, MLP width
    vocab_size: int  # V
    head_dim: int | None = None  # d_h; None means hidden_size // num_attention_heads

    def __post_init__(self) -> None:
        problems = []
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                     "num_key_value_heads", "intermediate_size", "vocab_size", "head_dim"):
            value = getattr(self, name)
            if value is None and name == "head_dim":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                problems.append(f"Arch.{name} must be a positive integer, got {value!r}.")
        if not problems and self.num_attention_heads % self.num_key_value_heads:
            problems.append(
                f"Arch.num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads}) for grouped-query attention.")
        if not problems and self.head_dim is None and self.hidden_size % self.num_attention_heads:
            problems.append(
                f"Arch.hidden_size ({self.hidden_size}) is not divisible by num_attention_heads "
                f"({self.num_attention_heads}); give head_dim explicitly.")
        if problems:
            raise RaceError(*problems)

    @classmethod
    def from_config(cls, cfg) -> "Arch":
        """Read the shapes from an HF `PretrainedConfig`, a dict or an OmegaConf mapping."""
        names = ("hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "intermediate_size", "vocab_size")

        def get(key):
            if isinstance(cfg, Mapping):
                return cfg.get(key) if key in cfg else None
            return getattr(cfg, key, None)

        missing = [n for n in names if get(n) is None]
        if missing:
            raise RaceError(
                f"Model config lacks {', '.join(missing)}; expected the fields of a "
                f"transformers.Qwen2Config ({', '.join(names)}, optional head_dim). "
                "Check the model= config group.")
        values = {n: get(n) for n in names}
        if values["num_key_value_heads"] is None:
            values["num_key_value_heads"] = values["num_attention_heads"]
        return cls(**values, head_dim=get("head_dim"))

    @property
    def d_head(self) -> int:
        """Head dimension d_h actually used."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    def matrices(self) -> dict[str, tuple[int, int]]:
        """(d_in, d_out) of each linear map of one layer."""
        d, f, q, kv = self.hidden_size, self.intermediate_size, self.num_attention_heads * self.d_head, \
            self.num_key_value_heads * self.d_head
        return {"q_proj": (d, q), "k_proj": (d, kv), "v_proj": (d, kv), "o_proj": (q, d),
                "gate_proj": (d, f), "up_proj": (d, f), "down_proj": (f, d)}

    @property
    def n_body(self) -> int:
        """Linear parameters of all layers: L * (d*(h*d_h + 2*h_kv*d_h) + h*d_h*d + 3*d*f)."""
        return self.num_hidden_layers * sum(i * o for i, o in self.matrices().values())

    @property
    def n_head(self) -> int:
        """LM head parameters d*V (paid only where logits are computed)."""
        return self.hidden_size * self.vocab_size

    @property
    def attn_pair(self) -> int:
        """FLOPs of one attention-sized matmul for one (query, key) pair over all layers: 2*L*h*d_h."""
        return 2 * self.num_hidden_layers * self.num_attention_heads * self.d_head


@dataclass(frozen=True)
class Lora:
    """LoRA adapters of rank r on the named linear maps of every layer (never the LM head)."""

    r: int
    target_modules: tuple[str, ...] = LAYER_MATRICES

    def __post_init__(self) -> None:
        if isinstance(self.target_modules, str):  # peft's shorthand
            if self.target_modules != "all-linear":
                raise RaceError(f"Lora.target_modules {self.target_modules!r} is a string; expected "
                                f"'all-linear' or a list drawn from {', '.join(LAYER_MATRICES)}.")
            object.__setattr__(self, "target_modules", LAYER_MATRICES)
        object.__setattr__(self, "target_modules", tuple(self.target_modules))
        problems = []
        if isinstance(self.r, bool) or not isinstance(self.r, int) or self.r <= 0:
            problems.append(f"Lora.r must be a positive integer, got {self.r!r}.")
        unknown = [m for m in self.target_modules if m not in LAYER_MATRICES]
        if unknown:
            problems.append(f"Lora.target_modules has unknown names {unknown}; expected names "
                            f"from {', '.join(LAYER_MATRICES)} (or 'all-linear').")
        if not self.target_modules:
            problems.append("Lora.target_modules is empty; name at least one linear map.")
        if problems:
            raise RaceError(*problems)

    def forward_per_token(self, arch: Arch) -> int:
        """Adapter FLOPs per token of one forward: 2*r*(d_in+d_out) per adapted matrix, all layers."""
        mats = arch.matrices()
        return arch.num_hidden_layers * sum(2 * self.r * sum(mats[m]) for m in self.target_modules)


@dataclass(frozen=True)
class Flops:
    """A pair of FLOP counts: `model` (budgeted) and `executed` (what kernels ran)."""

    model: float = 0.0
    executed: float = 0.0

    def __add__(self, other: "Flops") -> "Flops":
        if not isinstance(other, Flops):
            return NotImplemented
        return Flops(self.model + other.model, self.executed + other.executed)

    def __radd__(self, other) -> "Flops":
        if other == 0:  # sum() starts from 0
            return self
        return self.__add__(other)

    def __mul__(self, k: float) -> "Flops":
        if isinstance(k, Flops) or not isinstance(k, (int, float)):
            return NotImplemented
        return Flops(self.model * k, self.executed * k)

    __rmul__ = __mul__

    def to_dict(self) -> dict[str, float]:
        return {"model": float(self.model), "executed": float(self.executed)}


# --- validation helpers -----------------------------------------------------------------


def _lengths(name: str, values: Sequence[float]) -> list[float]:
    """Check a list of token counts: non-negative finite numbers (means may be fractional)."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise RaceError(f"{name} must be a list of token counts, got {type(values).__name__}.")
    out = list(values)
    if not out:
        raise RaceError(f"{name} is empty; expected at least one sequence length.")
    bad = [v for v in out if isinstance(v, bool) or not isinstance(v, (int, float))
           or not math.isfinite(v) or v < 0]
    if bad:
        raise RaceError(f"{name} must hold non-negative token counts; got {bad[:3]}.")
    return out


def _padded(seq_lens: list[float], padded_len: float | None, what: str = "padded_len") -> float:
    longest = max(seq_lens)
    if padded_len is None:
        return longest
    if padded_len < longest:
        raise RaceError(f"{what}={padded_len} is shorter than the longest sequence ({longest}); "
                        f"pass a {what} >= every length, or leave it unset.")
    return padded_len


def _causal_pairs(s: float) -> float:
    return s * (s + 1) / 2


# --- forward ----------------------------------------------------------------------------


def forward_flops(arch: Arch, seq_lens: Sequence[int], *, padded_len: int | None = None,
                  logit_positions: int | None = None, executed_logit_positions: int | None = None,
                  lora: Lora | None = None) -> Flops:
    """One forward of a batch of sequences (no grad: log-probs, reference, scoring).

    Model: body and adapters on the real tokens, s(s+1)/2 causal pairs per sequence, logits
    at `logit_positions` (total over the batch; default every real token). Executed: every
    row padded to `padded_len` (default the longest), padded_len^2 pairs per row, logits at
    `executed_logit_positions` (total; default every padded position, as HF's forward does).
    """
    lens = _lengths("seq_lens", seq_lens)
    pad = _padded(lens, padded_len)
    rows = len(lens)
    per_token = 2 * arch.n_body + (lora.forward_per_token(arch) if lora else 0)
    logits = sum(lens) if logit_positions is None else logit_positions
    ex_logits = rows * pad if executed_logit_positions is None else executed_logit_positions
    model = (per_token * sum(lens) + _ATTN_FWD * arch.attn_pair * sum(_causal_pairs(s) for s in lens)
             + 2 * arch.n_head * logits)
    executed = (per_token * rows * pad + _ATTN_FWD * arch.attn_pair * rows * pad * pad
                + 2 * arch.n_head * ex_logits)
    return Flops(model, executed)


# --- train step -------------------------------------------------------------------------


def _lora_backward_per_token(arch: Arch, lora: Lora, input_requires_grad: bool,
                             merged: bool = False) -> tuple[float, int, bool]:
    """Executed backward matmul FLOPs per token of the frozen base plus adapters.

    Autograd computes a gradient only for tensors that need one. With the base frozen and the
    embedding output not requiring grad, the residual stream starts requiring grad at the
    first adapted matrix; a frozen matrix reading a stream that does not require grad gets no
    activation gradient (with all-linear LoRA: layer 0's q/k/v base matmuls and their
    adapters' A-input gradients). `merged`: each adapted matrix ran as one weight W + s*B*A,
    so it gets the full weight gradient (2*d_in*d_out per token) instead of the adapters' own;
    the per-call merge matmuls are `_merge_flops`. Returns (FLOPs per token, number of layers
    whose attention needs a backward, whether the final stream - the LM head's input -
    requires grad).
    """
    mats = arch.matrices()
    targets = set(lora.target_modules)
    total = 0.0
    stream = input_requires_grad  # does the residual stream require grad here?
    attn_bwd_layers = 0

    def matrix(name: str, x_rg: bool) -> bool:
        """Backward FLOPs of one (possibly adapted) matrix; returns whether its output requires grad."""
        nonlocal total
        d_in, d_out = mats[name]
        if x_rg:
            total += 2 * d_in * d_out  # base activation gradient
        if name in targets and merged:
            total += 2 * d_in * d_out  # the merged weight's gradient
            return True
        if name in targets:
            r = lora.r
            total += 2 * r * d_out * 2  # B: activation gradient and weight gradient
            total += 2 * r * d_in  # A: weight gradient
            if x_rg:
                total += 2 * r * d_in  # A: activation gradient
            return True
        return x_rg

    for _ in range(arch.num_hidden_layers):
        qkv_rg = [matrix(n, stream) for n in ("q_proj", "k_proj", "v_proj")]
        attn_rg = any(qkv_rg)
        attn_bwd_layers += attn_rg
        stream = matrix("o_proj", attn_rg) or stream
        hidden_rg = any([matrix("gate_proj", stream), matrix("up_proj", stream)])
        stream = matrix("down_proj", hidden_rg) or stream
    return total, attn_bwd_layers, stream


def merge_flops(arch: Arch, lora: Lora) -> float:
    """Matmul FLOPs of merging the adapters into the weights, B @ A for every adapted matrix: once
    per sampling call of the lean sampler with float32 weights (`engine/rollout_lean.py: merged`)."""
    mats = arch.matrices()
    return arch.num_hidden_layers * sum(2 * lora.r * mats[m][0] * mats[m][1] for m in lora.target_modules)


def _merge_flops(arch: Arch, lora: Lora) -> float:
    """Matmul FLOPs of merging the adapters once per train step: B @ A forward, then B's and A's
    gradients from the merged weight's (two more matmuls of the same size), every adapted matrix."""
    return 3 * merge_flops(arch, lora)


def _recompute_skipped_per_token(arch: Arch, lora: Lora | None) -> int:
    """Forward FLOPs per token and layer that checkpointing's recompute never re-runs.

    transformers checkpoints each decoder layer with non-reentrant `torch.utils.checkpoint`,
    which stops recomputing as soon as every tensor the backward saved is back. The last
    saved tensor of a layer is the input of the last matmul that needs it for a weight
    gradient, so the layer's tail is skipped: the down projection under full fine-tuning or
    when down_proj is frozen and unadapted, only its adapter's B matmul when it is adapted
    (peft runs base, then A, then B; B's input, A's output, is the last saved tensor).
    """
    d, f = arch.hidden_size, arch.intermediate_size
    if lora is not None and "down_proj" in lora.target_modules:
        return 2 * lora.r * d
    return 2 * f * d


def train_step_flops(arch: Arch, seq_lens: Sequence[int], *, lora: Lora | None,
                     grad_checkpointing: bool = False, padded_len: int | None = None,
                     logit_positions: int | None = None,
                     executed_logit_positions: int | None = None,
                     attn_kernel: str = "fused", merged_lora: bool = False) -> Flops:
    """One forward + backward over a batch (a policy-gradient step, optimizer not counted).

    Model: full fine-tuning is 3x `forward_flops`; LoRA is 2x the base's forward (forward +
    activation gradients), attention 3x its forward, adapters 3x theirs. Recompute excluded.
    Executed (as autograd runs it): the LM head gets an activation gradient at every executed
    logit position (plus a weight gradient under full FT); LoRA skips gradients for matmuls
    whose input does not require grad (layer 0's q/k/v); gradient checkpointing re-runs each
    decoder layer's forward up to its last saved tensor (`_recompute_skipped_per_token`; never
    the head). `attn_kernel`: "fused" (SDPA flash / memory-efficient / cuDNN / CPU flash: backward 2.5x
    the forward, scores recomputed) or "math" (eager attention or SDPA's math path: 2x).
    With LoRA and checkpointing, the input embeddings are made to require grad (transformers /
    peft call `enable_input_require_grads`), so layer 0's gradients are computed too.
    `merged_lora` (the update's merged path, `merged_lora_update`): each adapted matrix runs as
    one weight W + s*B*A, so no adapter matmuls per token, a full weight gradient for each
    adapted matrix, and the merge's own matmuls once per call. Model FLOPs do not change.
    """
    if merged_lora and (lora is None or grad_checkpointing):
        raise RaceError("merged_lora needs a LoRA adapter and no gradient checkpointing (the recompute "
                        "would run the unmerged layers).")
    if attn_kernel not in _ATTN_BWD_EXECUTED:
        raise RaceError(f"attn_kernel {attn_kernel!r} is unknown; expected 'fused' (SDPA flash / "
                        "efficient kernels) or 'math' (eager attention).")
    attn_bwd = _ATTN_BWD_EXECUTED[attn_kernel]
    lens = _lengths("seq_lens", seq_lens)
    pad = _padded(lens, padded_len)
    rows = len(lens)
    fwd = forward_flops(arch, lens, padded_len=pad, logit_positions=logit_positions,
                        executed_logit_positions=executed_logit_positions, lora=lora)
    tokens, ex_tokens = sum(lens), rows * pad
    pairs, ex_pairs = sum(_causal_pairs(s) for s in lens), rows * pad * pad
    logits = sum(lens) if logit_positions is None else logit_positions
    ex_logits = rows * pad if executed_logit_positions is None else executed_logit_positions
    L = arch.num_hidden_layers

    if lora is None:
        body_bwd = 4 * arch.n_body  # activation + weight gradients, every matrix
        model_bwd = body_bwd * tokens + 4 * arch.n_head * logits + _ATTN_BWD_MODEL * arch.attn_pair * pairs
        executed_bwd = (body_bwd * ex_tokens + 4 * arch.n_head * ex_logits
                        + attn_bwd * arch.attn_pair * ex_pairs)
    else:
        a = lora.forward_per_token(arch)
        model_bwd = ((2 * arch.n_body + 2 * a) * tokens + 2 * arch.n_head * logits
                     + _ATTN_BWD_MODEL * arch.attn_pair * pairs)
        per_token, attn_layers, head_rg = _lora_backward_per_token(arch, lora, grad_checkpointing, merged_lora)
        executed_bwd = (per_token * ex_tokens + (2 * arch.n_head * ex_logits if head_rg else 0)
                        + attn_bwd * arch.attn_pair * ex_pairs * attn_layers / L)
        if merged_lora:  # the forward ran the base shapes only, plus the merge
            unadapted = forward_flops(arch, lens, padded_len=pad, logit_positions=logit_positions,
                                      executed_logit_positions=executed_logit_positions)
            fwd = Flops(fwd.model, unadapted.executed)
            executed_bwd += _merge_flops(arch, lora)
    executed_recompute = 0.0
    if grad_checkpointing:
        per_token = 2 * arch.n_body + (lora.forward_per_token(arch) if lora else 0)
        per_token -= L * _recompute_skipped_per_token(arch, lora)
        executed_recompute = per_token * ex_tokens + _ATTN_FWD * arch.attn_pair * ex_pairs
    return fwd + Flops(model_bwd, executed_bwd + executed_recompute)


def merged_lora_update(arch: Arch, lora: Lora | None, *, dropout: float, grad_checkpointing: bool,
                       float32: bool) -> bool:
    """Whether the update runs each adapted matrix as one merged weight W + s*B*A (`auto`).

    Merging trades the adapters' two small matmuls and their elementwise ops for a full weight
    gradient: at most 1.5x the adapter path's matmul FLOPs per token, less at high rank. It pays
    only where kernels, not arithmetic, bound the time, so `auto` merges when the merged step
    does at most 1.25x the adapter path's FLOPs per token (tiny-s at r >= 8, tiny-m at r >= 16,
    where it is faster on CPU: docs/measurements/code.md), never on
    real model shapes (Qwen2.5-0.5B: 1.45x). It also needs float32 weights (a bfloat16 W + s*B*A
    would round the adapter's update away), no LoRA dropout (it acts on the adapter's input
    only) and no gradient checkpointing (the recompute would run the unmerged layers).
    """
    if lora is None or dropout > 0 or grad_checkpointing or not float32:
        return False
    adapter = (2 * arch.n_body + lora.forward_per_token(arch)
               + _lora_backward_per_token(arch, lora, False)[0])
    merged = 2 * arch.n_body + _lora_backward_per_token(arch, lora, False, merged=True)[0]
    return merged <= 1.25 * adapter


# --- sampling ---------------------------------------------------------------------------


def generate_flops(arch: Arch, prompt_lens: Sequence[int], completion_lens: Sequence[int], *,
                   lora: Lora | None = None, share_prefix: int = 1, padded: bool = True,
                   max_new_tokens: int | None = None) -> Flops:
    """One batched sampling call with a KV cache; one entry per sampled sequence.

    `completion_lens` count every sampled token, the EOS included. A completion of c tokens
    takes c forward steps: the prefill's last-position logits give token 1, then c-1 decode
    steps feed tokens 1..c-1 (the last sampled token is never fed back).

    Model: each prompt's causal prefill (once per `share_prefix` consecutive sequences, which
    must then have equal prompt lengths: a backend such as vLLM sharing a group's prefix),
    logits at the last prompt position, then one decode step per fed token at position t
    attending t pairs with logits. Executed with `padded=True` (HF `generate`): every row
    left-padded to the longest prompt P, prefill over P tokens with the full P^2 matrix and
    logits at one position per row (`logits_to_keep=1`), then S-1 decode steps for EVERY row,
    step k attending the whole cache P+k, where S is the longest completion or
    `max_new_tokens` when given (generation ran to the cap for every row); with share_prefix=G
    and `padded=True` (the lean backend) only one row per group is prefilled. `padded=False`
    (unpadded, causal kernels, vLLM-like): executed = model.
    """
    plens = _lengths("prompt_lens", prompt_lens)
    clens = _lengths("completion_lens", completion_lens)
    problems = []
    if len(plens) != len(clens):
        problems.append(f"prompt_lens has {len(plens)} entries but completion_lens has {len(clens)}; "
                        "give one prompt length per sampled sequence.")
    if isinstance(share_prefix, bool) or not isinstance(share_prefix, int) or share_prefix < 1 \
            or len(plens) % share_prefix:
        problems.append(f"share_prefix={share_prefix!r} must be a positive integer dividing the "
                        f"number of sequences ({len(plens)}), e.g. the group size G.")
    if max_new_tokens is not None and max_new_tokens < max(clens):
        problems.append(f"max_new_tokens={max_new_tokens} is below the longest completion "
                        f"({max(clens)}); completions cannot be longer than the cap.")
    if problems:
        raise RaceError(*problems)
    groups = [plens[i:i + share_prefix] for i in range(0, len(plens), share_prefix)]
    uneven = [g for g in groups if len(set(g)) > 1]
    if uneven:
        raise RaceError(f"share_prefix={share_prefix} groups sequences with different prompt "
                        f"lengths {uneven[0]}; consecutive sequences of a group share one prompt.")

    per_token = 2 * arch.n_body + (lora.forward_per_token(arch) if lora else 0)
    attn, head = _ATTN_FWD * arch.attn_pair, 2 * arch.n_head

    def prefill(p: float) -> float:  # causal, logits at the last position
        return per_token * p + attn * _causal_pairs(p) + head

    def decode(p: float, c: float) -> float:  # fed tokens at positions p+1 .. p+c-1
        steps = max(c - 1, 0)
        pairs = _causal_pairs(p + steps) - _causal_pairs(p)
        return (per_token + head) * steps + attn * pairs

    model = sum(prefill(g[0]) for g in groups) + sum(decode(p, c) for p, c in zip(plens, clens))
    if not padded:
        return Flops(model, model)
    rows, P = len(plens), max(plens)
    S = max(clens) if max_new_tokens is None else max_new_tokens
    steps = max(S - 1, 0)
    executed = (rows // share_prefix) * (per_token * P + attn * P * P + head)  # prefill, full matrix
    executed += rows * ((per_token + head) * steps + attn * (steps * P + _causal_pairs(steps)))
    return Flops(model, executed)


# --- reward model -----------------------------------------------------------------------


def reward_model_flops(arch: Arch, seq_lens: Sequence[int], *, padded_len: int | None = None,
                       head: str = "token", num_labels: int = 1, executed_head_positions: int | None = None) -> Flops:
    """A reward model's forward over the sequences it scores.

    The head runs at every position (HF's token-classification heads run on all positions and
    then pick), per position:
    - `head="token"`: the LM head, d*V MACs (Math-Shepherd-style PRMs read label-token logits);
    - `head="classifier"`: the Qwen2.5-Math-PRM head, Linear(d, d) -> ReLU -> Linear(d, num_labels):
      d*d + d*num_labels MACs;
    - `head="scalar"`: one Linear(d, num_labels) (transformers' *ForTokenClassification), d*num_labels.
    Model: real tokens, causal pairs; executed: padded rows, full matrix, head on every padded position,
    or on `executed_head_positions` of them (the logprob format runs the LM head only where a
    completion token is predicted).
    """
    if head not in ("token", "classifier", "scalar"):
        raise RaceError(f"reward head {head!r} is unknown; expected 'token' (LM head at every position), "
                        "'classifier' (two-layer d->d->num_labels head) or 'scalar' (one d->num_labels layer).")
    if isinstance(num_labels, bool) or not isinstance(num_labels, int) or num_labels < 1:
        raise RaceError(f"num_labels must be a positive integer, got {num_labels!r}.")
    lens = _lengths("seq_lens", seq_lens)
    pad = _padded(lens, padded_len)
    body = forward_flops(arch, lens, padded_len=pad, logit_positions=0, executed_logit_positions=0)
    d = arch.hidden_size
    width = {"token": arch.n_head, "classifier": d * d + d * num_labels, "scalar": d * num_labels}[head]  # MACs per position
    head_positions = len(lens) * pad if executed_head_positions is None else executed_head_positions
    return body + Flops(2 * width * sum(lens), 2 * width * head_positions)


# --- one GRPO iteration (planning) ------------------------------------------------------


def iteration_flops(policy: Arch, *, prompts: int, group_size: int, prompt_len: float,
                    completion_len: float, updates_per_batch: int, lora: Lora | None,
                    beta: float = 0.0, grad_checkpointing: bool = False, share_prefix: bool = False,
                    padded: bool | None = None,
                    reward: Arch | None = None, reward_head: str = "classifier",
                    trained_share: float = 1.0, update_group_size: int | None = None) -> dict[str, Flops]:
    """Planning estimate of ONE GRPO iteration from mean lengths: {"rollout", "update", "reward"}.

    Every sequence is taken at the mean lengths (so the quadratic attention term is slightly
    underestimated when lengths vary; the job's live ledger uses real lengths). The forwards
    the engine runs per iteration, with n = prompts * group_size sequences of prompt+completion:

    - rollout: one sampling call over n sequences (`generate_flops`); with `share_prefix` the
      backend (lean, vLLM) prefills each prompt once per group, otherwise HF `generate`
      prefills every row; `padded` (default: not share_prefix) says whether the executed figure
      counts padded kernels (HF, lean) or unpadded ones (vLLM).
    - update: `updates_per_batch` train steps over the n sequences (the old policy's log-probs
      are the first pass's own, detached: no extra forward); plus one no-grad reference forward when
      beta > 0 (LoRA: the base with adapters disabled; full FT: a frozen copy). The loss needs
      logits only at the completion positions, and the engine computes no others (model and
      executed: completion_len positions per sequence). The executed figure assumes the adapter
      path; a tiny float32 LoRA policy may run the merged one (`merged_lora_update`).
      The train steps run on `trained_share` of the n sequences only: with beta = 0 the engine
      leaves rows of advantage exactly 0 out (engine/grpo.trained_rows); the reference forward,
      when beta > 0, covers every row.
    - reward: the reward model's forward over prompt+completion of each sequence
      (`reward_model_flops`), or 0 for a rule-based reward (`reward=None`).

    Rollout down-sampling (`update_group_size` m < G, grpo.update_group_size): rollout and reward
    are charged for all prompts x G sequences, the update (train steps and reference forward) for
    the prompts x m the update keeps.
    """
    problems = []
    for name, v in (("prompts", prompts), ("group_size", group_size),
                    ("updates_per_batch", updates_per_batch)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            problems.append(f"{name} must be a positive integer, got {v!r}.")
    for name, v in (("prompt_len", prompt_len), ("completion_len", completion_len)):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            problems.append(f"{name} must be a positive number of tokens, got {v!r}.")
    if isinstance(beta, bool) or not isinstance(beta, (int, float)) or beta < 0:
        problems.append(f"beta (KL coefficient) must be >= 0, got {beta!r}.")
    if isinstance(trained_share, bool) or not isinstance(trained_share, (int, float)) or not 0 <= trained_share <= 1:
        problems.append(f"trained_share (share of rows the update runs on) must be in [0, 1], got {trained_share!r}.")
    m = group_size if update_group_size is None else update_group_size
    if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= max(group_size, 1):
        problems.append(f"update_group_size must be an integer in [1, group_size={group_size}], got {m!r}.")
    if problems:
        raise RaceError(*problems)

    n, p, c = prompts * group_size, float(prompt_len), float(completion_len)
    n_update = prompts * m  # the rows the update keeps
    one_group = generate_flops(policy, [p] * group_size, [c] * group_size, lora=lora,
                               share_prefix=group_size if share_prefix else 1,
                               padded=(not share_prefix) if padded is None else padded)
    rollout = one_group * prompts

    s = p + c
    step = train_step_flops(policy, [s], lora=lora, grad_checkpointing=grad_checkpointing,
                            logit_positions=c, executed_logit_positions=c)
    update = step * (updates_per_batch * n_update * trained_share)
    if beta > 0:  # reference log-probs: the frozen base
        update = update + forward_flops(policy, [s], logit_positions=c, executed_logit_positions=c) * n_update

    scored = Flops()
    if reward is not None:
        scored = reward_model_flops(reward, [s], head=reward_head) * n
    return {"rollout": rollout, "update": update, "reward": scored}


# --- what CPU workers take ------------------------------------------------------------------------------

# A job whose policy or reward model has more parameters than this is not for CPU workers
# (Qwen2.5-0.5B has ~5e8; the embedded tiny zoo ~1e5): race run refuses it without --allow-cpu.
CPU_MAX_PARAMS = 1e8


def too_big_for_cpu(configs: Sequence[dict]) -> list[str]:
    """Names of the models in these job configs that are hub-sized (over CPU_MAX_PARAMS parameters)."""
    big: list[str] = []
    for cfg in configs:
        reward = cfg.get("reward")
        for node in (cfg.get("model"), reward.get("model") if isinstance(reward, dict) else None):
            if not isinstance(node, dict) or not node.get("arch"):
                continue
            try:
                arch = Arch.from_config(node["arch"])
            except Exception:  # noqa: BLE001 - a damaged config fails its own job (race train), not the run
                continue
            if arch.n_body + 2 * arch.n_head > CPU_MAX_PARAMS and node.get("name") not in big:
                big.append(str(node.get("name") or node.get("path")))
    return big
