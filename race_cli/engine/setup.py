"""Build what one job needs from its composed config: device, task, prompts, reward, policy, plan.

Each piece is its own function (torchtune's setup habit) so tests and `scripts/gpu_smoke.py`
can build one at a time. Every mistake a person can fix (a model path that does not exist,
`device=cuda` on a machine without a GPU, an unknown eval target) is a `RaceError` (exit 2).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from race_cli import machine
from race_cli.cost.flops import Arch, Flops, Lora
from race_cli.engine.hf import dtype_kwarg, enable_checkpointing, lora_wrap
from race_cli.errors import RaceError


# --- device and dtype ------------------------------------------------------------------------


GPU_SLOT_ENV = "RACE_GPU_SLOT"  # set by race run's pool (pool/local.GPU_SLOT_ENV): the GPU ids it gave the job


def expected_gpu() -> str | None:
    """Why this job must run on a GPU whatever torch says, or None: race run gave it a GPU slot (GPU_SLOT_ENV)."""
    slot = os.environ.get(GPU_SLOT_ENV, "").strip()
    if slot:
        return f"race run gave this job GPU {slot} (CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')})"
    return None


def cuda_available() -> tuple[bool, str]:
    """(torch.cuda.is_available(), the warning torch gave when it is not: its reason, e.g. a driver too old)."""
    import warnings

    import torch

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ok = torch.cuda.is_available()
    return ok, "" if ok else "; ".join(" ".join(str(w.message).split()) for w in caught)[:300]


def no_cuda_message(requested: str, why: str, torch_said: str) -> str:
    """Torch cannot use the GPU the job was given: name the torch, its CUDA build and the driver found."""
    import torch

    build = torch.version.cuda
    driver = machine.driver_version()
    found = (f"torch {torch.__version__} ({f'built for CUDA {build}' if build else 'a CPU-only build'}), "
             f"NVIDIA driver {driver or 'not found'}")
    said = f"; torch says: {torch_said}" if torch_said else ""
    if not build:
        fix = ("install a torch built for CUDA (pip install torch --index-url https://download.pytorch.org/whl/cu128, "
               "or the CUDA your driver supports)")
    elif driver:
        fix = f"update the NVIDIA driver to one that supports CUDA {build}, or install the torch build for its CUDA"
    else:
        fix = "check that the NVIDIA driver is installed and loaded (nvidia-smi)"
    return (f"device={requested}: {why}, but torch cannot use a GPU: torch.cuda.is_available() is False with {found}"
            f"{said}. Nothing ran on the CPU instead. Try: {fix}; or run on CPU on purpose with device=cpu "
            "(race run: CUDA_VISIBLE_DEVICES= for CPU workers).")


def resolve_device(requested: str) -> str:
    """`auto` -> `cuda:0` when CUDA is available, else `cpu`; `cuda`/`cuda:N` are checked.

    No silent CPU: where race run gave the job a GPU slot (`expected_gpu`) and torch cannot use it, `auto` is a
    RaceError naming torch, its CUDA build and the driver, never a CPU job (a 7B policy in float32 on CPU would
    run for days and say nothing); a job started by hand beside GPUs torch cannot use runs on the CPU and says so."""
    import torch

    if requested == "auto":
        ok, said = cuda_available()
        if ok:
            return "cuda:0"
        why = expected_gpu()
        if why:
            raise RaceError(no_cuda_message(requested, why, said))
        if machine.gpu_visible("auto"):  # a job by hand beside GPUs torch cannot use: on the CPU, but said
            import sys

            print("note: " + no_cuda_message(requested, "the NVIDIA driver lists GPUs here", said).replace(
                "Nothing ran on the CPU instead.", "This job runs on the CPU.", 1), file=sys.stderr, flush=True)
        return "cpu"
    if requested == "cpu":
        return "cpu"
    if requested.startswith("cuda"):
        ok, said = cuda_available()
        if not ok:
            raise RaceError(no_cuda_message(requested, expected_gpu() or "the job asks for a CUDA GPU", said))
        index = int(requested.split(":")[1]) if ":" in requested else 0
        if index >= torch.cuda.device_count():
            raise RaceError(f"device={requested} but only {torch.cuda.device_count()} CUDA device(s) exist.")
        return f"cuda:{index}"
    raise RaceError(f"device={requested!r} is unknown: expected auto, cpu, cuda or cuda:N.")


def reward_device(policy_device: str, n_gpus: int | None = None) -> str:
    """Where the reward model runs: its own GPU when the job sees two or more, else beside the policy.

    `race run --gpus-per-job 2` gives a job two GPUs (cuda:0, cuda:1 inside it): the policy and
    vLLM stay on the policy's GPU and the PRM takes the next one, so neither squeezes the other.
    """
    if not policy_device.startswith("cuda"):
        return policy_device
    if n_gpus is None:
        import torch

        n_gpus = torch.cuda.device_count()
    if n_gpus < 2:
        return policy_device
    index = int(policy_device.split(":")[1]) if ":" in policy_device else 0
    return f"cuda:{(index + 1) % n_gpus}"


def resolve_dtype(requested: str, device: str):
    """`auto` = bfloat16 on a GPU, float32 on CPU; otherwise the named torch dtype."""
    import torch

    if requested == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[requested]


def configure_torch(seed: int, threads: int, device: str) -> None:
    """Seed every RNG, set CPU threads, and ask for deterministic kernels (CPU runs repeat bitwise)."""
    import random

    import numpy as np
    import torch

    threads = threads or int(os.environ.get("RACE_THREADS") or 0)  # race run divides the cores among workers
    if threads > 0:
        torch.set_num_threads(threads)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    if device == "cpu":
        torch.use_deterministic_algorithms(True)


# --- task and prompts -------------------------------------------------------------------------


def build_task(cfg: Any):
    """The task of `task.name` with the job's seed (training order) and the shared eval items."""
    from race_cli.tasks.targets import build_task as build

    return build(cfg)


