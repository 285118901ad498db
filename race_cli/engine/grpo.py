"""GRPO as small pure tensor functions: group advantages, per-token log-probs, the clipped loss.

No model, no I/O: `job.py` calls these with tensors it got from the policy. Every function
states the shapes it takes (`# [B*G, T]`: B prompts x G completions, T completion positions).

Follows DeepSeekMath's GRPO with TRL's numerics (trl/trainer/grpo_trainer.py) as the reference:
- advantages are the group-centred rewards divided by the group's *unbiased* std + 1e-4
  (`scale_rewards=False` drops the division, as in Dr. GRPO);
- the surrogate is PPO's clipped ratio objective per token, with the old policy's log-probs
  (the current ones, detached, when there is a single update pass);
- the KL penalty to the reference is the k3 estimator exp(ref - logp) - (ref - logp) - 1;
- `loss_agg="token"` averages over every completion token of the batch (TRL's "bnpo"),
  `"sequence"` averages each sequence's tokens, then the sequences (TRL's "grpo").
Departures: a completion is masked after its first EOS (EOS included), like TRL; no
truncated-completion masking, no asymmetric clip; a group whose rewards are all equal gets
advantage exactly 0 (not the rounding residue of its mean), and with beta = 0 the update leaves
such rows out (`trained_rows`) while keeping the whole batch's normaliser: the same loss and
gradient for less work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from race_cli.cost.memory import block_rows  # rows per log-prob block, shared with the memory ledger

STD_EPS = 1e-4  # added to the group std before dividing (TRL's value)


@dataclass(frozen=True)
class Advantages:
    """Group-normalised advantages of one rollout batch."""

    advantages: torch.Tensor  # [B*G] one scalar per completion, broadcast over its tokens
    group_mean: torch.Tensor  # [B]
    group_std: torch.Tensor  # [B] unbiased std of each group's rewards
    frac_zero_std: float  # share of groups whose rewards are all equal (no learning signal)


def group_advantages(rewards: torch.Tensor, group_size: int, *, scale: bool = True) -> Advantages:
    """Advantages A_i = (r_i - mean_group) / (std_group + 1e-4), or r_i - mean_group without `scale`.

    `rewards` [B*G] holds the G completions of each prompt consecutively.
    """
    if rewards.dim() != 1 or rewards.numel() % group_size or group_size < 2:
        raise ValueError(f"rewards of shape {tuple(rewards.shape)} do not split into groups of {group_size}")
    grouped = rewards.float().view(-1, group_size)  # [B, G]
    mean = grouped.mean(dim=1)  # [B]
    std = grouped.std(dim=1)  # [B] unbiased (divides by G-1), as torch and TRL default
    adv = grouped - mean[:, None]  # [B, G]
    if scale:
        adv = adv / (std[:, None] + STD_EPS)
    # a group of equal rewards has advantage exactly 0 (its mean can round off the common value: 3 * 0.1 / 3)
    flat = grouped.amax(dim=1) == grouped.amin(dim=1)  # [B]
    adv = adv.masked_fill(flat[:, None], 0.0)  # [B, G]
    zero = torch.isclose(std, torch.zeros_like(std)).float().mean().item()
    return Advantages(adv.reshape(-1), mean, std, zero)


def downsample(rewards: torch.Tensor, group_size: int, keep: int, *, rule: str = "max_variance",
               generator: torch.Generator | None = None) -> torch.Tensor:
    """Rollout down-sampling: which `keep` = m of each group's G completions the update uses.

    rewards [B*G] (groups consecutive) -> row indices [B*m], each group's in increasing order.
    - "max_variance" (PODS, arXiv 2504.13818): the m-subset of largest reward variance. PODS shows
      it is the i highest and m - i lowest rewards for some i, so the m + 1 such subsets are
      compared (ties: the first i, with rewards sorted stably, so equal rewards keep row order). For
      0/1 rewards it keeps as even a split of right and wrong as the group allows; a group of equal
      rewards keeps its first m rows (advantage 0 either way).
    - "random": m rows drawn without replacement (torch's generator: the training stream).
    """
    G, m = group_size, keep
    if rewards.dim() != 1 or rewards.numel() % G or not 1 <= m <= G:
        raise ValueError(f"cannot keep {m} of groups of {G} from rewards of shape {tuple(rewards.shape)}")
    grouped = rewards.double().view(-1, G)  # [B, G]
    out = []
    for b, r in enumerate(grouped):
        if rule == "random":
            sel = torch.randperm(G, generator=generator)[:m]
        elif rule == "max_variance":
            order = torch.sort(r, stable=True).indices  # ascending
            best, best_var = order[:m], -1.0
            for i in range(m + 1):  # the i highest and the m - i lowest
                cand = torch.cat([order[:m - i], order[G - i:]])
                var = float(r[cand].var(unbiased=False))
                if var > best_var + 1e-12:
                    best, best_var = cand, var
            sel = best
        else:
            raise ValueError(f"downsample rule {rule!r} is unknown: expected max_variance or random")
        out.append(torch.sort(sel).values + b * G)
    return torch.cat(out)  # [B*m]


def completion_mask(completion_ids: torch.Tensor, eos_id: int) -> torch.Tensor:
    """1 for every completion token up to and including the first EOS, 0 after it.

    completion_ids [N, T] (right-padded after EOS) -> mask [N, T] float.
    """
    is_eos = completion_ids == eos_id  # [N, T]
    T = completion_ids.size(1)
    first = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), torch.full_like(is_eos[:, 0], T, dtype=torch.long))
    positions = torch.arange(T, device=completion_ids.device)[None, :]  # [1, T]
    return (positions <= first[:, None]).float()  # [N, T]


def rows_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log p(token) for a block of rows: logits [R, V], tokens [R] -> [R] (float32, float64 kept)."""
    if logits.dtype in (torch.float16, torch.bfloat16):
        logits = logits.float()  # [R, V] the only float32 copy, one block at a time
    if temperature != 1.0:
        logits = logits / temperature
    logz = torch.logsumexp(logits, dim=-1)  # [R]
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [R]
    return picked - logz


def chunked_logprobs(fn, hidden: torch.Tensor, tokens: torch.Tensor, chunk: int) -> torch.Tensor:
    """Apply `fn(hidden_rows [R, ...], tokens [R]) -> [R]` over blocks of `chunk` rows; hidden [N, ...] -> [N].

    With more than one block under autograd, each block runs inside a (non-reentrant)
    checkpoint: its float32 logits are freed after the forward and recomputed in the backward,
    so at most one block's [chunk, V] logits ever exist. A single block needs no checkpoint
    (its logits are the one block either way), which saves the recompute.
    """
    from torch.utils.checkpoint import checkpoint

    n = tokens.size(0)
    if n <= chunk:
        return fn(hidden, tokens) if n else tokens.new_zeros((0,), dtype=torch.float32)
    grad = torch.is_grad_enabled() and hidden.requires_grad
    parts = []
    for s in range(0, n, chunk):
        h, t = hidden[s:s + chunk], tokens[s:s + chunk]
        parts.append(checkpoint(fn, h, t, use_reentrant=False) if grad else fn(h, t))  # [R]
    return torch.cat(parts)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor, temperature: float = 1.0,
                   chunk: int | None = None) -> torch.Tensor:
    """log p(token) under softmax(logits / temperature): logits [N, T, V], tokens [N, T] -> [N, T] float32.

    Dividing by the sampling temperature makes the trained policy the one that was sampled
    (TRL does the same); top-p is not re-applied. Computed in blocks of `chunk` positions
    (default `block_rows(V)`), so no float32 [N, T, V] copy is made (see `chunked_logprobs`).
    """
    N, T, V = logits.shape
    out = chunked_logprobs(lambda h, t: rows_logprobs(h, t, temperature), logits.reshape(N * T, V),
                           tokens.reshape(N * T), chunk or block_rows(V))
    return out.view(N, T)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(pi || ref): exp(ref - logp) - (ref - logp) - 1 >= 0. [N, T] -> [N, T]."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


