"""Rows of advantage exactly 0 run no update pass (beta = 0): the same loss and gradient, fewer FLOPs charged.

Exactness in float64: the update with skipping and without gives the same loss, the same gradient of every
parameter and the same weights after the optimizer steps (relative error <= 1e-10), for token and sequence
aggregation, with and without reward scaling, mu in {1, 2}, micro-batched and not. The executed FLOPs of a
skipping update equal torch's FlopCounterMode, and an iteration whose groups are all uninformative charges
no update FLOPs and changes no weight (Adam's momentum and weight decay included).
"""

from __future__ import annotations

import copy
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from race_cli.cost.flops import Flops, train_step_flops
from race_cli.engine.grpo import group_advantages, trained_rows

# 3 prompts x G=4: one group of equal rewards (advantage exactly 0), two informative ones
REWARDS = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0])
INFORMATIVE = [False] * 4 + [True] * 8


import test_update  # noqa: E402

model_dir = test_update.model_dir  # the tiny random policy, as a fixture
_update_job = test_update.make_job


def make_job(model_dir: Path, tmp: Path, **extra):
    """test_update's tiny job with B=3 prompts, full fine-tuning at lr 1e-3 (what these checks use)."""
    return _update_job(model_dir, tmp, **{"grpo.prompts_per_iter": 3, "lora.enabled": "false", "grpo.lr": 1e-3} | extra)


COMPLETION_LENS = [6, 3, 5, 2, 6, 4, 1, 5, 3, 6, 2, 4]  # EOS included; varied, so token aggregation's loss
# (-sum_i A_i * len_i / tokens at ratio 1) does not cancel to rounding level


def rollout(job):
    """A sampled batch whose completions end (EOS) at COMPLETION_LENS (a random policy seldom samples EOS)."""
    from dataclasses import replace

    torch.manual_seed(0)
    ro = job.rollout.generate([job.train_prompts.ids(j) for j in job.batch(1)], group_size=4)
    assert ro.completion_ids.size(1) == 6 and len(set(ro.prompt_lens)) > 1  # prompt padding to cut, rows to sort
    eos = job.policy.tokenizer.eos_token_id
    ids = ro.completion_ids.clone()  # [12, 6]
    mask = torch.zeros(ids.shape)  # [12, 6]
    for i, n in enumerate(COMPLETION_LENS):
        ids[i, n - 1], mask[i, :n] = eos, 1.0
        ids[i, n:] = eos
    return replace(ro, completion_ids=ids, completion_mask=mask, completion_lens=list(COMPLETION_LENS))


def fresh_optimizer(job) -> None:
    job.optimizer = torch.optim.AdamW([p for p in job.policy.model.parameters() if p.requires_grad],
                                      lr=job.cfg.grpo.lr, weight_decay=0.01)
    job.scheduler = torch.optim.lr_scheduler.LambdaLR(job.optimizer, lambda it: 1.0)


@pytest.fixture(scope="module")
def job64(model_dir, tmp_path_factory):
    """One full-fine-tuning job in float64, its rollout batch and its initial weights."""
    job = make_job(model_dir, tmp_path_factory.mktemp("job64"))
    ro = rollout(job)
    job.policy.model.to(torch.float64)
    return job, ro, copy.deepcopy(job.policy.model.state_dict())


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = b.norm().item()
    return (a - b).norm().item() / scale if scale else (a - b).norm().item()


@pytest.mark.parametrize("micro_batch", [0, 3], ids=["whole", "mb3"])
@pytest.mark.parametrize("mu", [1, 2])
@pytest.mark.parametrize("scale", [True, False], ids=["scaled", "dr-grpo"])
@pytest.mark.parametrize("loss_agg", ["token", "sequence"])
def test_skipping_gives_the_same_loss_gradient_and_weights(job64, loss_agg, scale, mu, micro_batch):
    job, ro, init = job64
    job.cfg.grpo.loss_agg, job.cfg.grpo.updates_per_batch = loss_agg, mu
    job.micro_batch = micro_batch or 10 ** 6
    adv = group_advantages(REWARDS, 4, scale=scale).advantages.double()  # [12]
    assert (adv != 0).tolist() == INFORMATIVE
    runs = {}
    for skip in (False, True):
        job.cfg.grpo.skip_zero_advantage = skip
        job.policy.model.load_state_dict(init)
        fresh_optimizer(job)
        out = job.update(ro, adv)
        runs[skip] = (out, {n: p.grad.clone() for n, p in job.policy.model.named_parameters()},
                      {n: p.detach().clone() for n, p in job.policy.model.named_parameters()})
    (full, g_full, w_full), (skip, g_skip, w_skip) = runs[False], runs[True]
    assert full["rows"] == 12 and skip["rows"] == 8
    # sequence aggregation at ratio 1 (mu = 1) is -mean_i A_i: 0 up to rounding, as group-centred advantages sum
    # to 0; its error is measured against the size of its terms, mean |A_i|, as well as against the loss itself
    scale = max(abs(full["loss"]), adv.abs().mean().item())
    assert abs(skip["loss"] - full["loss"]) <= 1e-10 * scale
    assert full["loss"] != 0 or (loss_agg, mu) == ("sequence", 1)
    assert skip["clip_frac"] == pytest.approx(full["clip_frac"], rel=1e-10, abs=1e-15)
    assert g_full.keys() == g_skip.keys() and len(g_full) > 10
    moved = 0
    for n in g_full:  # the last pass's gradient (mu = 2: after one optimizer step) and the stepped weights
        assert rel(g_skip[n], g_full[n]) <= 1e-10, n
        assert rel(w_skip[n], w_full[n]) <= 1e-10, n
        moved += int(not torch.equal(w_full[n], init[n]))
    assert moved > 10  # the update did change the weights it is compared on
    # 8 of the 12 rows ran: the charged train steps are those of the informative rows only
    assert skip["flops"].model < full["flops"].model


