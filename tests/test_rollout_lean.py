"""The lean rollout backend (race_cli/engine/rollout_lean.py) against transformers on tiny random Qwen2 models.

References: HF `generate` (greedy tokens, stopping), the model's own forward (the sampling
distribution softmax(logits / T) within top-p, checked by frequencies within binomial error)
and torch's FlopCounterMode (the ledger's executed FLOPs). Also: `auto` resolves to lean
without vLLM, and the HF path ignores a checkpoint's generation_config.
"""

from __future__ import annotations

import math

import pytest
import torch

from race_cli.engine.rollout import HFRollout, choose_backend, left_pad
from race_cli.engine.rollout_lean import LeanRollout, top_p_filter
from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Flops, Lora, generate_flops

EOS = 256
PROMPTS = [list(b"Q: 1+2="), list(b"Q: 10+20-3="), list(b"12*3=")]  # 7, 11 and 5 tokens


def tiny_model(seed: int = 0, **kw):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=257, eos_token_id=EOS, pad_token_id=EOS, bos_token_id=EOS,
                      tie_word_embeddings=False, **kw)
    return AutoModelForCausalLM.from_config(cfg).eval()


def with_lora(model, targets="all-linear"):
    """PEFT LoRA (unmerged) with non-zero B, so the adapter really changes the outputs."""
    from peft import LoraConfig

    from race_cli.engine.hf import lora_wrap

    model = lora_wrap(model, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=targets))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.5)
    return model.eval()


def make(cls, model, **kw):
    from race_cli.zoo import byte_tokenizer

    args = dict(arch=Arch.from_config(model.config), lora=None, eos_id=EOS, pad_id=EOS, max_new_tokens=10,
                temperature=1.0, top_p=1.0, device="cpu") | kw
    return cls(model, byte_tokenizer(), **args)


def force_early_eos(model, hf):
    """Make EOS win wherever some token X wins (w_EOS = 2 w_X), for the first X of the greedy
    completions after which HF generate's completions have uneven lengths (some rows stop early)."""
    head = model.get_base_model().lm_head if hasattr(model, "get_base_model") else model.lm_head
    saved = head.weight[EOS].clone()
    ro = hf.generate(PROMPTS, group_size=1, greedy=True)
    for x in dict.fromkeys(ro.completion_ids.flatten().tolist()):
        with torch.no_grad():
            head.weight[EOS] = 2 * head.weight[x]
        lens = hf.generate(PROMPTS, group_size=1, greedy=True).completion_lens
        if min(lens) < max(lens):
            return
    with torch.no_grad():
        head.weight[EOS] = saved
    raise AssertionError("no token makes the greedy completions stop at different lengths")


@pytest.mark.parametrize("lora", [False, True])
def test_greedy_tokens_equal_hf_generate(lora):
    model = tiny_model()
    if lora:
        model = with_lora(model)
    hf, lean = make(HFRollout, model), make(LeanRollout, model)
    a = hf.generate(PROMPTS, group_size=3, greedy=True)
    b = lean.generate(PROMPTS, group_size=3, greedy=True)
    assert torch.equal(a.completion_ids, b.completion_ids)
    assert a.texts == b.texts and a.completion_lens == b.completion_lens
    assert torch.equal(a.prompt_ids, b.prompt_ids) and torch.equal(a.prompt_mask, b.prompt_mask)
    # now some rows stop early at EOS, each on its own, exactly where generate stops them
    force_early_eos(model, hf)
    a = hf.generate(PROMPTS, group_size=3, greedy=True)
    b = lean.generate(PROMPTS, group_size=3, greedy=True)
    assert min(b.completion_lens) < max(b.completion_lens)  # really uneven lengths
    assert torch.equal(a.completion_ids, b.completion_ids) and a.completion_lens == b.completion_lens
    assert torch.equal(a.completion_mask, b.completion_mask)


def test_greedy_equal_with_lora_on_some_matrices_and_adapter_disabled():
    model = with_lora(tiny_model(seed=1), targets=["q_proj", "v_proj", "down_proj"])
    hf, lean = make(HFRollout, model), make(LeanRollout, model)
    assert torch.equal(hf.generate(PROMPTS, group_size=2, greedy=True).completion_ids,
                       lean.generate(PROMPTS, group_size=2, greedy=True).completion_ids)
    with model.disable_adapter():  # the reference policy: the base alone
        base = lean.generate(PROMPTS, group_size=2, greedy=True).completion_ids
        assert torch.equal(hf.generate(PROMPTS, group_size=2, greedy=True).completion_ids, base)
    # the adapter changes what is sampled (B != 0), so the comparison above is not vacuous
    assert not torch.equal(lean.generate(PROMPTS, group_size=2, greedy=True).completion_ids, base)


