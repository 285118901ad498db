"""The vLLM rollout backend (GPU boxes, `pip install 'race-cli[vllm]'`): its whole lifecycle, one job at a time.

    start   LLM(base model, LoRA on, prefix caching, max_model_len from the task's longest prompt
            and the largest completion cap of rollout and evaluation (vLLM caps a longer request
            without an error), a GPU fraction from the plan, max_num_seqs = B x G and
            max_num_batched_tokens from B, G and the lengths (`batch_limits`: vLLM's defaults of
            1024 sequences and 16384 tokens would be profiled inside a fraction sized without
            them), sleep mode where the installed vLLM has it AND its platform supports it (vLLM's
            CPU build refuses enable_sleep_mode: the engine then never sleeps), the sampled
            tokens' log-probabilities after temperature (logprobs_mode="processed_logprobs"),
            vLLM's own sampling defaults instead of the model's generation_config), its
            engine process started on the job's GPU (CUDA_VISIBLE_DEVICES set to that one device
            while LLM() spawns it; the engine takes the first device it sees)
    sample  generate(): n=G samples of each prompt from softmax(logits / T) with top-p and nothing
            else (top-k, min-p and every penalty off), stopping on the tokenizer's EOS only: the
            same distribution and the same stop token as the HF backend; each sampled token's
            log-probability comes back with it (SamplingParams(logprobs=0): the sampled token only,
            no extra forward), so the job can compare the policy vLLM sampled from with the one it
            trains (engine/sampler_gap.py); training rows carry seeds from (job seed, iteration,
            row) (sampling.train_row_seed), so a resumed job samples what the uninterrupted one did
    update  yield_gpu(), called by the job when reward and update follow a generate, puts the
            engine to sleep in the job's `sleep_mode`: "kv_cache" (vLLM 0.33: sleep(level=0) pauses
            scheduling, release_kv_cache_memory() frees the KV cache, the weights stay on the
            device) when the ledger says they fit beside the update, else "weights" (level 1:
            weights copied to pinned host memory, KV cache freed), so the policy's update runs
            with that memory back; evaluation batches, which no update follows, do
            not sleep between them (each cycle moves the weights to the host and back). sync()
            writes the new adapter, in the policy's dtype (PEFT keeps adapters in float32), into the
            job's ONE sync folder on local fast storage (/dev/shm, else the temp dir: not the job
            folder, which may be on NFS) under a NEW integer id (a reused id would serve the old
            adapter and its prefix-cache blocks); the next generate wakes
            the engine, after `release_cached_memory()`: the update's blocks stay reserved in
            PyTorch's caching allocator otherwise, and vLLM's wake_up maps fresh memory through its
            own allocator (vllm/device_allocator/cumem.py), which cannot use them (the cumem OOM
            at the second iteration). vLLM's own wake_up empties ITS process's cache (0.33), not
            the training process's.
            wake_up() returns whether the engine is fully awake (0.33); False is an error, not
            a generate that would wait on paused scheduling.
    space   the sync folder must hold two adapters at once (the new one is written before the old
            one goes): /dev/shm is used when it has that much free, else the temp dir, and the
            job's log says so (Docker's default /dev/shm is 64 MB; a 7B rank-32 adapter ~161 MB)
    close   the sync folder is removed on every exit path: close() (the job's `finally`), the
            object's finaliser, interpreter exit, SIGTERM; a folder a SIGKILLed attempt left is
            cleared when the next one starts, and so are the vLLM engine processes it left running
            (end_stale_engines)

What vLLM does, read from the 0.10.1.1 and 0.33.0 sources: `LLM(...)` builds a V1 `LLMEngine`
(vllm/v1/engine/llm_engine.py) whose engine core runs in a child process
(VLLM_ENABLE_V1_MULTIPROCESSING=1 by default: a second CUDA context on the GPU, ZMQ over IPC
paths to this process); a single GPU gets the UniProcExecutor, whose worker sets up
torch.distributed over tcp://ip:get_open_port() in 0.10.1.1 (a port the kernel picks unless
VLLM_PORT is set, and then the first free one at or above it: engines starting at once with one
shared VLLM_PORT pick the same; the pool gives each slot its own) and over a file:// store with a
fresh name in 0.33 (no port). Startup refuses when free memory is under gpu_memory_utilization x
the device; sleep(level=1) offloads the weights to host memory and discards the KV cache (its
cumem pool, vllm/device_allocator/cumem.py); wake_up(tags=None) maps them again.

Charged as one prefill per group (prefix caching) and unpadded kernels (`generate_flops`,
share_prefix=G, padded=False). vLLM is imported inside the methods, never at module import.
Tested against tests/fake_vllm, a stand-in that enforces the real API and these rules, once per
supported release (tests/fake_vllm/vllm/_api.py: 0.10.1.1 and 0.33.0, read from their source);
the versions in the `vllm` extra are those whose API (LLM(...) keywords, sleep/wake_up,
LoRARequest(name, int_id, path), SamplingParams, generate's keywords, the allowed LoRA ranks) the
code and the fake were read against.
"""

