"""Measure what the kernels really run and compare it with the ledger's executed FLOPs.

Builds a real transformers Qwen2 model from an `Arch` (random weights, SDPA attention),
runs a forward, a LoRA forward+backward (peft, all linear layers), a full fine-tuning
forward+backward and a KV-cache `generate`, each under torch's `FlopCounterMode`, and
returns one row per case with the ledger's executed and model figures beside the count.
`race flops --audit` prints these rows; tests/test_flops_audit.py asserts on them.

Heavy imports (torch, transformers, peft) happen inside the functions. Counter caveats
(docs/design.md): on CPU, SDPA dispatches to `aten._scaled_dot_product_flash_attention_for_cpu`
and its backward, which FlopCounterMode does not know: `register_cpu_sdpa_flops()` teaches
it, reusing the counter's own SDPA formulas. Under `torch.inference_mode` the counter sees
nothing, so everything here runs under `no_grad` (generate uses no_grad itself).

On the meta device (big shapes, no memory) the forward and backward are counted from shapes
alone; `generate` needs real token values, so it is skipped there and the row says so.
"""

from __future__ import annotations

from typing import Any, Callable

from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Flops, Lora, forward_flops, generate_flops, train_step_flops


def register_cpu_sdpa_flops() -> None:
    """Teach FlopCounterMode the CPU flash-attention ops (idempotent).

    The forward is costed like every other SDPA kernel (`sdpa_flop`: 2 bmm over the full
    s_q x s_k matrix, causal or not) and the backward like theirs (`sdpa_backward_flop`:
    5 bmm, the score recompute included).
    """
    import torch
    from torch.utils import flop_counter as fc

    aten = torch.ops.aten
    pairs = (
        (aten._scaled_dot_product_flash_attention_for_cpu, fc.sdpa_flop),
        (aten._scaled_dot_product_flash_attention_for_cpu_backward, fc.sdpa_backward_flop),
    )
    for op, formula in pairs:
        if op not in fc.flop_registry:
            # fc.sdpa_flop / sdpa_backward_flop are already shape-wrapped (they take tensors and
            # out_val), so they register raw; the CPU ops' leading args are the same tensors.
            fc.register_flop_formula(op, get_raw=True)(formula)


def count_flops(fn: Callable[[], Any]) -> float:
    """Total FLOPs FlopCounterMode sees while `fn()` runs (call it under no_grad, not inference_mode)."""
    from torch.utils.flop_counter import FlopCounterMode

    register_cpu_sdpa_flops()
    with FlopCounterMode(display=False) as counter:
        fn()
    return float(counter.get_total_flops())


def build_model(arch: Arch, *, device: str = "cpu", attn_implementation: str = "sdpa", seed: int = 0):
    """A randomly initialised Qwen2ForCausalLM with `arch`'s shapes (meta: no memory at all)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(hidden_size=arch.hidden_size, num_hidden_layers=arch.num_hidden_layers,
                      num_attention_heads=arch.num_attention_heads,
                      num_key_value_heads=arch.num_key_value_heads,
                      intermediate_size=arch.intermediate_size, vocab_size=arch.vocab_size,
                      head_dim=arch.d_head, tie_word_embeddings=False, use_cache=True,
                      attn_implementation=attn_implementation)
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen2ForCausalLM(cfg)
    return model.eval()


def _batch(lengths: list[int], vocab: int, device: str, seed: int):
    """Left-padded token ids and attention mask for rows of the given real lengths."""
    import torch

    g = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), width), generator=g)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for i, n in enumerate(lengths):
        mask[i, width - n:] = 1
    return ids.to(device), mask.to(device)


def measure_forward(model, ids, mask) -> float:
    """One no-grad forward with logits at every position."""
    import torch

    def run():
        with torch.no_grad():
            model(input_ids=ids, attention_mask=mask)
    return count_flops(run)


def measure_train_step(model, ids, mask) -> float:
    """Forward + backward of a scalar loss over every position's logits (optimizer not counted)."""
    def run():
        logits = model(input_ids=ids, attention_mask=mask).logits  # [B, T, V]
        logits.float().logsumexp(-1).mean().backward()
    flops = count_flops(run)
    model.zero_grad(set_to_none=True)
    return flops