class PromptCache:
    """Prompt token ids of items, computed once each (format_prompt + tokenizer, no special tokens).

    convention: the answer form the prompt asks for (prompting.HASHES or BOXED); None = HASHES.
    """

    def __init__(self, items: list, tokenizer: Any, convention: Any = None):
        from race_cli.tasks.prompting import HASHES, format_prompt

        self.items, self.tokenizer, self._format = items, tokenizer, format_prompt
        self.convention = convention or HASHES
        self._ids: dict[int, list[int]] = {}

    def ids(self, index: int) -> list[int]:
        if index not in self._ids:
            text = self._format(self.items[index], self.tokenizer, convention=self.convention)
            self._ids[index] = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
        return self._ids[index]


def batch_indices(seed: int, iteration: int, batch: int, n_items: int) -> list[int]:
    """The training items of iteration `iteration` (1-based): epoch-wise shuffles drawn from (seed, epoch).

    Stateless on purpose: iteration i's prompts depend only on (seed, i), so a resumed job
    samples exactly the prompts the uninterrupted one would, and the budget check can look at
    the next iteration's prompts before running it. Each epoch visits every item once.
    """
    import numpy as np

    if n_items < 1:
        raise RaceError("The task has no training items; check task.num_train / task.path.")
    out, perms = [], {}
    for k in range((iteration - 1) * batch, iteration * batch):  # global draw positions
        epoch = k // n_items
        if epoch not in perms:
            perms[epoch] = np.random.default_rng([seed, epoch]).permutation(n_items)
        out.append(int(perms[epoch][k % n_items]))
    return out


# --- reward ------------------------------------------------------------------------------------


@dataclass
class RewardResult:
    rewards: list[float]  # one per completion
    flops: Flops  # what scoring cost (0 for the rule reward)
    seconds: float


