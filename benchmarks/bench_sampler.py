"""Decode throughput of the lean sampler against HF `generate`, alternating: tokens per second and the ratio.

    python benchmarks/bench_sampler.py                       # zoo:tiny-s, B=8 prompts x G=8 = 64 rows, 48 tokens
    python benchmarks/bench_sampler.py --pairs 5 --repeats 10 --lora
    python benchmarks/bench_sampler.py --crn                 # lean with per-row seeds (evaluation) vs without

Both backends sample from the same model (float32, CPU, one thread; --lora wraps it in an
unmerged PEFT LoRA r=16 on all linear maps), the same 8 task prompts, 64 rows, exactly
--tokens new tokens per row (EOS is taken out of play: its id is set to one no row can reach,
so every call decodes the same number of steps on both sides). Each pair runs --repeats calls
of each backend, in alternating order (lean first in odd pairs); a pair's figure is the median
call. Prints per pair: tokens/s of each and lean/HF; then the median ratio over pairs.
--crn compares the lean sampler with per-row seeds (evaluation's common random numbers: row_uniforms
drawn from one CPU generator per row, then one uniform per row and step) against the same sampler on
torch's generator (training), to price the common random numbers.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="zoo:tiny-s")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--lora", action="store_true")
    ap.add_argument("--crn", action="store_true", help="lean seeded (common random numbers) vs lean unseeded")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race_cli.engine.rollout import HFRollout
    from race_cli.engine.rollout_lean import LeanRollout
    from race_cli.engine.setup import PromptCache, resolve_model_path
    from race_cli.cost.flops import Arch
    from race_cli.tasks.arithmetic import ArithmeticTask

    torch.set_num_threads(1)
    path = resolve_model_path(args.model)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    if args.lora:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear"))
        model.eval()
    prompts = PromptCache(ArithmeticTask(seed=0, num_train=64, num_eval=1).train_items(), tok)
    batch = [prompts.ids(i) for i in range(8)]
    never = model.config.vocab_size + 10  # an EOS id no row samples: fixed-length decoding on both sides
    kw = dict(arch=Arch.from_config(model.config), lora=None, eos_id=never, pad_id=int(tok.pad_token_id or 0),
              max_new_tokens=args.tokens, temperature=1.0, top_p=1.0, device="cpu")
    backends = {"lean": LeanRollout(model, tok, **kw), "hf": HFRollout(model, tok, **kw)}
    calls = {name: (lambda b: lambda: b.generate(batch, group_size=8))(b) for name, b in backends.items()}
    names = ("lean", "hf")
    if args.crn:  # "hf" slot: the same lean sampler with evaluation's per-row seeds
        from race_cli.engine.rollout_lean import eval_row_seed

        seeds = [eval_row_seed(0, "bench", str(i), k) for i in range(8) for k in range(8)]
        calls["hf"] = lambda: backends["lean"].generate(batch, group_size=8, seeds=seeds)
        names = ("lean", "lean+crn")
    for c in calls.values():  # warm-up
        c()
    print(f"{names[0]} vs {names[1]}: {args.model}{' + LoRA r=16' if args.lora else ''}, 64 rows x {args.tokens} tokens, "
          f"{args.pairs} alternating pairs of {args.repeats} calls each, one thread")
    ratios = []
    for k in range(args.pairs):
        order = ["lean", "hf"] if k % 2 == 0 else ["hf", "lean"]
        rate = {}
        for name in order:
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                ro = calls[name]()
                times.append(time.perf_counter() - t0)
            assert sum(ro.completion_lens) == 64 * args.tokens
            rate[name] = 64 * args.tokens / statistics.median(times)
        ratios.append(rate["lean"] / rate["hf"])
        print(f"pair {k + 1} ({names[0] if order[0] == 'lean' else names[1]} first): {names[0]} {rate['lean']:.0f} "
              f"tok/s, {names[1]} {rate['hf']:.0f} tok/s, ratio {ratios[-1]:.2f}", flush=True)
    print(f"median {names[0]}/{names[1]} over {args.pairs} pairs = {statistics.median(ratios):.2f} "
          f"(pairs: {', '.join(f'{r:.2f}' for r in ratios)})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
