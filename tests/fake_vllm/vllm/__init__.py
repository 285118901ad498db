"""A stand-in for `vllm` that enforces the parts of its real API and rules the rollout adapter relies on.

Put tests/fake_vllm on sys.path and `import vllm` gets this. It is strict on purpose: every
misuse the real engine punishes (a crash, or worse, silently stale samples) raises here.

Which release it stands for: the environment variable FAKE_VLLM_VERSION at import (one of
`_api.VERSIONS`, the releases the `vllm` extra allows; default the newest). Every signature below
is that release's, read from its source (`_api.py`): a keyword one supported release lacks fails
under that release.

- `LLM(**engine_args)`: only keywords the real LLM/EngineArgs has (unknown -> TypeError, as the real
  one); `max_lora_rank` must be one of vLLM's allowed ranks (ValueError, as LoRAConfig);
  `gpu_memory_utilization` in (0, 1]; `sleep`/`wake_up` only with `enable_sleep_mode=True`, with
  the release's levels and tags.
- Memory, when `DEVICE_BYTES` is set (None: not modelled): the training process's share is
  `torch.cuda.memory_reserved()` (tests stub it; PyTorch's caching allocator keeps freed blocks
  reserved until `torch.cuda.empty_cache()`), and vLLM's own allocator cannot use those blocks.
  LLM() refuses to start when the free memory is under gpu_memory_utilization x the device
  (ValueError, the real startup message); `wake_up` maps the engine's memory again and raises the
  cumem allocator's `CUDA Error: out of memory` when the trainer's reserved bytes plus that
  reservation exceed the device. Asleep the engine keeps `ASLEEP_BYTES`.
- `LLM.generate(prompts, sampling_params, use_tqdm=..., lora_request=...)`: refuses to run asleep;
  an adapter id seen before in a NEW LoRARequest (or with another folder) is a REUSED id (the real
  engine would serve the adapter it cached under that id); a new adapter while sleep mode is on must come after a sleep since the
  last generate (the update ran while the engine held its memory otherwise); the adapter's rank
  (adapter_config.json) must be <= max_lora_rank.
- `SamplingParams(**kw)`: the real field names, range checks (temperature <= 2 where the release
  checks it: 0.33). With `logprobs=0` each completion carries `logprobs`, one {token id: Logprob}
  per sampled token as the real CompletionOutput; the fake has no model, so every value is 0.0
  (the sampled-vs-trained gap is measured on the real engine, tests/test_vllm_real.py).
- `vllm.platforms.current_platform.is_sleep_mode_available()`: True (a CUDA box) unless
  FAKE_VLLM_PLATFORM=cpu, where, as vLLM's CPU build, `LLM(enable_sleep_mode=True)` is refused.
- Lengths as the V1 engine treats them: a prompt of max_model_len tokens or more is refused
  (ValueError, v1/engine/input_processor.py `_validate_prompt_len`); a longer request is capped
  without an error when prompt + output reach max_model_len (v1/core/sched/utils.py `check_stop`,
  FINISHED_LENGTH_CAPPED), so a max_model_len sized for a shorter cap truncates silently.
- `sleep(level=0)` pauses scheduling only (no memory changes); `release_kv_cache_memory()` (0.33 only)
  needs that pause, frees the KV cache and keeps the weights; a generate on a paused engine would wait
  forever (RuntimeError here); `wake_up()` resumes. Every LLM() records the CUDA_VISIBLE_DEVICES its
  engine process inherits (`visible_devices`).
- `check_no_leftovers()`: every adapter folder ever served, and its parent sync folder, must be
  gone (AssertionError otherwise): call it when the job is over.

Sampled tokens are deterministic: completion k of a prompt is [prompt[-1] + 1 + k] * (k + 1)
followed by the first stop token id, cut at max_tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

import os

from vllm._api import NEWEST, VERSIONS
from vllm.lora.request import LoRARequest as LoRARequest  # re-exported as in vllm

__version__ = os.environ.get("FAKE_VLLM_VERSION") or NEWEST
if __version__ not in VERSIONS:
    raise ImportError(f"fake vllm: FAKE_VLLM_VERSION={__version__!r} is not one of {sorted(VERSIONS)}")
API = VERSIONS[__version__]
POSSIBLE_MAX_RANKS = API["max_lora_ranks"]
ENGINE_ARGS = API["engine_args"] | {"model"}
SAMPLING_FIELDS = API["sampling_fields"]
ENGINES: list["LLM"] = []  # every engine made in this process (tests inspect them)
SERVED: set[Path] = set()  # every adapter folder an engine read
DEVICE_BYTES: int | None = None  # the device's memory when tests model it (None: memory not modelled)
ASLEEP_BYTES = 2 * 2**30  # what the engine keeps on the device asleep (outside its cumem pool)
WEIGHT_BYTES = 0  # the engine's weights, kept on the device by release_kv_cache_memory (tests set it)
WEIGHT_BYTES = 0  # the engine's weights, kept on the device by release_kv_cache_memory (tests set it)
GIB = 2**30


def _platform_sleeps() -> bool:
    from vllm.platforms import current_platform

    return current_platform.is_sleep_mode_available()


def _trainer_reserved() -> int:
    """The training process's reserved CUDA bytes (PyTorch's caching allocator; stubbed by tests)."""
    import torch

    return int(torch.cuda.memory_reserved())


def check_no_leftovers() -> None:
    """AssertionError when an adapter folder (or its sync folder) outlived the job."""
    left = sorted(str(p) for p in SERVED | {p.parent for p in SERVED} if p.exists())
    if left:
        raise AssertionError(f"adapter sync folder(s) left behind: {left}")


def reset() -> None:
    ENGINES.clear()
    SERVED.clear()


def _bind(name: str, positional: tuple, keyword_only: tuple, args: tuple, kw: dict) -> dict:
    """The release's signature (after self): TypeError for too many positionals or a keyword it lacks."""
    if len(args) > len(positional):
        raise TypeError(f"{name}() takes {len(positional)} positional argument(s) in vLLM {__version__} "
                        f"but {len(args)} were given")
    bound = dict(zip(positional, args))
    for k, v in kw.items():
        if k not in positional and k not in keyword_only:
            raise TypeError(f"{name}() got an unexpected keyword argument {k!r} (vLLM {__version__})")
        if k in bound:
            raise TypeError(f"{name}() got multiple values for argument {k!r}")
        bound[k] = v
    return bound


