"""Any question/answer dataset as a race task (`task=jsonl`): a local JSONL file or a Hugging Face id.

    race train grid=none task=jsonl task.path=data/polaris.jsonl task.question_field=problem \
        task.grader=math --out runs/polaris

Where the rows come from (`task.path`):
- a local file, `.jsonl` or `.jsonl.gz`, one JSON object per line;
- `hf:<dataset id>` or `hf:<dataset id>:<config>`: the `task.split_train` split through `datasets`
  (needs the `data` extra and a network or a warm cache), e.g. `hf:POLARIS-Project/Polaris-Dataset-53K`.

Held-out items: `task.eval_path` (a second file, or `hf:` with `task.split_eval`) when given;
otherwise `task.num_eval` rows of the training file chosen by `task.eval_seed` are held out and
never trained on (the same rows in every job of a sweep).

Each row gives the question in `task.question_field` and the gold in `task.answer_field`; the
answer is read per `task.answer_format`: `raw` (the field is the answer: Polaris, MATH-500),
`hashes` (a solution ending `#### <answer>`: GSM8K) or `boxed` (a solution whose last `\\boxed{}`
is the answer: MATH train). `task.grader` (race_cli/answers/graders.py) grades both the rule
reward and the evaluation, and picks the prompt convention: `number` asks for `#### <number>`,
the math graders ask for `\\boxed{}`.

The evaluation target is named `task.label`, or the file's stem (lower-case, `[a-z0-9_-]`):
its accuracy is `eval/<label>/accuracy`. Item ids are `<label>-<row>` (0-based row of the file;
`<label>-eval-<row>` for rows of eval_path).
"""

from __future__ import annotations

import random
import re
from pathlib import Path
from typing import Any, Iterable

from race_cli.errors import RaceError
from race_cli.answers.graders import MATH_GRADERS, check_grader
from race_cli.answers.math import last_boxed
from race_cli.tasks.base import Item, jsonl_rows
from race_cli.tasks.prompting import BOXED, HASHES

ANSWER_FORMATS = ("raw", "hashes", "boxed")
HF_PREFIX = "hf:"
BUILTIN_TARGETS = ("arithmetic", "arithmetic-hard", "gsm8k", "math500")


def default_label(path: str) -> str:
    """'data/My Set.jsonl.gz' -> 'my-set'; 'hf:org/Name-53K' -> 'name-53k'."""
    name = path[len(HF_PREFIX):].split(":")[0].rstrip("/").split("/")[-1] if path.startswith(HF_PREFIX) else Path(path).name
    for suffix in (".gz", ".jsonl", ".json"):
        name = name[: -len(suffix)] if name.endswith(suffix) else name
    return re.sub(r"[^a-z0-9_-]+", "-", name.lower()).strip("-") or "jsonl"


