"""The FLOP formulas' executed convention (plan/flops_audit.py) against torch's FlopCounterMode on real transformers models.

Every reference number is measured here, on Qwen2 models built from `transformers.Qwen2Config`
with random weights: the three tiny zoo sizes, a 512-wide 8-layer model, and the real
Qwen2.5-0.5B / 7B shapes on the meta device (no memory, shapes only). Tolerance: 1%.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from race_cli.plan.flops_audit import (_batch, audit_arch, build_model, count_flops, measure_generate,  # noqa: E402
                            measure_train_step, register_cpu_sdpa_flops)
from race_cli.cost.flops import Arch, Lora, forward_flops, generate_flops, train_step_flops  # noqa: E402

REL = 0.01
ARCHS = {  # hidden, layers, heads, kv heads, mlp, vocab (256 bytes + one special token)
    "tiny-s": Arch(64, 2, 4, 2, 128, 257),
    "tiny-m": Arch(96, 3, 4, 2, 256, 257),
    "tiny-l": Arch(128, 4, 4, 2, 384, 257),
    "h512": Arch(512, 8, 8, 2, 1376, 257),
}
# From the config.json files of Qwen/Qwen2.5-0.5B and Qwen/Qwen2.5-7B on the Hugging Face hub.
QWEN = {
    "qwen2.5-0.5b": Arch(896, 24, 14, 2, 4864, 151936),
    "qwen2.5-7b": Arch(3584, 28, 28, 4, 18944, 152064),
}


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("name", list(ARCHS))
def test_executed_matches_counter(name):
    # 3 left-padded rows: prompts of 12, 11, 10 tokens, 8 completion tokens each
    rows = audit_arch(ARCHS[name], lora_r=8, batch=3, prompt_len=12, completion_len=8)
    assert [r["what"] for r in rows] == ["forward", "lora fwd+bwd", "full fwd+bwd", "generate"]
    for r in rows:
        assert r["measured"] > 0, r
        assert abs(r["rel_err"]) < REL, r
        # padding and the full matrix make the executed figure exceed the model figure
        assert r["ledger_model"] < r["ledger_executed"], r


@pytest.mark.parametrize("name", list(QWEN))
def test_real_qwen_shapes_on_meta(name):
    rows = audit_arch(QWEN[name], lora_r=16, batch=2, prompt_len=64, completion_len=64, device="meta")
    by_what = {r["what"]: r for r in rows}
    for what in ("forward", "lora fwd+bwd", "full fwd+bwd"):
        assert by_what[what]["measured"] > 0
        assert abs(by_what[what]["rel_err"]) < REL, by_what[what]
    assert by_what["generate"]["measured"] is None and "skipped on meta" in by_what["generate"]["note"]


@pytest.mark.parametrize("lora_r", [None, 8])
def test_gradient_checkpointing_recompute(lora_r):
    from peft import LoraConfig

    from race_cli.engine.hf import lora_wrap

    arch, seqs = ARCHS["tiny-m"], [20, 17, 13]
    ids, mask = _batch(seqs, arch.vocab_size, "cpu", 0)
    model = build_model(arch)
    # transformers 5 renamed gradient_checkpointing_enable (deprecated) to activation_checkpointing_enable
    (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
    if lora_r is None:
        lora = None
    else:  # peft's own "all-linear" (every linear but the LM head), as a user would write it
        lora = Lora(lora_r)
        model = lora_wrap(model, LoraConfig(r=lora_r, target_modules="all-linear", lora_dropout=0.0))
    model.train()  # checkpointing only acts in training mode
    measured = measure_train_step(model, ids, mask)
    ledger = train_step_flops(arch, seqs, lora=lora, grad_checkpointing=True)
    assert measured == pytest.approx(ledger.executed, rel=REL)
    # and the recompute is really there
    assert ledger.executed > train_step_flops(arch, seqs, lora=lora).executed


def test_sampled_generate_with_lora_and_cap():
    from peft import LoraConfig

    from race_cli.engine.hf import lora_wrap

    arch = ARCHS["tiny-s"]
    model = lora_wrap(build_model(arch), LoraConfig(r=4, target_modules="all-linear"))
    model.eval()
    prompts = [9, 4, 6, 9]
    ids, mask = _batch(prompts, arch.vocab_size, "cpu", 3)
    torch.manual_seed(0)

    def run():
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=7, min_new_tokens=7,
                       do_sample=True, temperature=1.0, eos_token_id=None, pad_token_id=0)
    measured = count_flops(run)
    ledger = generate_flops(arch, prompts, [7] * 4, lora=Lora(4))
    assert measured == pytest.approx(ledger.executed, rel=REL)


def test_generate_without_padding_and_restricted_logits():
    arch = ARCHS["tiny-l"]
    model = build_model(arch)
    ids, mask = _batch([10, 10], arch.vocab_size, "cpu", 5)
    assert measure_generate(model, ids, mask, 6) == pytest.approx(
        generate_flops(arch, [10, 10], [6, 6]).executed, rel=REL)
    # a forward with logits only at the last 4 positions (logits_to_keep) on 2 rows
    with torch.no_grad():
        measured = count_flops(lambda: model(input_ids=ids, attention_mask=mask, logits_to_keep=4))
    assert measured == pytest.approx(
        forward_flops(arch, [10, 10], executed_logit_positions=8).executed, rel=REL)


def test_eager_attention_is_the_math_kernel():
    arch, seqs = ARCHS["tiny-s"], [16, 11]
    model = build_model(arch, attn_implementation="eager")
    for p in model.parameters():
        p.requires_grad_(True)
    ids, mask = _batch(seqs, arch.vocab_size, "cpu", 0)
    measured = measure_train_step(model, ids, mask)
    assert measured == pytest.approx(
        train_step_flops(arch, seqs, lora=None, attn_kernel="math").executed, rel=REL)
    assert measured != pytest.approx(train_step_flops(arch, seqs, lora=None).executed, rel=1e-4)


def test_cpu_sdpa_registration_is_idempotent_and_counts_attention():
    register_cpu_sdpa_flops()
    register_cpu_sdpa_flops()  # a second call must not raise "duplicate registrations"
    arch = ARCHS["tiny-s"]
    model = build_model(arch)
    ids, mask = _batch([12], arch.vocab_size, "cpu", 0)
    with torch.no_grad():
        measured = count_flops(lambda: model(input_ids=ids, attention_mask=mask))
    no_attention = forward_flops(arch, [12]).executed - 4 * 2 * 4 * 16 * 12 * 12  # 4*L*h*d_h*s^2
    assert measured > no_attention
    assert measured == pytest.approx(forward_flops(arch, [12]).executed, rel=REL)