class SamplingParams:
    def __init__(self, **kw):
        unknown = set(kw) - SAMPLING_FIELDS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword(s) {sorted(unknown)}")
        defaults = dict(n=1, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
                        presence_penalty=0.0, frequency_penalty=0.0, stop_token_ids=None, ignore_eos=False,
                        max_tokens=16, seed=None, detokenize=True, logprobs=None)
        for k, v in (defaults | kw).items():
            setattr(self, k, v)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if API["max_temperature"] is not None and self.temperature > API["max_temperature"]:
            raise ValueError(f"temperature must be in [0, {API['max_temperature']:g}], got {self.temperature}.")
        if API["max_temperature"] is not None and self.temperature > API["max_temperature"]:
            raise ValueError(f"temperature must be in [0, {API['max_temperature']:g}], got {self.temperature}.")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1 (disable), or at least 1, got {self.top_k}.")
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError("n and max_tokens must be at least 1.")
        self.stop_token_ids = list(self.stop_token_ids or [])


class Logprob:
    def __init__(self, logprob: float):
        self.logprob = logprob


class _Completion:
    def __init__(self, token_ids, logprobs=None):
        self.token_ids = token_ids
        self.logprobs = logprobs


class _RequestOutput:
    def __init__(self, outputs):
        self.outputs = outputs