@dataclass(frozen=True)
class GrpoLoss:
    """The loss of one (micro-)batch and the statistics the metrics report."""

    loss: torch.Tensor  # scalar with grad, already divided by the whole batch's normaliser
    kl: float | None  # mean k3 KL per completion token (None when beta == 0 and no ref given)
    clip_frac: float  # share of completion tokens whose ratio was clipped in the active direction
    tokens: int  # completion tokens in this micro-batch (weights for averaging kl / clip_frac)


def grpo_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
              clip_eps: float, beta: float = 0.0, ref_logp: torch.Tensor | None = None, loss_agg: str = "token",
              num_tokens: float | None = None, num_seqs: int | None = None) -> GrpoLoss:
    """Clipped GRPO surrogate (+ beta * k3 KL), aggregated per token or per sequence.

    logp, old_logp, ref_logp, mask: [N, T]; advantages: [N]. For micro-batches pass the whole
    batch's `num_tokens` (token agg) or `num_seqs` (sequence agg) so the micro-batch losses
    sum to the whole batch's loss; by default this batch is the whole batch.
    """
    if loss_agg not in ("token", "sequence"):
        raise ValueError(f"loss_agg={loss_agg!r}: expected 'token' or 'sequence'")
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs the reference log-probs")
    ratio = torch.exp(logp - old_logp)  # [N, T]
    adv = advantages[:, None]  # [N, 1]
    unclipped = ratio * adv  # [N, T]
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv  # [N, T]
    per_token = -torch.min(unclipped, clipped)  # [N, T]
    kl_tok = None
    if ref_logp is not None:
        kl_tok = k3_kl(logp, ref_logp)  # [N, T]
        if beta > 0:
            per_token = per_token + beta * kl_tok
    tokens = mask.sum()
    if loss_agg == "token":
        denom = tokens.clamp(min=1.0) if num_tokens is None else max(float(num_tokens), 1.0)
        loss = (per_token * mask).sum() / denom
    else:
        per_seq = (per_token * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)  # [N]
        loss = per_seq.sum() / (per_seq.numel() if num_seqs is None else num_seqs)
    with torch.no_grad():
        low = (ratio < 1 - clip_eps) & (adv < 0)  # [N, T] clipped where it would push further down
        high = (ratio > 1 + clip_eps) & (adv > 0)
        n = max(tokens.item(), 1.0)
        clip_frac = ((low | high).float() * mask).sum().item() / n
        kl = None if kl_tok is None else (kl_tok * mask).sum().item() / n
    return GrpoLoss(loss, kl, clip_frac, int(tokens.item()))


def trained_rows(advantages: torch.Tensor, *, beta: float, skip_zero_advantage: bool) -> torch.Tensor:
    """Bool [N]: the rows an update pass must run. advantages [N] -> [N].

    With beta = 0 a row whose advantage is exactly 0 has a surrogate of exactly 0 for every
    ratio (-min(r*0, clip(r)*0) = 0), so its loss term and its gradient are exactly 0: it is left
    out (`skip_zero_advantage`) and the loss keeps the whole batch's normaliser (grpo_loss's
    `num_tokens` / `num_seqs`), so loss and gradient equal the unskipped update's. With beta > 0
    its KL term has a gradient: every row is kept.
    """
    if not skip_zero_advantage or beta > 0:
        return torch.ones_like(advantages, dtype=torch.bool)
    return advantages != 0  # [N] exact: group_advantages gives exactly 0 where a group's rewards are all equal
