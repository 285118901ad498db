"""GPU smoke test at real shapes: one GRPO iteration of grid=pilot's settings on Qwen2.5-shaped policies.

    python scripts/gpu_smoke.py                                   # 0.5B and 1.5B shapes, B=32 G=16, 512 tokens, LoRA r=32
    python scripts/gpu_smoke.py --models 0.5b --group-size 4      # a quicker look
    python scripts/gpu_smoke.py --device cpu --models tiny --prompts 2 --group-size 2 --max-new-tokens 8   # CPU dry run

For each shape: builds a Qwen2 model from config (random weights, the real vocabulary of 151,936,
bf16 on CUDA) and a byte tokenizer into a temp folder, then runs `race_cli.engine.job.Job` for
exactly one iteration with the pilot's B, G, max_new_tokens, LoRA rank and `micro_batch_size:
auto` on the arithmetic task with the rule reward (nothing to download). A random policy never
samples EOS, so every completion runs to max_new_tokens: the worst case the ledgers plan for.
It prints per phase the wall seconds, the FLOP ledger's executed FLOPs, the achieved FLOP/s and
the model FLOPs utilisation against the GPU's bf16 dense peak, and the measured peak memory
(`torch.cuda.max_memory_allocated`, reset at each phase) against the memory ledger's figure
for that phase (race_cli/cost/memory.py). Exit 1 when a job fails, a loss is not finite or the
policy's dtype is not bf16 on CUDA (fp32 on CPU). Budget: under 8 minutes on one H200.

Departures from the pilot: arithmetic prompts (byte tokens, ~60) instead of GSM8K's chat prompts
(~150-300 tokens), the rule reward only, HF generate unless --backend says otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

PEAK_BF16 = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "4090": 165e12}
SHAPES = {  # name -> (hidden, layers, heads, kv heads, MLP width, vocabulary, tied embeddings)
    "0.5b": (896, 24, 14, 2, 4864, 151_936, True),
    "1.5b": (1536, 28, 12, 2, 8960, 151_936, True),
    "tiny": (64, 2, 4, 2, 128, 257, False),
}


def build_model(folder: Path, shape: tuple, dtype) -> Path:
    """A random Qwen2 of `shape` saved with the zoo's byte tokenizer (ids >= 257 decode to nothing)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config
    from transformers.utils import logging as hf_logging

    from race_cli.zoo import EOS_ID, byte_tokenizer

    hf_logging.disable_progress_bar()
    d, L, h, kv, f, V, tied = shape
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=d, num_hidden_layers=L, num_attention_heads=h, num_key_value_heads=kv,
                      intermediate_size=f, vocab_size=V, eos_token_id=EOS_ID, pad_token_id=EOS_ID, bos_token_id=EOS_ID,
                      tie_word_embeddings=tied)
    AutoModelForCausalLM.from_config(cfg, dtype=dtype).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def gpu_peak_flops(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


class PhasePeaks:
    """Wraps the job's rollout, reward and update calls: seconds and peak CUDA bytes of each."""

    def __init__(self, job, device: str):
        import torch

        self.peaks: dict[str, int] = {}
        self.cuda = device.startswith("cuda")
        self.torch = torch
        gen, reward, update = job.rollout.generate, job.reward, job.update

        def wrap(name, fn):
            def run(*a, **k):
                if self.cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats()
                out = fn(*a, **k)
                if self.cuda:
                    torch.cuda.synchronize()
                    key = "eval" if k.get("greedy") else name
                    self.peaks[key] = max(self.peaks.get(key, 0), torch.cuda.max_memory_allocated())
                return out
            return run

        job.rollout.generate = wrap("rollout", gen)
        job.reward = wrap("reward", reward)
        job.update = wrap("update", update)


def run_shape(name: str, args, tmp: Path) -> list[str]:
    """One iteration at this shape; returns the problems found (empty = ok)."""
    import torch

    from race_cli.config.compose import compose
    from race_cli.engine.job import Job
    from race_cli import machine
    from race_cli.cost.memory import GiB, plan_memory

    d, L, h, kv, f, V, tied = SHAPES[name]
    cuda = args.device.startswith("cuda")
    t0 = time.perf_counter()
    model = build_model(tmp / f"model-{name}", SHAPES[name], torch.bfloat16 if cuda else torch.float32)
    build_s = time.perf_counter() - t0
    ov = ["grid=none", "task=arithmetic", f"model.path={model}", f"model.name=qwen2.5-{name}-shape",
          f"device={args.device}", f"model.arch.hidden_size={d}", f"model.arch.num_hidden_layers={L}",
          f"model.arch.num_attention_heads={h}", f"model.arch.num_key_value_heads={kv}",
          f"model.arch.intermediate_size={f}", f"model.arch.vocab_size={V}", f"model.arch.tie_word_embeddings={tied}",
          f"grpo.prompts_per_iter={args.prompts}", f"grpo.group_size={args.group_size}",
          f"rollout.max_new_tokens={args.max_new_tokens}", f"lora.r={args.lora_r}", f"lora.alpha={2 * args.lora_r}",
          "grpo.lr=1e-5", "grpo.micro_batch_size=auto", f"rollout.backend={args.backend}", "budget.flops=1e20",
          "budget.max_iterations=1", f"task.num_eval={args.num_eval}", f"eval.batch_size={args.num_eval}",
          "eval.every=1000", "checkpoint.every=1000", "task.prompt_tokens=64", "rollout.expected_completion_tokens=null",
          *args.overrides]
    job = Job(compose(ov), tmp / f"job-{name}", ov, log=lambda m: None)
    job.job_dir.mkdir(parents=True)
    job.setup()
    peaks = PhasePeaks(job, job.device)
    t1 = time.perf_counter()
    job.start_or_resume()
    job.train()
    wall = time.perf_counter() - t1
    dtype = next(job.policy.model.parameters()).dtype
    want = torch.bfloat16 if cuda else torch.float32
    led, peak = job.ledger, gpu_peak_flops(job.device)
    print(f"\n== Qwen2.5-{name} shape (d={d}, L={L}, V={V}): B={args.prompts} G={args.group_size} "
          f"max_new_tokens={args.max_new_tokens} LoRA r={args.lora_r}, micro-batch {job.micro_batch}"
          f"{' + checkpointing' if job.grad_checkpointing else ''}, {dtype}, rollout {job.rollout.name}, "
          f"model built in {build_s:.0f} s, iteration + eval {wall:.1f} s")
    mem = None
    if cuda:
        total = torch.cuda.get_device_properties(job.device).total_memory
        mem = plan_memory(job.cfg_dict, total, vllm_installed=machine.vllm_installed())
    print(f"  {'phase':8s} {'seconds':>8s} {'exec FLOPs':>11s} {'TFLOP/s':>8s} {'MFU':>6s} {'peak mem':>9s} "
          f"{'ledger':>9s} {'error':>7s}")
    for p in ("rollout", "update", "reward"):
        s, fl = led.seconds[p], led.flops[p].executed
        rate = fl / s if s > 0 else 0.0
        mfu = f"{rate / peak:6.1%}" if peak and fl else "     -"
        meas = peaks.peaks.get(p)
        plan = mem.total(p) if mem is not None and p in mem.phases else None
        err = f"{(plan - meas) / meas:+7.1%}" if meas and plan else "      -"
        print(f"  {p:8s} {s:8.2f} {fl:11.3g} {rate / 1e12:8.2f} {mfu} "
              f"{(f'{meas / GiB:.2f}G' if meas else '-'):>9s} {(f'{plan / GiB:.2f}G' if plan else '-'):>9s} {err}")
    if cuda and "eval" in peaks.peaks:
        print(f"  eval     {led.eval_seconds:8.2f}  (greedy, {args.num_eval} items, not budgeted)  "
              f"peak {peaks.peaks['eval'] / GiB:.2f}G")
    if not cuda:
        print("  peak memory: measured on CUDA only (on CPU see `race mem --audit`, fake tensors)")
    rows = [json.loads(x) for x in job.metrics_path.read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    problems = []
    if dtype != want:
        problems.append(f"{name}: policy dtype {dtype}, expected {want}")
    if len(losses) != 1 or not all(isinstance(x, float) and math.isfinite(x) for x in losses):
        problems.append(f"{name}: losses {losses}, expected one finite value")
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--models", default="0.5b,1.5b", help=f"comma-separated shapes: {', '.join(SHAPES)}")
    ap.add_argument("--prompts", type=int, default=32, help="B (grid=pilot: 32)")
    ap.add_argument("--group-size", type=int, default=16, help="G (grid=pilot: 4, 8, 16)")
    ap.add_argument("--max-new-tokens", type=int, default=512, help="grid=pilot: 512")
    ap.add_argument("--lora-r", type=int, default=32, help="grid=pilot: 32")
    ap.add_argument("--num-eval", type=int, default=32, help="held-out items of the initial and final evaluation")
    ap.add_argument("--backend", default="hf", help="rollout.backend: hf | vllm | auto")
    ap.add_argument("overrides", nargs="*", help="extra config overrides")
    args = ap.parse_args(argv)

    import torch

    from race_cli.errors import RaceError

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA GPU; run with --device cpu for a dry run.", file=sys.stderr)
        return 1
    unknown = [m for m in args.models.split(",") if m not in SHAPES]
    if unknown:
        print(f"error: --models {','.join(unknown)}: expected some of {', '.join(SHAPES)}.", file=sys.stderr)
        return 1
    if args.device.startswith("cuda"):
        print(f"device {torch.cuda.get_device_name(args.device)}, bf16 dense peak "
              f"{(gpu_peak_flops(args.device) or float('nan')) / 1e12:.0f} TFLOP/s")
    t0 = time.perf_counter()
    problems = []
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                problems += run_shape(name, args, Path(tmp))
            except RaceError as exc:
                problems.append(f"{name}: {exc}")
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if problems:
        print("error: " + "; ".join(problems), file=sys.stderr)
        return 1
    print("gpu smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
