"""The memory ledger, its audit, and the memory-safe update (chunked log-probs, micro-batches)."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from race_cli.cost import flops, memory
from race_cli.engine import grpo
from race_cli.engine.job import Job
from race_cli.engine.logprobs import completion_logprobs
from race_cli.engine.rollout import Rollout
from race_cli.engine.hf import dtype_kwarg
from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Flops
from race_cli.plan.build import build_plan

GIB = 2**30


def tiny_qwen(dtype=torch.float64, layers=2):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=61, tie_word_embeddings=False, attn_implementation="sdpa")
    return AutoModelForCausalLM.from_config(cfg).to(dtype)


# --- chunked log-probs -------------------------------------------------------------------------------


def test_chunked_token_logprobs_equal_log_softmax_values_and_gradients():
    torch.manual_seed(1)
    logits = torch.randn(3, 7, 50, dtype=torch.float64, requires_grad=True)  # [N, T, V]
    tokens = torch.randint(0, 50, (3, 7))
    want = torch.log_softmax(logits / 0.7, -1).gather(-1, tokens[..., None])[..., 0]  # [N, T] reference
    (g_want,) = torch.autograd.grad(want.sum(), logits)
    got = grpo.token_logprobs(logits, tokens, temperature=0.7, chunk=4)  # 21 rows in blocks of 4
    (g_got,) = torch.autograd.grad(got.sum(), logits)
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert torch.allclose(g_got, g_want, rtol=0, atol=1e-12)


def test_completion_logprobs_in_blocks_equal_each_row_run_alone():
    """Re-packed rows, no mask, head + log-softmax per block of 5 real positions == every row run alone,
    unpadded, through the whole logits (values and gradients); padding positions give 0."""
    model = tiny_qwen()
    torch.manual_seed(2)
    ids = torch.randint(0, 61, (3, 12))  # [N, P+C], P=5, C=7
    attn = torch.ones_like(ids)
    attn[0, :2] = 0  # a left-padded prompt
    attn[1, 9:] = 0  # a completion that ended after 4 tokens (right-padded)
    comp = ids[:, 5:]
    want = torch.zeros(3, 7, dtype=torch.float64)
    for i in range(3):
        real = ids[i][attn[i].bool()]  # the row alone: its prompt, then its completion
        c = int(attn[i, 5:].sum())
        logits = model(input_ids=real[None], use_cache=False).logits[0]  # [len, V]
        lp = torch.log_softmax(logits[-c - 1:-1], -1).gather(-1, real[-c:, None])[:, 0]  # [c]
        want = want.index_put((torch.full((c,), i), torch.arange(c)), lp)
    g_want = torch.autograd.grad(want.sum(), list(model.parameters()))
    got = completion_logprobs(model, ids, attn, comp, chunk=5)  # 18 real positions in blocks of 5
    g_got = torch.autograd.grad(got.sum(), list(model.parameters()))
    assert torch.allclose(got, want, rtol=0, atol=1e-12)
    assert (got[1, 4:] == 0).all()
    for a, b in zip(g_got, g_want):
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-12)


def test_logprob_blocks_hold_256_rows_at_qwen_vocabulary():
    assert memory.block_rows(151_936) == 256  # the block the GPU memory figures were measured with
    assert memory.block_rows(257) == 38_895_616 // 257 == 151_344  # tiny policies: every completion token in one block
    assert memory.block_rows(10**12) == 1


# --- micro-batches: the same loss and gradient as one batch ------------------------------------------


def _update_job(model, micro_batch: int, loss_agg: str) -> Job:
    """A Job with just what `update()` reads: float64 tiny model, lr 0 (gradients stay readable)."""
    job = object.__new__(Job)
    job.cfg = SimpleNamespace(grpo=SimpleNamespace(updates_per_batch=1, beta=0.0, clip_eps=0.2, loss_agg=loss_agg,
                                                   max_grad_norm=0.0, skip_zero_advantage=True),
                              rollout=SimpleNamespace(temperature=1.0))
    job.policy = SimpleNamespace(model=model, arch=Arch(32, 2, 4, 2, 64, 61), lora=None)
    job.device, job.iteration, job.ref_model = "cpu", 0, None
    job.micro_batch, job.grad_checkpointing, job.merge_lora = micro_batch, False, False
    job.optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    job.scheduler = SimpleNamespace(step=lambda: None)
    job.rollout = SimpleNamespace(sync=lambda m: None)
    return job


def _rollout() -> Rollout:
    torch.manual_seed(3)
    N, P, C = 6, 4, 5
    comp = torch.randint(1, 61, (N, C))
    mask = torch.ones(N, C)
    for row, length in enumerate([5, 2, 4, 1, 3, 5]):  # completions of different lengths
        mask[row, length:] = 0
    pmask = torch.ones(N, P, dtype=torch.long)
    pmask[1, :2] = 0
    return Rollout(prompt_ids=torch.randint(1, 61, (N, P)), prompt_mask=pmask, completion_ids=comp,
                   completion_mask=mask, prompt_lens=[int(x) for x in pmask.sum(1)],
                   completion_lens=[int(x) for x in mask.sum(1)], texts=[""] * N, flops=Flops(), seconds=0.0)


@pytest.mark.parametrize("loss_agg", ["token", "sequence"])
def test_micro_batches_give_the_one_batch_loss_and_gradient(loss_agg):
    ro, adv = _rollout(), torch.tensor([1.0, -0.5, 0.3, -1.2, 0.8, 0.1], dtype=torch.float64)
    results = {}
    for mb in (6, 4, 1):  # one batch; uneven micro-batches (4 + 2); one sequence at a time
        model = tiny_qwen()
        out = _update_job(model, mb, loss_agg).update(ro, adv)
        results[mb] = (out["loss"], torch.cat([p.grad.flatten() for p in model.parameters()]), out["flops"])
    loss1, grad1, flops1 = results[6]
    for mb in (4, 1):
        loss, grad, flops = results[mb]
        assert abs(loss - loss1) <= 1e-6 * abs(loss1)
        assert ((grad - grad1).norm() / grad1.norm()).item() <= 1e-6
        assert flops.model == pytest.approx(flops1.model, rel=1e-12)  # micro-batching changes no FLOPs


def test_micro_batches_hold_rows_of_like_length():
    # rows sorted by prompt + completion length before the cut: lengths 9 4 8 5 7 9 -> sorted 4 5 7 8 9 9;
    # micro-batches of 2 run padded to 5, 8 and 9 tokens (in rollout order they would run 9, 8 and 9)
    ro, adv = _rollout(), torch.tensor([1.0, -0.5, 0.3, -1.2, 0.8, 0.1], dtype=torch.float64)
    seq = [p + c for p, c in zip(ro.prompt_lens, ro.completion_lens)]
    assert seq == [9, 4, 8, 5, 7, 9]
    job = _update_job(tiny_qwen(), 2, "token")
    out = job.update(ro, adv)
    arch = job.policy.arch
    by_hand = Flops()
    for rows in ([1, 3], [4, 2], [0, 5]):  # lengths (4, 5), (7, 8), (9, 9)
        clens = sum(ro.completion_lens[i] for i in rows)
        by_hand = by_hand + flops.train_step_flops(arch, [seq[i] for i in rows], lora=None,
                                                    padded_len=max(seq[i] for i in rows),
                                                    logit_positions=clens, executed_logit_positions=clens)
    assert out["flops"].executed == pytest.approx(by_hand.executed, rel=1e-12)


@pytest.mark.parametrize("micro, n, merged, want", [("auto", 64, False, 16), ("auto", 8, False, 8), ("auto", 64, True, 64),
                                                    (0, 64, False, 64), (5, 64, False, 5), (5, 64, True, 5), (99, 8, False, 8)])
def test_cpu_micro_batch(micro, n, merged, want):
    from race_cli.engine.setup import CPU_MICRO_BATCH, resolve_micro_batch

    assert CPU_MICRO_BATCH == 16
    cfg = {"grpo": {"prompts_per_iter": n // 4, "group_size": 4, "micro_batch_size": micro, "grad_checkpointing": False}}
    assert resolve_micro_batch(cfg, "cpu", merged_lora=merged) == (want, False)


# --- the ledger ----------------------------------------------------------------------------------------


def test_lora_parameter_count_by_hand():
    # Qwen2.5-0.5B, r=32, all 7 projections: per layer 32*((896+896) + 2*(896+128) + (896+896) + 3*(896+4864))
    # = 32 * (1792 + 2048 + 1792 + 17280) = 32 * 22912 = 733,184; 24 layers -> 17,596,416 adapter weights
    assert memory.lora_params(memory_audit_arch(), 32) == 17_596_416


def memory_audit_arch() -> Arch:
    return Arch(896, 24, 14, 2, 4864, 151_936)


def test_peak_grows_with_micro_batch_and_checkpointing_saves_memory():
    s = memory.MemSpec(arch=memory_audit_arch(), tied=True, lora_r=32, sequences=64, prompt_len=300,
                       completion_len=512, micro_batch=8)
    small, big = memory.job_memory(s), memory.job_memory(memory.MemSpec(**{**s.__dict__, "micro_batch": 16}))
    ckpt = memory.job_memory(memory.MemSpec(**{**s.__dict__, "grad_checkpointing": True}))
    assert small.peak < big.peak and ckpt.total("update") < small.total("update")


def test_fit_picks_the_largest_micro_batch_that_fits():
    s = memory.MemSpec(arch=memory_audit_arch(), tied=True, lora_r=32, sequences=512, prompt_len=300,
                       completion_len=512, micro_batch=512)
    got = memory.fit(s, 40 * GIB)
    assert got is not None and got.peak <= 0.9 * 40 * GIB
    over = memory.job_memory(memory.MemSpec(**{**s.__dict__, "micro_batch": got.micro_batch + 1}), 40 * GIB)
    assert over.peak > 0.9 * 40 * GIB


@pytest.mark.parametrize("index", range(3))
def test_audit_small_cases_within_tolerance(index):
    """The quick audit cases, among them a PRM forward whose KV cache (were one built) would double its peak."""
    from race_cli.plan import memory_audit

    (row,) = memory_audit.audit([memory_audit.CASES[memory_audit.QUICK[index]]])
    assert abs(row["error"]) <= memory_audit.TOLERANCE, row


def test_parse_size():
    assert memory.parse_size("80GiB") == 80 * GIB
    assert memory.parse_size("24GB") == 24 * 10**9
    with pytest.raises(RaceError, match="80GiB"):
        memory.parse_size("lots")


def test_dtype_keyword_follows_the_transformers_version():
    assert dtype_kwarg("bf16", "4.55.2") == {"torch_dtype": "bf16"}
    assert dtype_kwarg("bf16", "4.56.0") == {"dtype": "bf16"}
    assert dtype_kwarg("bf16", "5.0.0.dev0") == {"dtype": "bf16"}


# --- race plan --gpu-mem ------------------------------------------------------------------------------
# (seed=0: one seed of each regime, a fixed design; memory is the same for every seed)


def test_pilot_fits_80gib_with_vllm_and_the_flops_do_not_change():
    plan = build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm"], gpu_mem=80 * GIB)
    assert len(plan.jobs) == 48
    for job in plan.jobs:
        assert 1 <= job.memory.micro_batch and job.memory.peak <= 0.9 * 80 * GIB
    whole = build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm", "grpo.micro_batch_size=0"])
    assert [j.per_iteration for j in whole.jobs] == [j.per_iteration for j in plan.jobs]


def test_plan_refuses_jobs_that_cannot_fit_naming_job_phase_and_fix():
    with pytest.raises(RaceError) as err:
        build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm"], gpu_mem=24 * GIB)
    problems = err.value.problems
    assert any(p.startswith("Job qwen2.5-7b_G4_mu1_prm-7b: the ") and "phase needs" in p and "Try:" in p
               for p in problems)
    assert not any("qwen2.5-0.5b_G4_mu1_rule" in p for p in problems)  # the 0.5B rule jobs fit in 24 GiB


def test_race_plan_gpu_mem_exit_code_2():
    out = subprocess.run([sys.executable, "-m", "race_cli", "plan", "grid=pilot", "--gpu-mem", "24GiB"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert "qwen2.5-7b" in out.stderr and "phase needs" in out.stderr and "Try:" in out.stderr


# --- vLLM and the trainer on one device; the lean sampler's fused weights -------------------------------

QWEN7B = Arch(3584, 28, 28, 4, 18944, 152064)  # Qwen2.5-7B's config.json


def test_vllm_phases_count_both_contexts_and_the_asleep_residue():
    """Rollout: vLLM awake (gpu_memory_utilization x device) beside the trainer's resident state;
    reward and update: vLLM asleep (its memory outside the cumem pool); two CUDA contexts throughout."""
    s = memory.MemSpec(arch=QWEN7B, sequences=64, prompt_len=150, completion_len=400, micro_batch=4,
                       backend="vllm", vllm_fraction=0.3)
    m = memory.job_memory(s, 80 * GIB)
    ctx = 512 * 2**20
    roll, upd = m.phases["rollout"], m.phases["update"]
    assert roll["vllm_reserved"] == int(0.3 * 80 * GIB) and m.vllm_fraction == 0.3
    assert roll["cuda_context"] == roll["vllm_context"] == upd["cuda_context"] == upd["vllm_context"] == ctx
    assert upd["vllm_asleep"] == 2 * GIB and "vllm_asleep" not in roll and "vllm_reserved" not in upd
    # the same job on HF generate: one context, no vLLM parts
    hf = memory.job_memory(memory.MemSpec(arch=QWEN7B, sequences=64, prompt_len=150, completion_len=400,
                                          micro_batch=4, backend="hf"), 80 * GIB)
    assert sum(hf.phases["update"].values()) + ctx + 2 * GIB == sum(upd.values())


def test_release_between_phases_is_what_lets_the_pilot_fit_beside_vllm(monkeypatch):
    """Without emptying the trainer's cache before wake_up, the update's transient stays reserved in
    PyTorch's allocator through the rollout, beside vLLM's whole reservation: the worst pilot job
    (7B policy, 7B PRM) is then over 80 GiB; released, every phase fits. (Level-1 sleep, as on a vLLM
    without release_kv_cache_memory: the update then fills what vLLM's weights left.)"""
    from dataclasses import replace

    from race_cli import machine

    monkeypatch.setattr(machine, "vllm_kv_release", lambda: False)
    plan = build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm"], gpu_mem=80 * GIB)
    assert {j.memory.sleep_mode for j in plan.jobs} == {"weights"}
    job = next(j for j in plan.jobs if j.job_id == "qwen2.5-7b_G4_mu1_prm-7b")
    m = job.memory
    assert all(m.total(p) <= 0.9 * 80 * GIB for p in m.phases)
    s = replace(memory.spec_from_config(job.config), micro_batch=m.micro_batch,
                grad_checkpointing=m.grad_checkpointing)
    kept = memory.job_memory(replace(s, release_between_phases=False), 80 * GIB)
    trainer_update = sum(v for k, v in m.phases["update"].items() if not k.startswith("vllm_"))
    trainer_rollout = sum(v for k, v in m.phases["rollout"].items() if not k.startswith("vllm_"))
    assert kept.phases["rollout"]["trainer_cache"] == trainer_update - trainer_rollout  # the update's high-water mark
    assert kept.total("rollout") > 80 * GIB
    overflow = 0
    for j in plan.jobs:
        s = replace(memory.spec_from_config(j.config), micro_batch=j.memory.micro_batch,
                    grad_checkpointing=j.memory.grad_checkpointing, release_between_phases=False)
        overflow += memory.job_memory(s, 80 * GIB).peak > 0.9 * 80 * GIB
    assert overflow == 48  # the plan fills the update; kept cached, that fill lands on top of vLLM


def test_plan_sizes_gpu_memory_utilization_and_refuses_the_rollout_phase():
    plan = build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm"], gpu_mem=80 * GIB)
    for job in plan.jobs:
        row = memory.memory_row(job.memory)
        need = memory.vllm_need_bytes(memory.spec_from_config(job.config))
        assert row["gpu_memory_utilization"] == max(round(need / (80 * GIB), 3), 0.05)
        assert job.memory.phases["rollout"]["vllm_reserved"] == int(row["gpu_memory_utilization"] * 80 * GIB)
    # 7B policy + 7B PRM beside vLLM at 40 GiB: the rollout phase alone cannot fit, whatever the micro-batch
    with pytest.raises(RaceError) as err:
        build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm", "model=qwen2.5-7b", "reward=prm-7b", "grpo.group_size=4",
                    "grpo.updates_per_batch=1"], gpu_mem=40 * GIB)
    (p,) = err.value.problems
    assert "the rollout phase needs" in p and "vllm_reserved" in p and "fewer rollout tokens" in p
    assert "micro_batch" not in p.split("Try:")[1]  # no micro-batch hint for a phase it cannot change


