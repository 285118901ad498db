"""GRPO's pure functions against values worked out by hand (race_cli/engine/grpo.py)."""

import math

import pytest
import torch

from race_cli.engine.grpo import completion_mask, group_advantages, grpo_loss, k3_kl, token_logprobs


def test_group_advantages_scaled_by_unbiased_std():
    # group 1: rewards 1,0,0,0 -> mean 0.25, deviations .75,-.25,-.25,-.25,
    #   unbiased var = (.5625 + 3*.0625)/3 = .25 -> std .5 -> A = .75/.5001, -.25/.5001
    # group 2: all ones -> std 0 -> A = 0 (zero-std group)
    r = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])
    a = group_advantages(r, 4)
    want = [0.75 / 0.5001] + [-0.25 / 0.5001] * 3 + [0.0] * 4
    assert a.advantages.tolist() == pytest.approx(want, abs=1e-6)
    assert a.group_mean.tolist() == pytest.approx([0.25, 1.0])
    assert a.group_std.tolist() == pytest.approx([0.5, 0.0])
    assert a.frac_zero_std == 0.5


def test_group_advantages_unscaled_is_dr_grpo():
    # Dr. GRPO: centred only. group (2, 0): mean 1 -> +1, -1; group (3, 3, ...) handled above
    a = group_advantages(torch.tensor([2.0, 0.0, 0.5, 0.5]), 2, scale=False)
    assert a.advantages.tolist() == pytest.approx([1.0, -1.0, 0.0, 0.0])
    assert a.frac_zero_std == 0.5


def test_group_advantages_refuses_ragged_groups():
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(6), 4)


def test_completion_mask_keeps_first_eos_only():
    eos = 9
    ids = torch.tensor([[1, 2, 9, 9, 9],  # EOS at 2 -> mask 1,1,1,0,0
                        [1, 9, 3, 9, 4],  # first EOS at 1
                        [1, 2, 3, 4, 5]])  # never ended: all five
    assert completion_mask(ids, eos).tolist() == [[1, 1, 1, 0, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]]


def test_token_logprobs_with_temperature():
    # logits (0, ln 3) -> softmax (1/4, 3/4); at T=2 -> logits (0, ln3/2) -> (1/(1+sqrt3), sqrt3/(1+sqrt3))
    logits = torch.tensor([[[0.0, math.log(3.0)]]])
    tok = torch.tensor([[1]])
    assert token_logprobs(logits, tok).item() == pytest.approx(math.log(0.75), abs=1e-6)
    s3 = math.sqrt(3.0)
    assert token_logprobs(logits, tok, temperature=2.0).item() == pytest.approx(math.log(s3 / (1 + s3)), abs=1e-6)


def test_k3_kl():
    # logp = ln .5, ref = 0 -> d = ln 2 -> 2 - ln 2 - 1 = 0.306853; equal log-probs -> 0
    kl = k3_kl(torch.tensor([math.log(0.5), 0.3]), torch.tensor([0.0, 0.3]))
    assert kl.tolist() == pytest.approx([1 - math.log(2.0), 0.0], abs=1e-6)


def _case():
    # ratios: row 0 (A=+2): 1.5, 1.0, 0.5; row 1 (A=-1): 0.7, 1.1, (masked) 1.0; eps = 0.2
    old = torch.zeros(2, 3)
    logp = torch.log(torch.tensor([[1.5, 1.0, 0.5], [0.7, 1.1, 1.0]])).requires_grad_(True)
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1.0, 1, 1], [1, 1, 0]])
    return logp, old, adv, mask


def test_clipped_surrogate_token_mean_by_hand():
    # per-token loss -min(r*A, clip(r)*A):
    #   row 0: r=1.5 -> min(3, 2.4) = 2.4 (clipped high) ; r=1 -> 2 ; r=.5 -> min(1, 1.6) = 1
    #   row 1: r=.7 -> min(-.7, -.8) = -.8 (clipped low) ; r=1.1 -> min(-1.1, -1.1) = -1.1
    # losses -2.4, -2, -1, .8, 1.1 over 5 tokens -> -3.5/5 = -0.7; clipped 2 of 5 -> 0.4
    logp, old, adv, mask = _case()
    out = grpo_loss(logp, old, adv, mask, clip_eps=0.2)
    assert out.loss.item() == pytest.approx(-0.7, abs=1e-6)
    assert out.clip_frac == pytest.approx(0.4)
    assert out.kl is None and out.tokens == 5
    out.loss.backward()
    # d/dlogp of -r*A/5 where unclipped: row0: 0, -2*1/5, -2*.5/5 ; row1: 0, -(-1*1.1)/5, masked 0
    assert logp.grad.tolist()[0] == pytest.approx([0.0, -0.4, -0.2], abs=1e-6)
    assert logp.grad.tolist()[1] == pytest.approx([0.0, 0.22, 0.0], abs=1e-6)


def test_clipped_surrogate_sequence_mean_by_hand():
    # row 0 mean (-2.4-2-1)/3 = -1.8 ; row 1 mean (.8+1.1)/2 = .95 ; mean of rows -0.425
    logp, old, adv, mask = _case()
    assert grpo_loss(logp, old, adv, mask, clip_eps=0.2, loss_agg="sequence").loss.item() == pytest.approx(-0.425, abs=1e-6)