from __future__ import annotations

import shutil
import time
import weakref
from pathlib import Path
from typing import Any

from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Lora, generate_flops
from race_cli.cost.memory import vllm_fraction, vllm_need

GIB = 1024 ** 3
MAX_FRACTION = 0.9  # leave the policy's training at least a tenth of the GPU


# --- sizing from the plan ------------------------------------------------------------------------


def model_len(longest_prompt: int, max_new_tokens: int) -> int:
    """vLLM's max_model_len for a task: its longest prompt plus the completion cap, in tokens."""
    return int(longest_prompt) + int(max_new_tokens)


def memory_fraction(arch: Arch, *, dtype_bytes: int, lora: Lora | None, sequences: int, max_model_len: int,
                    gpu_bytes: int) -> float:
    """The GPU fraction vLLM needs: weights + one LoRA slot + a KV cache holding every sequence at full length.

    The memory ledger's own functions (cost/memory.py `vllm_need`, `vllm_fraction`), so the plan's
    reservation is this one: weights (every parameter, untied worst case, + r * (d_in + d_out) per
    targeted matrix) and kv (sequences * max_model_len * 2 * L * h_kv * d_h) in the model dtype,
    x 1.1 for the block allocator's rounding, + vLLM's headroom; at least 5% of the GPU.
    Refuses (RaceError) when that is over MAX_FRACTION of the GPU.
    """
    need = vllm_need(arch, dtype_bytes=dtype_bytes, lora_r=lora.r if lora is not None else None,
                     lora_targets=tuple(lora.target_modules) if lora is not None else (),
                     sequences=sequences, max_model_len=max_model_len)
    fraction = need / gpu_bytes
    if fraction > MAX_FRACTION:
        raise RaceError(f"vLLM needs about {need / GIB:.1f} GiB ({fraction:.0%} of this {gpu_bytes / GIB:.0f} GiB GPU) "
                        f"for the weights and a KV cache of {sequences} sequences x {max_model_len} tokens; "
                        f"expected at most {MAX_FRACTION:.0%}. Lower grpo.prompts_per_iter x grpo.group_size or "
                        "rollout.max_new_tokens, set rollout.gpu_memory_utilization by hand, or use rollout.backend=hf.")
    return vllm_fraction(need, gpu_bytes)


