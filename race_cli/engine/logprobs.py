"""Model-level log-probs of sampled completions, and the LoRA merge the update can run on.

    logp = completion_logprobs(model, ids, attn, comp)   # [N, C], what Job.update and the memory audit run

`completion_logprobs` re-packs each row to start at column 0 (plain causal attention, no padding
mask), runs the decoder body once and the LM head + log-softmax only on the real completion
tokens, in blocks (grpo.chunked_logprobs). `merged_lora_weights` gives each LoRA-adapted matrix
as one weight W + s·B·A, for the merged update (cost/flops.merged_lora_update). Imports torch
inside the functions only.
"""

from __future__ import annotations

from typing import Any

from race_cli.cost.memory import block_rows
from race_cli.engine.grpo import chunked_logprobs, rows_logprobs


def merged_lora_weights(lm: Any) -> dict:
    """{parameter name: W + s*B*A} for every LoRA-adapted linear of `lm` (the base model under the
    PEFT wrapper), built from the live adapters so gradients flow back to A and B."""
    out = {}
    for name, mod in lm.named_modules():
        if not (hasattr(mod, "lora_A") and hasattr(mod, "base_layer")):
            continue
        w = mod.base_layer.weight
        for adapter in mod.active_adapters:
            if adapter in mod.lora_A:
                w = w + mod.scaling[adapter] * (mod.lora_B[adapter].weight @ mod.lora_A[adapter].weight)
        out[f"{name}.base_layer.weight"] = w
    return out


def completion_logprobs(model: Any, ids, attn, comp, temperature: float = 1.0, chunk: int | None = None, *,
                        merge_lora: bool = False):
    """Log-probs [N, C] of the completion tokens under `model`, as sampled at `temperature`.

    ids, attn [N, P+C]: left-padded prompts followed by the completions comp [N, C], each
    right-padded after its EOS (attn None: no padding). Each row is re-packed to start at
    column 0 (its prompt, its completion, then filler), so plain causal attention is exact for
    every real token: no padding mask is built (SDPA runs its causal kernel) and the decoder
    body runs over the longest real row. RoPE depends on relative positions only, so the shift
    changes nothing but rounding. The LM head and the log-softmax run on the real completion
    positions only (row i's token t is predicted at position p_i - 1 + t), in blocks of
    `chunk` rows (default memory.block_rows(V); see grpo.chunked_logprobs). Padding positions
    of the result are 0.

    `merge_lora` (see cost/flops.merged_lora_update): each adapted matrix runs as one weight
    W + s*B*A through `torch.func.functional_call` with the adapters switched off; the same
    function as PEFT's base + B(A(x))*s up to rounding, with gradients to A and B.
    """
    import torch

    N, S = ids.shape
    C = comp.size(1)
    P = S - C
    if attn is None:  # no padding: nothing to re-pack (and no data-dependent shapes, for the memory audit)
        packed = ids
    else:
        real = attn.bool()
        p_len = real[:, :P].sum(dim=1)  # [N] prompt tokens per row (>= 1)
        c_real = real[:, P:]  # [N, C] real completion tokens (up to and including EOS)
        lens = p_len + c_real.sum(dim=1)  # [N]
        L = int(lens.max())
        j = torch.arange(L, device=ids.device)[None, :]  # [1, L]
        packed = ids.gather(1, ((P - p_len)[:, None] + j).clamp(max=S - 1))  # [N, L] row i: its real tokens first
        packed = packed.masked_fill(j >= lens[:, None], 0)  # filler after the real tokens: causal attention never reads it

    lm = model.get_base_model() if hasattr(model, "get_base_model") else model
    body = lm.get_decoder() if hasattr(lm, "get_decoder") else lm.model
    if merge_lora and hasattr(model, "disable_adapter"):
        from torch.func import functional_call

        prefix = next(n for n, m in lm.named_modules() if m is body)
        weights = {k[len(prefix) + 1:]: w for k, w in merged_lora_weights(lm).items()}  # built before the
        with model.disable_adapter():  # adapters go off (peft also marks them frozen inside the block)
            hidden = functional_call(body, weights, (), {"input_ids": packed, "use_cache": False}).last_hidden_state
    else:
        hidden = body(input_ids=packed, use_cache=False).last_hidden_state  # [N, L, d]
    head = lm.get_output_embeddings()
    chunk = chunk or block_rows(head.weight.size(0))

    def block(x, tok):  # x [r, d], tok [r] -> [r]
        return rows_logprobs(head(x), tok, temperature)

    if attn is None:  # position P-1+t predicts token t
        h = hidden[:, P - 1:S - 1].reshape(N * C, -1)  # [N*C, d]
        return chunked_logprobs(block, h, comp.reshape(N * C), chunk).view(N, C)
    rows, t = c_real.nonzero(as_tuple=True)  # [R] each real completion token
    h = hidden[rows, p_len[rows] - 1 + t]  # [R, d] the positions that predict them
    lp = chunked_logprobs(block, h, comp[rows, t], chunk)  # [R]
    return torch.zeros((N, C), dtype=lp.dtype, device=lp.device).index_put((rows, t), lp)  # [N, C]