@pytest.mark.parametrize("temperature,top_p", [(1.0, 1.0), (0.7, 0.9)])
def test_sampled_frequencies_follow_the_softmax(temperature, top_p):
    """20000 first tokens of one prompt vs softmax(logits / T) cut to top-p, within binomial error."""
    model = tiny_model(seed=2)
    n = 20000
    lean = make(LeanRollout, model, max_new_tokens=1, temperature=temperature, top_p=top_p)
    torch.manual_seed(0)
    ro = lean.generate([PROMPTS[1]], group_size=n, greedy=False)
    counts = torch.bincount(ro.completion_ids[:, 0], minlength=257).double()  # [V]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([PROMPTS[1]])).logits[0, -1].double() / temperature  # [V]
    p = logits.softmax(-1)
    if top_p < 1.0:  # drop every token whose own mass plus that of all less likely tokens is <= 1 - top_p
        order = torch.argsort(p)  # ascending
        below = torch.cumsum(p[order], 0)
        keep = torch.ones_like(p, dtype=torch.bool)
        keep[order[below <= 1 - top_p]] = False
        assert 0 < int((~keep).sum()) < 256  # the cut really removes some tokens
        p = torch.where(keep, p, torch.zeros_like(p))
        p = p / p.sum()
        assert counts[~keep].sum() == 0
    freq = counts / n
    sigma = (p * (1 - p) / n).sqrt()
    assert ((freq - p).abs() <= 5 * sigma + 1e-12).all()
    # and jointly: Pearson chi-square over tokens with >= 5 expected draws, well below its 99.9% quantile
    big = p * n >= 5
    chi2 = float((((counts - n * p) ** 2) / (n * p))[big].sum())
    dof = int(big.sum()) - 1
    assert chi2 < dof + 3.1 * math.sqrt(2 * dof) + 10


def test_top_p_filter_matches_transformers():
    from transformers.generation.logits_process import TopPLogitsWarper

    torch.manual_seed(0)
    scores = torch.randn(5, 257) * 3
    for top_p in (0.3, 0.9, 0.99):
        want = TopPLogitsWarper(top_p)(None, scores.clone())
        assert torch.equal(top_p_filter(scores, top_p), want)


@pytest.mark.parametrize("lora", [False, True])
def test_executed_flops_match_the_counter(lora):
    """One padded prefill per prompt, every row decoded to the longest completion: FlopCounterMode agrees."""
    from torch.utils.flop_counter import FlopCounterMode

    from race_cli.plan.flops_audit import register_cpu_sdpa_flops

    register_cpu_sdpa_flops()
    model, ledger_lora = tiny_model(seed=3), None
    if lora:
        targets = ["q_proj", "k_proj", "o_proj", "up_proj"]
        model, ledger_lora = with_lora(model, targets), Lora(r=4, target_modules=tuple(targets))
    lean = make(LeanRollout, model, lora=ledger_lora, max_new_tokens=12)
    force_early_eos(model, make(HFRollout, model, max_new_tokens=12))  # rows stop on their own
    torch.manual_seed(1)
    with FlopCounterMode(display=False) as counter:
        ro = lean.generate(PROMPTS, group_size=4, greedy=False)
    assert len(set(ro.completion_lens)) > 1
    assert ro.flops.executed == pytest.approx(counter.get_total_flops(), rel=1e-12)
    want = generate_flops(lean.arch, ro.prompt_lens, ro.completion_lens, lora=ledger_lora, share_prefix=4, padded=True)
    if lora:  # float32 adapters run merged: executed is the base's shapes plus B @ A once per adapted matrix
        base = generate_flops(lean.arch, ro.prompt_lens, ro.completion_lens, share_prefix=4, padded=True)
        want = Flops(want.model, base.executed + 2 * 2 * 4 * (2 * 32 * 32 + 32 * 16 + 32 * 64))  # 2 layers, r=4
        assert want.executed < generate_flops(lean.arch, ro.prompt_lens, ro.completion_lens, lora=ledger_lora,
                                              share_prefix=4, padded=True).executed
    assert ro.flops == want
    # sharing the prefix is real: the same call charged like HF (every row prefilled) costs more
    hf_like = generate_flops(lean.arch, ro.prompt_lens, ro.completion_lens, lora=ledger_lora)
    assert ro.flops.model < hf_like.model and ro.flops.executed < hf_like.executed