def batch_limits(*, sequences: int, prompts: int, longest_prompt: int, max_model_len: int) -> tuple[int, int]:
    """(max_num_seqs, max_num_batched_tokens) for a job whose rollout is `sequences` = B x G completions of
    `prompts` = B prompts.

    max_num_seqs = B x G: the KV cache the memory ledger sizes holds exactly those sequences (an evaluation
    batch with more rows waits its turn; it is never refused). max_num_batched_tokens: one step takes every
    prompt's prefill at once (B x the longest prompt; prefix caching shares each group's) and at least one
    whole sequence (max_model_len) and one decode token per sequence (vLLM requires >= max_num_seqs).

    >>> batch_limits(sequences=512, prompts=32, longest_prompt=300, max_model_len=812)
    (512, 9600)
    >>> batch_limits(sequences=4, prompts=2, longest_prompt=30, max_model_len=94)
    (4, 94)
    """
    seqs = max(1, int(sequences))
    return seqs, max(seqs, int(max_model_len), int(prompts) * int(longest_prompt))


def kv_cache_bytes_cpu(arch: Arch, *, dtype_bytes: int, sequences: int, max_model_len: int) -> int:
    """vLLM's CPU build: the KV cache it allocates, in bytes (engine argument kv_cache_memory_bytes).

    On CPU, gpu_memory_utilization is a fraction of the host's memory (vllm/v1/worker/cpu_worker.py) that
    the engine process's own resident size is taken from; an explicit size is what the job needs instead:
    every sequence at full length (cost/memory.kv_cache_bytes) with the ledger's 10% margin, at least 64 MiB.
    """
    from race_cli.cost.memory import VLLM_KV_MARGIN, kv_cache_bytes

    need = kv_cache_bytes(arch, int(sequences) * int(max_model_len), dtype_bytes) * VLLM_KV_MARGIN
    return max(int(need), 64 * 2 ** 20)


def sampling_kwargs(*, group_size: int, greedy: bool, temperature: float, top_p: float, max_new_tokens: int,
                    eos_id: int) -> dict:
    """SamplingParams keywords: softmax(logits / T) with top-p only, stopping on `eos_id` only.

    ignore_eos + stop_token_ids=[eos_id] makes the tokenizer's EOS the one stop token, as in the
    HF backend (a model's generation_config may list more, e.g. Qwen2.5-Instruct's <|endoftext|>
    beside <|im_end|>); the stop token stays in the output, as HF keeps it. detokenize=False: race
    decodes the token ids itself (rollout._finish), so vLLM's own text would be thrown away. Sampled
    requests ask for logprobs=0: the sampled token's log-probability alone (after temperature and top-p,
    the engine's logprobs_mode), which the engine computes anyway.
    """
    common = dict(n=group_size, max_tokens=max_new_tokens, stop_token_ids=[eos_id], ignore_eos=True,
                  repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, min_p=0.0, top_k=-1,
                  detokenize=False)
    if greedy:
        return common | dict(temperature=0.0, top_p=1.0)
    return common | dict(temperature=temperature, top_p=top_p, logprobs=0)


def platform_sleeps(vllm: Any) -> bool:
    """Whether this vLLM can sleep here: LLM has sleep/wake_up AND its platform supports sleep mode
    (vllm.platforms.current_platform.is_sleep_mode_available(): CUDA, ROCm, XPU; not the CPU build,
    which refuses enable_sleep_mode=True with "Sleep mode is not supported on current platform")."""
    if not (callable(getattr(vllm.LLM, "sleep", None)) and callable(getattr(vllm.LLM, "wake_up", None))):
        return False
    try:
        from vllm.platforms import current_platform
    except ImportError:
        return True
    available = getattr(current_platform, "is_sleep_mode_available", None)
    return bool(available()) if callable(available) else True


def sampled_logprobs(completion: Any) -> list[float] | None:
    """The log-probability of each sampled token of one vLLM completion (CompletionOutput), or None when the
    request asked for none. vLLM returns, per position, a mapping of token id -> Logprob holding at least
    the sampled token (logprobs=0); a FlatLogprobs container (flat_logprobs=True) indexes the same way."""
    per_position = getattr(completion, "logprobs", None)
    if per_position is None:
        return None
    out = []
    for tok, entry in zip(completion.token_ids, per_position):
        lp = entry[tok]
        out.append(float(getattr(lp, "logprob", lp)))
    return out


