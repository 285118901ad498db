"""The vLLM rollout backend (GPU boxes, `pip install 'race-cli[vllm]'`): its whole lifecycle, one job at a time.

    start   LLM(base model, LoRA on, prefix caching, max_model_len from the task, a GPU fraction
            from the plan, sleep mode where the installed vLLM has it, vLLM's own sampling defaults
            instead of the model's generation_config)
    sample  generate(): n=G samples of each prompt from softmax(logits / T) with top-p and nothing
            else (top-k, min-p and every penalty off), stopping on the tokenizer's EOS only: the
            same distribution and the same stop token as the HF backend
    update  yield_gpu(), called by the job when reward and update follow a generate, puts the
            engine to sleep (level 1: weights to host memory, KV cache freed), so the policy's
            update runs with that memory back; evaluation batches, which no update follows, do
            not sleep between them (each cycle moves the weights to the host and back). sync()
            writes the new adapter into the job's ONE sync folder under a NEW integer id (a reused
            id would serve the old adapter and its prefix-cache blocks); the next generate wakes
            the engine, after `release_cached_memory()`: the update's blocks stay reserved in
            PyTorch's caching allocator otherwise, and vLLM's wake_up maps fresh memory through its
            own allocator (vllm/device_allocator/cumem.py), which cannot use them (the cumem OOM
            at the second iteration). vLLM's own wake_up empties ITS process's cache (0.33), not
            the training process's.
    close   the sync folder is removed on every exit path: close() (the job's `finally`), the
            object's finaliser, interpreter exit, SIGTERM; a folder a SIGKILLed attempt left is
            cleared when the next one starts

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
from race_cli.cost.memory import VLLM_HEADROOM_BYTES as HEADROOM_BYTES  # the memory ledger sizes vLLM with it too

GIB = 1024 ** 3
MAX_FRACTION = 0.9  # leave the policy's training at least a tenth of the GPU


# --- sizing from the plan ------------------------------------------------------------------------


def model_len(longest_prompt: int, max_new_tokens: int) -> int:
    """vLLM's max_model_len for a task: its longest prompt plus the completion cap, in tokens."""
    return int(longest_prompt) + int(max_new_tokens)


def memory_fraction(arch: Arch, *, dtype_bytes: int, lora: Lora | None, sequences: int, max_model_len: int,
                    gpu_bytes: int) -> float:
    """The GPU fraction vLLM needs: weights + LoRA slots + a KV cache holding every sequence at full length.

    weights  (n_body + 2 * d*V) * dtype_bytes          embeddings and LM head counted apart (untied worst case)
    kv       sequences * max_model_len * 2 * L * h_kv * d_h * dtype_bytes     (K and V, every layer)
    total    (weights + kv) * 1.1 + HEADROOM_BYTES      10% for the block allocator's rounding
    Refuses (RaceError) when that is over MAX_FRACTION of the GPU.
    """
    weights = (arch.n_body + 2 * arch.n_head) * dtype_bytes
    if lora is not None:  # one adapter slot: r * (d_in + d_out) per targeted matrix, every layer
        weights += sum(lora.r * (i + o) for name, (i, o) in arch.matrices().items()
                       if name in lora.target_modules) * arch.num_hidden_layers * dtype_bytes
    kv = sequences * max_model_len * 2 * arch.num_hidden_layers * arch.num_key_value_heads * arch.d_head * dtype_bytes
    need = (weights + kv) * 1.1 + HEADROOM_BYTES
    fraction = need / gpu_bytes
    if fraction > MAX_FRACTION:
        raise RaceError(f"vLLM needs about {need / GIB:.1f} GiB ({fraction:.0%} of this {gpu_bytes / GIB:.0f} GiB GPU) "
                        f"for the weights and a KV cache of {sequences} sequences x {max_model_len} tokens; "
                        f"expected at most {MAX_FRACTION:.0%}. Lower grpo.prompts_per_iter x grpo.group_size or "
                        "rollout.max_new_tokens, set rollout.gpu_memory_utilization by hand, or use rollout.backend=hf.")
    return round(max(fraction, 0.05), 3)


