"""MATH-500 (the 500-problem MATH test subset of "Let's Verify Step by Step"; MIT) as an evaluation target.

The 500 problems ship in race_cli/data/math500/test.jsonl (rows `problem`, `solution`, `answer`,
`subject`, `level`, `unique_id`; see the LICENSE beside it). Item ids are `math500-<row>`, the
gold answer is the `answer` field (LaTeX, e.g. `\\frac{14}{3}`, `(3,4]`, `\\text{Evelyn}`),
prompts ask for the final answer in `\\boxed{}` (prompting.BOXED) and grading is the `math`
grader (race's normaliser, then math-verify when installed; race_cli/answers/graders.py).

MATH-500 is a test set: it is an evaluation target only (`eval.targets=[math500]`), never a
training task; to train on MATH-style data use `task=jsonl` with `task.grader=math`.

    Math500().eval_items()[0].answer  # '\\left( 3, \\frac{\\pi}{2} \\right)'
"""

from __future__ import annotations

from pathlib import Path

from race_cli.errors import RaceError
from race_cli.tasks.base import Item, jsonl_rows
from race_cli.tasks.prompting import BOXED

PACKAGED_FILE = Path(__file__).resolve().parent.parent / "data" / "math500" / "test.jsonl"


def read_math_jsonl(file: Path, prefix: str) -> list[Item]:
    """Rows {"problem", "answer", "solution"?} of a MATH-format JSONL file as Items `<prefix>-<row>`."""
    items = []
    for line_no, row in jsonl_rows(file, "MATH"):
        if not isinstance(row, dict) or not isinstance(row.get("problem"), str) or \
                not isinstance(row.get("answer"), str) or not row["answer"].strip():
            raise RaceError(f"{file}:{line_no}: not a MATH row; expected {{'problem': str, 'answer': str, ...}}.")
        items.append(Item(id=f"{prefix}-{len(items)}", question=row["problem"].strip(),
                          answer=row["answer"].strip(), solution=row.get("solution")))
    if not items:
        raise RaceError(f"{file} holds no rows; expected MATH JSONL lines.")
    return items


class Math500:
    """The MATH-500 problems, all 500 in file order (`eval_items`); no training split."""

    name = "math500"
    grader = "math"  # race_cli.answers.graders
    convention = BOXED  # prompts ask for \boxed{}

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else PACKAGED_FILE
        self._items: list[Item] | None = None

    def eval_items(self) -> list[Item]:
        if self._items is None:
            self._items = read_math_jsonl(self.path, "math500")
        return self._items

    def train_items(self) -> list[Item]:
        raise RaceError("math500 is a test set: it can be an evaluation target (eval.targets=[math500]) but "
                        "not a training task. Train on MATH-style data with task=jsonl task.grader=math.")
