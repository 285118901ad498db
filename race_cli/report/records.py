"""The typed parts of a Report (report/build.py): its targets, its response fits, what the frontier, the joint
comparison, a validation sweep and the compute totals came to, each a small record with its fields documented.

The computing modules build them (frontier.frontier_report, joint.joint_compare, validation.compare,
recommend.compute_totals); the views (report/views/) read them by attribute, never by string key. This
module holds values only: it imports no computing module, so a view may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# the methods' settings that the views state beside their results
CURVE_DRAWS = 200  # compute-curve refits per regime for the prediction intervals (report/curve.py)
MAX_EXTRAPOLATION = 2.0  # X / (largest compute observed) beyond which a prediction always warns (bench_curve.py)
MIN_RHO_REGIMES = 4  # Spearman's ρ is printed only over at least this many validated regimes (report/validation.py)

# the phases of the compute totals, in the order report.json lists them
TOTAL_PHASES = ("rollout", "update", "reward", "total", "eval", "budget")


@dataclass(frozen=True)
class Target:
    """One ranked evaluation target and its direction (report/build.py, from table.maximize_target)."""

    name: str  # the <target> of eval/<target>/accuracy, e.g. "gsm8k"
    maximize: bool  # higher is better (False: the name says it is a loss or an error rate)


@dataclass(frozen=True)
class ConditionFit:
    """The response fit of one condition (recommend.fit_all, report/response.py)."""

    condition: str  # the condition's key: the ranking's `condition` (its columns and its target)
    fit: Any  # response.FitResult: the chosen curve (or none), p* with its interval, or the pilot-best fallback


@dataclass(frozen=True)
class Totals:
    """Model-convention FLOPs of the readable jobs, summed per phase (report/recommend.compute_totals)."""

    rollout: float = 0.0  # search: rollout FLOPs
    update: float = 0.0  # learning: policy-update FLOPs
    reward: float = 0.0  # feedback: reward-model FLOPs (0 for a rule reward)
    total: float = 0.0  # training FLOPs charged to the budgets (the three above)
    eval: float = 0.0  # evaluation FLOPs, recorded apart, never charged
    budget: float = 0.0  # the budgets the jobs' ledgers declared, summed
    by_condition: dict[str, Totals] = field(default_factory=dict, compare=False)  # condition -> its jobs' Totals
    # (recommend.totals_by; summary.md prints each condition's); not in report.json

    def share(self, phase: str) -> float | None:
        """phase's share of the training FLOPs; None when nothing was trained."""
        return getattr(self, phase) / self.total if self.total > 0 else None

    def to_json(self) -> dict[str, float]:
        """report.json's `totals`: {phase: FLOPs} in TOTAL_PHASES order."""
        return {p: getattr(self, p) for p in TOTAL_PHASES}


@dataclass
class Frontier:
    """The frontier across budgets (report/frontier.frontier_report); empty tables when no job recorded
    checkpoints (an older sweep)."""

    table: Any  # DataFrame: one row per (target, condition, checkpoint fraction, regime) (frontier.frontier_table)
    best: Any  # DataFrame: the best regime at each checkpoint budget, and what is ≈ best (frontier.best_per_budget)
    sentences: list[str]  # where the winner changes beyond noise, or that it does not
    problems: list[str]  # checkpoints that could not be read, a line each
    checkpoints: Any  # frontier.Checkpoints: the per-job evaluation points (the predictions and the joint read them)


@dataclass
class Joint:
    """The joint comparison of every (budget, task, target) (report/joint.joint_compare); empty tables when no
    joint condition has two models or two reward systems."""

    ranking: Any  # DataFrame: one row per joint regime (model, reward, knobs), ranked within its joint condition
    sentences: Any  # DataFrame: one row per comparison (size, feedback, allocation); `text` is its sentence
    across: list[dict] = field(default_factory=list)  # the sentences across budgets (overtakes, best per budget)
    per_budget: list[dict] = field(default_factory=list)  # one sentence per joint condition: {joint, budget, task,
    # target, checkpoint, text}
    sizes: dict[str, int] = field(default_factory=dict)  # model name -> parameters (bigger / smaller)
    notes: list[str] = field(default_factory=list)  # joint conditions left out, and why
    plotted: bool = False  # its figure was drawn (views/joint.write_joint_plot sets it; summary.md links it)


@dataclass
class Validation:
    """A validation sweep's verdicts: did the pilot's call hold? (report/validation.compare)"""

    target: str  # the validated evaluation target
    maximize: bool  # higher is better on it
    conditions: list[dict]  # one row per pilot condition: the best − control test, its verdict, Spearman's ρ
    regimes: Any  # DataFrame: one row per (condition, validated regime), pilot and validation side by side
    summary: str  # the sentence that answers "was the pilot's call confirmed?"
    pilot: dict  # the provenance's pilot record (its sweep, its report)
    margin: float  # the margin fixed in advance (0 without --margin)
    skipped: list[str]  # pilot conditions race validate left out, a line each
    design: str  # what the validation was planned as (its control, items, seeds)
    predictors: dict[str, str | None] = field(default_factory=dict)  # condition -> how the pilot's predictions held
    # (a sentence; None without stored predictions); not in validation.json (its rows carry the figures)

    def to_json(self) -> dict:
        """validation.json: every field, `regimes` as records (last)."""
        import json

        head = {k: getattr(self, k) for k in ("target", "maximize", "conditions")}
        tail = {k: getattr(self, k) for k in ("summary", "pilot", "margin", "skipped", "design")}
        return head | tail | {"regimes": json.loads(self.regimes.to_json(orient="records"))}
