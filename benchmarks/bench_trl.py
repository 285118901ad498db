"""race against TRL's GRPOTrainer, side by side: ms per GRPO iteration and tokens per second per phase.

    pip install 'race-cli[bench]'                     # trl
    python benchmarks/bench_trl.py                     # zoo:tiny-s, B=8, G=8, 48 tokens, LoRA r=16 and full FT
    python benchmarks/bench_trl.py --pairs 3 --iters 20 --modes lora

Both sides train the same policy (the zoo model, float32, CPU, one thread) on the same task
prompts (race's arithmetic training items, formatted by race's prompt template) with the same
rule reward, B=8 prompts x G=8 completions, 48 new tokens, temperature 1, top-p 1, one update
pass, no KL, no gradient checkpointing, lr 1e-3, AdamW, grad-norm clip 1. LoRA: r=16, alpha=32
on all seven linear maps of every layer. race runs with its defaults otherwise
(rollout.backend=auto, the lean sampler without vLLM), and with the embedded grid's
grpo.micro_batch_size=auto (on CPU: 16 length-sorted rows a micro-batch, or the whole batch when
LoRA runs merged; the same loss and gradient as the whole batch, up to rounding). TRL's order of prompts is its own
(shuffled per epoch from seed 0): the prompt pool is the same, the draws differ.

Each side runs in its own subprocess (fresh interpreter, nothing shared); the sides alternate
(race first in odd pairs, TRL first in even ones) and each measures --iters iterations after
--warmup unmeasured ones. Per side: median ms per iteration, median rollout and update ms,
completion tokens per second of the rollout, sequence tokens per second of the update, and the
time per informative row (seconds / rows of nonzero advantage: race skips the others in its
update, TRL trains on them). Per pair: race / TRL, per iteration and per informative row; over
pairs: the median of the ratios. Run it on an idle machine for figures
you quote; a loaded one drifts, which is why the pairs alternate.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
B, G, NEW = 8, 8, 48
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def race_side(lora: bool, iters: int, warmup: int, model: str) -> dict:
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    ov = ["grid=none", f"model.path={model}", "threads=1", "budget.flops=1e30", "budget.max_iterations=100000",
          f"lora.enabled={str(lora).lower()}", "lora.r=16", "lora.alpha=32", f"lora.target_modules=[{','.join(TARGETS)}]",
          f"grpo.prompts_per_iter={B}", f"grpo.group_size={G}", f"rollout.max_new_tokens={NEW}", "grpo.lr=1e-3",
          "grpo.beta=0", "grpo.updates_per_batch=1", "grpo.grad_checkpointing=false", "task.num_eval=8",
          "grpo.micro_batch_size=auto"]  # as the embedded grid runs (setup.resolve_micro_batch)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(compose(ov), Path(tmp) / "bench", ov, log=lambda m: None)
        job.setup()
        from race_cli.cost.budget import Ledger

        job.iteration, job.ledger, job.state = 0, Ledger(), {}
        rows = []
        for i in range(1, warmup + iters + 1):
            t0 = time.perf_counter()
            line = job.iterate(i)
            total = time.perf_counter() - t0
            job.iteration = i
            if i > warmup:
                rows.append({"total": total, "rollout": line["time/rollout"], "update": line["time/update"],
                             "informative": line["train/trained_rows"] * B * G,
                             "completion_tokens": line["tokens/completion"],
                             "tokens": line["tokens/completion"] + line["tokens/prompt"]})
    return summarise(rows, backend=job.rollout.name)


def trl_side(lora: bool, iters: int, warmup: int, model: str) -> dict:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationMixin, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from race_cli.engine.grpo import completion_mask
    from race_cli.engine.setup import resolve_model_path
    from race_cli.rewards.rule import score_batch
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.tasks.prompting import format_prompt

    torch.set_num_threads(1)
    path = resolve_model_path(model)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    items = ArithmeticTask(seed=0, num_train=20000, num_eval=8).train_items()[: B * (warmup + iters + 2)]
    data = Dataset.from_list([{"prompt": format_prompt(it, tok), "answer": it.answer} for it in items])

    clock = {"gen": 0.0, "depth": 0, "comp": 0.0, "seq": 0.0, "informative": 0.0}

    def reward(prompts, completions, answer, **_):
        scores = score_batch(list(completions), list(answer), use_math_verify=False)[0]
        # TRL repeats each prompt G times consecutively (RepeatSampler): rows of a group of unequal rewards carry
        # a nonzero advantage, the rows race would train on
        groups = [scores[i:i + G] for i in range(0, len(scores), G)]
        clock["informative"] += sum(G for g in groups if max(g) != min(g))
        return scores

    real_generate = GenerationMixin.generate

    def timed_generate(self, *a, **k):  # TRL's rollout: transformers' generate on the policy
        if clock["depth"]:
            return real_generate(self, *a, **k)
        clock["depth"] += 1
        t0 = time.perf_counter()
        try:
            out = real_generate(self, *a, **k)
        finally:
            clock["gen"] += time.perf_counter() - t0
            clock["depth"] -= 1
        seqs = out if torch.is_tensor(out) else out.sequences  # [N, P+S]
        prompt = k["input_ids"] if "input_ids" in k else a[0]
        comp = seqs[:, prompt.size(1):]
        clock["comp"] += float(completion_mask(comp, tok.eos_token_id).sum())  # up to and including EOS
        clock["seq"] += float(completion_mask(comp, tok.eos_token_id).sum() + (prompt != tok.pad_token_id).sum())
        return out

    GenerationMixin.generate = timed_generate
    rows = []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            clock.update(gen=0.0, comp=0.0, seq=0.0, informative=0.0, t0=time.perf_counter())

        def on_step_end(self, args, state, control, **kw):
            if state.global_step > warmup:
                total = time.perf_counter() - clock["t0"]
                rows.append({"total": total, "rollout": clock["gen"], "update": total - clock["gen"],
                             "informative": clock["informative"],
                             "completion_tokens": clock["comp"], "tokens": clock["seq"]})

    peft_config = None
    if lora:
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=TARGETS, task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = GRPOConfig(output_dir=tmp, per_device_train_batch_size=B * G, num_generations=G,
                         max_completion_length=NEW, learning_rate=1e-3, beta=0.0, loss_type="bnpo",
                         temperature=1.0, top_p=1.0, top_k=0, num_iterations=1, max_grad_norm=1.0,
                         gradient_checkpointing=False, use_cpu=True, bf16=False, report_to="none",
                         save_strategy="no", logging_steps=10 ** 6, max_steps=warmup + iters, seed=0,
                         disable_tqdm=True, dataloader_num_workers=0, lr_scheduler_type="constant",
                         warmup_steps=0, weight_decay=0.0)
        trainer = GRPOTrainer(model=policy, reward_funcs=[reward], args=cfg, train_dataset=data,
                              processing_class=tok, peft_config=peft_config, callbacks=[Timer()])
        trainer.train()
    return summarise(rows, backend="hf-generate")


def summarise(rows: list[dict], backend: str) -> dict:
    med = lambda k: statistics.median(r[k] for r in rows)
    out = {"iters": len(rows), "backend": backend, "ms_iter": 1000 * med("total"),
           "ms_rollout": 1000 * med("rollout"), "ms_update": 1000 * med("update")}
    if rows and "tokens" in rows[0]:
        out["rollout_tok_s"] = statistics.median(r["completion_tokens"] / r["rollout"] for r in rows)
        out["update_tok_s"] = statistics.median(r["tokens"] / r["update"] for r in rows)
    # time per informative row: all measured iterations' seconds / all their rows of nonzero advantage
    informative = sum(r.get("informative", 0.0) for r in rows)
    out["informative_rows_iter"] = informative / len(rows) if rows else 0.0
    out["ms_informative_row"] = 1000 * sum(r["total"] for r in rows) / informative if informative else None
    return out


def run_side(side: str, mode: str, iters: int, warmup: int, model: str) -> dict:
    cmd = [sys.executable, __file__, "--side", side, "--modes", mode, "--iters", str(iters), "--warmup", str(warmup),
           "--model", model]
    env = {**__import__("os").environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    res = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(ROOT))
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("RESULT ")]
    if res.returncode != 0 or not lines:
        raise SystemExit(f"{side} {mode} failed (exit {res.returncode}):\n{res.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20, help="measured iterations per side and pair")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--modes", nargs="+", default=["lora", "full"], choices=["lora", "full"])
    ap.add_argument("--model", default="zoo:tiny-s")
    ap.add_argument("--side", choices=["race", "trl"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.side:  # a child: one side, one mode
        fn = race_side if args.side == "race" else trl_side
        print("RESULT " + json.dumps(fn(args.modes[0] == "lora", args.iters, args.warmup, args.model)), flush=True)
        return 0
    try:
        import trl  # noqa: F401
    except ImportError:
        raise SystemExit("TRL is not installed: pip install 'race-cli[bench]' (or pip install trl).") from None
    print(f"race vs TRL GRPOTrainer: {args.model}, B={B}, G={G}, {NEW} new tokens, {args.pairs} alternating pairs, "
          f"medians of {args.iters} iterations per side (+{args.warmup} warm-up), one thread each")
    for mode in args.modes:
        ratios, row_ratios = [], []
        for k in range(args.pairs):
            order = ["race", "trl"] if k % 2 == 0 else ["trl", "race"]
            got = {side: run_side(side, mode, args.iters, args.warmup, args.model) for side in order}
            r, t = got["race"], got["trl"]
            ratio = r["ms_iter"] / t["ms_iter"]
            ratios.append(ratio)
            row_ratio = (r["ms_informative_row"] / t["ms_informative_row"]
                         if r["ms_informative_row"] and t["ms_informative_row"] else float("nan"))
            row_ratios.append(row_ratio)
            print(f"{mode} pair {k + 1} ({order[0]} first): race {r['ms_iter']:.0f} ms/it (rollout {r['ms_rollout']:.0f}, "
                  f"update {r['ms_update']:.0f}; {r['rollout_tok_s']:.0f} completion tok/s sampling, "
                  f"{r['update_tok_s']:.0f} tok/s updating; {r['informative_rows_iter']:.1f} informative rows/it, "
                  f"{r['ms_informative_row'] or float('nan'):.1f} ms each; backend {r['backend']}) | TRL "
                  f"{t['ms_iter']:.0f} ms/it (rollout {t['ms_rollout']:.0f}, update {t['ms_update']:.0f}; "
                  f"{t['informative_rows_iter']:.1f} informative rows/it, {t['ms_informative_row'] or float('nan'):.1f} "
                  f"ms each) | race/TRL {ratio:.2f} per iteration, {row_ratio:.2f} per informative row", flush=True)
        print(f"{mode}: median race/TRL over {args.pairs} pairs = {statistics.median(ratios):.2f} per iteration "
              f"(pairs: {', '.join(f'{x:.2f}' for x in ratios)}), {statistics.median(row_ratios):.2f} per informative "
              f"row (pairs: {', '.join(f'{x:.2f}' for x in row_ratios)})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