def build_reward(cfg: Any, device: str, dtype: Any, grader: str = "number") -> Callable[[list, list[str]], RewardResult]:
    """`reward(items, completions) -> RewardResult`: rule (answer check) or a process reward model.

    grader: the training task's grader (race_cli/answers/graders.py); the rule reward uses it, so
    training on MATH-style data is rewarded by the same verdict its evaluation gives.
    """
    r = cfg.reward
    if r.type == "rule":
        from race_cli.rewards.rule import score_batch

        def rule(items: list, completions: list[str]) -> RewardResult:
            rewards, seconds = score_batch(completions, [it.answer for it in items], use_math_verify=r.use_math_verify,
                                           grader=grader)
            return RewardResult(rewards, Flops(), seconds)

        return rule
    if r.type == "prm":
        from race_cli.rewards.prm import ProcessRewardModel

        path = resolve_model_path(r.model.path, what="reward.model.path")
        prm = ProcessRewardModel.from_pretrained(path, format=r.model.format, device=device,
                                                 dtype=str(dtype).replace("torch.", ""), separator=r.step_separator,
                                                 aggregation=r.aggregate, batch_size=r.batch_size,
                                                 template=r.model.template, step_tag=r.model.step_tag,
                                                 step_joiner=r.model.step_joiner, good_token=r.model.good_token,
                                                 bad_token=r.model.bad_token,
                                                 trust_remote_code=r.model.trust_remote_code,
                                                 revision=r.model.revision)

        def process(items: list, completions: list[str]) -> RewardResult:
            t0 = time.perf_counter()
            rewards, info = prm.reward([it.question for it in items], completions, [it.answer for it in items],
                                       outcome_weight=r.outcome_weight, use_math_verify=r.use_math_verify)
            return RewardResult([float(x) for x in rewards], info["flops"], time.perf_counter() - t0)

        return process
    raise RaceError(f"reward.type={r.type!r} is unknown: expected rule or prm.")


# --- policy ------------------------------------------------------------------------------------


def resolve_model_path(path: str, *, what: str = "model.path") -> str:
    """`zoo:<name>` -> the built zoo folder; an existing local folder as is; `org/name` as a hub id."""
    if path.startswith("zoo:"):
        from race_cli import zoo

        return str(zoo.resolve(path))
    p = Path(path).expanduser()
    if p.exists():
        if not (p / "config.json").is_file():
            raise RaceError(f"{what}={path} exists but holds no config.json: expected a transformers model folder "
                            "(save_pretrained output), a hub id such as Qwen/Qwen2.5-0.5B, or zoo:tiny-s.")
        return str(p)
    if path.startswith(("/", ".", "~")) or path.count("/") != 1:
        raise RaceError(f"{what}={path} does not exist: expected a local model folder, a hub id such as "
                        "Qwen/Qwen2.5-0.5B-Instruct, or a zoo name such as zoo:tiny-s.")
    return path  # a hub id: transformers resolves (and may fail with its own message, turned into RaceError)


# On CPU a smaller micro-batch keeps a layer's activations in cache: 16 rows beat the whole batch for full
# fine-tuning and LoRA adapters, 4 rows lose to per-call overhead, and the merged LoRA path keeps the whole
# batch (its per-micro-batch functional_call costs more than the cache saves): docs/measurements/code.md.
CPU_MICRO_BATCH = 16


def resolve_micro_batch(cfg_dict: dict, device: str, *, merged_lora: bool = False) -> tuple[int, bool]:
    """(sequences per micro-batch, gradient checkpointing) for this job on `device`.

    `grpo.micro_batch_size: auto` asks the memory ledger (race_cli/cost/memory.py) for the largest
    micro-batch that fits the GPU's total memory, turning checkpointing on only when one
    sequence does not fit without it; on CPU, auto is CPU_MICRO_BATCH sequences (the update sorts rows
    by length first, so each micro-batch pads only to rows like its own), or the whole batch when the
    update runs merged LoRA weights (`merged_lora`). 0 = the whole batch.
    """
    g = cfg_dict["grpo"]
    n = int(g["prompts_per_iter"]) * int(g["group_size"])
    mb, ckpt = g.get("micro_batch_size", 0), bool(g.get("grad_checkpointing", False))
    if mb != "auto":
        return (min(int(mb), n) if mb else n), ckpt
    if not device.startswith("cuda"):
        return (n if merged_lora else min(n, CPU_MICRO_BATCH)), ckpt
    mem = job_memory_plan(cfg_dict, device)
    return mem.micro_batch, mem.grad_checkpointing


