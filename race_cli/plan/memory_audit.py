"""Measure device memory of the real engine code on fake tensors, and compare with the memory ledger.

    race mem --audit            # the audited cases (Qwen2.5-0.5B, -1.5B, -7B shapes and small ones)

The models are real transformers Qwen2 models (and real PEFT LoRA adapters) built from config on
the meta device, then given fake tensors (torch's FakeTensorMode) on a pretend CPU device: every
kernel runs its shape logic, no memory is allocated, so a 7B update at the pilot's shapes
"runs" on a laptop in seconds. `PeakTracker`, a TorchDispatchMode, sees every tensor an operator
returns, keys it by its storage, and frees it when the storage dies (weakref finalizer): its
`peak` is the high-water mark of live tensor bytes, what `torch.cuda.max_memory_allocated`
reports on a GPU (minus the caching allocator's rounding). What runs is the engine's own code:
`logprobs.completion_logprobs` (chunked log-probs), the GRPO policy-gradient loss, backward, AdamW,
and the PRM's scoring forward (`rewards/prm.score_logits` on the Qwen2.5-Math-PRM layout).

Departure from a GPU run: fake tensors cannot answer data-dependent questions, so the batch has no
padding and is passed without an attention mask (HF's SDPA path on CPU still materialises the
[n, 1, S, S] causal mask, which the ledger's mask term counts). GPU kernels (memory-efficient
SDPA, cuBLAS workspaces) and the caching allocator's rounding are not seen here: the planner keeps
10% headroom (memory.HEADROOM) and scripts/gpu_smoke.py compares with max_memory_allocated.
Imports torch: never from `race plan`.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from race_cli.cost.flops import LAYER_MATRICES, Arch
from race_cli.cost.memory import MemSpec, kv_cache_bytes, logprob_forward_bytes, reward_bytes, resident_bytes, update_bytes


class PeakTracker:
    """Live and peak bytes of every tensor storage created while active (plus those registered)."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        tracker = self

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:
                    tracker.add(t)
                return out

        self.mode = _Mode()
        self.live: dict[int, int] = {}  # id(storage) -> bytes
        self.current = 0
        self.peak = 0

    def add(self, t: Any) -> None:
        import torch

        if not isinstance(t, torch.Tensor):
            return
        st = t.untyped_storage()  # the same Python object for as long as the storage lives
        key = id(st)
        if key in self.live:
            return
        n = st.nbytes()
        self.live[key] = n
        self.current += n
        self.peak = max(self.peak, self.current)
        weakref.finalize(st, self._free, key)

    def _free(self, key: int) -> None:
        self.current -= self.live.pop(key, 0)

    def __enter__(self):
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        return self.mode.__exit__(*exc)


@dataclass
class FakeModel:
    model: Any  # PeftModel or Qwen2ForCausalLM whose parameters are fake tensors
    mode: Any  # the FakeTensorMode that owns them
    keep: list  # the meta originals (their ids key the conversion memo)


