"""GSM8K grade-school math (Cobbe et al. 2021, MIT licence) as a race task.

Where the problems come from, first that applies:
1. `path`: a folder holding `<split>.jsonl` (or `<split>.jsonl.gz`) files, or one JSONL file
   (then both train_items() and eval_items() read that one file: meant for small smoke sets);
   `path="hub"` loads the `openai/gsm8k` "main" config through `datasets` (package and network);
2. the environment variable RACE_GSM8K_DIR (a folder as above);
3. the copy shipped in the package, race_cli/data/gsm8k (test.jsonl: all 1,319 items;
   train.jsonl.gz: all 7,473; MIT, see its LICENSE).

Each line is GSM8K's own format: {"question": ..., "answer": "<worked solution>\\n#### <number>"}.
An Item has id `gsm8k-<split>-<line index>`, the gold answer normalised by the rule reward
(`1,080` -> `1080`), and the solution with the calculator annotations (`<<48/2=24>>`) removed
and the last line rewritten as `#### <gold>`.

Evaluation items are the first `num_eval` of the evaluation split (the same in every job of a
sweep); training items are the training split in an order drawn from `seed`, the first
`num_train` of it.

    GSM8KTask(num_eval=500).eval_items()[0].id  # 'gsm8k-test-0' (the packaged copy)
"""

from __future__ import annotations

import gzip
import os
import random
import re
from pathlib import Path

from race_cli.errors import RaceError
from race_cli.answers.number import normalize_number
from race_cli.tasks.base import Item, jsonl_rows
from race_cli.tasks.prompting import HASHES

ENV_DIR = "RACE_GSM8K_DIR"  # a folder with train.jsonl / test.jsonl, used when path is None
HUB = "hub"  # task.path=hub: load openai/gsm8k through `datasets`
HF_NAME, HF_CONFIG = "openai/gsm8k", "main"
PACKAGED_DIR = Path(__file__).resolve().parent.parent / "data" / "gsm8k"  # shipped with race
_CALCULATOR = re.compile(r"<<[^<>]*>>")  # GSM8K's calculator annotations: "2/2=<<2/2=1>>1"


def strip_calculator(text: str) -> str:
    """'48/2=<<48/2=24>>24 clips' -> '48/2=24 clips'."""
    return _CALCULATOR.sub("", text)


def local_gsm8k_dir() -> Path:
    """The GSM8K folder a task without `path` reads: $RACE_GSM8K_DIR when set, else the packaged copy."""
    return Path(os.environ[ENV_DIR]) if os.environ.get(ENV_DIR) else PACKAGED_DIR


def open_text(file: Path):
    return gzip.open(file, "rt", encoding="utf-8") if file.suffix == ".gz" else open(file, encoding="utf-8")


def make_item(split: str, index: int, question: str, answer_text: str, where: str) -> Item:
    """One Item from a GSM8K row; `where` names the row in error messages."""
    if not isinstance(question, str) or not isinstance(answer_text, str) or "####" not in answer_text:
        raise RaceError(f"{where}: not a GSM8K row; expected {{'question': str, 'answer': "
                        f"'<solution>\\n#### <number>'}}. Check that the file is GSM8K's JSONL format.")
    steps, _, final = answer_text.rpartition("####")
    gold = normalize_number(final)
    if gold is None:
        raise RaceError(f"{where}: the final '#### ' line holds {final.strip()!r}, not a number.")
    solution = strip_calculator(steps).rstrip() + f"\n#### {gold}"
    return Item(id=f"gsm8k-{split}-{index}", question=question.strip(), answer=gold,
                solution=solution.lstrip("\n"))


def read_jsonl_split(file: Path, split: str) -> list[Item]:
    """Every row of a GSM8K JSONL file (.jsonl or .jsonl.gz) as Items `gsm8k-<split>-<i>`
    (i = 0-based row index, blank lines skipped)."""
    items = []
    for line_no, row in jsonl_rows(file, "GSM8K"):
        row = row if isinstance(row, dict) else {}
        items.append(make_item(split, len(items), row.get("question"), row.get("answer"), f"{file}:{line_no}"))
    if not items:
        raise RaceError(f"{file} holds no rows; expected GSM8K JSONL lines.")
    return items