def job_memory_plan(cfg_dict: dict, device: str):
    """The memory ledger of this job on this GPU (cost/memory.plan_memory): the device's total memory as torch
    sees it, the installed vLLM's sleep support, and the PRM on a second GPU when `reward_device` puts it there."""
    from race_cli.cost.memory import plan_memory

    return plan_memory(cfg_dict, machine.device_total_bytes(device), vllm_installed=machine.vllm_installed(),
                       kv_release=machine.vllm_kv_release(), reward_gpu=reward_device(device) != device)


def vllm_room_cut(cfg: Any, fraction: float, total: int, device: str) -> float:
    """vLLM's fraction, no larger than the memory ledger's where the ledger cut it to the room the trainer
    leaves (cost/memory.vllm_room_fraction: a KV cache for fewer than every sequence at full length); the
    plan counted this job as fitting only with that cut."""
    import copy

    from omegaconf import OmegaConf

    from race_cli.cost.memory import plan_memory

    plain = copy.deepcopy(OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg)
    plain["rollout"]["backend"] = "vllm"  # the ledger of this engine, whatever rollout.backend said
    try:
        mem = plan_memory(plain, total, vllm_installed=True, kv_release=machine.vllm_kv_release(),
                          reward_gpu=reward_device(device) != device)
    except RaceError:  # the ledger says it cannot fit (micro_batch_size set by hand): run as configured
        return fraction
    return min(fraction, mem.vllm_fraction) if mem.vllm_capped and mem.vllm_fraction else fraction


@dataclass
class Policy:
    model: Any  # PeftModel (LoRA) or the plain model (full fine-tuning)
    tokenizer: Any
    path: str  # resolved model folder / hub id
    arch: Arch  # read from the loaded model's config (not the planning config)
    lora: Lora | None  # the ledger's view of the adapter (None = full fine-tuning)
    eos_id: int
    pad_id: int


def load_policy(cfg: Any, device: str, dtype: Any, log: Callable[[str], None] = print) -> Policy:
    """Tokenizer + causal LM + LoRA adapter (or full fine-tuning), on `device` in `dtype`."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = resolve_model_path(cfg.model.path)
    trust = bool(cfg.model.trust_remote_code)
    try:
        rev = cfg.model.revision
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust, revision=rev)
        model = AutoModelForCausalLM.from_pretrained(path, **dtype_kwarg(dtype), trust_remote_code=trust, revision=rev)
    except (OSError, ValueError) as exc:
        raise RaceError(f"Cannot load model.path={cfg.model.path} ({path}): {str(exc).splitlines()[0]}. "
                        "Expected a transformers causal-LM folder or hub id (no network here: use a local folder "
                        "or a zoo: model).") from None
    if tokenizer.eos_token_id is None:
        raise RaceError(f"The tokenizer of {path} has no EOS token: completions could never end. "
                        "Use a tokenizer with eos_token set.")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
        log(f"note: the tokenizer of {path} has no pad token; using its EOS token {tokenizer.eos_token!r} as pad.")
    model.to(device)
    arch = Arch.from_config(model.config)
    lora = None
    if cfg.lora.enabled:
        from peft import LoraConfig

        targets = list(cfg.lora.target_modules)
        model = lora_wrap(model, LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                                                 target_modules=targets, task_type="CAUSAL_LM"))
        lora = Lora(r=cfg.lora.r, target_modules=tuple(targets))
    if cfg.grpo.grad_checkpointing:
        enable_checkpointing(model, lora=cfg.lora.enabled)
    model.train()
    return Policy(model, tokenizer, path, arch, lora, int(tokenizer.eos_token_id), int(tokenizer.pad_token_id))


def eval_cap(cfg: Any, target: Any) -> int:
    """The completion cap of one evaluation target: eval.max_new_tokens, else the larger of
    rollout.max_new_tokens and what the target's reference solutions need (target.min_new_tokens)."""
    return int(cfg.eval.max_new_tokens or max(cfg.rollout.max_new_tokens, target.min_new_tokens))


