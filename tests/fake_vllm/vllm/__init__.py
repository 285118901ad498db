"""A stand-in for `vllm` that enforces the parts of its real API and rules the rollout adapter relies on.

Put tests/fake_vllm on sys.path and `import vllm` gets this. It is strict on purpose: every
misuse the real engine punishes (a crash, or worse, silently stale samples) raises here.

- `LLM(**engine_args)`: only keywords the real EngineArgs has (unknown -> TypeError, as the real
  one); `max_lora_rank` must be one of vLLM's allowed ranks (ValueError, as LoRAConfig);
  `gpu_memory_utilization` in (0, 1]; `sleep`/`wake_up` only with `enable_sleep_mode=True`.
- `LLM.generate(prompts, sampling_params, use_tqdm=..., lora_request=...)`: refuses to run asleep;
  an adapter id seen before in a NEW LoRARequest (or with another folder) is a REUSED id (the real
  engine would serve the adapter it cached under that id); a new adapter while sleep mode is on must come after a sleep since the
  last generate (the update ran while the engine held its memory otherwise); the adapter's rank
  (adapter_config.json) must be <= max_lora_rank.
- `SamplingParams(**kw)`: the real field names, range checks.
- `check_no_leftovers()`: every adapter folder ever served, and its parent sync folder, must be
  gone (AssertionError otherwise): call it when the job is over.

Sampled tokens are deterministic: completion k of a prompt is [prompt[-1] + 1 + k] * (k + 1)
followed by the first stop token id, cut at max_tokens.
"""

from __future__ import annotations

import json
from pathlib import Path

from vllm.lora.request import LoRARequest  # noqa: F401  (re-exported as in vllm)

__version__ = "0.10.1.1"
POSSIBLE_MAX_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)  # vllm LoRAConfig in 0.8.5 .. 0.11
ENGINE_ARGS = {
    "model", "tokenizer", "tokenizer_mode", "skip_tokenizer_init", "trust_remote_code", "allowed_local_media_path",
    "tensor_parallel_size", "dtype", "quantization", "revision", "tokenizer_revision", "seed",
    "gpu_memory_utilization", "swap_space", "cpu_offload_gb", "enforce_eager", "max_seq_len_to_capture",
    "disable_custom_all_reduce", "disable_async_output_proc", "hf_token", "hf_overrides", "mm_processor_kwargs",
    "task", "override_pooler_config", "compilation_config", "max_model_len", "enable_lora", "max_lora_rank",
    "max_loras", "max_cpu_loras", "enable_prefix_caching", "enable_sleep_mode", "generation_config",
    "max_num_seqs", "max_num_batched_tokens", "distributed_executor_backend", "kv_cache_dtype", "block_size",
    "code_revision", "download_dir", "load_format", "lora_dtype", "enable_chunked_prefill",
}
SAMPLING_FIELDS = {
    "n", "best_of", "presence_penalty", "frequency_penalty", "repetition_penalty", "temperature", "top_p", "top_k",
    "min_p", "seed", "stop", "stop_token_ids", "ignore_eos", "max_tokens", "min_tokens", "logprobs",
    "prompt_logprobs", "detokenize", "skip_special_tokens", "spaces_between_special_tokens",
    "include_stop_str_in_output", "bad_words", "logits_processors", "truncate_prompt_tokens", "output_kind",
}
ENGINES: list["LLM"] = []  # every engine made in this process (tests inspect them)
SERVED: set[Path] = set()  # every adapter folder an engine read


def check_no_leftovers() -> None:
    """AssertionError when an adapter folder (or its sync folder) outlived the job."""
    left = sorted(str(p) for p in SERVED | {p.parent for p in SERVED} if p.exists())
    if left:
        raise AssertionError(f"adapter sync folder(s) left behind: {left}")


def reset() -> None:
    ENGINES.clear()
    SERVED.clear()