def fake_model(arch: Arch, *, dtype: str = "bfloat16", lora_r: int | None = 32, grad_checkpointing: bool = False,
               tie: bool = False, num_labels: int | None = None) -> FakeModel:
    """A Qwen2 causal LM (or sequence classifier with `num_labels`) of `arch`, with fake parameters."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, Qwen2Config

    cfg = Qwen2Config(hidden_size=arch.hidden_size, num_hidden_layers=arch.num_hidden_layers,
                      num_attention_heads=arch.num_attention_heads, num_key_value_heads=arch.num_key_value_heads,
                      intermediate_size=arch.intermediate_size, vocab_size=arch.vocab_size,
                      head_dim=arch.head_dim or arch.hidden_size // arch.num_attention_heads,
                      tie_word_embeddings=tie, pad_token_id=0, num_labels=num_labels or 2)
    from race_cli.engine.hf import dtype_kwarg, enable_checkpointing, lora_wrap

    tdtype = getattr(torch, dtype)
    with torch.device("meta"):
        if num_labels:
            model = AutoModelForSequenceClassification.from_config(cfg, **dtype_kwarg(tdtype), attn_implementation="sdpa")
        else:
            model = AutoModelForCausalLM.from_config(cfg, **dtype_kwarg(tdtype), attn_implementation="sdpa")
        if lora_r:
            from peft import LoraConfig

            model = lora_wrap(model, LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules=list(LAYER_MATRICES),
                                                task_type="CAUSAL_LM"))
        if grad_checkpointing:
            enable_checkpointing(model, lora=bool(lora_r))
    return _faked(model)


def _faked(model) -> FakeModel:
    """`model` (built on the meta device) with every parameter and buffer a fake CPU tensor."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    memo: dict[int, Any] = {}
    keep: list = []
    device = torch.device("cpu")

    def fake(t, requires_grad=None):  # meta -> fake CPU, once per tensor (tied weights stay tied)
        if id(t) not in memo:
            keep.append(t)
            f = mode.fake_tensor_converter.from_meta_and_device(mode, t.detach(), device)
            memo[id(t)] = f if requires_grad is None else torch.nn.Parameter(f, requires_grad=requires_grad)
        return memo[id(t)]

    for mod in model.modules():
        for k, p in list(mod._parameters.items()):
            if p is not None:
                mod._parameters[k] = fake(p, p.requires_grad)
        for k, b in list(mod._buffers.items()):
            if b is not None:
                mod._buffers[k] = fake(b)
    model.train()
    return FakeModel(model, mode, keep)


def _start(fm: FakeModel) -> PeakTracker:
    tr = PeakTracker()
    for t in list(fm.model.parameters()) + list(fm.model.buffers()):
        tr.add(t)  # the weights are live before the phase starts
    return tr


def measure_update(arch: Arch, *, n: int, prompt_len: int, completion_len: int, lora_r: int | None = 32,
                   grad_checkpointing: bool = False, dtype: str = "bfloat16", steps: int = 2,
                   tied: bool = False) -> int:
    """Peak bytes of `steps` update passes on one micro-batch of n sequences (weights included).

    Each pass: zero_grad, `completion_logprobs` with grad, the mu=1 GRPO loss (ratio 1: the
    policy-gradient term averaged over tokens), backward, AdamW step. Two passes so the peak
    sees the optimizer states and gradients that live from the first step on.
    """
    import torch

    from race_cli.engine.logprobs import completion_logprobs

    fm = fake_model(arch, dtype=dtype, lora_r=lora_r, grad_checkpointing=grad_checkpointing, tie=tied)
    with fm.mode:
        params = [p for p in fm.model.parameters() if p.requires_grad]
        opt = torch.optim.AdamW(params, lr=1e-5, foreach=False)
        ids = torch.randint(0, arch.vocab_size, (n, prompt_len + completion_len))  # [n, S]
        comp = ids[:, prompt_len:]  # [n, C]
        adv = torch.randn(n)  # [n]
        tr = _start(fm)
        with tr:
            for _ in range(steps):
                opt.zero_grad(set_to_none=True)
                logp = completion_logprobs(fm.model, ids, None, comp)  # [n, C]
                loss = -(torch.exp(logp - logp.detach()) * adv[:, None]).mean()
                loss.backward()
                del logp, loss
                opt.step()
    return tr.peak


def measure_logprob_forward(arch: Arch, *, n: int, prompt_len: int, completion_len: int, lora_r: int | None = 32,
                            dtype: str = "bfloat16", tied: bool = False) -> int:
    """Peak bytes of the no-grad log-prob forward (old policy / reference) on n sequences."""
    import torch

    from race_cli.engine.logprobs import completion_logprobs

    fm = fake_model(arch, dtype=dtype, lora_r=lora_r, tie=tied)
    with fm.mode:
        ids = torch.randint(0, arch.vocab_size, (n, prompt_len + completion_len))
        tr = _start(fm)
        with tr, torch.no_grad():
            completion_logprobs(fm.model, ids, None, ids[:, prompt_len:])
    return tr.peak


