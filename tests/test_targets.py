"""Evaluation targets and tasks by name (race_cli/tasks/targets.py), the harder arithmetic variant,
and task=jsonl (race_cli/tasks/jsonl.py): pure, no model."""

from __future__ import annotations

import gzip
import json

import pytest
from omegaconf import OmegaConf

from race_cli.config.compose import compose
from race_cli.errors import RaceError
from race_cli.tasks.arithmetic import ArithmeticTask, solve
from race_cli.tasks.jsonl import JsonlTask, default_label, read_answer
from race_cli.tasks.prompting import BOXED, HASHES
from race_cli.tasks.targets import build_targets, build_task, target_names


def _cfg(*overrides: str):
    return compose(["grid=none", *overrides])


# --- targets ----------------------------------------------------------------------------------

def test_default_target_is_the_training_tasks_own():
    cfg = _cfg()
    assert target_names(cfg) == ["arithmetic"]
    (t,) = build_targets(cfg, build_task(cfg))
    assert t.name == "arithmetic" and len(t.items) == 200 and t.items[0].id == "arith-eval-0"
    assert t.grader == "number" and t.convention is HASHES and t.min_new_tokens == 0


def test_all_shipped_targets_with_caps():
    cfg = _cfg("eval.targets=[arithmetic,arithmetic-hard,gsm8k,math500,gsm8k]", "eval.max_items=7",
               "+eval.max_items_by_target.math500=3")
    targets = build_targets(cfg, build_task(cfg))
    assert [t.name for t in targets] == ["arithmetic", "arithmetic-hard", "gsm8k", "math500"]  # duplicate dropped
    assert [len(t.items) for t in targets] == [7, 7, 7, 3]
    assert [t.grader for t in targets] == ["number", "number", "number", "math"]
    assert targets[3].convention is BOXED and targets[3].items[0].id == "math500-0"
    assert targets[2].items[0].id == "gsm8k-test-0"


def test_full_sets_without_caps():
    cfg = _cfg("eval.targets=[gsm8k,math500]")
    assert [len(t.items) for t in build_targets(cfg, build_task(cfg))] == [1319, 500]
    cfg = _cfg("task=gsm8k", "eval.targets=[gsm8k]")  # conf/task/gsm8k.yaml: num_eval null = all
    assert len(build_targets(cfg, build_task(cfg))[0].items) == 1319


def _operands(question: str) -> list[int]:
    return [int(x) for x in question.replace("-", "+").split("+")]


def test_own_target_follows_the_task_parameters():
    cfg = _cfg("task.max_operand=4", "task.num_eval=8", "task.num_train=16", "task.min_ops=1", "task.max_ops=2",
               "eval.targets=[arithmetic,arithmetic-hard]")
    own, hard = build_targets(cfg, build_task(cfg))
    assert len(own.items) == 8 and {len(solve(it.question)) for it in own.items} == {1, 2}
    assert {len(solve(it.question)) for it in hard.items} == {2}  # the longest chains only
    assert all(max(_operands(it.question)) <= 4 for it in hard.items)
    train_q = {it.question for it in build_task(cfg).train_items()}
    assert not train_q & {it.question for it in hard.items}  # held out of training


def test_default_task_items_are_unchanged():
    """arithmetic-hard must not move the training task's items (the zoo and the lead's tuning rely on them):
    these are the generator's draws before arithmetic-hard existed."""
    task = ArithmeticTask()
    assert [it.question for it in task.eval_items()[:2]] == ["53+0+28", "36+47+2"]
    # the training stream as it was drawn then ("arith-train"; jobs now draw from "arith-rl")
    assert ArithmeticTask(train_stream="arith-train").train_items()[5].question == "21-44-97"


def test_arithmetic_hard_is_the_longest_chains_held_out():
    task = ArithmeticTask(num_train=2000)
    hard = task.harder()
    assert hard.name == "arithmetic-hard" and hard.eval_items()[0].id == "arith-hard-0"
    assert {len(solve(it.question)) for it in hard.eval_items()} == {3}  # training chains have 2-3 steps
    assert all(max(_operands(it.question)) <= 99 for it in hard.eval_items())
    assert not {it.question for it in task.train_items()} & {it.question for it in hard.eval_items()}
    assert hard.train_items() == []
    assert {len(solve(it.question)) for it in ArithmeticTask(min_ops=2, max_ops=2).harder().eval_items()} == {3}
    # its completion cap covers every reference solution (byte tokens) plus the leading space and EOS
    cfg = _cfg("eval.targets=[arithmetic-hard]")
    (t,) = build_targets(cfg, build_task(cfg))
    assert t.min_new_tokens == max(len(it.solution) for it in t.items) + 2


def test_unknown_target_and_bad_caps_are_refused_at_compose():
    with pytest.raises(RaceError) as e:
        _cfg("eval.targets=[accuracy,mmlu]", "eval.max_items=0")
    msg = str(e.value)
    assert "eval.targets has 'accuracy'" in msg and "'mmlu'" in msg and "eval.max_items=0" in msg
    assert "arithmetic, arithmetic-hard, gsm8k, math500" in msg