def test_kl_penalty_added_per_token():
    # reference = logp except token (0,0) where ref = logp - ln 2... use ref = 0 everywhere:
    # k3 with d = -logp: row0 r=1.5: 1/1.5 + ln1.5 - 1 = 0.072132 ; r=1: 0 ; r=.5: 2 - ln2 - 1 = 0.306853
    #                    row1 r=.7: 1/.7 + ln.7 - 1 = 0.071900 ; r=1.1: 1/1.1 + ln1.1 - 1 = 0.004401
    logp, old, adv, mask = _case()
    ref = torch.zeros(2, 3)
    kls = [1 / 1.5 + math.log(1.5) - 1, 0.0, 1 - math.log(2), 1 / 0.7 + math.log(0.7) - 1, 1 / 1.1 + math.log(1.1) - 1]
    out = grpo_loss(logp, old, adv, mask, clip_eps=0.2, beta=0.1, ref_logp=ref)
    assert out.kl == pytest.approx(sum(kls) / 5, abs=1e-6)
    assert out.loss.item() == pytest.approx(-0.7 + 0.1 * sum(kls) / 5, abs=1e-6)


def test_micro_batches_sum_to_the_whole_batch():
    logp, old, adv, mask = _case()
    whole = grpo_loss(logp, old, adv, mask, clip_eps=0.2).loss.item()
    parts = sum(grpo_loss(logp[i:i + 1], old[i:i + 1], adv[i:i + 1], mask[i:i + 1], clip_eps=0.2,
                          num_tokens=5).loss.item() for i in range(2))
    assert parts == pytest.approx(whole, abs=1e-7)
    seq = sum(grpo_loss(logp[i:i + 1], old[i:i + 1], adv[i:i + 1], mask[i:i + 1], clip_eps=0.2,
                        loss_agg="sequence", num_seqs=2).loss.item() for i in range(2))
    assert seq == pytest.approx(-0.425, abs=1e-6)


def test_single_pass_ratio_is_one_and_gradient_is_policy_gradient():
    # mu = 1: old = logp.detach() -> ratio 1, nothing clipped, grad = -A * mask / tokens
    logp = torch.tensor([[-1.0, -2.0], [-0.5, -0.1]], requires_grad=True)
    adv, mask = torch.tensor([1.0, -0.5]), torch.tensor([[1.0, 1], [1, 0]])
    out = grpo_loss(logp, logp.detach(), adv, mask, clip_eps=0.2)
    out.loss.backward()
    assert out.clip_frac == 0.0
    assert out.loss.item() == pytest.approx(-(1 + 1 - 0.5) / 3, abs=1e-7)
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 0.5 / 3, 0.0], abs=1e-7)


def test_beta_without_reference_is_refused():
    logp, old, adv, mask = _case()
    with pytest.raises(ValueError):
        grpo_loss(logp, old, adv, mask, clip_eps=0.2, beta=0.1)


# --- rollout down-sampling -----------------------------------------------------------------------


def test_max_variance_downsampling_matches_hand_worked_groups():
    from race_cli.engine.grpo import downsample

    # group 0 (G=8, m=4): rewards 1 0 0 1 1 0 1 1 -> sorted ascending (stable): rows 1 2 5 | 0 3 4 6 7.
    # i highest + (4 - i) lowest: i=0 {1,2,5,0} var 3/16; i=1 {1,2,5,7} 3/16; i=2 {1,2,6,7} 1/4 (best);
    # i=3 {1,4,6,7} 3/16; i=4 {3,4,6,7} 0 -> rows 1 2 6 7, two right and two wrong.
    # group 1 (rows 8..15): all equal -> i=0, the first four rows (advantage 0 anyway).
    rewards = torch.tensor([1, 0, 0, 1, 1, 0, 1, 1] + [1] * 8, dtype=torch.float32)
    assert downsample(rewards, 8, 4, rule="max_variance").tolist() == [1, 2, 6, 7, 8, 9, 10, 11]
    # PRM-like scores (G=4, m=2): 0.9 0.1 0.5 0.3 -> {0.1, 0.3} var 0.01, {0.1, 0.9} 0.16 (best), {0.5, 0.9} 0.04
    assert downsample(torch.tensor([0.9, 0.1, 0.5, 0.3]), 4, 2, rule="max_variance").tolist() == [0, 1]
    # the kept subset's variance is the largest over all C(8,4) = 70 subsets (brute force)
    import itertools

    r = torch.tensor([0.2, 0.9, 0.4, 0.4, 0.0, 0.7, 1.0, 0.1], dtype=torch.float64)
    best = max(r[list(c)].var(unbiased=False).item() for c in itertools.combinations(range(8), 4))
    got = downsample(r, 8, 4, rule="max_variance")
    assert r[got].var(unbiased=False).item() == pytest.approx(best, abs=1e-12)


def test_random_downsampling_keeps_m_distinct_rows_of_each_group_from_the_generator():
    from race_cli.engine.grpo import downsample

    rewards = torch.arange(12, dtype=torch.float32)
    a = downsample(rewards, 4, 2, rule="random", generator=torch.Generator().manual_seed(0))
    b = downsample(rewards, 4, 2, rule="random", generator=torch.Generator().manual_seed(0))
    assert a.tolist() == b.tolist() and len(a) == 6
    for g in range(3):
        rows = a[2 * g:2 * g + 2].tolist()
        assert len(set(rows)) == 2 and all(4 * g <= x < 4 * g + 4 for x in rows)
    picks = {tuple(downsample(rewards, 4, 2, rule="random", generator=torch.Generator().manual_seed(s))[:2].tolist())
             for s in range(40)}
    assert len(picks) == 6  # every one of the C(4,2) pairs of group 0 occurs: random, not a fixed rule
    with pytest.raises(ValueError):
        downsample(rewards, 4, 5)
    with pytest.raises(ValueError):
        downsample(rewards, 4, 2, rule="largest")
