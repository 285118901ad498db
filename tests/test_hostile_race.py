"""Hostile input, round five: a raced sweep's own files. plan.json's rows and race record, later looks' job
folders and the lock between looks, edited as a hostile user would: nothing outside the sweep's own unlisted
job folders is deleted, no traceback, no silent exit 0 with the race unfinished, no decision changed, no job run
twice (race_cli/plan_file.py, pool/race_loop.py, docs/security.md).

Every case runs fake jobs (tests/fake_job.py) on tests/test_race_run.py's truth: five conditions m0..m4 of two
regimes G=4 / G=8, looks 2 -> 3 -> 4 -> 6. Uninterrupted, that race decides m4 at look 0, m0 and m3 at look 1 and
m1, m2 at look 3 (40 jobs listed, 20 left in the reserve). `finished` runs it once for the file; each test
edits a copy of it, or a fresh (unrun) folder of the same truth.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.errors import RaceError
from race_cli.io import read_json

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_hostile import snapshot
from test_race_run import ROOT, outcome, race, truth_sweep


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> tuple[Path, dict]:
    """The uninterrupted race, run once: (its folder, its outcome)."""
    sweep = truth_sweep(tmp_path_factory.mktemp("finished") / "s")
    assert race(sweep) == 0
    return sweep, outcome(sweep)


def copy_of(finished, tmp_path: Path) -> Path:
    """A copy of the finished race at tmp_path/a/s (so ../../x, ../../../x stay inside tmp_path)."""
    target = tmp_path / "a" / "s"
    shutil.copytree(finished[0], target, symlinks=True)
    return target


def fresh(tmp_path: Path) -> Path:
    return truth_sweep(tmp_path / "a" / "s")


def edit_plan(sweep: Path, change) -> None:
    doc = read_json(sweep / "plan.json")
    change(doc)
    (sweep / "plan.json").write_text(json.dumps(doc))


def refused(sweep: Path, *fragments: str) -> str:
    """race run on `sweep`: a RaceError (exit 2) whose message holds every fragment; returns the message."""
    with pytest.raises(RaceError) as exc:
        race(sweep)
    text = " ".join(" ".join(exc.value.problems).split())
    for f in fragments:
        assert f in text, (f, text)
    return text


def states_of(sweep: Path, **kw) -> dict:
    """The report's race states, condition -> (state, look)."""
    from race_cli.report.build import ReportOptions, build_report

    rep = build_report(ReportOptions((sweep,), plots=False, bootstrap=100, **kw))
    return None if rep.race is None else {s.condition_values["model"]: (s.state, s.look) for s in rep.race}


# --- 1. deletions: only the sweep's own unlisted folders, by name inside jobs/ -------------------------


@pytest.mark.parametrize("bad", ["../../victim", "../../../x", "ABS", "", ".", "..", "m0_G4_s0"])
def test_a_reserve_id_that_names_another_folder_deletes_nothing(finished, tmp_path, bad):
    """A reserve job_id naming a folder outside the sweep, the whole jobs/ or the sweep, or a finished job:
    refused (exit 2) naming plan.json, the row and the field; nothing anywhere is removed."""
    sweep = copy_of(finished, tmp_path)
    for victim in (tmp_path / "a" / "victim", tmp_path / "x", tmp_path / "abs-victim"):
        victim.mkdir()
        (victim / "keep.txt").write_text("mine")
    bad = str(tmp_path / "abs-victim") if bad == "ABS" else bad
    edit_plan(sweep, lambda d: d["reserve"][0].update(job_id=bad))
    before = snapshot(tmp_path)
    text = refused(sweep, "plan.json reserve[0]", "job_id")
    assert "replan the sweep" in text
    assert snapshot(tmp_path) == before


def test_a_folder_that_is_no_job_of_the_race_is_refused_never_removed(finished, tmp_path):
    sweep = copy_of(finished, tmp_path)
    (sweep / "jobs" / "mine").mkdir()
    before = snapshot(tmp_path)
    refused(sweep, "mine: folder(s) that are no job of this race")
    assert snapshot(tmp_path) == before