class LLM:
    def __init__(self, model: str, **kw):
        unknown = set(kw) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        self.model, self.args = model, kw
        self.visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")  # what the engine-core process inherits
        self.visible_devices = os.environ.get("CUDA_VISIBLE_DEVICES")  # what the engine-core process inherits
        if kw.get("enable_lora") and kw.get("max_lora_rank", 16) not in POSSIBLE_MAX_RANKS:
            raise ValueError(f"max_lora_rank ({kw.get('max_lora_rank')}) must be one of {POSSIBLE_MAX_RANKS}.")
        gmu = kw.get("gpu_memory_utilization", 0.9)
        if not 0.0 < gmu <= 1.0:
            raise ValueError(f"GPU memory utilization must be within (0, 1]. Got {gmu}.")
        self.reserved = 0  # bytes the engine holds on the device now
        if DEVICE_BYTES is not None:
            need, free = gmu * DEVICE_BYTES, DEVICE_BYTES - _trainer_reserved()
            if free < need:
                raise ValueError(API["startup_free_memory_error"].format(
                    free=round(free / GIB, 2), total=round(DEVICE_BYTES / GIB, 2), gmu=gmu, need=round(need / GIB, 2)))
            self.reserved = int(need)
        self.sleep_mode = bool(kw.get("enable_sleep_mode", False))
        if self.sleep_mode and not _platform_sleeps():
            raise ValueError("Sleep mode is not supported on current platform.")
        self.asleep = False
        self.paused = False  # sleep(level=0): scheduling paused, memory untouched
        self.kv_released = False  # release_kv_cache_memory(): KV cache freed, weights resident
        self.paused = False  # sleep(level=0): scheduling paused, memory untouched
        self.kv_released = False  # release_kv_cache_memory(): KV cache freed, weights resident
        self.slept_since_generate = False
        self.adapters: dict[int, str] = {}  # lora_int_id -> folder
        self.requests: dict[int, LoRARequest] = {}  # lora_int_id -> the request that introduced it
        self.current_id: int | None = None
        self.calls: list[tuple[str, object]] = []  # ("sleep" | "wake_up" | "generate", detail), for tests
        ENGINES.append(self)

    def sleep(self, *args, **kw) -> None:
        bound = _bind("LLM.sleep", API["sleep_params"], (), args, kw)
        level = bound.get("level", 1)
        if not self.sleep_mode:
            raise ValueError("Sleep mode is not enabled (LLM(..., enable_sleep_mode=True)).")
        if level not in API["sleep_levels"]:
            raise ValueError(f"sleep level must be one of {API['sleep_levels']} in vLLM {__version__}, got {level}")
        self.slept_since_generate = True
        self.paused = True
        if level >= 1:
            self.asleep = True
            if DEVICE_BYTES is not None:
                self.reserved = min(self.reserved, ASLEEP_BYTES)
        self.calls.append(("sleep", level))

    def release_kv_cache_memory(self) -> None:
        """0.33: free the KV cache, keep the weights mapped (vllm/v1/engine/core.py); needs a completed pause."""
        if not self.paused:
            raise RuntimeError("release_kv_cache_memory() requires a completed pause first")
        if self.asleep:
            raise RuntimeError("release_kv_cache_memory() requires all executor memory to be resident")
        self.kv_released = True
        if DEVICE_BYTES is not None:
            self.reserved = min(self.reserved, ASLEEP_BYTES + WEIGHT_BYTES)
        self.calls.append(("release_kv_cache_memory", None))

    def wake_up(self, tags: list[str] | None = None):
        if not self.sleep_mode:
            raise ValueError("Sleep mode is not enabled.")
        unknown = set(tags or ()) - set(API["wake_up_tags"])
        if unknown:
            raise ValueError(f"wake_up tags must be in {API['wake_up_tags']}, got {sorted(unknown)}")
        if DEVICE_BYTES is not None and (self.asleep or self.kv_released):
            need = int(self.args.get("gpu_memory_utilization", 0.9) * DEVICE_BYTES)
            if _trainer_reserved() + need > DEVICE_BYTES:  # cumem maps fresh memory; PyTorch's cached blocks stay put
                self.calls.append(("wake_up failed", tags))
                raise RuntimeError("CUDA Error: out of memory at csrc/cumem_allocator.cpp "
                                   f"(trainer reserved {_trainer_reserved() / GIB:.1f} GiB + vLLM {need / GIB:.1f} GiB "
                                   f"> {DEVICE_BYTES / GIB:.1f} GiB)")
            self.reserved = need
        self.asleep = self.paused = self.kv_released = False
        self.calls.append(("wake_up", tags))
        return True if API["wake_up_returns_bool"] else None

    def _check_adapter(self, req: LoRARequest) -> None:
        if not self.args.get("enable_lora"):
            raise ValueError("LoRA is not enabled: LLM(..., enable_lora=True).")
        path = Path(req.lora_path)
        seen = self.adapters.get(req.lora_int_id)
        if seen is not None and (seen != str(path) or self.requests[req.lora_int_id] is not req):
            raise ValueError(f"LoRA id {req.lora_int_id} reused by a new LoRARequest ({seen} -> {path}): "
                             "the engine would keep serving the adapter it cached under that id.")
        if seen is None:
            if self.sleep_mode and self.current_id is not None and not self.slept_since_generate:
                raise RuntimeError("a new adapter arrived but the engine stayed awake since the last generate: "
                                   "the update ran while vLLM held its weights and KV cache (sleep first).")
            cfg = path / "adapter_config.json"
            if not cfg.is_file():
                raise ValueError(f"no adapter_config.json in {path}")
            r = json.loads(cfg.read_text())["r"]
            if r > self.args.get("max_lora_rank", 16):
                raise ValueError(f"LoRA rank {r} is greater than max_lora_rank {self.args.get('max_lora_rank', 16)}.")
            self.adapters[req.lora_int_id] = str(path)
            self.requests[req.lora_int_id] = req
            SERVED.add(path.resolve())
        self.current_id = req.lora_int_id

    def generate(self, *args, **kw):
        bound = _bind("LLM.generate", API["generate_positional"], API["generate_keyword_only"], args, kw)
        prompts, sampling_params = bound.get("prompts"), bound.get("sampling_params")
        lora_request = bound.get("lora_request")
        if self.asleep:
            raise RuntimeError("generate() on a sleeping engine: call wake_up() first.")
        if self.paused:
            raise RuntimeError("generate() on a paused engine (sleep(level=0)): its requests would wait forever; "
                               "call wake_up() first.")
        if self.paused:
            raise RuntimeError("generate() on a paused engine (sleep(level=0)): its requests would wait forever; "
                               "call wake_up() first.")
        if lora_request is not None:
            self._check_adapter(lora_request)
        self.slept_since_generate = False
        p = sampling_params or SamplingParams()
        self.calls.append(("generate", p))
        if isinstance(p, (list, tuple)) and len(p) != len(prompts):  # one SamplingParams per prompt, as vLLM
            raise ValueError(f"{len(p)} sampling params for {len(prompts)} prompts")
        per = list(p) if isinstance(p, (list, tuple)) else [p] * len(prompts)
        limit = self.args.get("max_model_len")
        outs = []
        for prompt, p in zip(prompts, per):
            ids = prompt["prompt_token_ids"]
            if limit is not None and len(ids) >= limit:  # input_processor._validate_prompt_len
                raise ValueError(f"The decoder prompt (length {len(ids)}) plus the requested output tokens (at least 1) "
                                 f"is longer than the maximum model length of {limit}. Make sure that `max_model_len` "
                                 "is no smaller than the number of text tokens.")
            cap = p.max_tokens if limit is None else min(p.max_tokens, limit - len(ids))  # check_stop: length-capped
            stop = p.stop_token_ids[0] if p.stop_token_ids else None
            comps = []
            for k in range(p.n):
                toks = [ids[-1] + 1 + k] * (k + 1) + ([stop] if stop is not None else [])
                if p.seed is not None:  # a seeded request: its tokens are a function of (seed, k) alone
                    import random

                    rng = random.Random(p.seed * 1009 + k)
                    toks = [ids[-1] + 1 + rng.randrange(4) for _ in range(1 + rng.randrange(3))] + (
                        [stop] if stop is not None else [])
                toks = toks[:cap]
                comps.append(_Completion(toks, None if p.logprobs is None else [{t: Logprob(0.0)} for t in toks]))
            outs.append(_RequestOutput(comps))
        return outs


if not API["release_kv_cache_memory"]:  # 0.10: LLM has no such method
    del LLM.release_kv_cache_memory
