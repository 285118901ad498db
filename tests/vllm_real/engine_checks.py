"""The real vLLM engine (its CPU build), driven through race's backend: run by tests/test_vllm_real.py with the
vLLM venv's python (RACE_VLLM_PYTHON). One engine start serves every check, so the file costs one start-up.

    $RACE_VLLM_PYTHON tests/vllm_real/engine_checks.py OUT.json WORKDIR
    $RACE_VLLM_PYTHON tests/vllm_real/engine_checks.py --model DIR     # only build the model (for race train)

A random Qwen2 built from config (head dim 32: the smallest the CPU attention accepts; no download) with a
real PEFT LoRA adapter; float32 throughout. Writes one JSON object of measurements; the test asserts on them:
  start       seconds to LLM(...) and the first adapter, sleep mode (off on CPU), the engine's batch limits
  seeds       the same per-row seeds twice -> the same tokens; other seeds -> other tokens
  refreshes   after each of 3 simulated updates (every lora_B moved by N(0, 0.05^2)), a new adapter id and the
              sampler-vs-trainer gap (mean and max |log q - log p| per token, KL estimate), and how far the
              update moved the trainer's own log-probs (so a stale adapter would show)
  stale       the 4th update synced under the id of the 3rd (the real engine keeps serving its cached
              adapter): the same gap, which must exceed the bound
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

G = 4
PROMPTS = [list(b"Q: 12+7-3=\nA:"), list(b"Q: 40-15+2=\nA:")]
SHAPE = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
             intermediate_size=128, vocab_size=257, tie_word_embeddings=False)


def build_model(folder: Path) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from race_cli.zoo import EOS_ID, byte_tokenizer

    torch.manual_seed(0)
    cfg = Qwen2Config(**SHAPE, eos_token_id=EOS_ID, pad_token_id=EOS_ID, bos_token_id=EOS_ID)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def trainer_logprobs(model, ro, temperature: float):
    """The trainer's log-probs of the sampled tokens: what Job.update's first pass computes."""
    import torch

    from race_cli.engine.logprobs import completion_logprobs

    ids = torch.cat([ro.prompt_ids, ro.completion_ids], dim=1)
    attn = torch.cat([ro.prompt_mask, ro.completion_mask.long()], dim=1)
    with torch.no_grad():
        return completion_logprobs(model, ids, attn, ro.completion_ids, temperature)


def gap(ro, trainer) -> dict:
    from race_cli.engine.sampler_gap import GapSums

    sums = GapSums()
    sums.add(ro.sampler_logprobs, trainer, ro.completion_mask)
    return sums.metrics() | {"tokens": sums.tokens}


def main(out_path: str, work: str) -> None:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race_cli.cost.flops import Arch, Lora
    from race_cli.engine.hf import lora_wrap
    from race_cli.engine.rollout_vllm import VLLMRollout, batch_limits, kv_cache_bytes_cpu
    from race_cli.engine.sampling import train_row_seed

    work_dir = Path(work)
    path = build_model(work_dir / "model")
    tok = AutoTokenizer.from_pretrained(path)
    torch.manual_seed(1)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
    model = lora_wrap(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32),
                      LoraConfig(r=8, lora_alpha=16, target_modules=targets))
    arch = Arch.from_config(model.config)
    lora = Lora(r=8, target_modules=tuple(targets))
    max_len = 64
    seqs, tokens = batch_limits(sequences=len(PROMPTS) * G, prompts=len(PROMPTS),
                                longest_prompt=max(map(len, PROMPTS)), max_model_len=max_len)
    t0 = time.perf_counter()
    engine = VLLMRollout(str(path), tok, arch=arch, lora=lora, eos_id=256, pad_id=256, max_new_tokens=12,
                         temperature=1.0, top_p=1.0, dtype="float32", seed=0, gpu_memory_utilization=0.05,
                         max_model_len=max_len, sync_dir=work_dir / "sync", device="cpu", max_num_seqs=seqs,
                         max_num_batched_tokens=tokens,
                         kv_cache_memory_bytes=kv_cache_bytes_cpu(arch, dtype_bytes=4, sequences=seqs,
                                                                  max_model_len=max_len))
    engine.sync(model)
    out: dict = {"start": {"seconds": time.perf_counter() - t0, "can_sleep": engine.can_sleep,
                           "max_num_seqs": seqs, "max_num_batched_tokens": tokens}}

    def sample(seed_base: int, iteration: int):
        seeds = [train_row_seed(seed_base, iteration, r) for r in range(len(PROMPTS) * G)]
        return engine.generate(PROMPTS, group_size=G, seeds=seeds)

    try:
        # --- per-request seeds
        a, b, c = sample(0, 1), sample(0, 1), sample(0, 2)
        rows = lambda ro: [row[:n].tolist() for row, n in zip(ro.completion_ids, ro.completion_lens)]
        out["seeds"] = {"same_equal": rows(a) == rows(b), "other_differs": rows(a) != rows(c),
                        "rows": len(rows(a)), "same_logprobs_equal": bool(torch.equal(a.sampler_logprobs,
                                                                                      b.sampler_logprobs))}
        out["initial"] = gap(a, trainer_logprobs(model, a, 1.0))
        # --- refreshes: an update moves every lora_B, the adapter is synced under a new id, vLLM samples from it
        g = torch.Generator().manual_seed(2)
        out["refreshes"] = []
        for k in range(1, 5):
            ro_before = sample(0, 10 + k)
            before = trainer_logprobs(model, ro_before, 1.0)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    if "lora_B" in name:
                        p.add_(torch.randn(p.shape, generator=g) * 0.05)
            moved = (trainer_logprobs(model, ro_before, 1.0) - before).abs().sum().item() / ro_before.completion_mask.sum().item()
            stale = k == 4
            if stale:  # a stale id: the new adapter under the id the engine already holds
                engine._lora_id -= 1
            t1 = time.perf_counter()
            engine.sync(model)
            sync_s = time.perf_counter() - t1
            ro = sample(0, 20 + k)
            t2 = time.perf_counter()
            trainer = trainer_logprobs(model, ro, 1.0)
            entry = gap(ro, trainer) | {"lora_id": engine._request.lora_int_id, "moved": moved, "stale": stale,
                                        "sync_seconds": sync_s, "trainer_seconds": time.perf_counter() - t2,
                                        "generate_seconds": ro.seconds}
            out["refreshes"].append(entry)
    finally:
        engine.close()
    out["sync_folder_removed"] = not (work_dir / "sync").exists()
    Path(out_path).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    if sys.argv[1] == "--model":
        build_model(Path(sys.argv[2]))
    else:
        main(*sys.argv[1:3])