def read_answer(value: Any, answer_format: str) -> str | None:
    """The gold answer of one row's answer field, or None when the field does not hold one."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        return None
    if answer_format == "hashes":
        if "####" not in value:
            return None
        value = value.rpartition("####")[2]
    elif answer_format == "boxed":
        value = last_boxed(value)
        if value is None:
            return None
    value = value.strip()
    return value or None


def _read_file(file: Path) -> list[tuple[int, dict]]:
    """(line number, row) of every non-blank line of a .jsonl / .jsonl.gz file."""
    return jsonl_rows(file, "JSON")


def _read_hub(spec: str, split: str) -> list[tuple[int, dict]]:
    name, _, config = spec[len(HF_PREFIX):].partition(":")
    try:
        from datasets import load_dataset
    except ImportError:
        raise RaceError(f"task.path={spec} needs the `datasets` package (pip install 'race-cli[data]'); "
                        "or download the rows as JSONL and pass task.path=<file>.") from None
    try:
        rows = load_dataset(name, config or None, split=split)
    except Exception as e:  # noqa: BLE001 - network, hub and cache errors come in many types
        raise RaceError(f"Could not load {name} split {split!r} through datasets: {type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}",
                        "Without network access save the rows as JSONL and pass task.path=<file>.") from None
    return [(i, dict(r)) for i, r in enumerate(rows)]


class JsonlTask:
    """Question/answer rows from a JSONL file or a hub dataset (see the module docstring)."""

    def __init__(self, path: str | None, *, eval_path: str | None = None, question_field: str = "question",
                 answer_field: str = "answer", answer_format: str = "raw", grader: str = "number",
                 num_eval: int | None = 200, num_train: int | None = None, eval_seed: int = 1234, seed: int = 0,
                 label: str | None = None, split_train: str = "train", split_eval: str = "test"):
        problems = []
        if not path:
            problems.append("task=jsonl needs task.path: a .jsonl file or hf:<dataset id>.")
        for p, key in ((path, "task.path"), (eval_path, "task.eval_path")):
            if p and not p.startswith(HF_PREFIX) and not Path(p).is_file():
                problems.append(f"{key}={p} is not a file; expected a .jsonl (or .jsonl.gz) file or hf:<dataset id>.")
        if answer_format not in ANSWER_FORMATS:
            problems.append(f"task.answer_format={answer_format!r} is unknown: expected one of {', '.join(ANSWER_FORMATS)}.")
        try:
            check_grader(grader, "task.grader")
        except RaceError as e:
            problems.extend(e.problems)
        for key, value in (("num_eval", num_eval), ("num_train", num_train)):
            if value is not None and value < (1 if key == "num_eval" else 0):
                problems.append(f"task.{key}={value}: expected a positive count or null.")
        self.name = label or (default_label(path) if path else "jsonl")
        if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", self.name):
            problems.append(f"task.label={self.name!r}: expected lower-case letters, digits, '-' and '_' "
                            "(it names the target in eval/<label>/accuracy).")
        elif self.name in BUILTIN_TARGETS:
            problems.append(f"task.label={self.name!r} is the name of a built-in target; choose another label.")
        if problems:
            raise RaceError(*problems)
        self.path, self.eval_path = path, eval_path
        self.question_field, self.answer_field, self.answer_format = question_field, answer_field, answer_format
        self.grader = grader
        self.convention = BOXED if grader in MATH_GRADERS else HASHES
        self.num_eval, self.num_train, self.eval_seed, self.seed = num_eval, num_train, eval_seed, seed
        self.split_train, self.split_eval = split_train, split_eval
        self._train: list[Item] | None = None
        self._eval: list[Item] | None = None

    def _rows(self, spec: str, split: str) -> list[tuple[int, dict]]:
        return _read_hub(spec, split) if spec.startswith(HF_PREFIX) else _read_file(Path(spec))

    def _items(self, rows: Iterable[tuple[int, dict]], where: str, prefix: str) -> list[Item]:
        items = []
        for index, (line, row) in enumerate(rows):
            q = row.get(self.question_field) if isinstance(row, dict) else None
            a = read_answer(row.get(self.answer_field), self.answer_format) if isinstance(row, dict) else None
            if not isinstance(q, str) or not q.strip() or a is None:
                fields = ", ".join(sorted(row)) if isinstance(row, dict) else type(row).__name__
                raise RaceError(f"{where}:{line}: no question in field {self.question_field!r} or no "
                                f"{self.answer_format} answer in field {self.answer_field!r} (the row has: {fields}).",
                                "Set task.question_field / task.answer_field / task.answer_format to match the data.")
            items.append(Item(id=f"{prefix}-{index}", question=q.strip(), answer=a))
        if not items:
            raise RaceError(f"{where} holds no rows; expected JSON objects, one per line.")
        return items

    def _load(self) -> None:
        if self._train is not None:
            return
        train = self._items(self._rows(self.path, self.split_train), self.path, self.name)
        if self.eval_path:
            held = self._items(self._rows(self.eval_path, self.split_eval), self.eval_path, f"{self.name}-eval")
            if self.num_eval is not None:
                held = held[: self.num_eval]
        else:  # hold num_eval rows of the training file out, drawn from eval_seed alone
            n_eval = self.num_eval if self.num_eval is not None else max(1, len(train) // 10)
            if n_eval >= len(train):
                raise RaceError(f"{self.path} has {len(train)} rows: holding out task.num_eval={n_eval} leaves none "
                                "to train on. Lower task.num_eval or give task.eval_path.")
            order = list(range(len(train)))
            random.Random(f"jsonl-eval-{self.eval_seed}").shuffle(order)
            chosen = set(order[:n_eval])
            held = [train[i] for i in sorted(chosen)]
            train = [it for i, it in enumerate(train) if i not in chosen]
        random.Random(f"jsonl-train-{self.seed}").shuffle(train)
        self._train = train if self.num_train is None else train[: self.num_train]
        self._eval = held

    def train_items(self) -> list[Item]:
        """The training rows (held-out rows removed), shuffled by `seed`, cut to num_train."""
        self._load()
        return self._train

    def eval_items(self) -> list[Item]:
        """The held-out rows in file order (the same in every job)."""
        self._load()
        return self._eval
