"""Job.update without waste: no old-policy forward (mu > 1 reuses the first pass), micro-batches cut to their own padding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from race_cli.ledger import Flops, train_step_flops


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
    from race_cli.compose import compose
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
    # charged: exactly the train steps that ran, each micro-batch at its own padded width
    want = Flops()
    for start, stop in ((0, 3), (3, 6), (6, 8)):
        rows = slice(start, stop)
        p_s, c_s = max(ro.prompt_lens[rows]), max(ro.completion_lens[rows])
        seq = [p + c for p, c in zip(ro.prompt_lens[rows], ro.completion_lens[rows])]
        want = want + train_step_flops(job.policy.arch, seq, lora=job.policy.lora, padded_len=p_s + c_s,
                                       logit_positions=sum(ro.completion_lens[rows]),
                                       executed_logit_positions=(stop - start) * (c_s + 1))
    assert out["flops"] == want * 2
    assert [s[1] for s in calls[:3]] == [max(ro.prompt_lens[r]) + max(ro.completion_lens[r])
                                        for r in (slice(0, 3), slice(3, 6), slice(6, 8))]


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