# --- 2. no traceback from a malformed plan.json ------------------------------------------------------------


@pytest.mark.parametrize("change, says", [
    (lambda d: d.update(reserve="m0_G4_s2"), "reserve is str, expected a list of job rows"),
    (lambda d: d.update(reserve={"job_id": "m0_G4_s2"}), "reserve is dict, expected a list of job rows"),
    (lambda d: d["reserve"].__setitem__(0, 7), "plan.json reserve[0]: '7' (int), expected a job row"),
    (lambda d: d["reserve"][0].update(seed="x"), "reserve[0] (m0_G4_s2) seed: 'x' is not a seed of a later look"),
    (lambda d: d["reserve"][0].pop("seed"), "reserve[0] (m0_G4_s2): no seed."),
    (lambda d: d["reserve"][0].pop("job_id"), "reserve[0]: no job_id."),
    (lambda d: d["jobs"][0].pop("seed"), "jobs[0] (m0_G4_s0): no seed."),
    (lambda d: d["reserve"][0].update(overrides=None), "reserve[0] (m0_G4_s2) overrides: 'None'"),
])
def test_a_malformed_row_is_a_message_naming_the_row_and_field(tmp_path, change, says):
    sweep = fresh(tmp_path)
    edit_plan(sweep, change)
    before = snapshot(tmp_path)
    refused(sweep, says)
    assert snapshot(tmp_path) == before  # refused before anything ran


@pytest.mark.parametrize("race_block", [{"max_seeds": 100_000_000}, {"looks": [2, 3, 100_000_000]}])
def test_race_plan_refuses_a_cap_beyond_what_it_writes_before_building_the_seed_axis(monkeypatch, race_block):
    """A cap of 10^8 seeds was a MemoryError (the seed axis built as strings before the job count was checked)."""
    from race_cli.plan import build

    grid = {"name": "huge", "description": "", "axes": {"grpo.group_size": "2,4", "seed": "0,1"},
            "fixed": {"model": "tiny-s"}, "race": race_block}
    monkeypatch.setattr(build, "load_grid", lambda name: grid)
    with pytest.raises(RaceError) as exc:
        build.build_plan(["grid=huge"])
    assert "a race to 100000000 seeds plans 2 regime(s) x 100000000 seeds = 200000000 jobs, more than the 512" in \
        " ".join(exc.value.problems)


# --- 3. never a silent exit 0 with the race unfinished -------------------------------------------------------


@pytest.mark.parametrize("change, says", [
    (lambda d: d["reserve"][0].update(seed=99), "reserve[0] (m0_G4_s2) seed: 99 is not a seed of a later look"),
    (lambda d: d.update(reserve=[]), "lacks the row(s) of seed(s) 2, 3, 4, 5"),
    (lambda d: d["jobs"].pop(0), "the regime 'model=m0 grpo.group_size=4' lacks the row(s) of seed(s) 0"),
])
def test_a_plan_that_would_end_the_race_short_is_refused_before_it_runs(tmp_path, change, says):
    sweep = fresh(tmp_path)
    edit_plan(sweep, change)
    before = snapshot(tmp_path)
    refused(sweep, says)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("damage, says", [
    (lambda j: (j / "summary.json").unlink(), "status.json says done, but summary.json missing"),
    (lambda j: (j / "summary.json").write_text(json.dumps({**read_json(j / "summary.json"), "seed": 5})),
     "summary.json says seed 5 (its config: 0); seed 5 (plan.json: 0)"),
    (lambda j: (j / "summary.json").write_text(json.dumps(
        {**read_json(j / "summary.json"), "condition": {**read_json(j / "summary.json")["condition"], "model": "m9"}})),
     "summary.json says model 'm9' (its config: 'm4')"),
])
def test_a_done_jobs_deleted_or_relabelled_files_are_named_by_run_and_report(finished, tmp_path, damage, says):
    """Once decided at look 0 (m4), a condition never reverts to 'still open at look 0' because a done job's
    summary was deleted or relabelled: race run and race report refuse, naming the job and the field."""
    sweep = copy_of(finished, tmp_path)
    job = sweep / "jobs" / "m4_G4_s0"
    damage(job)
    text = refused(sweep, f"{job}: ", says)
    assert "delete the job's status.json so that race run runs it again" in text
    with pytest.raises(RaceError, match="m4_G4_s0"):
        states_of(sweep)


