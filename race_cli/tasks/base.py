"""What a task is made of: its Item record and the JSONL reader every task shares."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from pathlib import Path

from race_cli.errors import RaceError


@dataclass(frozen=True)
class Item:
    """One problem. `answer` is the gold final answer as a plain number string ("92", "-3.5")."""

    id: str  # stable across runs, e.g. "gsm8k-test-17" or "arith-eval-3"
    question: str  # the problem text, without any prompt formatting
    answer: str  # gold final answer
    solution: str | None = None  # worked solution in steps, ending "#### <answer>", when known


def jsonl_rows(file: Path, what: str) -> list[tuple[int, object]]:
    """(line number, parsed value) of every non-blank line of a .jsonl or .jsonl.gz file.

    A line that is not JSON is refused with its line number; `what` names the expected
    object in that message ("GSM8K", "MATH", ...). Checking the row's fields is the caller's.
    """
    opener = gzip.open if file.suffix == ".gz" else open
    rows = []
    with opener(file, "rt", encoding="utf-8") as f:
        for i, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rows.append((i + 1, json.loads(line)))
            except json.JSONDecodeError as e:
                raise RaceError(f"{file}:{i + 1}: not valid JSON ({e.msg}); expected one {what} object per line.") from None
    return rows