def test_full_fine_tuning_weights_are_read_at_every_call():
    """An optimizer step on a plain model changes what the next call samples (no stale copy)."""
    model = tiny_model(seed=4)
    lean, hf = make(LeanRollout, model), make(HFRollout, model)
    before = lean.generate(PROMPTS, group_size=1, greedy=True).completion_ids
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    after = lean.generate(PROMPTS, group_size=1, greedy=True).completion_ids
    assert not torch.equal(before, after)
    assert torch.equal(after, hf.generate(PROMPTS, group_size=1, greedy=True).completion_ids)


def test_unsupported_architecture_is_refused_with_a_way_out():
    model = tiny_model(hidden_act="gelu")
    with pytest.raises(RaceError, match="rollout.backend=hf"):
        make(LeanRollout, model)


def test_auto_resolves_to_lean_without_vllm():
    assert choose_backend("auto", "cpu", vllm_installed=True) == "lean"
    assert choose_backend("auto", "cuda:0", vllm_installed=False) == "lean"
    assert choose_backend("auto", "cuda:0", vllm_installed=True) == "vllm"
    assert choose_backend("lean", "cuda:0", vllm_installed=True) == "lean"
    with pytest.raises(RaceError, match="expected auto, lean, hf or vllm"):
        choose_backend("fast", "cpu")