# --- 4. decisions change with no check -------------------------------------------------------------------


@pytest.mark.parametrize("key, value", [("margin", 0.9), ("alpha", 0.2), ("looks", [2, 3, 4, 8]),
                                        ("spending", "bonferroni-obf")])
def test_an_edited_race_record_is_refused_by_run_and_report_naming_both(finished, tmp_path, key, value):
    sweep = copy_of(finished, tmp_path)
    want = states_of(sweep)
    edit_plan(sweep, lambda d: d["race"].update({key: value}))
    text = refused(sweep, "the race record says", f"{key} {value}", "but this race started with", f"{key} changed")
    started = finished[1]["states"][0]["margin"] if key == "margin" else None
    if started is not None:
        assert f"margin {started}" in text
    with pytest.raises(RaceError, match="changed after the first job"):
        states_of(sweep)
    edit_plan(sweep, lambda d: d.update(race=read_json(sweep / "race.json")["race"]))  # restored: as before
    assert states_of(sweep) == want


def test_a_damaged_pending_job_of_a_later_look_undoes_no_decision(finished, tmp_path):
    """m1 runs to look 3; one of its look-3 jobs made pending with a garbage config: the report keeps every
    decision of the looks before (no condition back at look 0, no budget_flops=nan phantom condition), and
    look 3 waits for the job."""
    sweep = copy_of(finished, tmp_path)
    want = states_of(sweep)
    job = sweep / "jobs" / "m1_G4_s5"
    for name in ("summary.json", "ledger.json", "metrics.jsonl"):
        (job / name).unlink()
    shutil.rmtree(job / "checkpoint")
    (job / "status.json").write_text(json.dumps({"job_id": "m1_G4_s5", "state": "pending", "attempts": 0}))
    (job / ".hydra" / "config.yaml").write_text(": : [garbage")
    got = states_of(sweep)
    assert set(got) == set(want)  # no phantom condition
    assert sorted(m for m, s in want.items() if s[1] == 3) == ["m1", "m2"]
    # look 3 waits for the job (its seed pool spans the conditions racing there); every earlier decision stands
    assert got == {m: (("continue", 3) if s[1] == 3 else s) for m, s in want.items()}


def test_a_planted_unlisted_done_folder_changes_no_decision(finished, tmp_path):
    """A done job copied into jobs/ under a name plan.json does not list (another identity, all items wrong):
    the report's race reads only the jobs plan.json lists, and race run refuses the folder."""
    sweep = copy_of(finished, tmp_path)
    want = states_of(sweep)
    src, planted = sweep / "jobs" / "m4_G8_s1", sweep / "jobs" / "m4_G8_s1b"
    shutil.copytree(src, planted)
    cfg = (planted / ".hydra" / "config.yaml").read_text()
    (planted / ".hydra" / "config.yaml").write_text(cfg.replace("mean: 0.7", "mean: 0.1"))
    summary = read_json(planted / "summary.json")
    summary["job_id"], summary["eval"]["accuracy"] = "m4_G8_s1b", 0.0
    summary["eval_items"]["accuracy"]["scores"] = [0.0] * len(summary["eval_items"]["accuracy"]["scores"])
    (planted / "summary.json").write_text(json.dumps(summary))
    assert states_of(sweep) == want
    refused(sweep, "m4_G8_s1b: folder(s) that are no job of this race")


def test_later_seeds_never_copy_an_edited_config(tmp_path):
    """m1_G4_s0's config edited before the race: the first look runs it, but no later seed copies it; the
    race stops naming both files of the regime (exit 2)."""
    sweep = fresh(tmp_path)
    cfg = sweep / "jobs" / "m1_G4_s0" / ".hydra" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("mean: 0.5", "mean: 0.9"))
    refused(sweep, f"{cfg} and {sweep / 'jobs' / 'm1_G4_s1' / '.hydra' / 'config.yaml'} differ beyond the seed "
            "(fake.mean)")
    assert not (sweep / "jobs" / "m1_G4_s2").exists()