def test_eval_and_logger_keys_are_typed_with_defaults():
    cfg = _cfg()
    assert OmegaConf.to_container(cfg.eval) == {
        "at": [0.0, 0.125, 0.25, 0.5, 0.75, 1.0], "every": None, "greedy": True, "batch_size": 200, "targets": [], "samples": 1, "temperature": None,
        "max_items": None, "max_items_by_target": {}, "max_new_tokens": None, "sample_seed": 0,
        "start_samples": None}  # None: the start is evaluated with eval.samples, like every other point
    assert cfg.logger == "none"
    for bad, key in (("eval.samples=0", "eval.samples"), ("logger=mlflow", "logger"),
                     ("eval.temperature=0", "eval.temperature")):
        with pytest.raises(RaceError, match=key):
            _cfg(bad)


# --- task=jsonl ------------------------------------------------------------------------------

def _rows(n: int) -> list[dict]:
    return [{"problem": f"What is {i} + {i}?", "solution": f"{i}+{i}={2 * i}\n#### {2 * i}",
             "final": f"$\\boxed{{{2 * i}}}$", "answer": 2 * i} for i in range(n)]


def _write(path, rows):
    text = "".join(json.dumps(r) + "\n" for r in rows)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def test_jsonl_holds_out_rows_and_reads_fields(tmp_path):
    path = _write(tmp_path / "My Set.jsonl", _rows(30))
    task = JsonlTask(path, question_field="problem", answer_field="answer", num_eval=5, eval_seed=1)
    train, held = task.train_items(), task.eval_items()
    assert task.name == "my-set" and (len(train), len(held)) == (25, 5)
    assert not {it.id for it in train} & {it.id for it in held}
    assert {it.id for it in train} | {it.id for it in held} == {f"my-set-{i}" for i in range(30)}
    assert [int(it.id.split("-")[-1]) for it in held] == sorted(int(it.id.split("-")[-1]) for it in held)
    first = held[0]
    i = int(first.id.split("-")[-1])
    assert first.question == f"What is {i} + {i}?" and first.answer == str(2 * i)
    same = JsonlTask(path, question_field="problem", num_eval=5, eval_seed=1, seed=9)
    assert same.eval_items() == held  # held-out rows depend on eval_seed only
    assert task.grader == "number" and task.convention is HASHES


@pytest.mark.parametrize("field, fmt, grader", [("solution", "hashes", "number"), ("final", "boxed", "math")])
def test_jsonl_answer_formats(tmp_path, field, fmt, grader):
    path = _write(tmp_path / "d.jsonl.gz", _rows(6))
    task = JsonlTask(path, question_field="problem", answer_field=field, answer_format=fmt, grader=grader,
                     num_eval=2, label="mine")
    assert sorted(int(it.answer) for it in task.train_items() + task.eval_items()) == [0, 2, 4, 6, 8, 10]
    assert task.convention is (BOXED if grader == "math" else HASHES)


def test_jsonl_eval_path(tmp_path):
    train = _write(tmp_path / "train.jsonl", _rows(6))
    test = _write(tmp_path / "test.jsonl", _rows(3))
    task = JsonlTask(train, eval_path=test, question_field="problem", num_eval=None, label="t")
    assert len(task.train_items()) == 6 and [it.id for it in task.eval_items()] == ["t-eval-0", "t-eval-1", "t-eval-2"]


def test_jsonl_bad_input(tmp_path):
    with pytest.raises(RaceError) as e:
        JsonlTask(str(tmp_path / "none.jsonl"), answer_format="latex", grader="exact", label="Bad Name")
    assert len(e.value.problems) == 4  # every problem at once
    with pytest.raises(RaceError, match="built-in target"):
        JsonlTask(_write(tmp_path / "gsm8k.jsonl", _rows(3)))
    path = _write(tmp_path / "d.jsonl", _rows(4))
    with pytest.raises(RaceError, match=r"d\.jsonl:1: no question in field 'question'.*problem"):
        JsonlTask(path).train_items()
    with pytest.raises(RaceError, match="leaves none to train on"):
        JsonlTask(path, question_field="problem", num_eval=4).train_items()


def test_read_answer_and_labels():
    assert read_answer("x\n#### 1,080", "hashes") == "1,080" and read_answer("no hashes", "hashes") is None
    assert read_answer("so \\boxed{\\frac{1}{2}}.", "boxed") == "\\frac{1}{2}" and read_answer(7, "raw") == "7"
    assert default_label("hf:POLARIS-Project/Polaris-Dataset-53K") == "polaris-dataset-53k"
    assert default_label("/x/Train Set.jsonl.gz") == "train-set"


def test_jsonl_hub_rows(monkeypatch):
    import sys
    import types

    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return [{"problem": "1+1?", "answer": "2"}, {"problem": "2+2?", "answer": "4"}, {"problem": "3+3?", "answer": "6"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    task = JsonlTask("hf:org/Set:main", question_field="problem", num_eval=1)
    assert len(task.train_items()) == 2 and len(task.eval_items()) == 1 and task.name == "set"
    assert calls == [("org/Set", "main", "train")]


def test_jsonl_target_is_named_by_label(tmp_path):
    path = _write(tmp_path / "poly.jsonl", _rows(12))
    cfg = _cfg("task=jsonl", f"task.path={path}", "task.question_field=problem", "task.num_eval=4",
               "eval.targets=[poly,arithmetic]")
    own, arith = build_targets(cfg, build_task(cfg))
    assert own.name == "poly" and len(own.items) == 4 and arith.items[0].id == "arith-eval-0"
