"""Token sampling shared by every evaluation and rollout backend (pure torch, no model code).

`pick` draws the next tokens from logits, by argmax or by inverting the CDF with one uniform per row;
`row_uniforms` gives each row its own counter-based uniforms and `eval_row_seed` keys an evaluation
row by (eval.sample_seed, target, item id, sample k): common random numbers, so every job and
checkpoint draws item i's k-th sample from the same numbers and evaluation never touches the
training generator. The lean sampler (rollout_lean.py) and HF generate's logits processor
(rollout.py) both draw through these functions.
"""

from __future__ import annotations


def top_p_filter(scores, top_p: float):
    """transformers' TopPLogitsWarper: drop the least likely tokens whose mass is <= 1 - top_p. [n, V]."""
    import torch

    sorted_logits, sorted_idx = torch.sort(scores, descending=False)
    cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    remove = cum <= (1 - top_p)
    remove[..., -1:] = False  # keep at least the most likely token
    return scores.masked_fill(remove.scatter(1, sorted_idx, remove), float("-inf"))


def row_uniforms(seeds: list[int], steps: int, device: str = "cpu"):
    """Counter-based uniforms [N, steps] float64: row i's numbers depend on seeds[i] alone (a CPU
    generator seeded with it), whatever the other rows, the batch, the device or the training stream.

    Common random numbers: the evaluation seeds row (item, sample k) by (eval.sample_seed, target,
    item id, k) (`eval_row_seed`), so every job and checkpoint draws item i's k-th sample from the
    same numbers, and sampling leaves the training generator untouched.
    """
    import torch

    out = torch.empty(len(seeds), steps, dtype=torch.float64)
    g = torch.Generator()
    for i, s in enumerate(seeds):
        g.manual_seed(int(s))
        out[i] = torch.rand(steps, generator=g, dtype=torch.float64)
    return out.to(device)


def eval_row_seed(sample_seed: int, target: str, item_id: str, k: int) -> int:
    """The seed of one evaluation row: sample k of item `item_id` of `target` (63 bits of BLAKE2b,
    the same in every process and on every backend)."""
    import hashlib

    key = f"{int(sample_seed)}|{target}|{item_id}|{int(k)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def train_row_seed(seed: int, iteration: int, row: int) -> int:
    """The seed of one training row: row `row` of iteration `iteration` of a job seeded `seed` (63 bits of
    BLAKE2b). vLLM's training rollouts are seeded per row with it: the engine's own generator lives in its
    process and is not checkpointed, so a resumed job samples what the uninterrupted one did only when
    every request carries its seed."""
    import hashlib

    key = f"train|{int(seed)}|{int(iteration)}|{int(row)}".encode()
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little") >> 1


def pick(logits, *, greedy: bool, temperature: float, top_p: float, u=None):
    """Next tokens [n] from float32 logits [n, V]: argmax, or a draw from softmax(logits / T) within top-p.

    The draw inverts the CDF with one uniform per row (u * total mass, first token whose
    cumulative mass exceeds it): exactly the categorical distribution, without torch.multinomial's
    per-call validity checks and its V exponential draws per row. `u` [n]: the rows' uniforms
    (common random numbers, `row_uniforms`); None = torch's generator (the training stream).
    Two policies with close CDFs map the same u to the same token mostly: item-paired
    differences lose most of their sampling noise.
    """
    import torch

    if greedy:
        return logits.argmax(dim=-1)
    scores = logits / temperature if temperature != 1.0 else logits
    if top_p < 1.0:
        scores = top_p_filter(scores, top_p)
    cdf = scores.softmax(dim=-1).cumsum(dim=-1)  # [n, V]
    if u is None:
        u = torch.rand(cdf.size(0), 1, device=cdf.device, dtype=cdf.dtype)
    else:
        u = u.to(device=cdf.device, dtype=cdf.dtype).view(-1, 1)
    u = u * cdf[:, -1:]  # [n, 1]
    return torch.searchsorted(cdf, u, right=True).squeeze(1).clamp_(max=cdf.size(1) - 1)
