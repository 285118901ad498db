"""The synthetic arithmetic task: deterministic, held-out set fixed and disjoint, every solution right."""

from __future__ import annotations

import pytest

from race_cli.errors import RaceError
from race_cli.rewards.rule import rule_reward
from race_cli.tasks.arithmetic import ArithmeticTask, parse_solution, render_solution, solve


def test_worked_example_by_hand():
    # 45+74 = 119, 119-27 = 92
    assert solve("45+74-27") == [(45, "+", 74, 119), (119, "-", 27, 92)]
    assert render_solution(solve("45+74-27")) == "45+74=119\n119-27=92\n#### 92"
    # negatives: 3-50 = -47, -47-9 = -56
    assert render_solution(solve("3-50-9")) == "3-50=-47\n-47-9=-56\n#### -56"
    with pytest.raises(ValueError):
        solve("4*5+1")


def test_deterministic_and_ids():
    a, b = ArithmeticTask(seed=3, num_train=500), ArithmeticTask(seed=3, num_train=500)
    assert a.train_items() == b.train_items() and a.eval_items() == b.eval_items()
    assert [it.id for it in a.eval_items()] == [f"arith-eval-{i}" for i in range(200)]
    assert a.train_items()[7].id == "arith-train-7"
    assert ArithmeticTask(seed=4, num_train=500).train_items() != a.train_items()


def test_eval_depends_only_on_eval_seed_and_is_disjoint_from_train():
    a, b = ArithmeticTask(seed=0, num_train=3000), ArithmeticTask(seed=1, num_train=3000)
    assert a.eval_items() == b.eval_items()
    assert ArithmeticTask(eval_seed=99).eval_items() != a.eval_items()
    for task in (a, b):
        train_q = [it.question for it in task.train_items()]
        eval_q = [it.question for it in task.eval_items()]
        assert len(set(train_q)) == 3000 and len(set(eval_q)) == 200
        assert not set(train_q) & set(eval_q)


def test_every_solution_is_right_short_and_recomputes():
    task = ArithmeticTask(num_train=2000)
    for it in task.train_items() + task.eval_items():
        steps = parse_solution(it.solution)
        assert 2 <= len(steps) <= 3 and steps == solve(it.question)
        for a, op, b, r in steps:  # each written step is true arithmetic
            assert r == (a + b if op == "+" else a - b)
        assert [s[0] for s in steps[1:]] == [s[3] for s in steps[:-1]]  # each step starts from the last result
        assert it.answer == str(steps[-1][3])
        assert rule_reward(" " + it.solution, it.answer) == 1.0  # as the policy writes it after "A:"
        assert len((" " + it.solution).encode()) <= 48  # bytes = byte-tokenizer tokens
    assert any(int(it.answer) < 0 for it in task.train_items())


def test_bad_settings_are_refused():
    with pytest.raises(RaceError, match="min_ops"):
        ArithmeticTask(min_ops=3, max_ops=2)
    with pytest.raises(RaceError, match="too many distinct"):
        ArithmeticTask(max_operand=1, min_ops=1, max_ops=1, num_train=100)