def test_hf_generate_ignores_the_models_generation_config():
    """A checkpoint's repetition_penalty / top_k / n-gram ban must not change what HF generate samples."""
    model = tiny_model(seed=5)
    hf = make(HFRollout, model, max_new_tokens=12)
    torch.manual_seed(0)
    greedy = hf.generate(PROMPTS, group_size=2, greedy=True).completion_ids
    sampled = hf.generate(PROMPTS, group_size=2, greedy=False).completion_ids
    gc = model.generation_config
    gc.repetition_penalty, gc.top_k, gc.no_repeat_ngram_size, gc.min_new_tokens = 50.0, 1, 1, 12
    torch.manual_seed(0)
    assert torch.equal(hf.generate(PROMPTS, group_size=2, greedy=True).completion_ids, greedy)
    assert torch.equal(hf.generate(PROMPTS, group_size=2, greedy=False).completion_ids, sampled)
    assert model.generation_config.repetition_penalty == 50.0  # put back after the call
    # the penalty is strong enough to matter when generate does read it
    ids, mask = left_pad([p for p in PROMPTS for _ in range(2)], EOS)
    with torch.no_grad():
        penalised = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=12, do_sample=False,
                                   eos_token_id=EOS, pad_token_id=EOS)[:, ids.size(1):]
    assert not torch.equal(penalised, greedy[:, :penalised.size(1)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("lora", [False, True])
def test_cuda_bf16_runs_and_mostly_agrees_with_hf(lora):
    """bf16 on CUDA: kernels differ from HF's, so agreement is measured, not demanded token for token."""
    model = tiny_model(seed=6).to("cuda", torch.bfloat16)
    if lora:
        model = with_lora(model)
    hf, lean = make(HFRollout, model, device="cuda"), make(LeanRollout, model, device="cuda")
    a = hf.generate(PROMPTS, group_size=4, greedy=True)
    b = lean.generate(PROMPTS, group_size=4, greedy=True)
    first = (a.completion_ids[:, 0] == b.completion_ids[:, 0]).float().mean().item()
    assert first >= 0.9
    torch.manual_seed(0)
    ro = lean.generate(PROMPTS, group_size=4, greedy=False)
    assert ro.completion_ids.shape[0] == 12 and all(1 <= n <= 10 for n in ro.completion_lens)


# --- common random numbers (evaluation) ----------------------------------------------------------------


@pytest.mark.parametrize("cls", [LeanRollout, HFRollout])
def test_seeded_rows_give_byte_identical_completions_whatever_the_training_stream(cls):
    """Evaluation's common random numbers: rows seeded by their key sample the same tokens under any torch
    seed, leave torch's generator where it was, and each row's draw depends on its own seed only."""
    from race_cli.engine.rollout_lean import eval_row_seed

    model = tiny_model(seed=3)
    ro_of = make(cls, model, max_new_tokens=8, temperature=1.0, top_p=0.95)
    seeds = [eval_row_seed(0, "arithmetic", f"item-{i}", k) for i in range(3) for k in range(2)]
    outs = []
    for torch_seed in (0, 1):  # two jobs' training streams
        torch.manual_seed(torch_seed)
        before = torch.get_rng_state()
        outs.append(ro_of.generate(PROMPTS, group_size=2, greedy=False, seeds=seeds))
        assert torch.equal(torch.get_rng_state(), before)  # the training stream was not touched
    assert torch.equal(outs[0].completion_ids, outs[1].completion_ids) and outs[0].texts == outs[1].texts
    # the stream is really sampled: another sample seed, or unseeded rows, give other completions
    other = ro_of.generate(PROMPTS, group_size=2, greedy=False,
                           seeds=[eval_row_seed(1, "arithmetic", f"item-{i}", k) for i in range(3) for k in range(2)])
    assert not torch.equal(other.completion_ids, outs[0].completion_ids)
    torch.manual_seed(0)
    a = ro_of.generate(PROMPTS, group_size=2, greedy=False).completion_ids
    torch.manual_seed(1)
    b = ro_of.generate(PROMPTS, group_size=2, greedy=False).completion_ids
    assert not torch.equal(a, b)
    # row 0's tokens depend on its seed alone: alone in a batch it samples what it sampled among others
    alone = ro_of.generate(PROMPTS[:1], group_size=1, greedy=False, seeds=seeds[:1])
    n = outs[0].completion_lens[0]
    assert alone.completion_ids[0, :n].tolist() == outs[0].completion_ids[0, :n].tolist()


def test_seeded_lean_and_hf_draw_the_same_tokens():
    """Both backends pick with one rule (inverse CDF on the row's uniforms): on float64 logits, where the two
    forwards agree to rounding, the seeded completions are equal."""
    from race_cli.engine.rollout_lean import eval_row_seed

    model = tiny_model(seed=4).double()
    seeds = [eval_row_seed(7, "t", str(i), k) for i in range(3) for k in range(4)]
    lean = make(LeanRollout, model, max_new_tokens=6).generate(PROMPTS, group_size=4, seeds=seeds)
    hf = make(HFRollout, model, max_new_tokens=6).generate(PROMPTS, group_size=4, seeds=seeds)
    assert lean.texts == hf.texts


def test_eval_row_seed_is_stable_and_distinct():
    from race_cli.engine.rollout_lean import eval_row_seed

    # fixed by BLAKE2b, not by the process (Python's hash() of a str changes per process)
    assert eval_row_seed(0, "arithmetic", "a-1", 0) == eval_row_seed(0, "arithmetic", "a-1", 0)
    keys = {eval_row_seed(s, t, i, k) for s in (0, 1) for t in ("x", "y") for i in ("1", "2") for k in range(3)}
    assert len(keys) == 24 and all(0 <= x < 2 ** 63 for x in keys)


def test_the_decode_loop_reads_done_every_few_steps_and_trims_what_it_ran_past(monkeypatch):
    """On a GPU each `done.all()` read waits for the device: the loop checks every DONE_CHECK_EVERY steps
    and trims the steps it decoded past the last EOS, so the completions equal the every-step loop's."""
    from race_cli.engine import rollout_lean

    assert rollout_lean.done_check_every("cpu") == 1 and rollout_lean.done_check_every("cuda:0") == 8
    model = tiny_model(3)
    hf = make(HFRollout, model, max_new_tokens=24)
    force_early_eos(model, hf)  # rows that stop at different lengths
    lean = make(LeanRollout, model, max_new_tokens=24)
    seeds = list(range(len(PROMPTS) * 2))
    reads = []
    real = rollout_lean.finished
    monkeypatch.setattr(rollout_lean, "finished", lambda done: reads.append(1) or real(done))
    want = lean.generate(PROMPTS, group_size=2, greedy=False, seeds=seeds)
    every_step = len(reads)
    reads.clear()
    monkeypatch.setattr(rollout_lean, "done_check_every", lambda device: 4)
    got = lean.generate(PROMPTS, group_size=2, greedy=False, seeds=seeds)
    assert torch.equal(got.completion_ids, want.completion_ids) and got.completion_lens == want.completion_lens
    longest = max(want.completion_lens)
    # every step: a read after each step until the last EOS (none at step 24 = max_new_tokens, which ends the loop)
    assert every_step == (longest if longest < 24 else 23)
    # every 4th: steps 4, 8, ... up to the first multiple of 4 at or past the last EOS (below 24)
    first = -(-longest // 4) * 4
    assert len(reads) == (first // 4 if first < 24 else 5) and len(reads) < every_step