def test_lean_rollout_counts_the_fused_weights():
    """Hand count for Qwen2.5-7B in bf16: per layer q|k|v 3584 x (3584 + 2*512) + its bias 4608, gate|up
    2 x 3584 x 18944; 28 layers x 2 bytes = 8,529,375,232 bytes (7.94 GiB)."""
    s = memory.MemSpec(arch=QWEN7B, backend="lean", group_size=8)
    assert memory.fused_weight_bytes(s) == 28 * (3584 * 4608 + 4608 + 2 * 3584 * 18944) * 2 == 8_529_375_232
    m = memory.job_memory(s, 80 * GIB)
    assert m.phases["rollout"]["fused_weights"] == 8_529_375_232
    assert "fused_weights" not in memory.job_memory(memory.MemSpec(arch=QWEN7B, backend="hf")).phases["rollout"]


@pytest.mark.parametrize("dtype,lora", [(torch.bfloat16, False), (torch.float32, True)])
def test_fused_weight_bytes_equal_what_read_weights_allocates(dtype, lora):
    """Measured: the bytes of the tensors the lean sampler's read_weights makes that are not the model's own."""
    from peft import LoraConfig

    from race_cli.engine.hf import lora_wrap
    from race_cli.engine.rollout_lean import read_weights

    model = tiny_qwen(dtype)
    if lora:
        model = lora_wrap(model, LoraConfig(r=4, lora_alpha=8, target_modules=list(flops.LAYER_MATRICES)))
        for n, p in model.named_parameters():  # lora_B starts at zero; any values do here
            if "lora_" in n:
                p.data.normal_()
    own = {p.data_ptr() for p in model.parameters()}
    w = read_weights(model)
    made = {}
    for layer in w.layers:
        for lin in (layer.qkv, layer.o, layer.gate_up, layer.down):
            for t in (lin.weight, lin.bias):
                if t is not None and t.data_ptr() not in own:
                    made[t.data_ptr()] = t.numel() * t.element_size()
    s = memory.MemSpec(arch=Arch(32, 2, 4, 2, 64, 61), dtype_bytes=dtype.itemsize, lora_r=4 if lora else None,
                       backend="lean")
    assert sum(made.values()) == memory.fused_weight_bytes(s)


