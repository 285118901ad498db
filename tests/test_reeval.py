"""Re-evaluating finished jobs on more items (engine/reeval.py, pool/reeval.py), with the tiny random Qwen2 of
test_job.py: two real jobs of a sweep, re-evaluated through the pool as real subprocesses; the added items are
checked against a full evaluation of the extended item list, so the pairing (common random numbers) holds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.engine.train import train_main
from race_cli.errors import RaceError
from race_cli.io import atomic_write_json, read_json
from test_job import build_model, overrides

REPO = Path(__file__).resolve().parent.parent
EXTRA = {"task.num_eval": 6, "task.num_train": 8, "eval.samples": 2, "eval.greedy": "false",
         "eval.start_samples": 4, "budget.max_iterations": 2, "eval.every": "null"}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A sweep of two finished jobs (seeds 0 and 1) sharing their start evaluation."""
    model = build_model(tmp_path_factory.mktemp("tiny") / "model")
    sweep = tmp_path_factory.mktemp("sweep") / "s"
    (sweep / "jobs").mkdir(parents=True)
    atomic_write_json(sweep / "plan.json", {"jobs": []})
    for seed in (0, 1):
        assert train_main(overrides(model, **EXTRA, seed=seed), out=sweep / "jobs" / f"j_s{seed}") == 0
    return sweep


def _pool(sweep: Path, items: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "race_cli", "evaluate", str(sweep), "--items", str(items),
                           "--workers", "1"], capture_output=True, text=True, cwd=REPO, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"})


def _full_evaluation(job_dir: Path, items: int, final: bool) -> dict:
    """The job's start or final policy scored on the whole extended list in one evaluation (the reference)."""
    from race_cli.config.compose import load_job_config
    from race_cli.cost.budget import Ledger
    from race_cli.engine.job import Job
    from race_cli.engine.reeval import extended_config, load_final_policy

    job = Job(extended_config(load_job_config(job_dir / ".hydra" / "config.yaml"), items), job_dir, [],
              log=lambda m: None)
    job.setup()
    job.ledger = Ledger()
    if not final:
        return job._evaluate_start()
    load_final_policy(job.policy.model, job_dir, bool(job.cfg.lora.enabled))
    job.rollout.sync(job.policy.model)
    return job.evaluate()


def test_reevaluation_extends_the_summary_and_pairs_with_a_full_evaluation(sweep):
    res = _pool(sweep, 12)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "re-evaluating 2 of 2 job(s) on 12 items per target" in res.stdout
    from race_cli.tasks.arithmetic import ArithmeticTask

    mores = {}
    for seed in (0, 1):
        job = sweep / "jobs" / f"j_s{seed}"
        s, m = read_json(job / "summary.json"), read_json(job / "eval-more.json")
        mores[seed] = m
        assert read_json(job / "status.json")["state"] == "done"  # the training's record is left alone
        ev, ev0 = m["eval"]["items"]["arithmetic"], m["eval_initial"]["items"]["arithmetic"]
        base = s["eval_items"]["arithmetic"]
        assert m["base_items"] == {"arithmetic": 6} and m["items"] == 12
        assert ev["ids"][:6] == base["ids"] and ev["scores"][:6] == base["scores"]  # what the race saw, kept
        assert ev0["ids"] == ev["ids"] and ev0["scores"][:6] == s["eval_items_initial"]["arithmetic"]["scores"]
        # the added items: the extended list's 7th to 12th, less those that were this job's training questions
        task = ArithmeticTask(seed=seed, num_train=8, num_eval=12, min_ops=1, max_ops=1, max_operand=4)
        trained = {it.question for it in ArithmeticTask(seed=seed, num_train=8, num_eval=6, min_ops=1, max_ops=1,
                                                        max_operand=4).train_items()}
        added = task.eval_items()[6:]
        assert ev["ids"][6:] == [it.id for it in added if it.question not in trained]
        assert m["excluded"]["arithmetic"] == [it.id for it in added if it.question in trained]
        # common random numbers: the added items score exactly as in one evaluation of all 12 items
        for final, got in ((True, ev), (False, ev0)):
            full = _full_evaluation(job, 12, final)["items"]["arithmetic"]
            ref = dict(zip(full["ids"], full["scores"]))
            assert [ref[i] for i in got["ids"]] == got["scores"], (seed, final)
        assert m["eval"]["accuracy"]["arithmetic"] == pytest.approx(sum(ev["scores"]) / len(ev["scores"]))
    assert len(list((sweep / "start-evals").glob("*.json"))) == 2  # the start, and its added items: once each
    assert mores[0]["start_key"] == mores[1]["start_key"]
    again = _pool(sweep, 12)  # a rerun redoes nothing
    assert again.returncode == 0 and "re-evaluating 0 of 2 job(s)" in again.stdout


def test_the_ranking_reads_the_added_items_where_every_job_has_them(sweep):
    from race_cli.report.more_items import more_items_used, with_more_items
    from race_cli.report.rank import rank_all
    from race_cli.report.table import read_sweeps

    if not (sweep / "jobs" / "j_s1" / "eval-more.json").exists():
        assert _pool(sweep, 12).returncode == 0
    data = read_sweeps([sweep])
    ids = [set(read_json(sweep / "jobs" / f"j_s{s}" / "eval-more.json")["eval"]["items"]["arithmetic"]["ids"])
           for s in (0, 1)]
    common = len(ids[0] & ids[1])
    assert more_items_used(data, "arithmetic", [0, 1]) == common
    more, used = with_more_items(data, [])
    assert list(used.values()) == [common]
    method = rank_all(more, "arithmetic", [], n_boot=200)["method"].iloc[0]
    n = len(ids[0] | ids[1])
    assert method == (f"items (paired, n={n}) × seeds" if common == n else
                      f"items (paired, {common} common ids of {max(map(len, ids))}) × seeds")
    assert rank_all(data, "arithmetic", [], n_boot=200)["method"].iloc[0] == "items (paired, n=6) × seeds"
    # a job without a re-evaluation: the ranking keeps every job's summary items
    data.items_more.pop(next(k for k in data.items_more if k[1] == "j_s1"))
    assert with_more_items(data, [])[1] == {}


def test_an_item_list_that_does_not_extend_its_start_is_refused():
    from types import SimpleNamespace

    from race_cli.engine.reeval import added_items

    it = [SimpleNamespace(id=f"x-{i}", question=f"q{i}") for i in range(5)]
    target = SimpleNamespace(name="t", items=it)
    assert added_items(target, ["x-0", "x-1"], 4, {"q2"}) == ([3], ["x-2"])
    with pytest.raises(RaceError, match="not the ones summary.json holds"):
        added_items(target, ["x-1", "x-0"], 4, set())


def test_a_rerun_skips_only_jobs_scored_on_exactly_the_items_asked(tmp_path):
    from race_cli.pool.reeval import has_items

    atomic_write_json(tmp_path / "eval-more.json", {"items": 12})
    assert has_items(tmp_path, 12)
    assert not has_items(tmp_path, 10) and not has_items(tmp_path, 20)  # a race's look reads exactly its own count
    (tmp_path / "eval-more.json").write_text("{torn")
    assert not has_items(tmp_path, 12)