class SamplingParams:
    def __init__(self, **kw):
        unknown = set(kw) - SAMPLING_FIELDS
        if unknown:
            raise TypeError(f"SamplingParams got unexpected keyword(s) {sorted(unknown)}")
        defaults = dict(n=1, temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0,
                        presence_penalty=0.0, frequency_penalty=0.0, stop_token_ids=None, ignore_eos=False,
                        max_tokens=16, seed=None)
        for k, v in (defaults | kw).items():
            setattr(self, k, v)
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}.")
        if self.temperature < 0:
            raise ValueError(f"temperature must be non-negative, got {self.temperature}.")
        if self.top_k < -1:
            raise ValueError(f"top_k must be -1 (disable), or at least 1, got {self.top_k}.")
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError("n and max_tokens must be at least 1.")
        self.stop_token_ids = list(self.stop_token_ids or [])


class _Completion:
    def __init__(self, token_ids):
        self.token_ids = token_ids


class _RequestOutput:
    def __init__(self, outputs):
        self.outputs = outputs


class LLM:
    def __init__(self, model: str, **kw):
        unknown = set(kw) - ENGINE_ARGS
        if unknown:
            raise TypeError(f"EngineArgs.__init__() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        self.model, self.args = model, kw
        if kw.get("enable_lora") and kw.get("max_lora_rank", 16) not in POSSIBLE_MAX_RANKS:
            raise ValueError(f"max_lora_rank ({kw.get('max_lora_rank')}) must be one of {POSSIBLE_MAX_RANKS}.")
        gmu = kw.get("gpu_memory_utilization", 0.9)
        if not 0.0 < gmu <= 1.0:
            raise ValueError(f"GPU memory utilization must be within (0, 1]. Got {gmu}.")
        self.sleep_mode = bool(kw.get("enable_sleep_mode", False))
        self.asleep = False
        self.slept_since_generate = False
        self.adapters: dict[int, str] = {}  # lora_int_id -> folder
        self.requests: dict[int, LoRARequest] = {}  # lora_int_id -> the request that introduced it
        self.current_id: int | None = None
        self.calls: list[tuple[str, object]] = []  # ("sleep" | "wake_up" | "generate", detail), for tests
        ENGINES.append(self)

    def sleep(self, level: int = 1) -> None:
        if not self.sleep_mode:
            raise ValueError("Sleep mode is not enabled (LLM(..., enable_sleep_mode=True)).")
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        self.asleep, self.slept_since_generate = True, True
        self.calls.append(("sleep", level))

    def wake_up(self, tags: list[str] | None = None) -> None:
        if not self.sleep_mode:
            raise ValueError("Sleep mode is not enabled.")
        self.asleep = False
        self.calls.append(("wake_up", tags))

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

    def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None, **kw):
        unknown = set(kw) - {"prompt_adapter_request", "guided_options_request", "priority"}
        if unknown:
            raise TypeError(f"LLM.generate() got unexpected keyword(s) {sorted(unknown)}")
        if self.asleep:
            raise RuntimeError("generate() on a sleeping engine: call wake_up() first.")
        if lora_request is not None:
            self._check_adapter(lora_request)
        self.slept_since_generate = False
        p = sampling_params or SamplingParams()
        self.calls.append(("generate", p))
        limit = self.args.get("max_model_len")
        outs = []
        for prompt in prompts:
            ids = prompt["prompt_token_ids"]
            if limit is not None and len(ids) + p.max_tokens > limit:
                raise ValueError(f"prompt ({len(ids)}) + max_tokens ({p.max_tokens}) exceeds max_model_len {limit}")
            stop = p.stop_token_ids[0] if p.stop_token_ids else None
            comps = []
            for k in range(p.n):
                toks = [ids[-1] + 1 + k] * (k + 1) + ([stop] if stop is not None else [])
                comps.append(_Completion(toks[:p.max_tokens]))
            outs.append(_RequestOutput(comps))
        return outs