def measure_kv_cache(arch: Arch, *, n: int, seq_len: int, lora_r: int | None = 32, dtype: str = "bfloat16",
                     tied: bool = False) -> int:
    """Peak bytes of building the KV cache of n sequences of seq_len tokens, as generate's prefill does.

    The last decode step of a rollout holds the cache of P+C-1 positions and grows it by one:
    the peak of a prefill over P+C tokens with `use_cache` and logits at the last position only.
    """
    import torch

    fm = fake_model(arch, dtype=dtype, lora_r=lora_r, tie=tied)
    with fm.mode:
        ids = torch.randint(0, arch.vocab_size, (n, seq_len))
        tr = _start(fm)
        with tr, torch.no_grad():
            out = fm.model(input_ids=ids, use_cache=True, logits_to_keep=1)
            probs = torch.softmax(out.logits[:, -1].float(), dim=-1)  # [n, V] sampling
            del probs
    return tr.peak


def fake_prm(arch: Arch, *, dtype: str = "bfloat16", num_labels: int = 2) -> FakeModel:
    """The Qwen2.5-Math-PRM layout (rewards/prm.qwen2_prm_class: Qwen2 body + two-layer head) of `arch`, faked."""
    import torch
    from transformers import Qwen2Config

    from race_cli.rewards.prm import qwen2_prm_class

    cfg = Qwen2Config(hidden_size=arch.hidden_size, num_hidden_layers=arch.num_hidden_layers,
                      num_attention_heads=arch.num_attention_heads, num_key_value_heads=arch.num_key_value_heads,
                      intermediate_size=arch.intermediate_size, vocab_size=arch.vocab_size,
                      head_dim=arch.head_dim or arch.hidden_size // arch.num_attention_heads, pad_token_id=0,
                      num_labels=num_labels)
    cfg._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = qwen2_prm_class()(cfg).to(getattr(torch, dtype))
    return _faked(model)


def measure_reward(arch: Arch, *, n: int, seq_len: int, dtype: str = "bfloat16") -> int:
    """Peak bytes of the PRM's scoring forward (rewards/prm.score_logits, the code the job runs) over n
    sequences of seq_len tokens, then the per-position step scores (softmax over the two labels)."""
    import torch

    from race_cli.rewards.prm import score_logits

    fm = fake_prm(arch, dtype=dtype)
    fm.model.eval()
    with fm.mode:
        ids = torch.randint(1, arch.vocab_size, (n, seq_len))
        tr = _start(fm)
        with tr, torch.no_grad():
            score_logits(fm.model, ids).float().softmax(-1)  # [n, S, 2] per-position step scores
    return tr.peak


# --- the audit: ledger vs measurement ---------------------------------------------------------------

TOLERANCE = 0.15  # the audit fails above this relative error
QWEN_VOCAB = 151_936
QWEN_05B = Arch(896, 24, 14, 2, 4864, QWEN_VOCAB)  # Qwen2.5-0.5B (tied embeddings)
QWEN_15B = Arch(1536, 28, 12, 2, 8960, QWEN_VOCAB)  # Qwen2.5-1.5B (tied embeddings)
QWEN_7B = Arch(3584, 28, 28, 4, 18944, 152_064)  # Qwen2.5-7B (untied)
SMALL = Arch(256, 2, 4, 2, 1024, QWEN_VOCAB)


@dataclass(frozen=True)
class Case:
    name: str
    what: str  # update | logprob_forward | kv_cache | reward
    arch: Arch
    n: int
    prompt_len: int
    completion_len: int
    lora_r: int | None = 32
    grad_checkpointing: bool = False
    tied: bool = False


