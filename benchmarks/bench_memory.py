"""Peak memory of one update pass on a Qwen2.5-0.5B shape at the pilot's batch: the old code vs today's.

    python benchmarks/bench_memory.py                 # B=32, G=4 (N=128), prompts 300 + 512 completion tokens
    python benchmarks/bench_memory.py --group-size 16 # N=512

Measured, not estimated: a real transformers Qwen2 (+ PEFT LoRA r=32) with fake tensors
(race_cli.plan.memory_audit), every tensor's storage tracked by a dispatch mode, so the peak is
the bytes the code would hold on a GPU (bf16 weights), with no memory actually allocated.

- "old": the update as it was before the memory ledger: the whole batch in one forward
  (micro_batch_size 0, the pilot's default then), `model(..., logits_to_keep=C+1).logits`
  ([N, C+1, V] bf16) and a float32 copy of it for log_softmax;
- "new": `completion_logprobs` (head + log-softmax per 256-position block, checkpointed) at the
  micro-batch `micro_batch_size: auto` picks for an 80 GiB GPU, and at the whole batch
  (the log-prob change alone).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def old_completion_logprobs(model, ids, attn, comp, temperature: float = 1.0):
    """The log-probs as computed before this change (kept here for the comparison only)."""
    import torch

    C = comp.size(1)
    out = model(input_ids=ids, attention_mask=attn, logits_to_keep=C + 1, use_cache=False)
    logits = out.logits[:, :-1].float()  # [N, C, V] float32 copy
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)
    return logits.gather(-1, comp.unsqueeze(-1)).squeeze(-1) - logz


def peak(n: int, P: int, C: int, *, old: bool, ckpt: bool = False) -> int:
    import torch

    from race_cli.engine.logprobs import completion_logprobs
    from race_cli.plan.memory_audit import QWEN_05B, _start, fake_model

    fm = fake_model(QWEN_05B, lora_r=32, tie=True, grad_checkpointing=ckpt)
    fn = old_completion_logprobs if old else completion_logprobs
    with fm.mode:
        ids = torch.randint(0, QWEN_05B.vocab_size, (n, P + C))
        opt = torch.optim.AdamW([p for p in fm.model.parameters() if p.requires_grad], lr=1e-5, foreach=False)
        tr = _start(fm)
        with tr:
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                logp = fn(fm.model, ids, None, ids[:, P:])
                (-(logp * torch.randn(n)[:, None]).mean()).backward()
                del logp
                opt.step()
    return tr.peak


def main() -> None:

    from race_cli.cost.memory import GiB, MemSpec, fit
    from race_cli.plan.memory_audit import QWEN_05B

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--prompt-len", type=int, default=300)
    ap.add_argument("--completion-len", type=int, default=512)
    args = ap.parse_args()
    N, P, C = args.prompts * args.group_size, args.prompt_len, args.completion_len
    spec = MemSpec(arch=QWEN_05B, tied=True, lora_r=32, sequences=N, prompt_len=P, completion_len=C, micro_batch=N)
    auto = fit(spec, 80 * GiB)
    print(f"Qwen2.5-0.5B shape, LoRA r=32, bf16, N={N} sequences of {P}+{C} tokens; "
          f"auto micro-batch for 80 GiB: {auto.micro_batch}{' + checkpointing' if auto.grad_checkpointing else ''}")
    rows = [("old: whole batch, full logits + float32 copy", dict(n=N, old=True)),
            ("new: whole batch, chunked log-probs", dict(n=N, old=False)),
            (f"new: auto micro-batch {auto.micro_batch}, chunked", dict(n=auto.micro_batch, old=False,
                                                                        ckpt=auto.grad_checkpointing))]
    base = None
    for name, kw in rows:
        t0 = time.perf_counter()
        got = peak(kw.pop("n"), P, C, **kw)
        base = base or got
        print(f"  {name:48s} peak {got / GiB:9.1f} GiB  ({base / got:5.1f}x below old)  [{time.perf_counter() - t0:.0f} s]",
              flush=True)
    print(f"  ledger for the auto micro-batch: {auto.total('update') / GiB:.1f} GiB (update phase)")


if __name__ == "__main__":
    main()