def test_skipping_charges_the_rows_that_ran_and_flop_counter_agrees(model_dir, tmp_path):
    """The executed ledger of a skipping update == FlopCounterMode; the model ledger == train steps over the
    informative rows, sorted by length and cut into micro-batches after the filter (3 + 3 + 2 of 8)."""
    from race_cli.plan.flops_audit import count_flops, register_cpu_sdpa_flops

    register_cpu_sdpa_flops()
    job = make_job(model_dir, tmp_path / "j", **{"grpo.micro_batch_size": 3, "grpo.updates_per_batch": 2})
    ro = rollout(job)
    adv = group_advantages(REWARDS, 4).advantages
    out = {}
    measured = count_flops(lambda: out.update(job.update(ro, adv)))
    assert out["flops"].executed == pytest.approx(measured, rel=1e-9)
    seq = [p + c for p, c in zip(ro.prompt_lens, ro.completion_lens)]
    kept = sorted((i for i in range(12) if INFORMATIVE[i]), key=seq.__getitem__)
    want = Flops()
    for mb in (kept[0:3], kept[3:6], kept[6:8]):
        want = want + train_step_flops(job.policy.arch, [seq[i] for i in mb], lora=None,
                                       logit_positions=sum(ro.completion_lens[i] for i in mb))
    assert out["flops"].model == want.model * 2
    assert out["rows"] == 8


def test_all_uninformative_iteration_charges_nothing_and_moves_no_weight(model_dir, tmp_path):
    """After an informative update (Adam has momentum, weight decay is on), an iteration of equal rewards runs
    no pass: 0 update FLOPs charged (FlopCounterMode counts 0), every weight and the optimizer state unchanged."""
    from race_cli.cost.budget import Ledger
    from race_cli.plan.flops_audit import count_flops, register_cpu_sdpa_flops

    register_cpu_sdpa_flops()
    job = make_job(model_dir, tmp_path / "u", **{"grpo.weight_decay": 0.1})
    ro = rollout(job)
    assert job.update(ro, group_advantages(REWARDS, 4).advantages)["rows"] == 8  # momentum in Adam's state
    before = {n: p.detach().clone() for n, p in job.policy.model.named_parameters()}
    steps = [s["step"].item() for s in job.optimizer.state.values()]
    lr_steps = job.scheduler.last_epoch
    flat = group_advantages(torch.ones(12), 4).advantages  # [12] all exactly 0
    out = {}
    assert count_flops(lambda: out.update(job.update(ro, flat))) == 0  # nothing ran
    assert out["flops"] == Flops() and out["rows"] == 0
    job.reward = lambda items, texts: SimpleNamespace(rewards=[1.0] * len(texts), seconds=0.0, flops=Flops())
    job.ledger = Ledger()
    line = job.iterate(1)  # the whole iteration: rollout, equal rewards, no update
    assert job.ledger.flops["update"] == Flops()
    assert line["flops/update"] == 0 and line["train/trained_rows"] == 0 and line["train/loss"] == 0
    assert job.ledger.rows == {"total": 12, "trained": 0} and job.ledger.informative_share() == 0
    for n, p in job.policy.model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert [s["step"].item() for s in job.optimizer.state.values()] == steps  # the optimizer did not step
    assert job.scheduler.last_epoch == lr_steps + 2  # the lr schedule counts iterations, updated or not


def test_beta_keeps_every_row():
    adv = group_advantages(REWARDS, 4).advantages
    assert trained_rows(adv, beta=0.0, skip_zero_advantage=True).tolist() == INFORMATIVE
    assert trained_rows(adv, beta=0.04, skip_zero_advantage=True).all()  # the KL term has a gradient
    assert trained_rows(adv, beta=0.0, skip_zero_advantage=False).all()


def test_equal_rewards_give_exactly_zero_advantage():
    """0.11 three times (a PRM-like score): its float32 mean rounds off 0.11, so without the exact zero the
    std-scaled advantage would be the rounding residue divided by ~1e-4, a spurious signal."""
    r = torch.tensor([0.11, 0.11, 0.11, 0.22, 0.22, 0.22, 0.3, 0.3, 0.3])
    assert (r.view(3, 3) - r.view(3, 3).mean(dim=1, keepdim=True)).abs().max() > 0  # the residue is there
    a = group_advantages(r, 3)
    assert (a.advantages == 0).all() and a.frac_zero_std == 1.0