def generation_cap(cfg: Any, targets: tuple = ()) -> int:
    """The largest completion cap any generate of the job asks for: training's and every target's."""
    return max([int(cfg.rollout.max_new_tokens)] + [eval_cap(cfg, t) for t in targets])


def build_rollout(cfg: Any, policy: Policy, device: str, dtype: Any, backend: str, *, prompts: tuple = (),
                  sync_dir: str | Path | None = None, targets: tuple = (), log: Callable[[str], None] | None = None):
    """The rollout `backend` (hf | lean | vllm, from budget_plan); vllm is checked against this device.

    vLLM only: `prompts` (PromptCaches of the task's splits) and `targets` (the evaluation targets)
    size max_model_len (the longest prompt + the largest completion cap of training and
    evaluation, `generation_cap`: vLLM caps a longer request silently) unless
    rollout.max_model_len is set; the GPU fraction comes from the plan's batch (prompts_per_iter x
    group_size sequences) unless rollout.gpu_memory_utilization is set; the sleep mode from the
    memory ledger (`job_memory_plan`); `sync_dir` names the job's one adapter folder, kept on local
    fast storage (rollout_vllm.local_sync_dir) and removed when the backend closes.
    """
    from race_cli.engine.rollout import HFRollout, choose_backend

    r = cfg.rollout
    name = choose_backend(backend, device, vllm_installed=machine.vllm_installed(),  # vllm: refused without a GPU or vLLM
                          lora=bool(cfg.lora.enabled))
    common = dict(arch=policy.arch, lora=policy.lora, eos_id=policy.eos_id, pad_id=policy.pad_id,
                  max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p)
    if name == "lean":
        from race_cli.engine.rollout_lean import LeanRollout

        return LeanRollout(policy.model, policy.tokenizer, device=device, **common)
    if name == "hf":
        return HFRollout(policy.model, policy.tokenizer, device=device, **common)
    return build_vllm(cfg, policy, device, dtype, prompts=prompts, targets=targets, sync_dir=sync_dir, log=log,
                      **common)