def sampling_kwargs(*, group_size: int, greedy: bool, temperature: float, top_p: float, max_new_tokens: int,
                    eos_id: int) -> dict:
    """SamplingParams keywords: softmax(logits / T) with top-p only, stopping on `eos_id` only.

    ignore_eos + stop_token_ids=[eos_id] makes the tokenizer's EOS the one stop token, as in the
    HF backend (a model's generation_config may list more, e.g. Qwen2.5-Instruct's <|endoftext|>
    beside <|im_end|>); the stop token stays in the output, as HF keeps it.
    """
    common = dict(n=group_size, max_tokens=max_new_tokens, stop_token_ids=[eos_id], ignore_eos=True,
                  repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, min_p=0.0, top_k=-1)
    if greedy:
        return common | dict(temperature=0.0, top_p=1.0)
    return common | dict(temperature=temperature, top_p=top_p)


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
        _remove(folder)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


class VLLMRollout:
    """Sampling with vLLM (GPU only); the LoRA adapter re-registered after every update (see the module docstring)."""

    name = "vllm"
    share_prefix = True

    def __init__(self, model_path: str, tokenizer: Any, *, arch: Arch, lora: Lora | None, eos_id: int, pad_id: int,
                 max_new_tokens: int, temperature: float, top_p: float, dtype: str, seed: int,
                 gpu_memory_utilization: float, max_model_len: int, sync_dir: str | Path,
                 revision: str | None = None, trust_remote_code: bool = False):
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
        _remove(self.sync_dir)
        self.sync_dir.mkdir(parents=True)
        self._finalizer = weakref.finalize(self, _remove, self.sync_dir)  # also runs at interpreter exit
        _remove_on_sigterm(self.sync_dir)
        self.can_sleep = callable(getattr(vllm.LLM, "sleep", None)) and callable(getattr(vllm.LLM, "wake_up", None))
        release_cached_memory()  # vLLM refuses to start unless gpu_memory_utilization x the device is free
        try:
            self.llm = vllm.LLM(model=model_path, revision=revision, tokenizer_revision=revision, dtype=dtype,
                                seed=seed, enable_lora=True, max_lora_rank=lora.r, max_loras=1,
                                enable_prefix_caching=True, gpu_memory_utilization=gpu_memory_utilization,
                                max_model_len=max_model_len, generation_config="vllm",
                                trust_remote_code=trust_remote_code,
                                **({"enable_sleep_mode": True} if self.can_sleep else {}))
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
            self.llm.sleep(level=1)  # weights to CPU, KV cache freed: the update gets that memory
            self.asleep = True

    def _wake(self) -> None:
        if self.asleep:
            release_cached_memory()  # the update's cached blocks, which vLLM's allocator cannot reuse
            self.llm.wake_up()
            self.asleep = False

    def yield_gpu(self) -> None:
        """The training process takes the GPU next (reward, update): the engine sleeps until the next generate."""
        self._sleep()

    def sync(self, model: Any) -> None:
        """Hand the model's current adapter to vLLM: saved into the sync folder under a new id."""
        from vllm.lora.request import LoRARequest

        self._sleep()  # a sync before any generate (start/resume) also finds the engine asleep
        self._lora_id += 1
        path = self.sync_dir / f"adapter-{self._lora_id}"
        model.save_pretrained(str(path))
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
        rows, comps = [], []
        for p, out in zip([r["prompt_token_ids"] for r in requests], outs):
            for o in out.outputs:
                rows.append(p)
                comps.append(list(o.token_ids))
        comp = right_pad(comps, self.pad_id)
        share = group_size  # the n samples of one prompt share its prefill

        def flops(plens, clens):
            # prefix caching: one prefill per group; paged kernels run no padding
            return generate_flops(self.arch, plens, clens, lora=self.lora, share_prefix=share, padded=False)

        return _finish(rows, comp, eos_id=self.eos_id, pad_id=self.pad_id, tokenizer=self.tokenizer,
                       flops_fn=flops, seconds=seconds)

    def close(self) -> None:
        """Remove the sync folder (idempotent); the engine itself goes with the process."""
        self._finalizer()
