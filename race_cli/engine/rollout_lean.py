"""The lean rollout backend: one prefill per prompt, a preallocated KV cache, plain torch decoding.

`LeanRollout` (`rollout.backend=lean`, what `auto` picks where vLLM is absent) samples G
completions of each of B prompts without transformers' `generate`, whose per-step framework
overhead dominates small models on CPU:

1. read the policy's weights (a Qwen2-style HF causal LM, plain or wrapped by PEFT with LoRA
   adapters) into a flat list of tensors, at every call, so the current weights of a full
   fine-tuning run or the current adapter are what is sampled; float32 adapters are merged into
   their weights for the call (W + s*B@A: one matmul per linear map and step), others kept apart;
2. prefill the B distinct prompts once (left-padded to the longest, P), and copy each prompt's
   keys/values into the G cache rows of its group: a cache preallocated for P + max_new_tokens
   (keys stored transposed, K^T, the layout the score matmul reads fastest);
3. decode all N = B*G rows together, one token a step, attending the filled part of the cache;
   a row that sampled EOS is finished (later tokens are pad, as in HF `generate`) and the loop
   ends when every row is finished or at max_new_tokens;
4. sample exactly softmax(logits / T), with top-p applied as transformers' TopPLogitsWarper does,
   and nothing else (no top-k, no repetition penalty), by inverting the CDF with one uniform per
   row and step; greedy = argmax. Training draws the uniforms from torch's generator (the job's
   seeded stream); evaluation passes per-row seeds (`seeds=`, `row_uniforms`): common random
   numbers keyed by (eval.sample_seed, target, item id, sample index), independent of training.

The arithmetic is HF Qwen2's (RMSNorm in float32, RoPE cos/sin from the model's own rotary
module at HF generate's position ids, SDPA with the scale 1/sqrt(d_head), LoRA as
base(x) + B(A(x)) * scale up to the merge's rounding), so greedy tokens equal `generate`'s. The
ledger charge is `generate_flops(..., share_prefix=G, padded=True)`: B padded prefills of P tokens
(full P x P matrix, logits at one position), then S-1 decode steps for every row, step k
attending P + k cache slots, S = the longest completion; merged adapters execute the base's
shapes plus `merge_flops` once. tests/test_rollout_lean.py checks it against FlopCounterMode.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from race_cli.engine.rollout import Rollout, _finish
from race_cli.engine.sampling import eval_row_seed, pick, row_uniforms, top_p_filter  # noqa: F401 (re-exported)
from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Flops, Lora, generate_flops, merge_flops


@dataclass
class Linear:
    """One linear map as tensors: y = x W^T + b, plus B(A(x)) * scale for each active adapter.

    An adapter entry is (A [r, in], B [out_k, r], B's bias or None, scale, lo, hi): its output
    lands on columns lo..hi-1 of y (the whole of y when lo is None), so several linear maps
    fused into one weight (q|k|v, gate|up) keep their own unmerged adapters.
    """

    weight: Any  # [out, in]
    bias: Any  # [out] or None
    adapters: list

    def __call__(self, x):
        import torch.nn.functional as F

        y = F.linear(x, self.weight, self.bias)  # [..., out]
        for a, b, b_bias, scale, lo, hi in self.adapters:
            delta = F.linear(F.linear(x if x.dtype == a.dtype else x.to(a.dtype), a), b, b_bias) * scale
            if lo is None:
                y = y + delta
            else:
                y[..., lo:hi] += delta
        return y

    def add_to(self, residual, x):
        """residual + self(x), x [n, in]: one addmm kernel when there is no bias and no adapter."""
        import torch

        if self.bias is None and not self.adapters and x.dim() == 2:
            return torch.addmm(residual, x, self.weight.t())
        return residual + self(x)


def fuse(parts: list[Linear]) -> Linear:
    """Linear maps reading the same input -> one (weights and biases stacked by output, adapters kept apart)."""
    import torch

    if len(parts) == 1:
        return parts[0]
    weight = torch.cat([p.weight for p in parts])
    bias = None
    if any(p.bias is not None for p in parts):
        bias = torch.cat([p.bias if p.bias is not None else p.weight.new_zeros(p.weight.size(0)) for p in parts])
    adapters, lo = [], 0
    for p in parts:
        hi = lo + p.weight.size(0)
        adapters += [(a, b, bb, scale, lo, hi) for a, b, bb, scale, _, _ in p.adapters]
        lo = hi
    return Linear(weight, bias, adapters)


def read_linear(module: Any) -> Linear:
    """nn.Linear or PEFT's LoRA Linear -> `Linear`: active adapters merged into the weight for float32
    weights (`merged`), kept apart otherwise (eval mode: no dropout)."""
    import torch

    base = getattr(module, "base_layer", None)
    if base is None:  # a plain nn.Linear
        if not hasattr(module, "weight") or module.weight.dim() != 2:
            raise RaceError(f"rollout.backend=lean cannot read {type(module).__name__} as a linear layer; "
                            "use rollout.backend=hf for this model.")
        return Linear(module.weight, module.bias, [])
    out = read_linear(base)
    if getattr(module, "disable_adapters", False) or getattr(module, "merged", False):
        return out  # adapters off, or already inside the base weight
    adapters = []
    for name in module.active_adapters:
        if name not in module.lora_A:
            continue
        if getattr(module, "use_dora", {}).get(name, False):
            raise RaceError("rollout.backend=lean does not implement DoRA adapters; use rollout.backend=hf.")
        a, b = module.lora_A[name], module.lora_B[name]
        adapters.append((a.weight, b.weight, b.bias, float(module.scaling[name]), None, None))
    if adapters and out.weight.dtype == torch.float32:
        return merged(out, adapters)
    return Linear(out.weight, out.bias, adapters)


def merged(base: Linear, adapters: list) -> Linear:
    """float32 weights: base and adapters as one matrix W + sum s*B@A (and bias b + sum s*b_B), built
    once per sampling call. Every decode step then runs one matmul per linear map instead of three
    (faster rollouts for LoRA on every map); the same function up to
    rounding. Not for bfloat16/float16 weights, where W + s*B@A would round much of the adapter away."""
    w, bias = base.weight, base.bias
    for a, b, b_bias, scale, _, _ in adapters:
        w = w + scale * (b @ a)
        if b_bias is not None:
            bias = scale * b_bias if bias is None else bias + scale * b_bias
    return Linear(w, bias, [])


@dataclass
class Layer:
    ln1: Any  # [d] input RMSNorm weight
    ln2: Any  # [d] post-attention RMSNorm weight
    qkv: Linear  # q|k|v stacked: [(heads + 2 kv) d_h, d]
    o: Linear
    gate_up: Linear  # gate|up stacked: [2 f, d]
    down: Linear


@dataclass
class Weights:
    """The policy's decoder as tensors (views of its parameters, read before every sampling call)."""

    embed: Any  # [V, d]
    layers: list[Layer]
    norm: Any  # [d] final RMSNorm weight
    head: Linear  # [V, d]
    rotary: Any  # the model's rotary module: (x, position_ids [1, T]) -> cos, sin [1, T, d_head]
    eps: float
    heads: int
    kv_heads: int
    d_head: int


def read_weights(model: Any) -> Weights:
    """The decoder of a Qwen2/Llama-style causal LM (PEFT-wrapped or not) as `Weights`."""
    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = lm.config
    body = getattr(lm, "model", None)
    problems = []
    if body is None or not hasattr(body, "layers") or not hasattr(body, "rotary_emb"):
        problems.append(f"{type(lm).__name__} is not a Qwen2/Llama-style decoder (model.layers, model.rotary_emb)")
    elif getattr(cfg, "use_sliding_window", False) and getattr(cfg, "sliding_window", None):
        problems.append("sliding-window attention is not implemented")
    elif any(hasattr(layer.self_attn, "q_norm") for layer in body.layers):
        problems.append("per-head q/k norms (Qwen3-style) are not implemented")
    elif getattr(cfg, "hidden_act", "silu") != "silu":
        problems.append(f"hidden_act={cfg.hidden_act!r} (expected silu)")
    if problems:
        raise RaceError(f"rollout.backend=lean cannot run this policy: {problems[0]}. Use rollout.backend=hf.")
    layers = []
    for layer in body.layers:
        att, mlp = layer.self_attn, layer.mlp
        layers.append(Layer(layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                            fuse([read_linear(att.q_proj), read_linear(att.k_proj), read_linear(att.v_proj)]),
                            read_linear(att.o_proj), fuse([read_linear(mlp.gate_proj), read_linear(mlp.up_proj)]),
                            read_linear(mlp.down_proj)))
    heads, kv = cfg.num_attention_heads, cfg.num_key_value_heads
    d_head = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    return Weights(body.embed_tokens.weight, layers, body.norm.weight, read_linear(lm.lm_head), body.rotary_emb,
                   float(body.norm.variance_epsilon), heads, kv, d_head)


def rms_norm(x, weight, eps: float):
    """HF's Qwen2RMSNorm: normalise in float32, scale in the input dtype. x [..., d] -> [..., d]."""
    import torch
    import torch.nn.functional as F

    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return F.rms_norm(x, (x.size(-1),), weight, eps)  # one fused kernel, the same arithmetic
    h = x.float()
    return weight * (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)


def rope_tables(w: Weights, length: int, device: str):
    """cos, signed sin [length, d_h] in the model dtype, from the model's own rotary module.

    HF rotates x*cos + rotate_half(x)*sin with rotate_half(x) = cat(-x2, x1); here that is
    x*cos + roll(x, d_h/2)*sin_signed with sin_signed = cat(-sin1, sin2): the same products.
    """
    import torch

    probe = torch.zeros(1, dtype=w.embed.dtype, device=device)  # rotary reads only its dtype and device
    cos, sin = w.rotary(probe, torch.arange(length, device=device)[None])  # [1, T, d_h]
    half = w.d_head // 2
    sin = torch.cat((-sin[0, :, :half], sin[0, :, half:]), dim=-1)
    return cos[0], sin  # [T, d_h] each


def rotate(x, cos, sin_signed):
    """RoPE on x [n, t, heads, d_h] with cos/sin_signed broadcastable [n, t, 1, d_h]."""
    import torch

    return torch.addcmul(x * cos, torch.roll(x, x.shape[-1] // 2, dims=-1), sin_signed)


def attend(w: Weights, q, k_t, v, bias):
    """Causal GQA attention as two batched matmuls (FlopCounterMode and the ledger count them as SDPA).

    q [n, heads, t, d_h]; k_t [n, kv, d_h, T] (keys stored transposed) and v [n, kv, T, d_h]: views
    of the cache, no copy; bias [n*kv, g*t, T] additive (0 or -inf; `group_bias`) -> [n*t, heads*d_h].
    The g = heads/kv query heads of one key/value head are stacked as g*t query rows, so keys and
    values are never repeated; the scale and the mask enter the first matmul (baddbmm): one kernel
    instead of three. Keys are kept as K^T so that the score matmul reads them row-major: BLAS's
    fast layout (a decode step's score matmul at 64 rows: 24 us against 49 us with K transposed on the fly).
    """
    import torch

    n, _, t, d = q.shape
    g, T = w.heads // w.kv_heads, v.size(2)
    qg = q.reshape(n * w.kv_heads, g * t, d)  # [n*kv, g*t, d_h]
    scores = torch.baddbmm(bias, qg, k_t.reshape(n * w.kv_heads, d, T), alpha=d ** -0.5)
    probs = torch.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)  # [n*kv, g*t, T]
    out = torch.bmm(probs, v.reshape(n * w.kv_heads, T, d))  # [n*kv, g*t, d_h]
    return out.view(n, w.heads, t, d).transpose(1, 2).reshape(n * t, w.heads * d)


def group_bias(w: Weights, bias):
    """The additive mask [n, 1, t, T] laid out as attend's score rows [n*kv, g*t, T] (built once per call;
    a decode step reads a slice of it)."""
    n, _, t, T = bias.shape
    g = w.heads // w.kv_heads
    return bias.unsqueeze(1).expand(n, w.kv_heads, g, t, T).reshape(n * w.kv_heads, g * t, T)


def block(w: Weights, x, cos, sin, cache_k, cache_v, start: int, bias):
    """All decoder layers on x [n*t, d] at cache slots start..start+t-1; returns hidden [n*t, d].

    cache_k: per layer [n, kv_heads, d_h, T_max] (keys transposed), cache_v: per layer
    [n, kv_heads, T_max, d_h]; both written in place. cos/sin [n, t, 1, d_h]. bias: the additive
    mask (0 = attend, -inf = not) over the filled cache in attend's layout [n*kv, g*t, start+t]
    (`group_bias`).
    """
    import torch.nn.functional as F

    n, t = cos.shape[0], cos.shape[1]
    end, hq, hk = start + t, w.heads, w.heads + w.kv_heads
    for i, L in enumerate(w.layers):
        h = rms_norm(x, L.ln1, w.eps)
        qkv = L.qkv(h).view(n, t, hk + w.kv_heads, w.d_head)  # [n, t, heads + 2 kv, d_h]
        qk = rotate(qkv[:, :, :hk], cos, sin)  # queries and keys rotated together
        cache_k[i][:, :, :, start:end] = qk[:, :, hq:].permute(0, 2, 3, 1)  # [n, kv, d_h, t]
        cache_v[i][:, :, start:end] = qkv[:, :, hk:].transpose(1, 2)  # [n, kv, t, d_h]
        a = attend(w, qk[:, :, :hq].transpose(1, 2), cache_k[i][:, :, :, :end], cache_v[i][:, :, :end], bias)
        x = L.o.add_to(x, a)  # the residual enters the matmul
        h = rms_norm(x, L.ln2, w.eps)
        gate, up = L.gate_up(h).chunk(2, dim=-1)
        x = L.down.add_to(x, F.silu(gate) * up)
    return x


def sample(model: Any, prompts: list[list[int]], *, group_size: int, greedy: bool, max_new_tokens: int,
           temperature: float, top_p: float, eos_id: int, pad_id: int, device: str, seeds: list[int] | None = None):
    """Completions [B*G, S] (groups consecutive, pad after EOS) of the B prompts; S = longest completion.
    `seeds` (one per row): draw row i's tokens from row_uniforms(seeds)[i] instead of torch's generator."""
    import torch

    from race_cli.engine.rollout import left_pad

    w = read_weights(model)
    B, G, S_max = len(prompts), group_size, max_new_tokens
    N = B * G
    ids, pmask = left_pad(prompts, pad_id)  # [B, P]
    ids, pmask = ids.to(device), pmask.to(device).bool()
    P = ids.size(1)
    dtype = w.embed.dtype
    cos_tab, sin_tab = rope_tables(w, P + S_max, device)  # [T, d_h] each
    pos = (pmask.long().cumsum(1) - 1).clamp(min=0)  # [B, P] HF generate's position ids
    cache_k = [torch.empty(N, w.kv_heads, w.d_head, P + S_max, dtype=dtype, device=device) for _ in w.layers]
    cache_v = [torch.empty(N, w.kv_heads, P + S_max, w.d_head, dtype=dtype, device=device) for _ in w.layers]
    neg = torch.tensor(float("-inf"), dtype=dtype, device=device)
    zero = torch.tensor(0.0, dtype=dtype, device=device)
    keys = torch.zeros(N, P + S_max, dtype=dtype, device=device)  # [N, T] additive: -inf on prompt padding
    keys[:, :P] = torch.where(pmask, zero, neg).repeat_interleave(G, dim=0)

    # prefill: one row per distinct prompt; pad queries attend themselves only (no NaN rows)
    tmp_k = [torch.empty(B, w.kv_heads, w.d_head, P, dtype=dtype, device=device) for _ in w.layers]
    tmp_v = [torch.empty(B, w.kv_heads, P, w.d_head, dtype=dtype, device=device) for _ in w.layers]
    causal = torch.ones(P, P, dtype=torch.bool, device=device).tril()
    eye = torch.eye(P, dtype=torch.bool, device=device)
    allowed = (causal[None] & pmask[:, None, :]) | eye[None]  # [B, P, P]
    bias = torch.where(allowed, zero, neg)[:, None]  # [B, 1, P, P]
    x = w.embed[ids].reshape(B * P, -1)  # [B*P, d]
    h = block(w, x, cos_tab[pos][:, :, None], sin_tab[pos][:, :, None], tmp_k, tmp_v, 0, group_bias(w, bias))
    h = rms_norm(h.view(B, P, -1)[:, -1], w.norm, w.eps)  # [B, d]: logits at the last position only
    logits = w.head(h).float().repeat_interleave(G, dim=0)  # [N, V]
    for i in range(len(w.layers)):  # share each prompt's keys/values with its G rows
        cache_k[i][:, :, :, :P] = tmp_k[i].repeat_interleave(G, dim=0)
        cache_v[i][:, :, :P] = tmp_v[i].repeat_interleave(G, dim=0)
    del tmp_k, tmp_v

    plen = pmask.sum(1).repeat_interleave(G)  # [N] real prompt tokens = RoPE position of the first new token
    steps = plen[:, None] + torch.arange(S_max, device=device)[None]  # [N, S] positions (< P + S_max: plen <= P)
    cos_steps, sin_steps = cos_tab[steps][:, :, None, None], sin_tab[steps][:, :, None, None]  # [N, S, 1, 1, d_h]
    step_bias = group_bias(w, keys[:, None, None, :])  # [N*kv, g, P+S_max]: step k reads its first P+k slots
    out = torch.full((N, S_max), pad_id, dtype=torch.long, device=device)
    done = torch.zeros(N, dtype=torch.bool, device=device)
    if seeds is not None and len(seeds) != N:
        raise ValueError(f"{len(seeds)} seeds for {N} rows")
    uniforms = row_uniforms(seeds, S_max, device) if seeds is not None and not greedy else None  # [N, S_max]
    every = done_check_every(device)  # host reads of `done` (each one a device sync on a GPU)
    ends = torch.zeros(N, dtype=torch.long, device=device)  # [N] tokens each row has so far (its EOS included)
    step = 0
    while True:
        u = None if uniforms is None else uniforms[:, step]
        tok = pick(logits, greedy=greedy, temperature=temperature, top_p=top_p, u=u).masked_fill_(done, pad_id)  # [N]
        out[:, step] = tok
        ends = torch.where(done, ends, step + 1)  # rows still open before this token grow by it
        done |= tok == eos_id
        step += 1
        if step == S_max or (step % every == 0 and finished(done)):
            break
        slot = P + step - 1  # tok goes to cache slot P+step-1, at RoPE position plen+step-1
        cos, sin = cos_steps[:, step - 1], sin_steps[:, step - 1]  # [N, t=1, 1, d_h] at position plen+step-1
        h = block(w, w.embed[tok], cos, sin, cache_k, cache_v, slot, step_bias[:, :, :slot + 1])
        logits = w.head(rms_norm(h, w.norm, w.eps)).float()  # [N, V]
    return out[:, :int(ends.max()) if N else step]  # the longest completion (steps past it hold padding only)


def done_check_every(device: Any) -> int:
    """Decode steps between checks that every row has ended: 1 on CPU (a check costs nothing there and
    the random stream stays as it was), DONE_CHECK_EVERY on a GPU, where each check waits for the device;
    the up to DONE_CHECK_EVERY - 1 steps past the last EOS decode padding and are trimmed off."""
    return 1 if str(device) == "cpu" else DONE_CHECK_EVERY


DONE_CHECK_EVERY = 8


def finished(done: Any) -> bool:
    """Whether every row has ended (reads the device: a host sync)."""
    return bool(done.all())


class LeanRollout:
    """Sampling with the lean decoder on the policy being trained (see the module docstring)."""

    name = "lean"
    share_prefix = True  # one prefill per group: the ledger's prefix-sharing count applies

    def __init__(self, model: Any, tokenizer: Any, *, arch: Arch, lora: Lora | None, eos_id: int, pad_id: int,
                 max_new_tokens: int, temperature: float, top_p: float, device: str):
        import torch

        with torch.no_grad():
            read_weights(model)  # refuse an unsupported architecture at setup, not at iteration 1
        self.model, self.tokenizer, self.arch, self.lora = model, tokenizer, arch, lora
        self.eos_id, self.pad_id, self.device = eos_id, pad_id, device
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self._float32 = next(model.parameters()).dtype == torch.float32

    def generate(self, prompts: list[list[int]], *, group_size: int, greedy: bool = False,
                 seeds: list[int] | None = None) -> Rollout:
        import torch

        t0 = time.perf_counter()
        with torch.no_grad():
            comp = sample(self.model, prompts, group_size=group_size, greedy=greedy,
                          max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=self.top_p,
                          eos_id=self.eos_id, pad_id=self.pad_id, device=self.device, seeds=seeds)
        comp = comp.cpu()  # [N, S]
        seconds = time.perf_counter() - t0
        rows = [p for p in prompts for _ in range(group_size)]  # groups consecutive
        share = group_size
        merges = self.lora is not None and self._float32  # float32 adapters run merged (`merged`)

        def flops(plens, clens):
            # one padded prefill per group, every row decoded to the longest completion
            f = generate_flops(self.arch, plens, clens, lora=self.lora, share_prefix=share, padded=True)
            if merges:  # executed: the base's shapes, plus B @ A once for the call
                base = generate_flops(self.arch, plens, clens, lora=None, share_prefix=share, padded=True)
                f = Flops(f.model, base.executed + merge_flops(self.arch, self.lora))
            return f

        return _finish(rows, comp, eos_id=self.eos_id, pad_id=self.pad_id, tokenizer=self.tokenizer,
                       flops_fn=flops, seconds=seconds)

    def sync(self, model: Any) -> None:
        """Nothing to do: the weights are read from the training model at every `generate`."""

