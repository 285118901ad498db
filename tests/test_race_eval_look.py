"""The race's evaluation look (issue 52 item 3): precision bought by scoring finished checkpoints on more items
instead of training more seeds. The schedule's split, the projected power, where an open call buys its
precision, and the race loop end to end on fake jobs (tests/fake_job.py, tests/fake_reeval.py)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

from race_cli.errors import RaceError
from race_cli.io import atomic_write_json, read_json
from race_cli.stats.race import Schedule, decide_look

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fake_reeval
from fake_job import command
from race_fixture import make_race_sweep


# --- the schedule ----------------------------------------------------------------------------------


def test_an_evaluation_look_takes_an_equal_share_of_alpha_and_round_trips():
    s = Schedule((2, 3, 4), 0.05, 0.04, "bonferroni", eval_items=1200)
    assert (s.n_looks, s.eval_look) == (4, 3)
    assert [s.level(k) for k in range(4)] == pytest.approx([0.0125] * 4)  # 0.05 / 4 looks
    assert s.spent(3) == 0.05
    assert Schedule.from_json(json.loads(json.dumps(s.to_json()))) == s
    plain = Schedule((2, 3, 4), 0.05, 0.04, "bonferroni")
    assert "eval_items" not in plain.to_json() and plain.n_looks == 3 and plain.eval_look is None
    assert [plain.level(k) for k in range(3)] == pytest.approx([0.05 / 3] * 3)  # unchanged without one
    with pytest.raises(RaceError, match="needs the bonferroni split"):
        Schedule((2, 3, 4), 0.05, 0.04, "calibrated", eval_items=1200)
    with pytest.raises(RaceError, match="eval_items must be a whole number"):
        Schedule((2, 3, 4), eval_items=1.5)


# --- the projected power ---------------------------------------------------------------------------


def test_more_items_shrink_the_item_parts_and_leave_the_pure_seed_part():
    """items_factor f: inter/f + (pure seed + E/f)·s_now/s_cap, checked against the f = 1 formula on parts
    built by hand to that variance (the same df)."""
    from race_cli.stats.power import open_call_power
    from race_cli.stats.variance import Parts

    A, E, S = 9e-5, 5e-5, 7e-5  # item part, residual part, job-mean part: pure seed S − E = 2e-5
    parts = Parts(np.array(A), np.array(E), np.array(S), 399.0, 1200.0, np.array(6.0))
    f, s_now, s_cap = 3.0, 2, 4
    var = (A - E) / f + ((S - E) + E / f) * s_now / s_cap  # by hand: 1.333e-5 + 1.833e-5
    assert var == pytest.approx(3.1667e-5, rel=1e-4)
    same = Parts(np.array((A - E) / f), np.array(0.0), np.array(((S - E) + E / f)), 399.0, 1200.0, np.array(6.0))
    for gap in (0.0, 0.02, 0.05):
        got = open_call_power(gap, parts, s_now, s_cap, 3, 0.04, 0.0125, 0.0, items_factor=f)
        assert got == pytest.approx(open_call_power(gap, same, s_now, s_cap, 3, 0.04, 0.0125, 0.0))
    # more items help only as far as item noise goes: with no item parts they change nothing
    seed_only = Parts(np.array(0.0), np.array(0.0), np.array(S), 399.0, 1200.0, np.array(6.0))
    assert open_call_power(0.03, seed_only, 2, 2, 3, 0.04, 0.0125, 0.0, items_factor=10.0) == \
        pytest.approx(open_call_power(0.03, seed_only, 2, 2, 3, 0.04, 0.0125, 0.0))


# --- where an open call buys its precision ---------------------------------------------------------


def _noise(seed_sd: float, n_items: int, gap: float, seeds: int = 2, rng_seed: int = 0):
    """Two regimes, `seeds` jobs each, 0/1 scores on n_items items (common random numbers: item i's uniform
    is shared across regimes within a seed) at accuracy 0.5 and 0.5 + gap, plus a normal seed effect."""
    from race_cli.stats.variance import noise_of

    rng = np.random.default_rng(rng_seed)
    rows, codes = [], []
    for s in range(seeds):
        u = rng.random(n_items)
        for r, p in enumerate((0.5, 0.5 + gap)):
            rows.append((u < p + seed_sd * rng.standard_normal()).astype(float))
            codes.append(r)
    return noise_of(np.array(codes), np.array(rows), 2)


def test_an_open_call_of_item_noise_is_evaluated_and_one_of_seed_noise_buys_seeds():
    """Fixed draws (numpy's default_rng seeded), their powers as decide_look measured them."""
    sched = Schedule((2, 4, 8), 0.05, 0.02, "bonferroni", eval_items=4000)
    # item noise only (no seed effect), a gap of 0.04 on 400 items, 4 seeds: open now, settled by 10x the items
    items, = decide_look([_noise(0.0, 400, 0.04, seeds=4, rng_seed=1)], [None], sched, 1)
    assert items.state == "continue" and items.evaluate and "it reaches the power alone" in items.reason
    assert items.power == pytest.approx(0.99, abs=0.01)
    # a seed effect (sd 0.05) at 2 seeds: more items alone cannot settle it (0.00), seeds to the cap can
    seeds, = decide_look([_noise(0.05, 400, 0.03, seeds=2, rng_seed=0)], [None], sched, 0)
    assert seeds.state == "continue" and not seeds.evaluate
    assert "power at the cap of 8 seeds and the evaluation look (0.00 with the evaluation alone)" in seeds.reason
    sched = Schedule((2, 3, 4), 0.05, 0.02, "bonferroni", eval_items=4000)
    # at the cap an open call always takes its evaluation look (no training left to buy)
    cap, = decide_look([_noise(0.0, 400, 0.005, seeds=4)], [None], sched, 2)
    assert cap.state == "continue" and cap.evaluate and "at the cap" in cap.reason
    # the evaluation look itself stops, at its own level
    done, = decide_look([_noise(0.0, 4000, 0.005, seeds=4)], [None], sched, 2, evaluated=[True])
    assert done.state in ("winner", "equivalent", "undecided") and not done.evaluate
    # without an evaluation look the cap stops the call, as before
    plain, = decide_look([_noise(0.0, 400, 0.005, seeds=4)], [None], Schedule((2, 3, 4), 0.05, 0.02), 2)
    assert plain.state in ("winner", "equivalent", "undecided") and not plain.evaluate


# --- the race loop ---------------------------------------------------------------------------------


def _race(sweep: Path) -> int:
    from race_cli.pool.run import RunOptions, run_main

    return run_main(RunOptions(sweep_dir=sweep, workers=2, report=False, live=False), job_command=command,
                    say=lambda _: None)


def test_the_race_loop_evaluates_the_finished_jobs_and_decides_at_the_evaluation_look(tmp_path, monkeypatch):
    """Item noise only (seed_sd 0), a gap of 0.03 on 400 items (and a third regime far below, dropped at the
    first look, whose jobs keep their 400 items): seeds up to the cap leave the call open (the
    same folder replayed without an evaluation look ends undecided); the evaluation look scores the cap's jobs
    on 4000 items (the fake re-evaluation) and the better regime wins."""
    from dataclasses import replace

    from race_cli.plan_file import race_jobs, read_race
    from race_cli.pool import reeval
    from race_cli.pool.race_loop import decide, sweep_schedule
    from race_cli.report.race import race_states
    from race_cli.report.table import read_sweeps

    monkeypatch.setattr(reeval, "reeval_command", fake_reeval.command)
    sweep = make_race_sweep(tmp_path / "s", {"m0_G4": {"model": "m0", "group_size": 4, "mean": 0.5},
                                             "m0_G8": {"model": "m0", "group_size": 8, "mean": 0.53},
                                             "m0_G2": {"model": "m0", "group_size": 2, "mean": 0.3}},
                            looks=(2, 3, 4), margin=0.02, items=400, seed_sd=0.0, seconds=0.05)
    doc = read_json(sweep / "plan.json")
    doc["race"]["eval_items"] = 4000
    atomic_write_json(sweep / "plan.json", doc)
    assert _race(sweep) == 0
    sched = sweep_schedule(sweep)
    st, = decide(sweep, sched).states
    assert (st.look, st.state, st.best) == (sched.eval_look, "winner", "G=8")
    assert st.reason.startswith("evaluation look (4000 items, 4 seeds, α 0.0125)")  # not the 400 G=2 kept
    assert st.dropped["G=2"][0] < sched.eval_look  # shown worse at a seed look: never re-evaluated
    from race_cli.report.words import race_state

    assert race_state(st) == "winner G=8 at the evaluation look (4 seeds, 4000 items)"
    assert math.isclose(st.alpha_spent, 0.05)  # every look's share: three seed looks and the evaluation look
    evaluated = sorted(p.parent.name for p in (sweep / "jobs").glob("*/eval-more.json"))
    assert evaluated == [f"m0_G{g}_s{s}" for g in (4, 8) for s in range(4)]  # the cap's jobs, once each
    assert all(read_json(sweep / "jobs" / j / "eval-more.json")["items"] == 4000 for j in evaluated)
    plan = read_race(sweep, rows=False)
    plain, = race_states(race_jobs(read_sweeps([sweep]), plan, sweep), replace(sched, eval_items=None))
    assert plain.state == "undecided"  # seeds alone, even at the larger α/3: futile at look 1 (measured)
    stamps = {j: (sweep / "jobs" / j / "eval-more.json").stat().st_mtime_ns for j in evaluated}
    assert _race(sweep) == 0  # a rerun replays the same decision and re-evaluates nothing
    assert decide(sweep, sched).states[0] == st
    assert stamps == {j: (sweep / "jobs" / j / "eval-more.json").stat().st_mtime_ns for j in evaluated}


def test_a_grid_declares_its_evaluation_look_in_its_race_block():
    from race_cli.plan.race_plan import make_race_schedule, race_block, resolve_spending

    block = race_block({"name": "g", "race": {"max_seeds": 4, "margin": 0.04, "eval_items": 1200}})
    sched = resolve_spending(make_race_schedule(block, 2), named=False, jobs=[])
    assert sched == Schedule((2, 3, 4), 0.05, 0.04, "bonferroni", eval_items=1200)  # not the calibrated split
    with pytest.raises(RaceError, match="needs the bonferroni split"):
        make_race_schedule(race_block({"name": "g", "race": {"spending": "calibrated", "eval_items": 1200}}), 2)
    with pytest.raises(RaceError, match="race.eval_items: 1.5 is not a whole number"):
        race_block({"name": "g", "race": {"eval_items": 1.5}})
    assert make_race_schedule(race_block({"name": "g", "race": {"max_seeds": 2, "eval_items": 800}}), 2) is None


def test_the_plan_prices_the_evaluation_route_beside_a_seed():
    """By hand from the plan's own figures: per job, the completions the look adds (3 x the grid's n items, so
    2n more on each of the two targets, eval.samples 2) at the wall-time model's seconds per evaluated
    completion (its evaluation seconds over eval.at's 5 points x 2n items x 2 samples); a seed costs a job's
    planned seconds."""
    from dataclasses import replace

    from race_cli.plan.build import build_plan
    from race_cli.plan.walltime_eval import eval_route_line, kept_policy_bytes

    p = build_plan([], race=True)
    n = p.jobs[0].config["task"]["num_eval"]  # the grid's items per target (1200 on grid=tiny)
    sched = replace(p.race, spending="bonferroni", eval_items=3 * n)
    route = sorted(j.wall.eval / (5 * 2 * n * 2) * (2 * 2 * n) * 2 for j in p.jobs)[len(p.jobs) // 2]
    seed = sorted(j.wall.total for j in p.jobs)[len(p.jobs) // 2]
    line = eval_route_line(p.jobs, sched)
    assert line.startswith(f"evaluation route: the race's evaluation look scores each finished job on {3 * n} items "
                           f"per target without training, ~{route:.1f} s per job")
    assert f"against ~{seed:.0f} s for each new seed" in line
    # the kept policy is the whole model (the tiny grid fine-tunes fully): the default run's adapter/ files
    # measured 431,544 and 1,422,872 bytes (model.safetensors: the float32 weights and a JSON header of ~3-4 KB)
    kept = {m: kept_policy_bytes(next(j for j in p.jobs if j.config["model"]["name"] == m).memory)
            for m in ("tiny-s", "tiny-m")}
    assert 0 < 431_544 - kept["tiny-s"] < 5_000 and 0 < 1_422_872 - kept["tiny-m"] < 5_000
    assert "kept final policies (adapter/, per job): tiny-m 1.4 MiB, tiny-s 0.41 MiB." in line
