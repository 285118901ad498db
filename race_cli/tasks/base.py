"""The one small interface every task implements."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Item:
    """One problem. `answer` is the gold final answer as a plain number string ("92", "-3.5")."""

    id: str  # stable across runs, e.g. "gsm8k-test-17" or "arith-eval-3"
    question: str  # the problem text, without any prompt formatting
    answer: str  # gold final answer
    solution: str | None = None  # worked solution in steps, ending "#### <answer>", when known


class Task(Protocol):
    name: str

    def train_items(self) -> list[Item]: ...

    def eval_items(self) -> list[Item]: ...