def build_vllm(cfg: Any, policy: Policy, device: str, dtype: Any, *, prompts: tuple = (), targets: tuple = (),
               sync_dir: str | Path | None = None, gpu_bytes: int | None = None, sleep_mode: str | None = None,
               log: Callable[[str], None] | None = None, **common: Any):
    """The vLLM backend itself (see build_rollout), its first adapter synced. `gpu_bytes` (default: the
    device's, through torch; on CPU, vLLM's CPU build, the host's memory) and `sleep_mode` (default: the
    memory ledger's choice) let scripts/gpu_smoke.py drive it on any device. max_num_seqs and
    max_num_batched_tokens come from B, G and the lengths (rollout_vllm.batch_limits); on CPU the KV cache
    gets an explicit size (rollout_vllm.kv_cache_bytes_cpu). `log` hears the sync folder's fallback."""
    import tempfile

    import torch
    from omegaconf import OmegaConf

    from race_cli.engine.rollout_vllm import (VLLMRollout, adapter_bytes, batch_limits, kv_cache_bytes_cpu,
                                              local_sync_dir, memory_fraction, model_len, sync_space_needed)
    from race_cli.config.schema import VLLM_MAX_TEMPERATURE

    r = cfg.rollout
    hot = [f"{k}={v}" for k, v in (("rollout.temperature", r.temperature), ("eval.temperature", cfg.eval.temperature))
           if v is not None and v > VLLM_MAX_TEMPERATURE]
    if hot:  # rollout.backend=auto resolved to vLLM here; the schema refuses it for an explicit vllm
        raise RaceError(f"{', '.join(hot)}: vLLM refuses a temperature above {VLLM_MAX_TEMPERATURE:g}; lower it "
                        "or set rollout.backend=lean.")
    common = dict(arch=policy.arch, lora=policy.lora, eos_id=policy.eos_id, pad_id=policy.pad_id,
                  max_new_tokens=r.max_new_tokens, temperature=r.temperature, top_p=r.top_p) | common
    longest = max((len(c.ids(i)) for c in prompts for i in range(len(c.items))), default=0)
    if r.max_model_len is not None:
        max_len = int(r.max_model_len)
    else:
        max_len = model_len(longest, generation_cap(cfg, targets))
    cuda = device.startswith("cuda")
    total = gpu_bytes if gpu_bytes is not None else (machine.device_total_bytes(device) if cuda
                                                     else machine.host_memory_bytes())
    dtype_bytes = torch.finfo(dtype).bits // 8
    sequences = int(cfg.grpo.prompts_per_iter) * int(cfg.grpo.group_size)
    seqs, tokens = batch_limits(sequences=sequences, prompts=int(cfg.grpo.prompts_per_iter),
                                longest_prompt=min(longest, max_len), max_model_len=max_len)
    limits = dict(max_num_seqs=seqs, max_num_batched_tokens=tokens)
    if not cuda:  # vLLM's CPU build: an explicit KV cache (its gpu_memory_utilization is a share of host memory)
        limits["kv_cache_memory_bytes"] = kv_cache_bytes_cpu(policy.arch, dtype_bytes=dtype_bytes, sequences=seqs,
                                                             max_model_len=max_len)
    fraction = r.gpu_memory_utilization
    if fraction is None:
        fraction = memory_fraction(policy.arch, dtype_bytes=dtype_bytes, lora=policy.lora, sequences=sequences,
                                   max_model_len=max_len, gpu_bytes=total)
    if r.gpu_memory_utilization is None and device.startswith("cuda"):  # the ledger's cut beside the trainer
        fraction = vllm_room_cut(cfg, float(fraction), total, device)
    if sleep_mode is None:
        try:  # the ledger's choice: keep vLLM's weights on the device when they fit beside the update
            from race_cli.cost.memory import plan_memory

            import copy

            plain = copy.deepcopy(OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else cfg)
            plain["rollout"]["backend"] = "vllm"  # the ledger of this engine, whatever rollout.backend said
            sleep_mode = plan_memory(plain, total, vllm_installed=True, kv_release=machine.vllm_kv_release(),
                                     reward_gpu=reward_device(device) != device).sleep_mode or "weights"
        except RaceError:  # a job the ledger says cannot fit (micro_batch_size set by hand) runs as configured
            sleep_mode = "weights"
    need = sync_space_needed(adapter_bytes(policy.arch, policy.lora, dtype_bytes)) if policy.lora is not None else 0
    sync = (local_sync_dir(sync_dir, need_bytes=need, say=log or print) if sync_dir is not None
            else Path(tempfile.mkdtemp(prefix="race-vllm-")) / "adapter")
    backend = VLLMRollout(policy.path, policy.tokenizer, dtype=str(dtype).replace("torch.", ""), seed=cfg.seed,
                          gpu_memory_utilization=float(fraction), max_model_len=max_len, sync_dir=sync,
                          revision=cfg.model.revision, trust_remote_code=bool(cfg.model.trust_remote_code),
                          device=device, sleep_mode=sleep_mode, **limits, **common)
    if backend.ended_stale:
        (log or print)(f"note: ended {len(backend.ended_stale)} vLLM engine process(es) a killed earlier attempt of "
                       f"this job left running (pids {', '.join(map(str, backend.ended_stale))})")
    backend.sync(policy.model)
    return backend


# --- the budget -------------------------------------------------------------------------------


def budget_plan(cfg_dict: dict, device: str) -> tuple[str, Any]:
    """(backend, BudgetPlan): T and the planned ledger, race_cli.cost.budget on the backend this device resolves.

    The same function `race plan` calls with the same config, so the planned ledger in
    ledger.json equals the plan's row whenever the plan ran on a machine like this one.
    """
    from race_cli.cost.budget import job_backend, plan_budget

    backend = job_backend(cfg_dict, on_gpu=device.startswith("cuda"), vllm_installed=machine.vllm_installed())
    return backend, plan_budget(cfg_dict, backend)
