"""race run's race, look by look: later seeds only where a call is open, the same end after a SIGKILL at any
point, the reserve's jobs equal to a fixed design's, --no-race = the fixed plan, and the race's price.

The loop tests run fake jobs (tests/fake_job.py) on a known truth (tests/race_fixture.py): five conditions of
two regimes whose gaps are 0, 0.04, 0.06, 0.08 and 0.2, seed sd 0.02, 400 items, looks 2 -> 3 -> 4 -> 6. On
it the race decides m4 (gap 0.2) at look 0, m0 and m3 at look 1 and the rest at look 3 (40 jobs of the 60 to
the cap), so a kill can land in any look. The real engine's version is in tests/test_run_e2e.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from race_cli.errors import RaceError
from race_cli.io import read_json
from race_cli.pool.run import RunOptions, run_main

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fake_job import command
from race_fixture import make_race_sweep

GAPS = (0.0, 0.04, 0.06, 0.08, 0.2)
LOOKS = (2, 3, 4, 6)
ROOT = Path(__file__).resolve().parent.parent


def truth_sweep(path: Path, seconds: float = 0.05) -> Path:
    regimes = {f"m{c}_G{4 * (i + 1)}": {"model": f"m{c}", "group_size": 4 * (i + 1), "mean": 0.5 + gap * i}
               for c, gap in enumerate(GAPS) for i in range(2)}
    return make_race_sweep(path, regimes, looks=LOOKS, seed_sd=0.02, items=400, seconds=seconds)


def race(sweep: Path, job_command=command, say=lambda _: None, **kw) -> int:
    return run_main(RunOptions(sweep_dir=sweep, **{"workers": 2, "report": False, "live": False, **kw}),
                    job_command=job_command, say=say)


def outcome(sweep: Path) -> dict:
    """What a race ends with: the jobs listed and present, their metrics, and every condition's state record."""
    from race_cli.pool.race_loop import decide, sweep_schedule

    doc = read_json(sweep / "plan.json")
    listed = sorted(r["job_id"] for r in doc["jobs"])
    folders = sorted(p.name for p in (sweep / "jobs").iterdir())
    metrics = {j: [json.loads(x) for x in (sweep / "jobs" / j / "metrics.jsonl").read_text().splitlines()]
               for j in listed}
    # the decisions, without the wall seconds per job they are reported beside (`job_seconds`, `take`): the
    # killed races run slower fake jobs on purpose, and a measured time is not a decision
    states = [{k: v for k, v in s.to_json().items() if k not in ("job_seconds", "take")}
              for s in decide(sweep, sweep_schedule(sweep)).states]
    return {"listed": listed, "folders": folders, "metrics": metrics, "states": states,
            "reserve": sorted(r["job_id"] for r in doc["reserve"])}


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> tuple[Path, dict]:
    """The uninterrupted race on the truth, run once for this file: (its folder, its outcome)."""
    sweep = truth_sweep(tmp_path_factory.mktemp("straight") / "s")
    assert race(sweep) == 0
    return sweep, outcome(sweep)


def test_race_adds_seeds_only_where_a_call_is_open(straight):
    sweep, out = straight
    assert out["listed"] == out["folders"]  # the reserve is never written
    seeds: dict[str, set] = {}
    for j in out["listed"]:
        regime, seed = j.rsplit("_s", 1)
        seeds.setdefault(regime, set()).add(int(seed))
    states = {s["condition_values"]["model"]: s for s in out["states"]}
    assert all(s["state"] != "continue" for s in states.values())
    for m, s in states.items():  # each condition ran exactly the looks it needed, every regime from seed 0
        n = LOOKS[s["look"]]
        assert {r: seeds[r] for r in seeds if r.startswith(m + "_")} == {f"{m}_G4": set(range(n)),
                                                                          f"{m}_G8": set(range(n))}, m
        assert s["seeds"] == {"G=4": n, "G=8": n}
    assert states["m4"]["state"] == "winner" and states["m4"]["look"] == 0  # gap 0.2: settled at 2 seeds
    assert states["m0"]["state"] != "winner"  # no gap: never a winner
    assert max(s["look"] for s in states.values()) >= 2, "the truth keeps some call open past look 1"
    assert sum(len(v) for v in seeds.values()) < 10 * LOOKS[-1]  # fewer jobs than every regime to the cap
    for j in out["listed"]:
        assert read_json(sweep / "jobs" / j / "status.json")["state"] == "done"


