"""Job.update without waste: no old-policy forward (mu > 1 reuses the first pass), micro-batches cut to their own padding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from race_cli.cost.flops import Flops, train_step_flops


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from transformers import AutoModelForCausalLM, Qwen2Config

    from race_cli.zoo import byte_tokenizer

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=257, eos_token_id=256, bos_token_id=256,
                      tie_word_embeddings=False)
    path = tmp_path_factory.mktemp("tiny") / "model"
    AutoModelForCausalLM.from_config(cfg).save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path


def make_job(model_dir: Path, tmp: Path, **extra):
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    base = {"model.path": str(model_dir), "model.name": "tiny-rand", "grid": "none", "model.arch.hidden_size": 32,
            "model.arch.intermediate_size": 64, "grpo.prompts_per_iter": 2, "grpo.group_size": 4,
            "rollout.max_new_tokens": 6, "rollout.expected_completion_tokens": 6, "task.num_eval": 4, "task.num_train": 16, "threads": 1,
            "task.min_ops": 1, "task.max_ops": 3, "task.max_operand": 999, "budget.flops": 1e12} | extra
    ov = [f"{k}={v}" for k, v in base.items()]
    job = Job(compose(ov), tmp, ov, log=lambda m: None)
    job.setup()
    job.iteration = 0
    return job


def test_mu_2_runs_two_passes_and_nothing_more(model_dir, tmp_path, monkeypatch):
    import race_cli.engine.job as J

    job = make_job(model_dir, tmp_path / "a", **{"grpo.updates_per_batch": 2, "grpo.micro_batch_size": 3})
    torch.manual_seed(0)
    ro = job.rollout.generate([job.train_prompts.ids(j) for j in job.batch(1)], group_size=4)
    calls = []
    real = J.completion_logprobs
    monkeypatch.setattr(J, "completion_logprobs", lambda *a, **k: calls.append(a[1].shape) or real(*a, **k))
    out = job.update(ro, torch.randn(8))
    assert len(calls) == 2 * 3  # mu passes x 3 micro-batches (3, 3, 2 rows); no old-policy forward
    # charged (model convention): exactly the train steps that ran
    want = Flops()
    for start, stop in ((0, 3), (3, 6), (6, 8)):
        rows = slice(start, stop)
        seq = [p + c for p, c in zip(ro.prompt_lens[rows], ro.completion_lens[rows])]
        want = want + train_step_flops(job.policy.arch, seq, lora=job.policy.lora,
                                       logit_positions=sum(ro.completion_lens[rows]))
    assert out["flops"].model == want.model * 2
    assert [s[1] for s in calls[:3]] == [max(ro.prompt_lens[r]) + max(ro.completion_lens[r])
                                        for r in (slice(0, 3), slice(3, 6), slice(6, 8))]


@pytest.mark.parametrize("extra", [
    {"lora.enabled": "true"},  # r=16 on a 32-wide model: the merged path
    {"lora.enabled": "true", "lora.dropout": 0.1},  # dropout rules merging out: the adapter path
    {"lora.enabled": "false", "grpo.beta": 0.1},  # full FT + the frozen reference's forward
    {"lora.enabled": "true", "lora.dropout": 0.1, "grpo.beta": 0.1, "grpo.micro_batch_size": 3,
     "grpo.updates_per_batch": 2},
], ids=["lora-merged", "lora", "full-beta", "lora-beta-mb3-mu2"])
def test_update_executed_flops_equal_flop_counter(model_dir, tmp_path, extra):
    """The update's executed ledger == torch's FlopCounterMode over the real update (re-packed rows, real
    completion positions only, merged or adapter LoRA, the reference forward)."""
    from race_cli.plan.flops_audit import count_flops, register_cpu_sdpa_flops

    register_cpu_sdpa_flops()
    job = make_job(model_dir, tmp_path / "j", **extra)
    assert job.merge_lora == (extra["lora.enabled"] == "true" and "lora.dropout" not in extra)
    torch.manual_seed(0)
    ro = job.rollout.generate([job.train_prompts.ids(j) for j in job.batch(1)], group_size=4)
    assert len(set(ro.prompt_lens)) > 1 or len(set(ro.completion_lens)) > 1  # padding is there to skip
    out = {}
    measured = count_flops(lambda: out.update(job.update(ro, torch.linspace(-1, 1, 8))))
    assert out["flops"].executed == pytest.approx(measured, rel=1e-9)


@pytest.mark.parametrize("micro_batch", [0, 3])
def test_merged_lora_update_equals_the_adapter_path(model_dir, tmp_path, micro_batch):
    """One update through merged weights W + s*B*A == through PEFT's adapters: the loss and every adapter's gradient.
    (Gradients, not the stepped weights: Adam turns rounding-level gradients into lr-sized steps.) Also with
    micro-batches of 3 + 3 + 2 rows, each merging the weights anew."""
    results = []
    for merge in (False, True):
        job = make_job(model_dir, tmp_path / f"m{merge}", **{"lora.enabled": "true", "grpo.lr": 1e-2,
                                                             "grpo.micro_batch_size": micro_batch})
        torch.manual_seed(0)
        with torch.no_grad():  # B = 0 at init would make both paths trivially equal
            for name, p in job.policy.model.named_parameters():
                if "lora_B" in name:
                    p.normal_(0, 0.1)
        torch.manual_seed(1)
        ro = job.rollout.generate([job.train_prompts.ids(j) for j in job.batch(1)], group_size=4)
        job.merge_lora = merge
        loss = job.update(ro, torch.linspace(-1, 1, 8))["loss"]
        results.append((loss, {n: p.grad.clone() for n, p in job.policy.model.named_parameters() if p.requires_grad}))
    (loss_a, w_a), (loss_m, w_m) = results
    assert loss_m == pytest.approx(loss_a, rel=1e-5, abs=1e-7)
    assert w_a.keys() == w_m.keys() and len(w_a) == 2 * 2 * 7  # A and B of 7 matrices x 2 layers
    for n in w_a:
        assert w_a[n].norm() > 0, n
        assert (w_m[n] - w_a[n]).norm() <= 1e-4 * w_a[n].norm(), n


def test_micro_batches_cut_to_their_padding_give_the_whole_batch_loss(model_dir, tmp_path):
    losses = []
    ro = None
    for mb in (0, 3):
        job = make_job(model_dir, tmp_path / f"mb{mb}", **{"grpo.micro_batch_size": mb})
        torch.manual_seed(0)
        if ro is None:
            ro = job.rollout.generate([job.train_prompts.ids(j) for j in job.batch(1)], group_size=4)
            assert len(set(ro.prompt_lens)) > 1 or len(set(ro.completion_lens)) > 1  # there is padding to cut
        losses.append(job.update(ro, torch.linspace(-1, 1, 8))["loss"])
    assert losses[1] == pytest.approx(losses[0], rel=1e-5, abs=1e-7)


# --- rollout down-sampling: the job charges G rollouts and m updates ------------------------------------


def test_downsampled_iteration_charges_g_rollouts_and_m_updates(model_dir, tmp_path, monkeypatch):
    """G = 4 sampled and scored per prompt, m = 2 kept by max variance: the rollout charged is the sampling
    call's (8 rows), the update runs on the 4 kept rows (FlopCounterMode agrees with its executed charge),
    the ledger counts 4 rows offered to the update, and the job's cost rule is the plan's (same spec)."""
    from race_cli.cost.budget import Ledger, plan_budget
    from race_cli.plan.flops_audit import count_flops, register_cpu_sdpa_flops
    from race_cli.engine.grpo import downsample

    register_cpu_sdpa_flops()
    job = make_job(model_dir, tmp_path / "j", **{"lora.enabled": "false", "grpo.update_group_size": 2})
    job.ledger = Ledger()
    assert job.spec.update_group_size == 2 == plan_budget(job.cfg_dict, job.backend).spec.update_group_size
    seen, measured = {}, {}
    generate, update = job.rollout.generate, job.update

    def spy_generate(*a, **k):
        seen["ro"] = generate(*a, **k)
        return seen["ro"]

    def spy_update(ro, adv):
        seen["kept"], seen["adv"] = ro, adv
        out = {}
        measured["update"] = count_flops(lambda: out.update(update(ro, adv)))
        return out

    monkeypatch.setattr(job.rollout, "generate", spy_generate)
    monkeypatch.setattr(job, "update", spy_update)
    from race_cli.engine.setup import RewardResult

    # fixed rewards, so both groups are informative: max variance keeps a 1-0 pair of each
    rewards = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0]
    monkeypatch.setattr(job, "reward", lambda items, texts: RewardResult(list(rewards), Flops(), 0.0))
    torch.manual_seed(0)
    job.iterate(1)
    ro, kept = seen["ro"], seen["kept"]
    assert len(ro.completion_lens) == 8 and len(kept.completion_lens) == 4 and len(rewards) == 8
    rows = downsample(torch.tensor(rewards), 4, 2, rule="max_variance").tolist()
    # hand-worked: group 0 (1 0 0 1) sorts stably to rows 1 2 0 3: the two lowest {1, 2} have variance 0, the
    # lowest and the highest {1, 3} 1/4; group 1 (0 1 1 1) sorts to 4 5 6 7: the two lowest {4, 5} already 1/4
    assert rows == [1, 3, 4, 5]
    assert kept.texts == [ro.texts[i] for i in rows]  # the rule's rows, in order
    assert job.ledger.flops["rollout"] == ro.flops  # every one of the G completions is charged
    assert job.ledger.flops["update"].executed == pytest.approx(measured["update"], rel=1e-9)
    assert job.ledger.rows["total"] == 4
    # the model-convention update charge: train steps over the kept rows that carry a gradient
    keep = [i for i in range(4) if seen["adv"][i] != 0]
    assert len(keep) == 4  # every kept row carries a gradient
    seq = sorted(kept.prompt_lens[i] + kept.completion_lens[i] for i in keep)
    want = train_step_flops(job.policy.arch, seq, lora=None, logit_positions=sum(kept.completion_lens))
    assert job.ledger.flops["update"].model == pytest.approx(want.model, rel=1e-12) and measured["update"] > 0