# --- 5. a job never run twice ----------------------------------------------------------------------------


@pytest.mark.parametrize("change, says", [
    (lambda d: d["reserve"].append(dict(d["reserve"][0])), "have the same job_id 'm0_G4_s2'"),
    (lambda d: d["reserve"][0].update(seed=1), "reserve[0] (m0_G4_s2) seed: 1 is not a seed of a later look"),
    (lambda d: d["reserve"][0].update(seed=3), "overrides: set seed 2, but the row's seed is 3"),
    (lambda d: d["reserve"][0].update(overrides="model=m0 grpo.group_size=8 seed=2"),
     "reserve[0] (m0_G4_s2) job_id: not the id race plan writes for its overrides"),
    (lambda d: d["reserve"][0].update(job_id="m0_G8_s2", overrides="model=m0 grpo.group_size=8 seed=2"),
     "reserve[4] (m0_G8_s2) is the same job as reserve[0] (m0_G8_s2) (the same overrides and seed 2)"),
    (lambda d: d["reserve"][0].update(seed=-1), "seed: -1 is not a seed of a later look"),
])
def test_a_row_that_would_run_a_job_twice_is_refused_naming_plan_json(tmp_path, change, says):
    sweep = fresh(tmp_path)
    edit_plan(sweep, change)
    before = snapshot(tmp_path)
    refused(sweep, f"{sweep / 'plan.json'}", says)
    assert snapshot(tmp_path) == before


# --- 6. messages that name the right thing -------------------------------------------------------------------


def test_a_file_where_a_reserve_jobs_folder_goes_is_named_by_its_own_path(tmp_path):
    sweep = fresh(tmp_path)
    (sweep / "jobs" / "m0_G4_s2").write_text("not a folder")
    text = refused(sweep, f"{sweep / 'jobs' / 'm0_G4_s2'}: not a folder race wrote")
    assert ".race-look.tmp" not in text and (sweep / "jobs" / "m0_G4_s2").is_file()


# --- 7. the lock is held for the whole race ---------------------------------------------------------------


def test_a_second_run_started_between_two_looks_is_refused(tmp_path, monkeypatch):
    """A second race run started in the gap between look 0's pass and the decision that opens look 1: it exits 2
    ('Another race run ... is running this sweep') and the first ends the race as an uninterrupted one."""
    from race_cli.pool import run as run_mod

    sweep = fresh(tmp_path)
    real = run_mod.run_local
    seconds: list = []

    def then_a_second_run(*a, **k):
        got = real(*a, **k)
        if not seconds:
            code = ("import sys; sys.path.insert(0, sys.argv[2]); from fake_job import command; "
                    "from race_cli.pool.run import run_main; from race_cli.cli import main; "
                    "sys.argv = ['race', 'run', '--sweep-dir', sys.argv[1]]; main()")
            seconds.append(subprocess.run([sys.executable, "-c", code, str(sweep), str(ROOT / "tests")],
                                          capture_output=True, text=True, timeout=120,
                                          env={**os.environ, "PYTHONPATH": str(ROOT)}))
        return got

    monkeypatch.setattr(run_mod, "run_local", then_a_second_run)
    assert race(sweep) == 0
    second = seconds[0]
    assert second.returncode == 2, second.stdout + second.stderr
    assert "Another race run" in second.stdout + second.stderr and "is running this sweep" in second.stdout + second.stderr


# --- 8. one race per sweep in race report ---------------------------------------------------------------------


