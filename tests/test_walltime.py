"""Planned wall time (cost/walltime.py, plan/wall.py, plan/measured.py), the informative share the plan
assumes, and race run's time left. Expected values are worked out by hand in the comments."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from race_cli.cost import walltime as W


def test_eval_points_start_every_and_end():
    assert W.eval_points(947, 100) == 11  # 0, 100, ..., 900 (10), and the end at 947
    assert W.eval_points(200, 100) == 3  # 0, 100, 200: the end is an every-point
    assert W.eval_points(5, 100) == 2  # start and end
    assert W.eval_points(947, None, [0, 0.25, 0.5, 0.75, 1]) == 5  # eval.at alone: its distinct fractions
    assert W.eval_points(947, None, [0.5]) == 3  # the start and the end are always evaluated
    assert W.eval_points(200, 100, [0.5]) == 4  # 0, 0.5·C, 1·C, and the every-point at 100 (counted apart)


def test_job_seconds_adds_phases_eval_and_setup():
    r = W.Rates({"rollout": 1e9, "update": 4e9, "reward": 1e9}, eval_s=2.0, overhead_s=3.0, source="test")
    t = W.job_seconds({"rollout": 1e10, "update": 2e10, "reward": 0.0}, r, iterations=20, eval_every=10)
    # 1e10/1e9 = 10 s rollout, 2e10/4e9 = 5 s update, no reward; evals at 0, 10, 20 = 3 x 2 s; setup 3 s
    assert t.phases == {"rollout": 10.0, "update": 5.0, "reward": 0.0}
    assert t.eval == 6.0 and t.total == 24.0


def test_an_unmeasured_models_evaluation_is_priced_at_its_rollouts_seconds_per_completion():
    """Rates assumed for a model nobody measured: 1e12 rollout FLOPs at 1e10 FLOP/s = 100 s for 1,000
    training completions, so a point of 200 evaluation completions takes 20 s, and eval.at [0, 0.5, 1]
    is 3 points: 60 s (a fixed seconds-per-point figure from a tiny model would have said 3 x 2.06 s).
    Measured rates keep their own seconds per point."""
    assumed = W.Rates({"rollout": 1e10, "update": 1e10, "reward": 1e10}, eval_s=2.06, overhead_s=0.0,
                      source="assumed: big-model not measured, tiny-m's rates", eval_assumed=True)
    t = W.job_seconds({"rollout": 1e12}, assumed, iterations=10, eval_at=[0, 0.5, 1], generations=(200, 1000))
    assert t.phases["rollout"] == pytest.approx(100.0) and t.eval == pytest.approx(60.0)
    measured = W.Rates(assumed.flops_per_s, eval_s=2.06, overhead_s=0.0, source="measured defaults (idle 2 cores)")
    t = W.job_seconds({"rollout": 1e12}, measured, iterations=10, eval_at=[0, 0.5, 1], generations=(200, 1000))
    assert t.eval == pytest.approx(3 * 2.06)


def test_evaluation_is_scaled_to_the_jobs_own_completions_per_point():
    # eval_s 2.68 s was measured at 1,600 completions a point (2 targets x 400 items x 2 samples); a job that
    # evaluates 200 items greedily (200 completions a point) pays 2.68 x 200 / 1600 = 0.335 s a point
    r = W.Rates({"rollout": 1e9, "update": 1e9, "reward": 1e9}, eval_s=2.68, overhead_s=0.0, source="test",
                eval_completions=1600)
    t = W.job_seconds({"rollout": 0.0, "update": 0.0, "reward": 0.0}, r, iterations=10, eval_at=[0, 1],
                      generations=(200, 1000))
    assert t.eval == pytest.approx(2 * 0.335)
    assert W.CPU_RATES["tiny-s"].eval_completions == 1600  # the default grid's evaluation, where eval_s comes from
    unknown = W.Rates(r.flops_per_s, eval_s=2.68, overhead_s=0.0, source="test")  # measured at an unknown size
    assert W.job_seconds({}, unknown, iterations=10, eval_at=[0, 1], generations=(200, 1000)).eval == pytest.approx(5.36)


def test_grid_seconds_is_the_pools_longest_first_schedule():
    # 5 -> A (5), 4 -> B (4), 3 -> B (7), 3 -> A (8), 3 -> B (10): the grid ends at 10
    assert W.grid_seconds([3, 5, 3, 4, 3], slots=2) == 10
    assert W.grid_seconds([3, 5, 3, 4, 3], slots=1) == 18
    assert W.grid_seconds([], slots=2) == 0


def test_cpu_workers_follow_the_pool():
    from race_cli.plan.wall import cpu_workers
    from race_cli.pool.local import default_workers

    for cores, jobs in ((2, 24), (2, 1), (16, 5), (1, 3)):
        assert cpu_workers(cores, jobs) == default_workers(cores, jobs)


def test_gpu_kind_and_memory_bound_rollout():
    assert W.gpu_kind("NVIDIA H100 80GB HBM3").name == "H100"
    assert W.gpu_kind("NVIDIA H200").name == "H200" and W.gpu_kind("Tesla T4") is None
    k = W.GPU_KINDS["H100"]
    # 1e9 weight bytes per step / (3.35e12 B/s x 0.6) = 0.4975 ms per step; 48 steps = 23.9 ms; the matmuls of
    # 1e12 FLOPs at 0.35 x 989e12 would take 2.9 ms: the rollout is memory-bound, 1e12 FLOPs in 23.9 ms
    r = W.gpu_rates(k, weight_bytes=1e9, decode_steps=48, rollout_flops=1e12)
    assert r.flops_per_s["rollout"] == pytest.approx(1e12 / (48 * 1e9 / (3.35e12 * 0.6)), rel=1e-12)
    assert r.flops_per_s["update"] == pytest.approx(0.35 * 989e12)


def _sweep(tmp: Path, jobs: dict[str, dict]) -> Path:
    """A sweep folder written by hand: plan.json rows, and per job status/ledger/summary as given."""
    sweep = tmp / "sw"
    (sweep / "jobs").mkdir(parents=True)
    rows = []
    for jid, j in jobs.items():
        d = sweep / "jobs" / jid
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "config.yaml").write_text("seed: 0\n")
        rows.append({"job_id": jid, **j["row"]})
        for name in ("status", "ledger", "summary"):
            if name in j:
                (d / f"{name}.json").write_text(json.dumps(j[name]))
    (sweep / "plan.json").write_text(json.dumps(rows))
    return sweep


def _ledger(rollout, update, secs, eval_s, runs, trained, total):
    return {"actual": {"flops": {"rollout": rollout, "update": update, "reward": 0.0},
                       "seconds": {"rollout": secs[0], "update": secs[1], "reward": 0.0, "total": sum(secs)},
                       "rows": {"trained": trained, "total": total}},
            "eval": {"seconds": eval_s, "runs": runs}}


def test_calibrate_and_informative_from_a_sweep(tmp_path):
    from race_cli.plan.measured import sweep_informative, sweep_rates

    row = {"model": "tiny-s", "reward": "rule", "group_size": 4, "updates_per_batch": 1}
    done = lambda start, end: {"state": "done", "attempts": 1, "started": start, "finished": end}
    sweep = _sweep(tmp_path, {
        "a": {"row": row, "status": done("2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"),
              "ledger": _ledger(1e11, 2e11, (20.0, 10.0), 10.0, 2, 300, 1000), "summary": {"informative_share": 0.3}},
        "b": {"row": row, "status": done("2026-01-01T00:00:00Z", "2026-01-01T00:01:40Z"),
              "ledger": _ledger(3e11, 2e11, (40.0, 30.0), 20.0, 3, 500, 1000)},  # no summary: ledger rows 0.5
        "c": {"row": row | {"model": "tiny-m"}, "status": {"state": "running", "attempts": 1}},  # not finished
    })
    rates = sweep_rates(sweep)
    assert set(rates) == {"tiny-s"}
    r = rates["tiny-s"]
    # pooled: rollout 4e11 FLOPs / 60 s, update 4e11 / 40 s; eval 30 s / 5 points; setup (60-40) + (100-90) = 30 / 2 jobs
    assert r.flops_per_s["rollout"] == pytest.approx(4e11 / 60) and r.flops_per_s["update"] == pytest.approx(1e10)
    assert r.flops_per_s["reward"] == W.CPU_RATES["tiny-s"].flops_per_s["reward"]  # not measured: the default
    assert r.eval_s == pytest.approx(6.0) and r.overhead_s == pytest.approx(15.0)
    shares = sweep_informative(sweep)
    assert shares[("tiny-s", "rule", 4, 1)] == pytest.approx(0.4) and shares[("rule",)] == pytest.approx(0.4)


def test_a_folder_that_is_not_a_finished_sweep_is_refused(tmp_path):
    from race_cli.errors import RaceError
    from race_cli.plan.measured import sweep_rates

    with pytest.raises(RaceError, match="not a sweep folder"):
        sweep_rates(tmp_path)
    sweep = _sweep(tmp_path, {"a": {"row": {"model": "tiny-s"}, "status": {"state": "pending", "attempts": 0}}})
    with pytest.raises(RaceError, match="no finished job"):
        sweep_rates(sweep)


def test_plan_uses_the_measured_informative_share_and_keeps_the_worst_case():
    from race_cli.cost.budget import INFORMATIVE_SHARE_BY_MODEL, iteration_spec, total
    from race_cli.config.compose import compose
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose(["grid=none", "reward=rule"]), resolve=True)
    spec = iteration_spec(cfg, "lean")
    share = INFORMATIVE_SHARE_BY_MODEL[("rule", "tiny-s")]  # the default model
    assert spec.trained_share == share
    full = spec.cost(trained_share=1.0)
    assert spec.cost()["update"].model == pytest.approx(full["update"].model * share, rel=1e-12)
    assert spec.cost()["rollout"] == full["rollout"]
    # the live stop rule's worst case trains every row: a job cannot overrun whatever its rewards
    assert spec.worst_case(8, 40) == total(spec.cost(8, prompt_len=40, completion_len=spec.max_new_tokens,
                                                     trained_share=1.0))
    cfg["grpo"]["beta"] = 0.04  # every row carries a KL gradient
    assert iteration_spec(cfg, "lean").trained_share == 1.0
    cfg["grpo"]["beta"], cfg["grpo"]["expected_informative_share"] = 0.0, 0.25
    assert iteration_spec(cfg, "lean").trained_share == 0.25


def test_time_left_uses_planned_seconds_over_the_slots(tmp_path):
    from race_cli.pool.display import Progress

    p = Progress(tmp_path, planned={"a": 100.0, "b": 50.0, "c": 50.0, "d": 10.0},
                 states={"a": "running", "b": "pending", "c": "pending", "d": "done"},
                 planned_seconds={"a": 100.0, "b": 60.0, "c": 40.0, "d": 20.0}, slots=2)
    p.spent["a"] = 50.0  # half of a's FLOPs: 50 s of it left
    # left [50, 60, 40] longest first on 2 slots: 60 -> A, 50 -> B, 40 -> B (90): 90 s
    assert p.eta() == pytest.approx(90.0)
    p.took["d"] = 24.0  # d took 24 s for 20 planned: this session runs 1.2x the plan
    assert p.eta() == pytest.approx(108.0)


# --- the rates this machine's own sweeps measured (plan/learned.py) ------------------------------------


def _cpu_sweep(tmp: Path, model: str = "tiny-s", device: str = "cpu") -> Path:
    """Two finished jobs of `model` on `device`: the sweep test_calibrate_and_informative_from_a_sweep reads."""
    row = {"model": model, "reward": "rule", "group_size": 4, "updates_per_batch": 1}
    done = lambda start, end: {"state": "done", "attempts": 1, "device": device, "started": start, "finished": end}
    return _sweep(tmp, {
        "a": {"row": row, "status": done("2026-01-01T00:00:00Z", "2026-01-01T00:01:00Z"),
              "ledger": _ledger(1e11, 2e11, (20.0, 10.0), 10.0, 2, 300, 1000)},
        "b": {"row": row, "status": done("2026-01-01T00:00:00Z", "2026-01-01T00:01:40Z"),
              "ledger": _ledger(3e11, 2e11, (40.0, 30.0), 20.0, 3, 500, 1000)},
    })


def test_a_finished_cpu_sweep_is_kept_per_machine_and_per_worker_count(tmp_path, monkeypatch):
    from race_cli.plan.learned import learn, machine_rates
    from race_cli.plan.measured import sweep_rates

    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    path = tmp_path / "cpu-rates.json"
    sweep = _cpu_sweep(tmp_path / "one")
    assert learn(sweep, 2, path=path) == ["tiny-s"]
    kept, measured = machine_rates(2, path=path)["tiny-s"], sweep_rates(sweep)["tiny-s"]
    # the figures test_calibrate_and_informative_from_a_sweep works out by hand, stored and read back
    assert kept.flops_per_s == measured.flops_per_s and kept.flops_per_s["update"] == pytest.approx(1e10)
    assert (kept.eval_s, kept.overhead_s) == (pytest.approx(6.0), pytest.approx(15.0))
    assert str(sweep.resolve()) in kept.source and "--reprobe" in kept.source
    assert machine_rates(1, path=path) == {}  # one job alone runs faster than two sharing two cores
    # a later sweep of another model adds to what is kept; the same model is replaced by the latest
    assert learn(_cpu_sweep(tmp_path / "two", "tiny-m"), 2, path=path) == ["tiny-m"]
    assert set(machine_rates(2, path=path)) == {"tiny-s", "tiny-m"}
    monkeypatch.setenv("RACE_CPU_PROBE", "off")  # the reference rates: nothing read, nothing written
    assert machine_rates(2, path=path) == {} and learn(sweep, 2, path=tmp_path / "other.json") == []
    assert not (tmp_path / "other.json").exists()


def test_gpu_jobs_and_unusable_records_are_not_learned(tmp_path, monkeypatch):
    from race_cli.plan import cpu_probe
    from race_cli.plan.learned import learn, machine_rates

    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    path = tmp_path / "cpu-rates.json"
    assert learn(_cpu_sweep(tmp_path / "gpu", device="cuda:0"), 1, path=path) == [] and not path.exists()
    assert learn(tmp_path, 1, path=path) == []  # not a sweep folder: nothing to learn, no error
    assert learn(_cpu_sweep(tmp_path / "cpu"), 2, path=path) == ["tiny-s"]
    data = json.loads(path.read_text())
    record = data["machines"][cpu_probe.machine_key()]["tiny-s"]
    for bad in ({"eval_s": float("nan")}, {"overhead_s": -1.0}, {"flops_per_s": {"rollout": "fast"}},
                {"eval_completions": 0}, {"eval_s": True}, {"overhead_s": False}):
        data["machines"][cpu_probe.machine_key()]["tiny-s"] = record | bad
        path.write_text(json.dumps(data))
        assert machine_rates(2, path=path) == {}, bad
    path.write_text("not json")
    assert machine_rates(2, path=path) == {}


def test_reprobe_forgets_what_the_machine_learned(tmp_path, monkeypatch):
    from race_cli.plan import cpu_probe
    from race_cli.plan.learned import learn, machine_rates

    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    learned = tmp_path / "cpu-rates.json"
    assert learn(_cpu_sweep(tmp_path / "s"), 2, path=learned) == ["tiny-s"]
    monkeypatch.setenv("RACE_CPU_PROBE", "refresh")  # race plan --reprobe
    assert machine_rates(2, path=learned) == {}
    assert cpu_probe.machine_key() not in json.loads(learned.read_text())["machines"]
    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    assert machine_rates(2, path=learned) == {}  # gone, not only hidden


def test_a_plan_prices_cpu_jobs_at_what_this_machine_measured(tmp_path, monkeypatch):
    from race_cli.plan import cpu_probe
    from race_cli.plan.build import build_plan
    from race_cli.plan.learned import learn
    from race_cli.plan.measured import sweep_rates

    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    monkeypatch.setenv("RACE_CACHE", str(tmp_path / "cache"))

    def no_probe(*_, **__):
        raise AssertionError("the probe ran although this machine's own rates were kept")

    monkeypatch.setattr(cpu_probe, "run_probe", no_probe)
    sweep = _cpu_sweep(tmp_path / "s")
    assert learn(sweep, 1) == ["tiny-s"]  # grid=none: one job, one worker
    job = build_plan(["grid=none"], race=False).jobs[0]
    assert job.config["model"]["name"] == "tiny-s" and "measured on this machine" in job.wall.source
    b, c = job.budget, job.config
    by_hand = W.job_seconds({p: f.model for p, f in b.flops().items()}, sweep_rates(sweep)["tiny-s"],
                            iterations=b.iterations, eval_every=c["eval"].get("every"), eval_at=c["eval"].get("at") or (),
                            generations=None)
    assert job.wall.phases == pytest.approx(by_hand.phases) and job.wall.overhead == pytest.approx(15.0)
    # --calibrate-from still comes first
    other = build_plan(["grid=none"], race=False, rates=sweep_rates(sweep)).jobs[0]
    assert other.wall.source.startswith("measured: ")


def test_race_run_says_what_it_kept_for_the_next_plan(tmp_path, monkeypatch):
    from race_cli.pool.run import learn_line

    monkeypatch.setenv("RACE_CACHE", str(tmp_path / "cache"))
    sweep = _cpu_sweep(tmp_path / "s")
    monkeypatch.setenv("RACE_CPU_PROBE", "off")
    assert learn_line(sweep, 2) == "race plan --calibrate-from this sweep plans the next one on its own rates."
    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    hint = "race plan --calibrate-from this sweep plans the next one on its own rates."
    assert learn_line(sweep, 0) == hint and not (tmp_path / "cache").exists()  # GPU jobs only: nothing learned
    assert learn_line(sweep, 2) == ("The next race plan on this machine prices tiny-s at the rates this sweep "
                                    "measured with 2 worker(s) (race plan --reprobe forgets them).")
    assert (tmp_path / "cache" / "cpu-rates.json").exists()
