"""The synthetic multi-step arithmetic task the embedded zoo trains on and `race run` uses offline.

A problem is a left-to-right chain of 2-3 additions and subtractions of operands 0..99, e.g.
question `45+74-27`, solution `45+74=119\\n119-27=92\\n#### 92`, answer `92`. Answers may be
negative; `*` is left out because left-to-right steps would contradict operator precedence.
The final line uses GSM8K's `#### N` form, so the same rule reward and prompts serve both tasks.

The evaluation set depends only on `eval_seed` (so every job of a sweep scores the same items);
the training set depends on `seed` and never contains an evaluation question.

`harder()` is the held-out variant behind the `arithmetic-hard` evaluation target: the same
generator restricted to the longest chains (exactly max_ops operations; max_ops+1 when every chain
has the same length), the same operands, its own evaluation stream and ids `arith-hard-<i>`. The
training set excludes its questions as it excludes the task's own evaluation questions.
Harder still (one more step, or operands above max_operand) the embedded tiny-s scores nothing, so
such a target could not rank anything (docs/measurements/code.md).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from race_cli.errors import RaceError
from race_cli.tasks.base import Item
from race_cli.tasks.prompting import HASHES

# one step of a solution: left operand, operator, right operand, result
Step = tuple[int, str, int, int]

_QUESTION = re.compile(r"^\d+(?:[+-]\d+)+$")
_STEP_LINE = re.compile(r"^(-?\d+)([+-])(\d+)=(-?\d+)$")


def solve(question: str) -> list[Step]:
    """The left-to-right steps of `question` ("45+74-27" -> [(45,'+',74,119), (119,'-',27,92)])."""
    if not _QUESTION.match(question):
        raise ValueError(f"not an arithmetic question: {question!r} (expected e.g. '45+74-27')")
    numbers = [int(x) for x in re.split(r"[+-]", question)]
    ops = re.findall(r"[+-]", question)
    steps, value = [], numbers[0]
    for op, b in zip(ops, numbers[1:]):
        result = value + b if op == "+" else value - b
        steps.append((value, op, b, result))
        value = result
    return steps


def render_solution(steps: list[Step]) -> str:
    """Solution text: one `a±b=r` line per step, then `#### <last result>` (no trailing newline)."""
    lines = [f"{a}{op}{b}={r}" for a, op, b, r in steps]
    return "\n".join(lines + [f"#### {steps[-1][3]}"])


def parse_solution(text: str) -> list[Step]:
    """Steps written in a solution text (lines `a±b=r`; other lines such as `#### N` are skipped).

    The results are read as written, not recomputed: compare with `solve` to check them.
    """
    steps = []
    for line in text.split("\n"):
        m = _STEP_LINE.match(line.strip())
        if m:
            steps.append((int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))))
    return steps


def make_item(item_id: str, question: str) -> Item:
    steps = solve(question)
    return Item(id=item_id, question=question, answer=str(steps[-1][3]), solution=render_solution(steps))


def random_question(rng: random.Random, min_ops: int, max_ops: int, max_operand: int) -> str:
    """One question with min_ops..max_ops operations and operands 0..max_operand."""
    n_ops = rng.randint(min_ops, max_ops)
    parts = [str(rng.randint(0, max_operand))]
    for _ in range(n_ops):
        parts.append(rng.choice("+-"))
        parts.append(str(rng.randint(0, max_operand)))
    return "".join(parts)


DEFAULT_EVAL_SEED = 1234  # conf/task/arithmetic.yaml's and the schema's task.eval_seed


def eval_id_prefix(prefix: str, eval_seed: int) -> str:
    """The id prefix of an evaluation set: `prefix` for the default eval_seed (the ids every earlier sweep
    wrote), `prefix-e<eval_seed>` for another. Ids are positions in the set, so two sets drawn from different
    eval seeds (a validation's fresh items, `race validate`) must not share them: the report pairs items by id."""
    return prefix if eval_seed == DEFAULT_EVAL_SEED else f"{prefix}-e{eval_seed}"


@dataclass
class ArithmeticTask:
    """Chains of + and - on small integers, in GSM8K's `#### N` answer form.

    seed: draws the training stream (changes per job seed).
    num_train: training items returned by train_items().
    num_eval: held-out items; fixed by eval_seed alone, identical across a sweep.
    min_ops, max_ops: operations per problem (2..3 gives 2-3 steps).
    max_operand: operands are drawn from 0..max_operand.
    eval_seed: draws the evaluation set.
    train_stream: names the training stream, `<train_stream>-<seed>`: jobs draw their RL prompts from
        "arith-rl" streams, the zoo's warm start from "arith-train" streams, so RL never trains on a
        problem the policy memorised during its warm start.
    eval_prefix: evaluation item ids are `<eval_prefix>-<i>` (`<eval_prefix>-e<eval_seed>-<i>` off the default eval_seed).
    """

    seed: int = 0
    num_train: int = 20000
    num_eval: int = 200
    min_ops: int = 2
    max_ops: int = 3
    max_operand: int = 99
    eval_seed: int = DEFAULT_EVAL_SEED
    name: str = "arithmetic"
    train_stream: str = "arith-rl"
    eval_prefix: str = "arith-eval"

    grader = "number"  # race_cli.answers.graders: the final '#### N' read as a number (class attribute)
    convention = HASHES  # prompts ask for '#### <number>'

    def __post_init__(self) -> None:
        problems = []
        if not 1 <= self.min_ops <= self.max_ops:
            problems.append(f"task.min_ops={self.min_ops}, task.max_ops={self.max_ops}: expected 1 <= min_ops <= max_ops.")
        if self.max_operand < 1:
            problems.append(f"task.max_operand={self.max_operand}: expected a positive integer such as 99.")
        if self.num_train < 0 or self.num_eval < 1:
            problems.append(f"task.num_train={self.num_train}, task.num_eval={self.num_eval}: expected num_train >= 0 and num_eval >= 1.")
        if not problems:
            space = (self.max_operand + 1) ** (self.min_ops + 1) * 2**self.min_ops  # distinct shortest questions
            if self.num_eval + self.num_train > space // 2:
                problems.append(
                    f"task.num_train + task.num_eval = {self.num_train + self.num_eval} is too many distinct "
                    f"problems for max_operand={self.max_operand}, min_ops={self.min_ops}: raise max_operand or lower the counts."
                )
        if problems:
            raise RaceError(*problems)
        self._eval: list[Item] | None = None
        self._train: list[Item] | None = None

    def eval_items(self) -> list[Item]:
        """`num_eval` distinct problems drawn from eval_seed alone; ids `<eval_prefix>-<i>` (`arith-eval-<i>`)
        for the default eval_seed, `<eval_prefix>-e<eval_seed>-<i>` for any other (see eval_id_prefix)."""
        if self._eval is None:
            rng = random.Random(f"{self.eval_prefix}-{self.eval_seed}")
            seen: dict[str, None] = {}
            while len(seen) < self.num_eval:
                seen.setdefault(random_question(rng, self.min_ops, self.max_ops, self.max_operand))
            self._eval = [make_item(f"{eval_id_prefix(self.eval_prefix, self.eval_seed)}-{i}", q)
                          for i, q in enumerate(seen)]
        return self._eval

    def train_items(self) -> list[Item]:
        """`num_train` distinct problems drawn from seed, none of them an eval question; ids `arith-train-<i>`."""
        if self._train is None:
            held_out = {it.question for it in self.eval_items()}
            if self.eval_prefix != "arith-hard":  # nor any question of the arithmetic-hard target
                held_out |= {it.question for it in self.harder().eval_items()}
            rng = random.Random(f"{self.train_stream}-{self.seed}")
            seen: dict[str, None] = {}
            while len(seen) < self.num_train:
                q = random_question(rng, self.min_ops, self.max_ops, self.max_operand)
                if q not in held_out:
                    seen.setdefault(q)
            self._train = [make_item(f"arith-train-{i}", q) for i, q in enumerate(seen)]
        return self._train

    def harder(self) -> "ArithmeticTask":
        """The held-out harder variant (target `arithmetic-hard`): the longest chains only, exactly
        max_ops operations (max_ops+1 when min_ops == max_ops), the same operands; num_eval items of
        its own (ids `arith-hard-<i>`), no training set."""
        ops = self.max_ops if self.min_ops < self.max_ops else self.max_ops + 1
        return ArithmeticTask(seed=self.seed, num_train=0, num_eval=self.num_eval, min_ops=ops, max_ops=ops,
                              max_operand=self.max_operand, eval_seed=self.eval_seed, name="arithmetic-hard",
                              eval_prefix="arith-hard")
