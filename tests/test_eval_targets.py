"""Jobs with several evaluation targets, task=jsonl and logger=tensorboard, end to end on CPU with the
tiny random Qwen2 of test_job.py (a few seconds each): the files of docs/files.md's eval contract."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.engine.train import train_main
from race_cli.io import read_json, read_jsonl
from test_job import build_model, overrides

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("tiny") / "model")


def _check_contract(job: Path, targets: list[str], n_items: dict[str, int]) -> dict:
    """The eval files every job writes (docs/files.md), checked against each other; returns summary.json."""
    rows = read_jsonl(job / "metrics.jsonl")
    evals = [r for r in rows if any(k.startswith("eval/") for k in r)]
    assert evals[0]["iteration"] == 0 and evals[-1]["iteration"] == rows[-1]["iteration"]
    for r in evals:
        assert {k for k in r if k.startswith("eval/")} == {f"eval/{t}/accuracy" for t in targets}
    s = read_json(job / "summary.json")
    assert s["targets"] == targets
    for t in targets:
        final, first = s["eval_items"][t], s["eval_items_initial"][t]
        assert len(final["ids"]) == n_items[t] and first["ids"] == final["ids"]
        assert all(0.0 <= x <= 1.0 for x in final["scores"] + first["scores"])
        assert s["eval"][t] == pytest.approx(sum(final["scores"]) / n_items[t]) == evals[-1][f"eval/{t}/accuracy"]
        assert s["eval_initial"][t] == pytest.approx(sum(first["scores"]) / n_items[t]) == evals[0][f"eval/{t}/accuracy"]
    led = read_json(job / "ledger.json")["eval"]
    assert set(led["targets"]) == set(targets)
    assert sum(v["flops"] for v in led["targets"].values()) == pytest.approx(led["flops"])
    assert all(v["flops"] > 0 and v["items"] == n_items[t] for t, v in led["targets"].items())
    return s


def test_gsm8k_and_math500_targets_through_race_train(model_dir, tmp_path):
    job = tmp_path / "job"
    cmd = [sys.executable, "-m", "race_cli", "train",
           *overrides(model_dir, **{"eval.targets": "[gsm8k,math500]", "eval.max_items": 4,
                                    "+eval.max_items_by_target.math500": 3, "budget.max_iterations": 2}),
           "--out", str(job)]
    res = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    s = _check_contract(job, ["gsm8k", "math500"], {"gsm8k": 4, "math500": 3})
    assert s["eval_items"]["gsm8k"]["ids"] == [f"gsm8k-test-{i}" for i in range(4)]
    assert s["eval_items"]["math500"]["ids"] == ["math500-0", "math500-1", "math500-2"]
    assert "initial eval: gsm8k" in res.stdout and "math500" in res.stdout

    from race_cli.report.table import read_job  # the report's reader takes the summary as it is

    row, items, _ = read_job(job, "sweep")
    assert row["readable"], row["problem"]
    assert row["eval/gsm8k"] == s["eval"]["gsm8k"] and row["eval/math500"] == s["eval"]["math500"]
    assert set(items) == {(stage, t) for stage in ("initial", "final") for t in ("gsm8k", "math500")}


def test_task_jsonl_trains_and_evaluates(model_dir, tmp_path):
    rows = [{"q": f"{a}+{b}", "a": str(a + b)} for a in range(5) for b in range(5)]
    path = tmp_path / "sums.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    job = tmp_path / "job"
    ov = overrides(model_dir, **{"task": "jsonl", "task.path": str(path), "task.question_field": "q",
                                 "task.answer_field": "a", "task.num_eval": 6, "eval.targets": "[sums,arithmetic]"})
    ov = [o for o in ov if not o.startswith(("task.max_operand", "task.min_ops", "task.max_ops", "task.num_eval=8"))]
    assert train_main(ov, out=job) == 0
    s = _check_contract(job, ["sums", "arithmetic"], {"sums": 6, "arithmetic": 200})
    assert s["condition"]["task"] == "jsonl"
    metrics = read_jsonl(job / "metrics.jsonl")
    assert [r["iteration"] for r in metrics] == [0, 1, 2, 3] and metrics[1]["train/reward_std"] >= 0
    assert all(i.startswith("sums-") for i in s["eval_items"]["sums"]["ids"])


def test_sampled_evaluation_scores_fractions(model_dir, tmp_path):
    job = tmp_path / "job"
    ov = overrides(model_dir, **{"eval.samples": 3, "eval.temperature": 2.0, "budget.max_iterations": 1})
    assert train_main(ov, out=job) == 0
    s = _check_contract(job, ["arithmetic"], {"arithmetic": 8})
    scores = s["eval_items"]["arithmetic"]["scores"] + s["eval_items_initial"]["arithmetic"]["scores"]
    assert all(abs(3 * x - round(3 * x)) < 1e-9 for x in scores)  # k = 3: a score is 0, 1/3, 2/3 or 1
    assert any(0 < x < 1 for x in scores)  # this policy gets some samples right and others wrong
    led = read_json(job / "ledger.json")
    # evaluation FLOPs (3 completions per item) stay out of the budget: the charged phases are the same
    assert led["actual"]["flops"]["total"] == pytest.approx(sum(led["actual"]["flops"][p] for p in ("rollout", "update", "reward")))


def test_tensorboard_events_hold_the_metrics(model_dir, tmp_path):
    pytest.importorskip("tensorboard", reason="logger=tensorboard needs the tensorboard extra")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    job = tmp_path / "job"
    ov = overrides(model_dir, **{"logger": "tensorboard", "eval.targets": "[arithmetic,arithmetic-hard]",
                                 "eval.max_items": 4})
    assert train_main(ov, out=job) == 0
    acc = EventAccumulator(str(job / "tensorboard"))
    acc.Reload()
    events = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    expected: dict[str, dict[int, float]] = {}
    for row in read_jsonl(job / "metrics.jsonl"):
        for k, v in row.items():
            if k != "iteration" and isinstance(v, (int, float)) and not isinstance(v, bool):
                expected.setdefault(k, {})[row["iteration"]] = v
    assert set(events) == set(expected)
    assert "eval/arithmetic-hard/accuracy" in events and "train/kl" not in events  # kl is null with beta = 0
    for tag, by_step in expected.items():
        assert events[tag] == pytest.approx(by_step, rel=1e-6), tag  # float32 in the event file
