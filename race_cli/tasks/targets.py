"""Training tasks and evaluation targets by name: what `task.name` and `eval.targets` refer to.

A *task* gives training prompts and its own held-out items (`train_items`, `eval_items`), a
grader and a prompt convention. An *evaluation target* is a named list of held-out items with the
grader and prompt convention that go with them; each writes `eval/<target>/accuracy`.

| target            | items                                                     | grader | prompt asks for |
|-------------------|-----------------------------------------------------------|--------|-----------------|
| `arithmetic`      | the arithmetic task's held-out set (task.* when task=arithmetic) | number | `#### <number>` |
| `arithmetic-hard` | the same generator, longest chains only, held out of training (ArithmeticTask.harder) | number | `#### <number>` |
| `gsm8k`           | GSM8K test, all 1,319 (task.num_eval when task=gsm8k)     | number | `#### <number>` |
| `math500`         | MATH-500, all 500                                         | math   | `\\boxed{}` |
| `<label>`         | a jsonl task's held-out rows (task=jsonl, see jsonl.py)    | task.grader | per grader |

`eval.targets: []` (the default) evaluates the training task's own target. A target named like the
training task uses that task's held-out items (so `task.num_eval` and the generator's parameters
apply); the others use their standard sets. `eval.max_items` (and `eval.max_items_by_target`)
keep only the first N items of a target, the same N in every job, for small runs.

Pure except for reading the shipped data files; imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from race_cli.errors import RaceError
from race_cli.tasks.base import Item
from race_cli.tasks.prompting import Convention

TASKS = ("arithmetic", "gsm8k", "jsonl")
TARGETS = ("arithmetic", "arithmetic-hard", "gsm8k", "math500")
COMPLETION_MARGIN = 2  # tokens beyond the longest reference solution: the leading space and EOS
# The completion cap each standard target's answers need, whatever the training task's cap: an evaluation
# reads the larger of the two (engine/setup.eval_cap). GSM8K: conf/task/gsm8k.yaml's cap (a Qwen2.5-Instruct
# step-by-step solution fits in 512). MATH-500: twice that, as its reference solutions run twice GSM8K's
# (the shipped copies: mean 531 vs 293 characters, 90th percentile 1041 vs 483). The arithmetic targets'
# needs are measured from their own solutions (_solution_cap).
TARGET_COMPLETION_TOKENS = {"gsm8k": 512, "math500": 1024}


def _get(node: Any, key: str, default: Any = None) -> Any:
    if isinstance(node, dict):
        return node.get(key, default)
    return getattr(node, key, default)


def task_target_name(task_cfg: Any) -> str:
    """The name of the training task's own target: `arithmetic`, `gsm8k` or the jsonl label."""
    name = _get(task_cfg, "name")
    if name == "jsonl":
        from race_cli.tasks.jsonl import default_label

        path = _get(task_cfg, "path")
        return _get(task_cfg, "label") or (default_label(path) if path else "jsonl")
    return name


def target_names(cfg: Any) -> list[str]:
    """`eval.targets`, or the training task's own target when the list is empty; duplicates dropped."""
    names = list(_get(_get(cfg, "eval"), "targets") or [])
    return list(dict.fromkeys(names)) or [task_target_name(_get(cfg, "task"))]


def target_problems(cfg: Any) -> list[str]:
    """Messages for unknown target names and bad item caps (empty = fine); pure, for config.validate."""
    own = task_target_name(_get(cfg, "task"))
    known = list(TARGETS) + ([own] if own not in TARGETS else [])
    problems = [f"eval.targets has {t!r}: expected some of {', '.join(known)} (the training task's own "
                f"target is {own!r})." for t in target_names(cfg) if t not in known]
    ev = _get(cfg, "eval")
    caps = dict(_get(ev, "max_items_by_target") or {})
    for t, n in caps.items():
        if t not in known:
            problems.append(f"eval.max_items_by_target has {t!r}: expected a target name ({', '.join(known)}).")
        if n is None or n < 1:
            problems.append(f"eval.max_items_by_target.{t}={n!r}: expected a positive number of items.")
    n = _get(ev, "max_items")
    if n is not None and n < 1:
        problems.append(f"eval.max_items={n!r}: expected a positive number of items, or null for all.")
    return problems