CASES = [
    Case("small update lora", "update", SMALL, 4, 128, 256),
    Case("small update full-FT ckpt", "update", SMALL, 4, 128, 256, None, True),
    Case("0.5B update lora", "update", QWEN_05B, 4, 128, 256, tied=True),
    Case("0.5B update lora ckpt", "update", QWEN_05B, 8, 150, 512, 32, True, tied=True),
    Case("0.5B update full-FT", "update", QWEN_05B, 2, 128, 256, None, tied=True),
    Case("0.5B logprob no-grad", "logprob_forward", QWEN_05B, 8, 150, 512, tied=True),
    Case("0.5B kv cache", "kv_cache", QWEN_05B, 16, 150, 512, tied=True),
    Case("1.5B update lora", "update", QWEN_15B, 4, 150, 512, tied=True),
    Case("7B update lora", "update", QWEN_7B, 2, 150, 512),
    Case("7B update lora ckpt", "update", QWEN_7B, 8, 150, 512, 32, True),
    Case("7B kv cache", "kv_cache", QWEN_7B, 8, 150, 512),
    Case("7B PRM forward", "reward", QWEN_7B, 8, 0, 662, None),
    Case("small PRM forward", "reward", SMALL, 16, 0, 1024, None),
    # deep and narrow: a KV cache (2 x 12 layers x 128 x 2 bytes per token) would double this forward's peak
    Case("deep narrow PRM forward", "reward", Arch(128, 12, 2, 2, 256, 512), 8, 0, 512, None),
]
QUICK = [0, 1, 13]  # the cases the test suite runs (seconds)


def ledger_bytes(c: Case) -> int:
    """The memory ledger's figure for what `measure(c)` runs."""
    s = MemSpec(arch=c.arch, tied=c.tied, dtype_bytes=2, lora_r=c.lora_r, sequences=c.n, prompt_len=c.prompt_len,
                completion_len=c.completion_len, micro_batch=c.n, grad_checkpointing=c.grad_checkpointing,
                reward=c.arch if c.what == "reward" else None, reward_head=2, reward_batch=c.n,
                reward_len=c.prompt_len + c.completion_len)
    res = resident_bytes(s)
    if c.what == "update":
        return sum(res.values()) + sum(update_bytes(s, c.n, c.grad_checkpointing).values())
    weights = res["policy_weights"] + (lora_params_bytes(c) if c.lora_r else 0)
    if c.what == "logprob_forward":
        return weights + logprob_forward_bytes(s, c.n)
    if c.what == "kv_cache":  # a prefill over all positions: the cache plus the prefill's transient
        from race_cli.cost.memory import inference_layer_bytes

        tokens = c.n * (c.prompt_len + c.completion_len)
        return weights + kv_cache_bytes(c.arch, tokens, 2) + tokens * inference_layer_bytes(c.arch, c.lora_r)
    return res["reward_weights"] + sum(reward_bytes(s).values())


def lora_params_bytes(c: Case) -> int:
    from race_cli.cost.memory import lora_params

    return lora_params(c.arch, c.lora_r) * 4  # float32 adapters, no optimizer state in a no-grad phase


def measure(c: Case) -> int:
    if c.what == "update":
        return measure_update(c.arch, n=c.n, prompt_len=c.prompt_len, completion_len=c.completion_len,
                              lora_r=c.lora_r, grad_checkpointing=c.grad_checkpointing, tied=c.tied)
    if c.what == "logprob_forward":
        return measure_logprob_forward(c.arch, n=c.n, prompt_len=c.prompt_len, completion_len=c.completion_len,
                                       lora_r=c.lora_r, tied=c.tied)
    if c.what == "kv_cache":
        return measure_kv_cache(c.arch, n=c.n, seq_len=c.prompt_len + c.completion_len, lora_r=c.lora_r, tied=c.tied)
    return measure_reward(c.arch, n=c.n, seq_len=c.prompt_len + c.completion_len)


def audit(cases: list[Case] | None = None) -> list[dict]:
    """One row per case: ledger bytes, measured bytes, relative error."""
    rows = []
    for c in cases if cases is not None else CASES:
        got, want = measure(c), ledger_bytes(c)
        rows.append({"case": c.name, "n": c.n, "seq": c.prompt_len + c.completion_len, "ledger": want,
                     "measured": got, "error": (want - got) / got})
    return rows
