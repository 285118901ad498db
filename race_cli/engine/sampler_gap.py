"""Sampled = trained: the gap between the policy the rollout engine sampled from and the policy being trained.

vLLM samples from its own copy of the weights (the base in its dtype and kernels, plus the adapter it
last loaded); the trainer's first update pass computes log-probabilities of the same tokens with the
policy it is about to step. With mu = 1 the GRPO ratio is taken against that first pass, so a policy
vLLM did not really sample from (a stale or lost adapter, wrong LoRA scaling, bf16 drift) trains off
policy and nothing else would say so. Per iteration, over the completion tokens the update ran on:

    rollout/logp_gap_mean       mean |log q(y_t) - log p(y_t)|  (q: the engine's, p: the trainer's)
    rollout/logp_gap_max        max of the same
    rollout/kl_sampler_trainer  mean over sequences of sum_t (log q(y_t) - log p(y_t)): the k1 estimate
                                of KL(q || p) between whole completions (unbiased; the samples are q's)

The engine's log-probabilities are those after temperature (vLLM's processed_logprobs), the trainer's
are log softmax(logits / T), so with top_p = 1 they agree up to rounding; a top_p < 1 truncation shows
as a positive gap (the trainer's ratio ignores it), as it should. summary.json keeps the job's totals
and flags a job whose mean gap exceeds GAP_BOUND for its dtype. Pure: tensors in, sums out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# mean |log q - log p| per token above which a job is flagged as sampling from another policy:
# float32 is the bound (CPU vLLM vs the trainer, docs/measurements/vllm-cpu.md); bf16/fp16
# kernels differ by rounding of ~2^-8 per operation, so their bound is looser and not measured here
GAP_BOUND = {"float32": 1e-4, "bfloat16": 5e-2, "float16": 5e-2}


@dataclass
class GapSums:
    """Running sums of the gap over tokens and sequences (one iteration, or a whole job)."""

    tokens: int = 0
    sequences: int = 0
    abs_sum: float = 0.0
    max_abs: float = 0.0
    seq_logratio_sum: float = 0.0  # sum over sequences of sum_t (log q - log p)

    def add(self, sampler, trainer, mask) -> None:
        """Add one micro-batch: `sampler`, `trainer` [n, c] log-probs of the same tokens, `mask` [n, c] 1 on them."""
        import torch

        m = mask.to(torch.float64)
        diff = (sampler.to(torch.float64) - trainer.detach().to(torch.float64)) * m  # [n, c]
        self.tokens += int(m.sum().item())
        rows = m.sum(dim=1) > 0  # [n]
        self.sequences += int(rows.sum().item())
        self.abs_sum += float(diff.abs().sum().item())
        if diff.numel():
            self.max_abs = max(self.max_abs, float(diff.abs().max().item()))
        self.seq_logratio_sum += float(diff.sum(dim=1)[rows].sum().item())

    def merge(self, other: "GapSums") -> "GapSums":
        return GapSums(self.tokens + other.tokens, self.sequences + other.sequences, self.abs_sum + other.abs_sum,
                       max(self.max_abs, other.max_abs), self.seq_logratio_sum + other.seq_logratio_sum)

    def metrics(self) -> dict:
        """The metrics.jsonl keys (empty when no token was compared)."""
        if not self.tokens:
            return {}
        return {"rollout/logp_gap_mean": self.abs_sum / self.tokens, "rollout/logp_gap_max": self.max_abs,
                "rollout/kl_sampler_trainer": self.seq_logratio_sum / max(self.sequences, 1)}

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "sequences": self.sequences, "abs_sum": self.abs_sum, "max_abs": self.max_abs,
                "seq_logratio_sum": self.seq_logratio_sum}

    @classmethod
    def from_json(cls, d: dict | None) -> "GapSums":
        d = d or {}
        return cls(int(d.get("tokens", 0)), int(d.get("sequences", 0)), float(d.get("abs_sum", 0.0)),
                   float(d.get("max_abs", 0.0)), float(d.get("seq_logratio_sum", 0.0)))


def gap_bound(dtype: Any) -> float:
    """GAP_BOUND for a torch dtype or its name."""
    return GAP_BOUND.get(str(dtype).replace("torch.", ""), GAP_BOUND["bfloat16"])


def gap_summary(total: GapSums, iterations_over: int, dtype: Any) -> dict | None:
    """summary.json's `sampler_gap`: the job's mean and max gap, KL estimate, the bound, and whether it was
    exceeded (mean gap over the job above the bound); None when the engine returned no log-probabilities."""
    if not total.tokens:
        return None
    m = total.metrics()
    bound = gap_bound(dtype)
    return {"logp_gap_mean": m["rollout/logp_gap_mean"], "logp_gap_max": m["rollout/logp_gap_max"],
            "kl_sampler_trainer": m["rollout/kl_sampler_trainer"], "tokens": total.tokens, "bound": bound,
            "iterations_over_bound": int(iterations_over), "exceeded": m["rollout/logp_gap_mean"] > bound}


def gap_warning(summary: dict | None) -> str | None:
    """The one line a job prints when its sampler gap exceeded the bound, else None."""
    if not summary or not summary["exceeded"]:
        return None
    return (f"warning: the policy vLLM sampled from is not the policy trained: mean |log q - log p| "
            f"{summary['logp_gap_mean']:.3g} per token > bound {summary['bound']:g} "
            f"({summary['iterations_over_bound']} iterations over it; max {summary['logp_gap_max']:.3g}). "
            "A stale or unapplied adapter, or dtype drift: the run trained off-policy.")