# --- the backend -----------------------------------------------------------------------------------


def release_cached_memory() -> None:
    """Hand the training process's cached CUDA blocks back to the driver (gc, then empty_cache).

    Called before vLLM starts and before every wake_up: whatever another allocator maps next
    (vLLM's cumem pool) can only use memory PyTorch's caching allocator has returned. A no-op
    where CUDA was never initialised.
    """
    import gc

    import torch

    gc.collect()  # tensors only a reference cycle still holds
    torch.cuda.empty_cache()


def _remove(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)


def _owner_file(sync_dir: Path) -> Path:
    """Beside the sync folder: the process (and process group) of the attempt that started the engine."""
    return sync_dir.with_name(sync_dir.name + ".owner")


def _remove_sync(folder: Path) -> None:
    """The sync folder and its owner record."""
    _remove(folder)
    _owner_file(folder).unlink(missing_ok=True)


def end_stale_engines(sync_dir: Path) -> list[int]:
    """End the vLLM engine processes a SIGKILLed earlier attempt of this job left running; returns their pids.

    SIGKILL ends the job's process but not vLLM's engine core and worker (VLLM::EngineCore, VLLM::Worker) nor
    their multiprocessing resource tracker: they stay in the dead job's process group, holding its memory (on
    a GPU, the fraction the next attempt's engine needs). The owner record beside the sync folder names that
    process and group; when the process is gone, the group's members of those three kinds are ended, nothing
    else. Linux (/proc) only; elsewhere nothing is found.
    """
    import json
    import os
    import signal

    try:
        owner = json.loads(_owner_file(sync_dir).read_text())
        pid, pgid = int(owner["pid"]), int(owner["pgid"])
    except (OSError, ValueError, KeyError, TypeError):
        return []
    if pgid == os.getpgid(0):
        return []
    try:
        os.kill(pid, 0)
        return []  # the owner is alive: not a leftover
    except ProcessLookupError:
        pass
    except PermissionError:
        return []
    ended = []
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else ():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            group = int(stat.rsplit(")", 1)[1].split()[2])  # after the name: state, ppid, pgrp
        except (OSError, ValueError, IndexError):
            continue
        if group == pgid and (cmd.startswith("VLLM::") or "multiprocessing.resource_tracker" in cmd):
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                ended.append(int(entry.name))
            except OSError:
                pass
    return ended


def adapter_bytes(arch: Arch, lora: Lora, dtype_bytes: int) -> int:
    """One saved adapter's tensors: r x (d_in + d_out) per targeted matrix per layer, in the engine's dtype
    (safetensors' header and adapter_config.json are a few KB more: `sync_space_needed` adds a margin)."""
    from race_cli.cost.memory import lora_params

    return lora_params(arch, lora.r, tuple(lora.target_modules)) * int(dtype_bytes)


def sync_space_needed(one_adapter: int) -> int:
    """Free bytes the sync folder needs: two adapters (the new one is saved before the old one is removed),
    +10% and 1 MiB for headers and configs."""
    return int(2 * one_adapter * 1.1) + 2 ** 20


def local_sync_dir(job_key: str | Path, roots: tuple[str, ...] = ("/dev/shm",), *, need_bytes: int = 0,
                   say: Any = None) -> Path:
    """The adapter sync folder of one job on local fast storage: the first of `roots` that is a writable
    folder with `need_bytes` free (sync_space_needed), else the temp dir, with one line through `say`
    naming what was passed over and why. Named from `job_key` (the job folder), so the next attempt of
    the same job finds and clears what a killed one left."""
    import hashlib
    import os
    import tempfile

    name = "race-vllm-" + hashlib.sha256(str(Path(job_key).resolve()).encode()).hexdigest()[:16]
    passed = []
    for root in roots:
        if not (os.path.isdir(root) and os.access(root, os.W_OK)):
            continue
        free = shutil.disk_usage(root).free
        if free >= need_bytes:
            return Path(root) / name
        passed.append(f"{root} has {free / 2**20:.0f} MiB free")
    fallback = Path(tempfile.gettempdir()) / name
    if passed and say is not None:
        say(f"warning: vLLM's adapter sync folder needs {need_bytes / 2**20:.0f} MiB (two adapters) but "
            f"{'; '.join(passed)}: using {fallback.parent} instead (slower if it is not in memory). Enlarge it "
            "(docker run --shm-size=1g) to keep adapters in memory.")
    return fallback