# --- issue 35: vLLM's floor, the sleep mode, the PRM on its own GPU ------------------------------------

H200 = 143_771 * 2**20  # what torch and nvidia-smi report for an H200 (141 GB)


def test_the_0_5b_jobs_vllm_reservation_is_what_memory_fraction_reserves():
    """vLLM is started with memory_fraction(...) x the device, floored at 5%: on an H200 the 0.5B jobs need
    about 3-4 GiB, but vLLM reserves 5% (7.0 GiB); the plan must count the 7 GiB."""
    from race_cli.engine.rollout_vllm import memory_fraction

    plan = build_plan(["grid=pilot", "seed=0", "rollout.backend=vllm", "model=qwen2.5-0.5b"], gpu_mem=H200)
    floored = 0
    for job in plan.jobs:
        s = memory.spec_from_config(job.config)
        lora = flops.Lora(r=s.lora_r, target_modules=s.lora_targets)
        f = memory_fraction(s.arch, dtype_bytes=2, lora=lora, sequences=s.sequences,
                            max_model_len=s.prompt_len + s.completion_len, gpu_bytes=H200)
        assert job.memory.vllm_fraction == f
        assert job.memory.phases["rollout"]["vllm_reserved"] == int(f * H200)
        floored += f == 0.05 and memory.vllm_need_bytes(s) < 0.05 * H200
    assert floored >= 1  # the floor binds for the smaller batches