def _start_race(sweep: Path) -> subprocess.Popen:
    code = ("import sys; sys.path.insert(0, sys.argv[2]); from fake_job import command; "
            "from race_cli.pool.run import RunOptions, run_main; "
            "sys.exit(run_main(RunOptions(sweep_dir=__import__('pathlib').Path(sys.argv[1]), workers=2, "
            "report=False, live=False), job_command=command))")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    return subprocess.Popen([sys.executable, "-c", code, str(sweep), str(ROOT / "tests")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)


@pytest.mark.parametrize("look", [0, 1, 3])
def test_race_killed_mid_look_then_rerun_ends_as_an_uninterrupted_one(straight, tmp_path, look):
    want = straight[1]

    broken = truth_sweep(tmp_path / "broken", seconds=0.6)
    proc = _start_race(broken)
    pattern = f"jobs/*_s{LOOKS[look - 1] if look else 0}/checkpoint/state.json"  # the look's first new seed
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(broken.glob(pattern)) and proc.poll() is None:
        time.sleep(0.05)
    assert list(broken.glob(pattern)), f"look {look} never started a job"
    os.killpg(proc.pid, signal.SIGKILL)  # the race run and its jobs, mid-look
    proc.wait()
    listed = [r["job_id"] for r in read_json(broken / "plan.json")["jobs"]]
    done_before = {j for j in listed if read_json(broken / "jobs" / j / "status.json")["state"] == "done"}
    assert len(done_before) < len(want["listed"]), "the kill came after the race ended"

    assert race(broken) == 0  # the same command again: resumes
    got = outcome(broken)
    assert got["listed"] == want["listed"] and got["folders"] == want["folders"]
    assert got["reserve"] == want["reserve"]
    assert got["states"] == want["states"]
    assert got["metrics"] == want["metrics"]  # every job's iterations once, as uninterrupted
    for j in done_before:  # no job that had ended ran again
        assert read_json(broken / "jobs" / j / "status.json")["attempts"] == 1


def test_killed_between_the_next_looks_folders_and_plan_json(straight, tmp_path, monkeypatch):
    """A kill after the next look's folders are renamed into jobs/ but before plan.json lists them: the
    rerun decides the same look from the jobs plan.json lists, writes those folders again and runs each job once."""
    from race_cli.pool import race_loop

    want = straight[1]

    broken = truth_sweep(tmp_path / "broken")

    def killed(*a, **k):
        raise KeyboardInterrupt("killed before plan.json was written")

    monkeypatch.setattr(race_loop, "atomic_write_json", killed)
    with pytest.raises(KeyboardInterrupt):
        race(broken)
    monkeypatch.undo()
    listed = {r["job_id"] for r in read_json(broken / "plan.json")["jobs"]}
    unlisted = {p.name for p in (broken / "jobs").iterdir()} - listed
    assert unlisted == {j for j in want["listed"] if j.endswith("_s2")}  # look 1's: written, not listed, never run
    assert all(read_json(broken / "jobs" / j / "status.json")["state"] == "pending" for j in unlisted)
    assert race(broken) == 0
    got = outcome(broken)
    assert {k: got[k] for k in ("listed", "folders", "reserve", "states", "metrics")} == \
        {k: want[k] for k in ("listed", "folders", "reserve", "states", "metrics")}
    assert not (broken / race_loop.TMP).exists()


# --- the plan ------------------------------------------------------------------------------------

SMALL = ["grid=none", "model=tiny-s", "grpo.group_size=2,4", "grpo.prompts_per_iter=4", "budget.flops=1.5e10"]


def _files(sweep: Path, job: str) -> tuple[str, str]:
    d = sweep / "jobs" / job / ".hydra"
    return (d / "config.yaml").read_text(), (d / "overrides.yaml").read_text()


def test_a_looks_jobs_are_the_fixed_designs_jobs(tmp_path):
    """Opening the reserve writes exactly the folders and rows a fixed design of seed=0,1,2 writes."""
    from race_cli.plan.build import build_plan, write_sweep
    from race_cli.pool.race_loop import open_jobs

    raced = build_plan(SMALL + ["seed=0,1"], max_seeds=3)
    assert raced.race is not None and list(raced.race.looks) == [2, 3]
    assert [j.job_id for j in raced.jobs] == ["G2_s0", "G2_s1", "G4_s0", "G4_s1"]
    assert [j.job_id for j in raced.reserve] == ["G2_s2", "G4_s2"]
    write_sweep(raced, tmp_path / "raced")
    assert sorted(p.name for p in (tmp_path / "raced" / "jobs").iterdir()) == ["G2_s0", "G2_s1", "G4_s0", "G4_s1"]
    assert open_jobs(tmp_path / "raced", ["G2_s2", "G4_s2"]) == ["G2_s2", "G4_s2"]

    fixed = build_plan(SMALL + ["seed=0,1,2"], race=False)
    assert fixed.race is None
    write_sweep(fixed, tmp_path / "fixed")
    for j in fixed.jobs:
        assert _files(tmp_path / "raced", j.job_id) == _files(tmp_path / "fixed", j.job_id), j.job_id
    doc = read_json(tmp_path / "raced" / "plan.json")
    assert doc["reserve"] == [] and doc["race"] == raced.race.to_json()
    assert sorted(doc["jobs"], key=lambda r: r["job_id"]) == sorted(read_json(tmp_path / "fixed" / "plan.json"),
                                                                     key=lambda r: r["job_id"])
    # the sweep is still the same plan for race plan / race run (a rerun resumes it, nothing replanned)
    assert write_sweep(build_plan(SMALL + ["seed=0,1"], max_seeds=3), tmp_path / "raced") is False


def test_no_race_is_the_fixed_plan():
    """--no-race plans today's fixed design: the grid's seed axis, plan.json a list, the folder name of
    before (sha1 over ids and overrides); the race's first look has the same jobs under another name."""
    from race_cli.folder import default_sweep_dir, plan_hash
    from race_cli.plan.build import build_plan, plan_document

    fixed = build_plan([], race=False)
    raced = build_plan([])
    assert fixed.race is None and fixed.reserve == []
    assert len(fixed.jobs) == 32 and {j.config["seed"] for j in fixed.jobs} == {0, 1}
    assert isinstance(plan_document(fixed, fixed.rows()), list)
    old_hash = hashlib.sha1(json.dumps([[j.job_id, list(j.overrides)] for j in fixed.jobs]).encode()).hexdigest()[:8]
    assert plan_hash(fixed) == old_hash and default_sweep_dir(fixed).name == f"tiny-{old_hash}"
    assert raced.rows() == fixed.rows()
    assert plan_hash(raced) != plan_hash(fixed)  # a race and a fixed design never share a folder
    assert list(raced.race.looks) == [2, 3, 4, 6, 8] and len(raced.reserve) == 16 * 6  # seeds 2-7 of 16 regimes
    assert build_plan([], max_seeds=2).race is None  # one look: fixed


def test_a_plan_races_with_the_calibrated_split_only_where_it_was_measured():
    """A grid that names no split of α gets the calibrated one for the measured schedules (looks 2-3-4 and
    2-3-4-6-8, α 0.05, at most 6 regimes per condition: the default grid has 4 (G x μ), the GPU pilot 6) and
    Bonferroni otherwise; a split the grid names is kept whatever the measurement covers."""
    import dataclasses

    from race_cli.plan.build import build_plan
    from race_cli.plan.race_plan import regimes_per_condition, resolve_spending

    default = build_plan([])
    assert regimes_per_condition(default.jobs) == 4 and default.race.spending == "calibrated"
    assert list(default.race.looks) == [2, 3, 4, 6, 8]  # conf/grid/tiny.yaml's max_seeds 8
    assert build_plan([], max_seeds=4).race.spending == "calibrated"  # looks 2-3-4: measured
    assert build_plan([], max_seeds=6).race.spending == "bonferroni"  # looks 2-3-4-6: not measured
    seven = build_plan(["grid=none", "model=tiny-s", "grpo.updates_per_batch=1,2,3,4,5,6,7", "seed=0,1"], max_seeds=4)
    assert list(seven.race.looks) == [2, 3, 4] and regimes_per_condition(seven.jobs) == 7
    assert seven.race.spending == "bonferroni"  # more regimes than measured
    named = dataclasses.replace(default.race, spending="bonferroni-obf")
    assert resolve_spending(named, True, default.jobs).spending == "bonferroni-obf"


@pytest.mark.parametrize("args, kw, says", [
    (["seed=0,2"], {}, "numbers its seeds from 0"),  # --max-seeds asks for a race: refused, not fixed
    (["seed=3"], {}, "seed= fixes one seed"),
    ([], {"max_seeds": 1}, "fewer than the 2 seeds"),
])
def test_a_race_that_cannot_be_planned_is_refused(args, kw, says):
    from race_cli.plan.build import build_plan

    with pytest.raises(RaceError) as exc:
        build_plan(SMALL + args, **{"max_seeds": 3, **kw})
    assert says in " ".join(exc.value.problems)


def test_a_bad_race_block_is_refused():
    from race_cli.plan.race_plan import race_block

    with pytest.raises(RaceError) as exc:
        race_block({"name": "g", "race": {"max_seed": 4, "alpha": "0.05"}})
    text = " ".join(exc.value.problems)
    assert "race.max_seed: unknown key" in text and "race.alpha: '0.05' is not a number" in text
    assert race_block({"name": "g", "race": {"max_seeds": 4}}, no_race=True) is None


# --- the price -----------------------------------------------------------------------------------


def test_price_of_a_race_by_hand():
    """Two regimes of planned seconds a >= b on 2 slots, looks 2 -> 3. Minimum: 4 jobs, both regimes' 2 seeds
    scheduled longest first, a + b (a, a on the two slots, then b, b). Maximum: one more seed each, a second
    pass of max(a, b) = a: 2a + b. FLOPs: seeds x each regime's planned total. Expected on a truth settled at
    the first look (a gap of 0.5 with no seed noise: a winner at 2 seeds) is the minimum exactly."""
    from race_cli.plan.build import build_plan
    from race_cli.plan.race_price import price_race

    plan = build_plan(SMALL + ["seed=0,1"], max_seeds=3)
    plan.slots = 2
    by = {j.job_id: j for j in plan.jobs + plan.reserve}
    a, b = sorted((by["G2_s0"].wall.total, by["G4_s0"].wall.total), reverse=True)
    f2, f4 = (by[j].planned()["flops"]["total"] for j in ("G2_s0", "G4_s0"))
    price = price_race(plan, seed_sd=0.0, gap=0.5, n_sim=8)
    assert price.minimum.jobs == 4 and price.maximum.jobs == 6
    assert price.minimum.flops == pytest.approx(2 * (f2 + f4), rel=1e-12)
    assert price.maximum.flops == pytest.approx(3 * (f2 + f4), rel=1e-12)
    assert price.minimum.wall_s == pytest.approx(a + b, rel=1e-12)
    assert price.maximum.wall_s == pytest.approx(2 * a + b, rel=1e-12)
    assert price.minimum.gpu_hours is None  # CPU workers
    assert price.expected == price.minimum
    anywhere = price_race(plan, seed_sd=0.02, gap=0.03, n_sim=8)
    assert price.minimum.jobs <= anywhere.expected.jobs <= price.maximum.jobs


def test_seeds_typed_that_cannot_start_a_race_plan_a_fixed_design():
    """seed=0 on a grid that races (no --max-seeds): the fixed design the user typed, with a note."""
    from race_cli.plan.build import build_plan

    plan = build_plan(["seed=0"])
    # the default grid's 2 sizes x 2 reward systems x (G in {4, 8} x μ in {1, 2}), one seed each
    assert plan.race is None and {j.config["seed"] for j in plan.jobs} == {0} and len(plan.jobs) == 16
    assert "seed=0 cannot start a race" in plan.race_note
    assert build_plan([]).race_note is None


def test_expected_price_agrees_with_the_harness_at_the_same_truth():
    """The plan's expected jobs against stats/race_sim.expected_race (what benchmarks/bench_race.py checks
    against whole races written as job folders) on the same design: 3 regimes, 200 items x 4 samples, two
    conditions pooled, one better by 0.05, seed sd 0.02, the plan's seed kind. Within 10% of the seeds per regime."""
    from race_cli.plan.build import build_plan
    from race_cli.plan.race_price import SEED_KIND, price_race
    from race_cli.stats.race_sim import expected_race

    plan = build_plan(["grid=none", "model=tiny-s,tiny-m", "grpo.updates_per_batch=1,2,4", "task.num_eval=200",
                       "eval.samples=4", "eval.greedy=false", "seed=0,1"], max_seeds=4)
    assert len(plan.jobs) == 12 and list(plan.race.looks) == [2, 3, 4]
    price = price_race(plan, seed_sd=0.02, gap=0.05, n_sim=100)
    harness = expected_race(plan.race, 0.05, 0.02, regimes=3, n_items=200, samples=4, conditions=200, pool=2,
                            kind=SEED_KIND)
    assert price.expected.jobs / 6 == pytest.approx(harness.seeds_per_regime, rel=0.10)
    assert 2 < harness.seeds_per_regime < 4  # a truth the race neither settles at once nor runs to the cap