def engine_visible_devices(device: str, env: str | None) -> str:
    """CUDA_VISIBLE_DEVICES for vLLM's engine process so that its first device is the job's `device`
    (`cuda:N` counts the devices this process sees: the N-th entry of `env` when set, else N)."""
    from race_cli.machine import parse_visible_devices

    index = int(device.split(":")[1]) if ":" in device else 0
    ids = parse_visible_devices(env) if env is not None else []
    if env is not None:
        if index >= len(ids):
            raise RaceError(f"device={device} but CUDA_VISIBLE_DEVICES={env!r} names {len(ids)} device(s).")
        return ids[index]
    return str(index)


class _visible_devices:
    """Within the block, CUDA_VISIBLE_DEVICES is `value` (the engine process spawned there inherits it);
    restored afterwards (this process's CUDA context, made earlier, is not affected)."""

    def __init__(self, value: str):
        self.value = value

    def __enter__(self):
        import os

        self.old = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = self.value

    def __exit__(self, *exc):
        import os

        if self.old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = self.old


def _remove_on_sigterm(folder: Path) -> None:
    """A SIGTERM (the pool stopping the job) removes `folder`, then ends the process as SIGTERM would.

    Installed only over the default action, from the main thread; SIGKILL cannot be caught, so
    the next attempt's start clears what a killed one left.
    """
    import os
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        return

    def handler(signum, frame):
        _remove_sync(folder)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