# --- training tasks -------------------------------------------------------------------------


def build_task(cfg: Any):
    """The task of `task.name` with the job's seed (training order) and the shared eval items."""
    t, seed = cfg.task, cfg.seed
    if t.name == "arithmetic":
        from race_cli.tasks.arithmetic import ArithmeticTask

        return ArithmeticTask(seed=seed, num_train=t.num_train if t.num_train is not None else 20000,
                              num_eval=t.num_eval if t.num_eval is not None else 200, min_ops=t.min_ops,
                              max_ops=t.max_ops, max_operand=t.max_operand, eval_seed=t.eval_seed)
    if t.name == "gsm8k":
        from race_cli.tasks.gsm8k import GSM8KTask

        return GSM8KTask(path=t.path, num_eval=t.num_eval, num_train=t.num_train, seed=seed)
    if t.name == "jsonl":
        from race_cli.tasks.jsonl import JsonlTask

        return JsonlTask(t.path, eval_path=t.eval_path, question_field=t.question_field,
                         answer_field=t.answer_field, answer_format=t.answer_format, grader=t.grader,
                         num_eval=t.num_eval, num_train=t.num_train, eval_seed=t.eval_seed, seed=seed,
                         label=t.label, split_train=t.split_train, split_eval=t.split_eval)
    raise RaceError(f"task.name={t.name!r} is unknown: expected one of {', '.join(TASKS)}.")


# --- evaluation targets ---------------------------------------------------------------------


@dataclass
class Target:
    """One evaluation target: its items, how they are prompted and graded."""

    name: str  # eval/<name>/accuracy
    items: list[Item]
    grader: str  # race_cli.answers.graders name
    convention: Convention  # the answer form the prompt asks for
    min_new_tokens: int = 0  # completion cap its reference solutions need (0 = no need known)


def _solution_cap(items: list[Item]) -> int:
    """Tokens the longest reference solution takes a byte-level model (one per character), plus the margin."""
    return max(len(it.solution or "") for it in items) + COMPLETION_MARGIN


def _standard_target(name: str, cfg: Any, task: Any) -> Target:
    if name in ("arithmetic", "arithmetic-hard"):
        from race_cli.tasks.arithmetic import ArithmeticTask

        base = task if cfg.task.name == "arithmetic" else ArithmeticTask(num_train=0)
        src = base if name == "arithmetic" else base.harder()
        items = src.eval_items()
        cap = 0 if name == "arithmetic" else _solution_cap(items)  # the own target keeps rollout.max_new_tokens
        return Target(name, items, src.grader, src.convention, cap)
    if name == "gsm8k":
        from race_cli.tasks.gsm8k import GSM8KTask

        src = task if cfg.task.name == "gsm8k" else GSM8KTask()
        return Target(name, src.eval_items(), src.grader, src.convention, TARGET_COMPLETION_TOKENS[name])
    if name == "math500":
        from race_cli.tasks.math500 import Math500

        src = Math500()
        return Target(name, src.eval_items(), src.grader, src.convention, TARGET_COMPLETION_TOKENS[name])
    raise RaceError(f"eval.targets has {name!r}: expected some of {', '.join(TARGETS)}.")


def build_targets(cfg: Any, task: Any) -> list[Target]:
    """Every target of `eval.targets` (see the module docstring), item caps applied."""
    own = task_target_name(cfg.task)
    caps = dict(cfg.eval.max_items_by_target or {})
    out = []
    for name in target_names(cfg):
        if name == own and name not in TARGETS:  # a jsonl task's own held-out rows
            t = Target(name, task.eval_items(), task.grader, task.convention)
        else:
            t = _standard_target(name, cfg, task)
        n = caps.get(name, cfg.eval.max_items)
        if n is not None:
            t.items = t.items[: int(n)]
        out.append(t)
    return out
