"""GPU smoke test of the GRPO engine: a tiny job on CUDA in bf16, from a model built from config.

    python scripts/gpu_smoke.py                  # on a GPU box (no network needed)
    python scripts/gpu_smoke.py --device cpu     # the same script on CPU (fp32), for a dry run

Builds a random Qwen2 (byte tokenizer, --hidden/--layers) into a temp folder, runs
`race_cli.engine.job.Job` for --iterations GRPO iterations on the arithmetic task with the
rule reward, and prints the device, the policy's dtype, per-phase seconds and FLOPs (model and
executed), achieved FLOP/s per phase, and the ledger.json it wrote. Exits 1 when the job fails,
when a loss is not finite, or when the dtype is not the one asked for (bf16 on CUDA, fp32 on CPU).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build_model(folder: Path, hidden: int, layers: int) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from race_cli.zoo import EOS_ID, VOCAB_SIZE, byte_tokenizer

    torch.manual_seed(0)
    heads = max(2, hidden // 64)
    cfg = Qwen2Config(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      num_key_value_heads=max(1, heads // 2), intermediate_size=hidden * 3, vocab_size=VOCAB_SIZE,
                      eos_token_id=EOS_ID, pad_token_id=EOS_ID, bos_token_id=EOS_ID, tie_word_embeddings=False)
    AutoModelForCausalLM.from_config(cfg).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--backend", default="auto", help="rollout.backend: auto | hf | vllm")
    ap.add_argument("overrides", nargs="*", help="extra config overrides")
    args = ap.parse_args(argv)

    import torch

    from race_cli.compose import compose
    from race_cli.engine.job import Job
    from race_cli.errors import RaceError

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA GPU; run with --device cpu for a dry run.", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        model = build_model(Path(tmp) / "model", args.hidden, args.layers)
        heads = max(2, args.hidden // 64)
        ov = ["grid=none", f"model.path={model}", "model.name=smoke", f"device={args.device}",
              f"model.arch.hidden_size={args.hidden}", f"model.arch.num_hidden_layers={args.layers}",
              f"model.arch.num_attention_heads={heads}", f"model.arch.num_key_value_heads={max(1, heads // 2)}",
              f"model.arch.intermediate_size={args.hidden * 3}", f"rollout.backend={args.backend}",
              "budget.flops=1e18", f"budget.max_iterations={args.iterations}", "task.num_eval=32",
              "eval.every=1000", "checkpoint.every=1000", "grpo.updates_per_batch=2", "grpo.beta=0.01", *args.overrides]
        job_dir = Path(tmp) / "job"
        try:
            job = Job(compose(ov), job_dir, ov)
            t0 = time.perf_counter()
            code = job.run()
        except RaceError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        wall = time.perf_counter() - t0
        if code != 0:
            print(f"error: the job failed: {json.loads((job_dir / 'status.json').read_text()).get('error')}",
                  file=sys.stderr)
            return 1
        dtype = next(job.policy.model.parameters()).dtype
        want = torch.bfloat16 if job.device.startswith("cuda") else torch.float32
        print(f"device {job.device} ({torch.cuda.get_device_name(job.device) if job.device.startswith('cuda') else 'cpu'})"
              f"  dtype {dtype}  rollout backend {job.rollout.name}  wall {wall:.1f} s")
        led = job.ledger
        for p in ("rollout", "update", "reward"):
            s, f = led["seconds"][p], led["flops"][p]
            rate = f"{f.executed / s / 1e12:.3f} TFLOP/s executed" if s > 0 and f.executed else "-"
            print(f"  {p:8s} {s:7.3f} s  model {f.model:.4g} FLOPs  executed {f.executed:.4g}  {rate}")
        ev = led["eval"]
        print(f"  eval     {ev['seconds']:7.3f} s  model {ev['flops'].model:.4g} FLOPs ({ev['runs']} runs, not budgeted)")
        rows = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
        losses = [r["train/loss"] for r in rows if "train/loss" in r]
        print("ledger.json:")
        print((job_dir / "ledger.json").read_text())
        problems = []
        if dtype != want:
            problems.append(f"policy dtype {dtype}, expected {want}")
        if len(losses) != args.iterations or not all(isinstance(x, float) for x in losses):
            problems.append(f"losses {losses}: expected {args.iterations} finite values")
        if problems:
            print("error: " + "; ".join(problems), file=sys.stderr)
            return 1
        print("gpu smoke: ok")
        return 0


if __name__ == "__main__":
    sys.exit(main())