class VLLMRollout:
    """Sampling with vLLM (GPU only); the LoRA adapter re-registered after every update (see the module docstring)."""

    name = "vllm"
    share_prefix = True
    seeds_training_rows = True  # the engine's generator is not checkpointed: the job seeds every training row

    def __init__(self, model_path: str, tokenizer: Any, *, arch: Arch, lora: Lora | None, eos_id: int, pad_id: int,
                 max_new_tokens: int, temperature: float, top_p: float, dtype: str, seed: int,
                 gpu_memory_utilization: float, max_model_len: int, sync_dir: str | Path,
                 revision: str | None = None, trust_remote_code: bool = False, device: str = "cuda:0",
                 sleep_mode: str = "weights", max_num_seqs: int | None = None,
                 max_num_batched_tokens: int | None = None, kv_cache_memory_bytes: int | None = None):
        from race_cli.config.schema import VLLM_LORA_RANKS

        if lora is None:
            raise RaceError("rollout.backend=vllm supports LoRA policies only (lora.enabled=true): "
                            "full fine-tuning would need the weights copied into vLLM after every update. "
                            "Use rollout.backend=hf for full fine-tuning.")
        if lora.r not in VLLM_LORA_RANKS:
            raise RaceError(f"lora.r={lora.r} is not a rank vLLM accepts: expected one of "
                            f"{', '.join(map(str, VLLM_LORA_RANKS))}; or use rollout.backend=hf.")
        import vllm  # optional extra: imported only here

        self.tokenizer, self.arch, self.lora = tokenizer, arch, lora
        self.eos_id, self.pad_id = eos_id, pad_id
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        # one folder per job; whatever a killed earlier attempt left there goes first
        self.sync_dir = Path(sync_dir)
        self.ended_stale = end_stale_engines(self.sync_dir)  # engines a SIGKILLed attempt left running
        _remove_sync(self.sync_dir)
        self.sync_dir.mkdir(parents=True)
        import json
        import os

        _owner_file(self.sync_dir).write_text(json.dumps({"pid": os.getpid(), "pgid": os.getpgid(0)}))
        self._finalizer = weakref.finalize(self, _remove_sync, self.sync_dir)  # also runs at interpreter exit
        _remove_on_sigterm(self.sync_dir)
        self.can_sleep = platform_sleeps(vllm)
        # "kv_cache" needs release_kv_cache_memory (vLLM 0.33); an older engine sleeps at level 1 instead
        kv_release = callable(getattr(vllm.LLM, "release_kv_cache_memory", None))
        self.sleep_mode = sleep_mode if (sleep_mode == "weights" or kv_release) else "weights"
        self.dtype = dtype
        self.sleep_seconds: list[float] = []  # each sleep's and each wake-up's wall seconds (gpu_smoke reads them)
        self.wake_seconds: list[float] = []
        release_cached_memory()  # vLLM refuses to start unless gpu_memory_utilization x the device is free
        import contextlib
        import os

        extra: dict = {"enable_sleep_mode": True} if self.can_sleep else {}
        if max_num_seqs is not None:
            extra |= dict(max_num_seqs=int(max_num_seqs), max_num_batched_tokens=int(max_num_batched_tokens))
        if kv_cache_memory_bytes is not None:  # vLLM's CPU build: an explicit KV cache size (kv_cache_bytes_cpu)
            extra["kv_cache_memory_bytes"] = int(kv_cache_memory_bytes)
        cuda = device.startswith("cuda")
        if not cuda:  # vLLM's CPU build: a seeded request whose prefill is split across steps rewinds its generator's
            # offset (v1/worker/gpu_model_runner.py _bookkeeping_sync), which torch's CPU generator does not have
            # ("CPU Generator does not use offset"): whole prefills only
            extra["enable_chunked_prefill"] = False
        try:
            with (_visible_devices(engine_visible_devices(device, os.environ.get("CUDA_VISIBLE_DEVICES"))) if cuda
                  else contextlib.nullcontext()):
                self.llm = vllm.LLM(model=model_path, revision=revision, tokenizer_revision=revision, dtype=dtype,
                                    seed=seed, enable_lora=True, max_lora_rank=lora.r, max_loras=1,
                                    enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization,
                                    max_model_len=max_model_len, generation_config="vllm",
                                    trust_remote_code=trust_remote_code, logprobs_mode="processed_logprobs",
                                    **extra)
        except BaseException:
            self.close()
            raise
        self.asleep = False
        self._lora_id = 0  # the next update gets _lora_id + 1: never reused within the engine's life
        self._request = None
        self._adapter: Path | None = None

    # --- lifecycle --------------------------------------------------------------------------

    def _sleep(self) -> None:
        if self.can_sleep and not self.asleep:
            t0 = time.perf_counter()
            if self.sleep_mode == "kv_cache":
                self.llm.sleep(level=0)  # pause scheduling (a completed pause is what the release needs)
                self.llm.release_kv_cache_memory()  # KV cache freed; the weights stay on the device
            else:
                self.llm.sleep(level=1)  # weights to pinned host memory, KV cache freed
            self.sleep_seconds.append(time.perf_counter() - t0)
            self.asleep = True

    def _wake(self) -> None:
        if self.asleep:
            release_cached_memory()  # the update's cached blocks, which vLLM's allocator cannot reuse
            t0 = time.perf_counter()
            awake = self.llm.wake_up()  # every tag: KV cache (and weights) mapped again, scheduling resumed
            self.wake_seconds.append(time.perf_counter() - t0)
            if awake is False:  # 0.33 returns whether the engine is fully awake (0.10 returns None)
                raise RuntimeError("vLLM's wake_up() reported the engine not fully awake (some memory or its "
                                   "scheduling still asleep): a generate now would wait or sample without weights.")
            self.asleep = False

    def yield_gpu(self) -> None:
        """The training process takes the GPU next (reward, update): the engine sleeps until the next generate."""
        self._sleep()

    def sync(self, model: Any) -> None:
        """Hand the model's current adapter to vLLM: saved into the sync folder under a new id, in the
        engine's dtype (the adapter's float32 training copy is cast; vLLM casts to its dtype on load anyway)."""
        import torch
        from vllm.lora.request import LoRARequest

        from race_cli.engine.hf import save_model

        self._sleep()  # a sync before any generate (start/resume) also finds the engine asleep
        self._lora_id += 1
        path = self.sync_dir / f"adapter-{self._lora_id}"
        dtype = getattr(torch, self.dtype, None) if isinstance(self.dtype, str) else None
        if isinstance(dtype, torch.dtype) and hasattr(model, "state_dict"):
            lora_state = {k: v.detach().to(dtype) for k, v in model.state_dict().items() if "lora_" in k}
            save_model(model, str(path), state_dict=lora_state)
        else:
            save_model(model, str(path))
        self._request = LoRARequest(f"policy-{self._lora_id}", self._lora_id, str(path))
        if self._adapter is not None:
            _remove(self._adapter)  # the previous adapter: never served again (its id is retired)
        self._adapter = path

    def generate(self, prompts: list[list[int]], *, group_size: int, greedy: bool = False,
                 seeds: list[int] | None = None):
        from vllm import SamplingParams

        from race_cli.engine.rollout import _finish, right_pad

        if self._request is None:
            raise RaceError("VLLMRollout.generate before sync(): the engine has no adapter to sample from.")
        kw = sampling_kwargs(group_size=group_size, greedy=greedy, temperature=self.temperature,
                             top_p=self.top_p, max_new_tokens=self.max_new_tokens, eos_id=self.eos_id)
        requests = [{"prompt_token_ids": p} for p in prompts]
        params = SamplingParams(**kw)
        if seeds is not None and not greedy:  # common random numbers: one request per row, seeded by its key
            if len(seeds) != len(prompts) * group_size:
                raise ValueError(f"{len(seeds)} seeds for {len(prompts) * group_size} rows")
            requests = [r for r in requests for _ in range(group_size)]  # prefix caching shares each prefill
            params = [SamplingParams(**(kw | {"n": 1, "seed": int(s) % 2**63})) for s in seeds]
        self._wake()
        t0 = time.perf_counter()
        # awake afterwards: the next generate (evaluation's next batch) needs no wake-up; yield_gpu() sleeps
        outs = self.llm.generate(requests, params, lora_request=self._request, use_tqdm=False)
        seconds = time.perf_counter() - t0
        rows, comps, lps = [], [], []
        for p, out in zip([r["prompt_token_ids"] for r in requests], outs):
            for o in out.outputs:
                rows.append(p)
                comps.append(list(o.token_ids))
                lps.append(sampled_logprobs(o))
        comp = right_pad(comps, self.pad_id)
        share = group_size  # the n samples of one prompt share its prefill

        def flops(plens, clens):
            # prefix caching: one prefill per group; paged kernels run no padding
            return generate_flops(self.arch, plens, clens, lora=self.lora, share_prefix=share, padded=False)

        out = _finish(rows, comp, eos_id=self.eos_id, pad_id=self.pad_id, tokenizer=self.tokenizer,
                      flops_fn=flops, seconds=seconds)
        if all(x is not None for x in lps):  # [N, C] float32, 0 past each completion's end
            import torch

            table = torch.zeros(comp.shape, dtype=torch.float32)
            for i, x in enumerate(lps):
                table[i, :len(x)] = torch.tensor(x, dtype=torch.float32)
            out.sampler_logprobs = table * out.completion_mask
        return out

    def close(self) -> None:
        """Remove the sync folder (idempotent); the engine itself goes with the process."""
        self._finalizer()