def test_sleep_mode_keeps_vllms_weights_when_they_fit_beside_the_update():
    """kv_cache mode: vLLM's weights (+ one LoRA slot) stay through reward and update, nothing is pinned on the
    host; level-1 ("weights"): the update gets them back, and the host pins a copy of exactly those bytes."""
    s = memory.MemSpec(arch=QWEN7B, sequences=64, prompt_len=150, completion_len=400, micro_batch=4, lora_r=32,
                       backend="vllm")
    w = memory.vllm_weight_bytes(QWEN7B, 2, 32)
    # by hand: every parameter of the untied 7B in bf16, + r*(d_in+d_out) per adapted matrix per layer
    assert w == (memory.model_params(QWEN7B) + memory.lora_params(QWEN7B, 32)) * 2
    kept = memory.job_memory(memory.replace(s, sleep_mode="kv_cache"), 80 * GIB)
    moved = memory.job_memory(memory.replace(s, sleep_mode="weights"), 80 * GIB)
    assert kept.phases["update"]["vllm_weights"] == w and "vllm_weights" not in moved.phases["update"]
    assert kept.total("update") - moved.total("update") == w and kept.phases["rollout"] == moved.phases["rollout"]
    assert (kept.sleep_mode, kept.pinned_host_bytes) == ("kv_cache", 0)
    assert (moved.sleep_mode, moved.pinned_host_bytes, moved.sleep_weight_bytes) == ("weights", w, w)
    # the choice: kept on 80 GiB (a 7B at micro-batch 4 fits either way), level 1 where they do not fit,
    # level 1 on a vLLM without release_kv_cache_memory
    assert memory.choose_sleep_mode(s, 80 * GIB, kv_release=True, auto=False) == "kv_cache"
    assert memory.choose_sleep_mode(memory.replace(s, micro_batch=64), 80 * GIB, kv_release=True,
                                    auto=False) == "weights"
    assert memory.choose_sleep_mode(s, 80 * GIB, kv_release=False, auto=False) == "weights"
    # auto micro-batch: kept unless keeping them would need checkpointing that level 1 does not
    assert memory.choose_sleep_mode(s, 80 * GIB, kv_release=True, auto=True) == "kv_cache"
    tight = 22 * GIB  # 7B weights 14.2 GiB twice (trainer + vLLM) do not fit 90% of 22 GiB
    assert memory.choose_sleep_mode(s, tight, kv_release=True, auto=True) == "weights"


def test_the_prm_on_a_second_gpu_is_charged_to_that_gpu():
    """reward_gpu: the PRM's weights and forward leave the policy GPU's phases (a larger micro-batch fits there)
    and make up the second GPU's own phase."""
    prm = QWEN7B
    s = memory.MemSpec(arch=QWEN7B, sequences=64, prompt_len=150, completion_len=400, micro_batch=4, lora_r=32,
                       reward=prm, reward_head=2, reward_batch=16, reward_len=662)
    one, two = memory.job_memory(s), memory.job_memory(memory.replace(s, reward_gpu=True))
    weights = memory.model_params(prm, head_outputs=2) * 2
    assert one.phases["update"]["reward_weights"] == weights
    assert all("reward_weights" not in two.phases[p] for p in ("rollout", "update", "reward"))
    assert two.phases["reward_gpu"] == {"reward_weights": weights, **memory.reward_bytes(s),
                                        "cuda_context": memory.CUDA_CONTEXT_BYTES}
    assert one.total("update") - two.total("update") == weights
    a, b = memory.fit(s, 80 * GIB), memory.fit(memory.replace(s, reward_gpu=True), 80 * GIB)
    assert b.micro_batch > a.micro_batch