def load_hf_split(split: str) -> list[Item]:
    """The `openai/gsm8k` "main" split through `datasets`, or a RaceError that says what to do."""
    try:
        from datasets import load_dataset
    except ImportError:
        raise RaceError("task.path=hub needs the `datasets` package (pip install 'race-cli[data]'); "
                        "or leave task.path unset to use the GSM8K copy shipped with race.") from None
    try:
        rows = load_dataset(HF_NAME, HF_CONFIG, split=split)
    except Exception as e:  # noqa: BLE001 - network, hub and cache errors come in many types
        raise RaceError(f"Could not load {HF_NAME} ({HF_CONFIG}) split {split!r} through datasets: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
                        "Without network access leave task.path unset (the copy shipped with race) or "
                        f"pass task.path=<folder with train.jsonl/test.jsonl> (or set {ENV_DIR}).") from None
    return [make_item(split, i, r["question"], r["answer"], f"{HF_NAME} {split}[{i}]") for i, r in enumerate(rows)]


class GSM8KTask:
    """GSM8K problems: `train_items()` for rollouts, `eval_items()` held out.

    path: folder with <split>.jsonl(.gz), one JSONL file, "hub" (openai/gsm8k through datasets),
        or None ($RACE_GSM8K_DIR, else the copy shipped in race_cli/data/gsm8k).
    split_train, split_eval: split names ("train", "test").
    num_eval: the first num_eval evaluation items (None = all 1319 of test).
    num_train: training items kept after the seeded shuffle (None = all 7473 of train).
    seed: orders the training items.
    """

    name = "gsm8k"
    grader = "number"  # race_cli.answers.graders: the final '#### N' read as a number
    convention = HASHES  # prompts ask for '#### <number>'

    def __init__(self, path: str | None = None, split_train: str = "train", split_eval: str = "test",
                 num_eval: int | None = None, num_train: int | None = None, seed: int = 0):
        problems = []
        for key, value, least in (("num_eval", num_eval, 1), ("num_train", num_train, 0)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                problems.append(f"task.{key}={value!r}: expected an integer >= {least}, or null for the whole split.")
        if path is None:
            path = str(local_gsm8k_dir())
        if path != HUB and not Path(path).exists():
            problems.append(f"task.path={path!r} does not exist; expected a folder with train.jsonl and "
                            "test.jsonl (GSM8K format) or one such JSONL file.")
        if problems:
            raise RaceError(*problems)
        self.path = None if path == HUB else Path(path)
        self.split_train, self.split_eval = split_train, split_eval
        self.num_eval, self.num_train, self.seed = num_eval, num_train, seed
        self._cache: dict[str, list[Item]] = {}

    def _split(self, split: str) -> list[Item]:
        if split not in self._cache:
            if self.path is None:
                self._cache[split] = load_hf_split(split)
            elif self.path.is_file():
                self._cache[split] = read_jsonl_split(self.path, split)
            else:
                file = self.path / f"{split}.jsonl"
                if not file.is_file() and file.with_suffix(".jsonl.gz").is_file():
                    file = file.with_suffix(".jsonl.gz")
                if not file.is_file():
                    found = sorted(p.name for p in self.path.glob("*.jsonl*")) or ["no .jsonl files"]
                    raise RaceError(f"{file} not found: task.path holds {', '.join(found)}; expected "
                                    f"{split}.jsonl (or set the split name to one of those files).")
                self._cache[split] = read_jsonl_split(file, split)
        return self._cache[split]

    def eval_items(self) -> list[Item]:
        """The first num_eval items of the evaluation split, in file order."""
        items = self._split(self.split_eval)
        return items if self.num_eval is None else items[: self.num_eval]

    def train_items(self) -> list[Item]:
        """The training split shuffled by `seed`, cut to num_train."""
        items = list(self._split(self.split_train))
        random.Random(f"gsm8k-train-{self.seed}").shuffle(items)
        return items if self.num_train is None else items[: self.num_train]