def measure_generate(model, ids, mask, new_tokens: int) -> float:
    """Greedy KV-cache generate of exactly `new_tokens` tokens per row (no EOS can stop it)."""
    def run():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens,
                       min_new_tokens=new_tokens, do_sample=False, eos_token_id=None,
                       pad_token_id=0)
    return count_flops(run)


def _row(what: str, measured: float | None, ledger: Flops, note: str = "") -> dict:
    rel = None if not measured else (ledger.executed - measured) / measured
    row = {"what": what, "measured": measured, "ledger_executed": float(ledger.executed),
           "ledger_model": float(ledger.model), "rel_err": rel}
    if note:
        row["note"] = note
    return row


def audit_arch(arch: Arch, *, lora_r: int | None, batch: int, prompt_len: int, completion_len: int,
               seed: int = 0, device: str = "cpu") -> list[dict]:
    """Measured vs ledger FLOPs for one architecture: forward, LoRA and full fwd+bwd, generate.

    Rows are `{"what", "measured", "ledger_executed", "ledger_model", "rel_err"}` (rel_err =
    (ledger - measured) / measured), plus `"note"` where a case was skipped (measured and
    rel_err None). The batch has `batch` rows of different lengths, left-padded: row i has
    prompt_len - i prompt tokens (at least 1) and completion_len completion tokens.
    `lora_r=None` skips the LoRA case. On `device="meta"` generate is skipped and every row
    has equal lengths (shape-only tensors cannot build a padding mask), so no padding there,
    and SDPA runs its math path (a 2x attention backward instead of the fused kernels' 2.5x).
    """
    problems = [f"{name} must be a positive integer, got {v!r}." for name, v in
                (("batch", batch), ("prompt_len", prompt_len), ("completion_len", completion_len))
                if isinstance(v, bool) or not isinstance(v, int) or v < 1]
    if lora_r is not None and (isinstance(lora_r, bool) or not isinstance(lora_r, int) or lora_r < 1):
        problems.append(f"lora_r must be a positive integer or None (skip LoRA), got {lora_r!r}.")
    if problems:
        raise RaceError(*problems, "Try e.g. --batch 4 --prompt-len 32 --completion-len 16.")

    meta = device == "meta"
    kernel = "math" if meta else "fused"  # SDPA on meta tensors takes the math path (plain bmm)
    prompts = [prompt_len if meta else max(prompt_len - i, 1) for i in range(batch)]
    seqs = [p + completion_len for p in prompts]
    model = build_model(arch, device=device, seed=seed)
    ids, mask = _batch(seqs, arch.vocab_size, device, seed)
    if meta:
        mask = None  # equal lengths; SDPA still computes the full matrix (is_causal is free to the counter)
    rows = [_row("forward", measure_forward(model, ids, mask), forward_flops(arch, seqs))]

    if lora_r is not None:
        from peft import LoraConfig

        from race_cli.engine.hf import lora_wrap

        lora = Lora(lora_r)
        peft_model = lora_wrap(build_model(arch, device=device, seed=seed),
                                    LoraConfig(r=lora_r, lora_alpha=2 * lora_r, lora_dropout=0.0,
                                               target_modules=list(lora.target_modules)))
        rows.append(_row("lora fwd+bwd", measure_train_step(peft_model, ids, mask),
                         train_step_flops(arch, seqs, lora=lora, attn_kernel=kernel)))
        del peft_model

    for p in model.parameters():
        p.requires_grad_(True)
    model.train()  # dropout is 0 in Qwen2; train() only mirrors a real update
    rows.append(_row("full fwd+bwd", measure_train_step(model, ids, mask),
                     train_step_flops(arch, seqs, lora=None, attn_kernel=kernel)))
    model.eval()

    completions = [completion_len] * batch
    if meta:
        rows.append(_row("generate", None, generate_flops(arch, prompts, completions),
                         note="skipped on meta: generate needs real token values"))
    else:
        p_ids, p_mask = _batch(prompts, arch.vocab_size, device, seed + 1)
        rows.append(_row("generate", measure_generate(model, p_ids, p_mask, completion_len),
                         generate_flops(arch, prompts, completions)))
    return rows