def test_report_by_another_shape_or_with_other_sweeps_replays_no_race(finished, tmp_path, capsys):
    """--by task (one 10-regime condition) and a raced sweep reported with a fixed one (either order): no race
    states, and a note says why; alone, without --by, the race is the run's."""
    from race_cli.report.build import ReportOptions, build_report

    sweep = copy_of(finished, tmp_path)
    alone = states_of(sweep)
    assert alone == {s["condition_values"]["model"]: (s["state"], s["look"]) for s in finished[1]["states"]}
    rep = build_report(ReportOptions((sweep,), by=("task",), plots=False, bootstrap=100))
    assert rep.race is None and any("race states not shown: --by task" in n for n in rep.notes)
    other = truth_sweep(tmp_path / "fixed")
    doc = read_json(other / "plan.json")
    (other / "plan.json").write_text(json.dumps(doc["jobs"]))  # a fixed design of the first look's jobs
    for j in doc["jobs"]:  # a different model name: other jobs than the race's
        cfg = other / "jobs" / j["job_id"] / ".hydra" / "config.yaml"
        cfg.write_text(cfg.read_text().replace("name: m", "name: f"))
    race(other)
    for order in ((sweep, other), (other, sweep)):
        rep = build_report(ReportOptions(order, plots=False, bootstrap=100))
        assert rep.race is None and any("several sweeps are reported together" in n for n in rep.notes)


# --- docs/security.md's trust table: race.json, the record the race started with -------------------------------


def test_race_run_pins_the_record_before_the_first_job_and_never_rewrites_it(finished, tmp_path):
    sweep = finished[0]
    assert read_json(sweep / "race.json") == {"race": read_json(sweep / "plan.json")["race"]}
    copy = copy_of(finished, tmp_path)
    (copy / "race.json").unlink()  # missing: the race is read from plan.json, and race run pins it again
    assert states_of(copy) == states_of(sweep)
    assert race(copy) == 0 and read_json(copy / "race.json") == read_json(sweep / "race.json")


@pytest.mark.parametrize("how", ["garbage", "empty", "folder", "link"])
def test_trust_table_race_json_that_is_not_what_race_wrote_is_refused(finished, tmp_path, how):
    from test_hostile_files import damage

    sweep = copy_of(finished, tmp_path)
    damage(sweep / "race.json", how, tmp_path / "outside")
    before = snapshot(tmp_path)
    refused(sweep, f"{sweep / 'race.json'}: not the race record race run pins")
    with pytest.raises(RaceError, match="not the race record race run pins"):
        states_of(sweep)
    assert snapshot(tmp_path) == before


def test_a_report_mid_race_never_says_no_call_is_open(finished, tmp_path):
    """Mid-race (m1's last look-3 job not run yet), the findings said 'racing at look 3 ... continue' and then
    'open calls: none (every call above is settled at this design)'."""
    from race_cli.report.build import ReportOptions, build_report

    sweep = copy_of(finished, tmp_path)
    job = sweep / "jobs" / "m1_G4_s5"
    for name in ("summary.json", "ledger.json", "metrics.jsonl"):
        (job / name).unlink()
    shutil.rmtree(job / "checkpoint")
    (job / "status.json").write_text(json.dumps({"job_id": "m1_G4_s5", "state": "pending", "attempts": 0}))
    rep = build_report(ReportOptions((sweep,), plots=False, bootstrap=100))
    assert sorted(s.condition_values["model"] for s in rep.race if s.state == "continue") == ["m1", "m2"]
    assert not any(line.startswith("open calls: none") for line in rep.findings)
    assert "open calls: 2 still racing; the race's next looks give them seeds (race run resumes it)." in rep.findings


def test_a_race_waiting_on_done_jobs_exits_2_saying_what_disagrees(finished, tmp_path):
    """A done job whose summary holds no score (readable, labels intact, but nothing to rank): every job plan.json
    lists is done, yet look 0 waits for it. race run said 'waiting for look 0' and exit 0."""
    sweep = copy_of(finished, tmp_path)
    job = sweep / "jobs" / "m4_G4_s0"
    summary = read_json(job / "summary.json")
    for key in ("eval", "eval_items"):
        summary.pop(key)
    (job / "summary.json").write_text(json.dumps(summary))
    refused(sweep, "race: every job plan.json lists is done, yet", "call(s) still wait for jobs",
            "plan.json and the job folders disagree")
