"""Every file race reads from a sweep folder, damaged, linked, emptied or made a folder; every path argument
empty, a file, a folder or unwritable: one message naming the real problem, exit 2, nothing half-written.

docs/security.md's table "Which file is trusted for what" lists each file with what race takes from it
and what it does when the file is not what race wrote; `test_every_row_of_the_trust_table` walks that
table. The named cases (a linked job folder in race report / validate, relabelled regimes, a checkpoint
without its state, a planted interpolation at plan time, messages that named the wrong thing) each have
their own test here.
"""

from __future__ import annotations

import json
import shutil
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_fixtures import build_sweep
from test_hostile import cli, snapshot

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _wide(monkeypatch):
    """A wide console: rich folds a long path mid-name at 80 columns, and the tests look for whole paths."""
    monkeypatch.setenv("COLUMNS", "1000")


# --- a job folder that is a symbolic link: race report and race validate refuse it as race run does ---------

def _linked_job(sweep: Path, outside: Path) -> Path:
    """Move one job out of the sweep and leave a link in its place; returns the link."""
    job = sorted((sweep / "jobs").iterdir())[0]
    shutil.move(str(job), outside)
    job.symlink_to(outside)
    return job


def test_race_report_refuses_a_linked_job_folder(tmp_path, capsys, monkeypatch):
    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    link = _linked_job(sweep, tmp_path / "outside")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 2, text
    assert f"{link} is a symbolic link: race writes job folders itself and never follows links out of a sweep" in text
    assert snapshot(tmp_path) == before  # no report/ written


def test_race_report_refuses_a_linked_jobs_folder(tmp_path, capsys, monkeypatch):
    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    shutil.move(str(sweep / "jobs"), tmp_path / "elsewhere")
    (sweep / "jobs").symlink_to(tmp_path / "elsewhere")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 2 and f"{sweep / 'jobs'} is a symbolic link" in text, text
    assert snapshot(tmp_path) == before


def test_race_validate_refuses_a_linked_job_folder_of_the_pilot(tmp_path, capsys, monkeypatch):
    from test_validate import make_pilot

    pilot = make_pilot(tmp_path / "pilot")
    link = _linked_job(pilot, tmp_path / "outside")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "validate", str(pilot), "--dry-run", "--seeds", "2")
    assert code == 2 and f"{link} is a symbolic link" in text, text
    assert snapshot(tmp_path) == before


def test_race_validate_refuses_a_linked_report_folder(tmp_path, capsys, monkeypatch):
    from test_validate import make_pilot

    pilot = make_pilot(tmp_path / "pilot")
    shutil.move(str(pilot / "report"), tmp_path / "other-report")
    (pilot / "report").symlink_to(tmp_path / "other-report")
    code, text = cli(monkeypatch, capsys, tmp_path, "validate", str(pilot), "--dry-run", "--seeds", "2")
    assert code == 2 and f"{pilot / 'report'} is a symbolic link" in text, text


# --- regime labels read back from a file are checked against the jobs' own files ------------------------------

def _relabel(path: Path, old: str, new: str) -> None:
    """Replace every string `old` in a JSON file by `new` (a consistent forgery: every mention of a label)."""
    count = 0

    def walk(x):
        nonlocal count
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if x == old:
            count += 1
            return new
        return x

    path.write_text(json.dumps(walk(json.loads(path.read_text()))))
    assert count


@pytest.fixture(scope="module")
def validated(tmp_path_factory):
    """A pilot, its validation (replicate, 2 seeds, runner-up control) and that validation's results."""
    from test_validate import make_pilot, run_validation

    from race_cli.plan.validate import validate_main

    root = tmp_path_factory.mktemp("validated")
    pilot = make_pilot(root / "pilot")
    val = validate_main(pilot, replicate=True, seeds=2, out=root / "val")
    run_validation(val, {"rule": {"G=8 μ=2": 0.65, "G=4 μ=2": 0.45}})
    return pilot, val


def test_a_relabelled_regime_in_provenance_is_refused_naming_both(validated, tmp_path, capsys, monkeypatch):
    _, val = validated
    val = Path(shutil.copytree(val, tmp_path / "val"))
    prov = val / "provenance.json"
    _relabel(prov, "G=8 μ=2", "G=4096 μ=999")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(val), "--no-plots")
    assert code == 2, text
    assert "is labelled regime 'G=4096 μ=999' there, but its own files say 'G=8 μ=2'" in text, text
    assert str(prov) in text and "Confirmed" not in text
    assert snapshot(tmp_path) == before  # refused before report/ is written


def test_an_intact_provenance_still_compares(validated, tmp_path, capsys, monkeypatch):
    _, val = validated
    val = Path(shutil.copytree(val, tmp_path / "val"))
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(val), "--no-plots")
    assert code == 0 and "Confirmed at 1e+12 FLOPs: G=8 μ=2" in text, text


def test_a_provenance_moving_a_job_to_another_regime_is_refused(validated, tmp_path, capsys, monkeypatch):
    _, val = validated
    val = Path(shutil.copytree(val, tmp_path / "val"))
    path = val / "provenance.json"
    prov = json.loads(path.read_text())
    jid = next(j for j, t in prov["jobs"].items() if t["regime"] == "G=4 μ=2")
    prov["jobs"][jid]["regime"] = "G=8 μ=2"  # one control job counted as the best's
    path.write_text(json.dumps(prov))
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(val), "--no-plots")
    assert code == 2 and f"job {jid} is labelled regime 'G=8 μ=2' there, but its own files say 'G=4 μ=2'" in text


def test_a_relabelled_pilot_report_is_refused_by_race_validate(validated, tmp_path, capsys, monkeypatch):
    pilot, _ = validated
    pilot = Path(shutil.copytree(pilot, tmp_path / "pilot"))
    report = pilot / "report" / "report.json"
    _relabel(report, "G=8 μ=2", "G=4096 μ=999")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "validate", str(pilot), "--dry-run", "--seeds", "2")
    assert code == 2, text
    assert "with regime 'G=4096 μ=999', but the job's own files say 'G=8 μ=2'" in text, text
    assert f"race report {pilot}" in text and "pilot best G=4096" not in text
    assert snapshot(tmp_path) == before


def test_a_pilot_report_naming_a_job_outside_the_pilot_is_refused(validated, tmp_path, capsys, monkeypatch):
    pilot, _ = validated
    pilot = Path(shutil.copytree(pilot, tmp_path / "pilot"))
    report = pilot / "report" / "report.json"
    doc = json.loads(report.read_text())
    for j in doc["jobs"]:
        j["job_id"] = "../../elsewhere/" + j["job_id"]
    report.write_text(json.dumps(doc))
    code, text = cli(monkeypatch, capsys, tmp_path, "validate", str(pilot), "--dry-run", "--seeds", "2")
    assert code == 2 and "holds no such job" in text, text


# --- a checkpoint without its state: refused, never a silent restart ------------------------------------------

from test_hostile import resumable  # noqa: E402,F401 - the fixture: a real tiny job stopped at iteration 2 of 30


@pytest.mark.parametrize("damage", ["removed", "emptied-folder"])
def test_a_checkpoint_without_its_state_is_refused_and_the_metrics_kept(resumable, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                                         damage):
    job = Path(shutil.copytree(resumable, tmp_path / "job"))
    if damage == "removed":
        (job / "checkpoint" / "state.json").unlink()
    else:
        shutil.rmtree(job / "checkpoint")
        (job / "checkpoint").mkdir()
    metrics = (job / "metrics.jsonl").read_bytes()
    kept = snapshot(job / "checkpoint")
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 2, text
    assert f"{job / 'checkpoint'} holds no state.json, so it is not a complete checkpoint" in text, text
    assert f"Remove the folder {job / 'checkpoint'} to restart this job from iteration 0" in text
    assert "Traceback" not in text
    assert (job / "metrics.jsonl").read_bytes() == metrics and metrics.count(b"\n") == 3  # lines 0..2, never cut
    assert snapshot(job / "checkpoint") == kept
    status = json.loads((job / "status.json").read_text())
    assert status["state"] == "failed" and status["exit_code"] == 2


# --- a planted interpolation is refused when the sweep is planned, before any folder is written ---------------

@pytest.mark.parametrize("command", [["plan", "--out", "envsec"], ["run", "--sweep-dir", "envsec"], ["run"]])
def test_a_planted_interpolation_is_refused_before_a_folder_is_written(tmp_path, capsys, monkeypatch, command):
    monkeypatch.setenv("SECRET", "hunter2-value")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, *command, "grid=none", "task.path=${oc.env:SECRET}")
    assert code == 2, text
    assert "'task.path=${oc.env:SECRET}': task.path holds an interpolation" in text, text
    assert "hunter2" not in text and "Traceback" not in text
    assert snapshot(tmp_path) == before  # no envsec/, no runs/


# --- messages that named the wrong thing ------------------------------------------------------------------

@pytest.mark.parametrize("args,flag", [(["plan", "grid=none", "--out", ""], "'--out'"),
                                       (["run", "grid=none", "--sweep-dir", ""], "'--sweep-dir'"),
                                       (["report", ""], "'SWEEP...'"),
                                       (["report", "s", "--out", ""], "'--out'"),
                                       (["validate", ""], "'pilot'"),
                                       (["validate", "s", "--out", ""], "'--out'"),
                                       (["plan", "grid=none", "--calibrate-from", ""], "'--calibrate-from'")])
def test_an_empty_folder_argument_says_it_is_empty(tmp_path, capsys, monkeypatch, args, flag):
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, *args)
    assert code == 2, text
    assert f"Invalid value for {flag}" in text and "'' is empty: give a folder" in text, text
    assert "remove" not in text.lower() and " . " not in text
    assert snapshot(tmp_path) == before


def _planned_sweep(tmp_path, capsys, monkeypatch) -> Path:
    code, text = cli(monkeypatch, capsys, tmp_path, "plan", "grid=none", "--out", "s")
    assert code == 0, text
    return tmp_path / "s"


@pytest.mark.parametrize("which", ["job", "sweep"])
def test_a_lock_that_is_a_folder_is_named_and_left_alone(tmp_path, capsys, monkeypatch, which):
    sweep = _planned_sweep(tmp_path, capsys, monkeypatch)
    lock = sweep / "jobs" / "job" / ".job.lock" if which == "job" else sweep / ".race.lock"
    lock.mkdir()
    (lock / "inside").write_text("x")
    before = snapshot(tmp_path)
    args = ["train", "--job-dir", str(sweep / "jobs" / "job")] if which == "job" else ["run", "--sweep-dir", str(sweep)]
    code, text = cli(monkeypatch, capsys, tmp_path, *args)
    assert code == 2, text
    assert f"{lock} is a folder, not a lock file race wrote" in text and f"rm -r {lock}" in text, text
    assert ".stale." not in text and "Traceback" not in text
    assert snapshot(tmp_path) == before  # nothing renamed, nothing written


@pytest.mark.parametrize("command", ["train-out", "train-job-dir", "run", "zoo-build"])
def test_a_cache_that_is_a_file_is_named_and_nothing_written(tmp_path, capsys, monkeypatch, command):
    (tmp_path / "afile").write_text("not a folder\n")
    args = {"train-out": ["train", "grid=none", "--out", "j"], "run": ["run", "grid=none", "--sweep-dir", "r"],
            "train-job-dir": ["train", "--job-dir", "s/jobs/job"], "zoo-build": ["zoo", "--build", "tiny-s"]}[command]
    if command == "train-job-dir":
        _planned_sweep(tmp_path, capsys, monkeypatch)
    monkeypatch.setenv("RACE_CACHE", str(tmp_path / "afile"))
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, *args)
    assert code == 2, text
    assert f"the zoo cache cannot be made: {tmp_path / 'afile'} is a file" in text, text
    assert f"(RACE_CACHE={tmp_path / 'afile'})" in text and "Set RACE_CACHE to a folder" in text
    assert "NotADirectoryError" not in text and "while writing" not in text
    assert snapshot(tmp_path) == before  # no job folder, no .hydra/, no status.json


def _nan_summaries(sweep: Path, where: str) -> None:
    """Every summary.json's scores NaN (as JSON writes it: NaN): the final scores, the per-item ones, or both."""
    for path in sweep.glob("jobs/*/summary.json"):
        s = json.loads(path.read_text())
        for t in s["eval"]:
            if where in ("eval", "both"):
                s["eval"][t] = float("nan")
            if where in ("items", "both"):
                s["eval_items"][t]["scores"] = [float("nan")] * len(s["eval_items"][t]["scores"])
        path.write_text(json.dumps(s))


@pytest.mark.parametrize("where,field", [("eval", "eval.arithmetic = nan is not a finite number"),
                                         ("items", "eval_items.arithmetic: per-item score 0 (of 40) is NaN"),
                                         ("both", "is NaN; expected numbers in [0, 1]")])
def test_nan_scores_in_every_summary_are_called_malformed(tmp_path, capsys, monkeypatch, where, field):
    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    _nan_summaries(sweep, where)
    n = len(list(sweep.glob("jobs/*")))
    before = snapshot(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no numpy warning on the way (All-NaN slice)
        code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 2, text
    assert f"{n} job(s) unreadable: summary.json malformed (" in text and field in text, text
    assert "try --target" not in text and "Targets the jobs recorded" not in text and "RuntimeWarning" not in text
    assert snapshot(tmp_path) == before


# --- docs/security.md's trust table, row by row ---------------------------------------------------------------
#
# Each file race reads from a sweep folder, four ways: garbage (a torn or foreign file), emptied, a folder in its
# place, and a symbolic link to a copy of itself outside the sweep (the content is fine; the link is the attack).
# Each case runs the command that reads the file and checks what the table promises: the exit code, the file
# named in the message (or in the job's listed problem), no traceback, and nothing changed but what the command
# writes on success.

DAMAGES = ["garbage", "empty", "folder", "link"]


def damage(path: Path, how: str, outside: Path) -> None:
    """Damage one file of a sweep in place."""
    if how == "garbage":
        path.write_bytes(b'{"torn": [1, 2\n')  # neither JSON, YAML, safetensors nor a torch file
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "folder":
        path.unlink()
        path.mkdir()
    else:
        outside.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), outside / path.name)
        path.symlink_to(outside / path.name)


def _changed(before: dict, after: dict, allowed: tuple[str, ...] = ()) -> list[str]:
    """Paths that differ between two snapshots, outside the `allowed` prefixes."""
    keys = set(before) | set(after)
    return sorted(k for k in keys if before.get(k) != after.get(k) and not k.startswith(allowed))


# race report: a job file that is not what race wrote makes that job unreadable (listed with the file named,
# never ranked); the others are ranked, exit 0. The report writes only report/.
REPORT_JOB_FILES = ["summary.json", "ledger.json", "metrics.jsonl", "status.json", ".hydra/overrides.yaml"]


@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", REPORT_JOB_FILES)
def test_trust_table_report_lists_a_job_whose_file_is_damaged(tmp_path, capsys, monkeypatch, name, how):
    import csv

    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    victim = sorted((sweep / "jobs").iterdir())[0]
    if name == ".hydra/overrides.yaml":  # read only for a job without a summary: make the victim unfinished
        for f in ("summary.json", "ledger.json", "metrics.jsonl"):
            (victim / f).unlink()
        (victim / "status.json").write_text(json.dumps({"job_id": victim.name, "state": "pending", "attempts": 0}))
    damage(victim / name, how, tmp_path / "outside")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(sweep), "--no-plots")
    assert code == 0 and "Traceback" not in text, text
    assert _changed(before, snapshot(tmp_path), ("s/report",)) == []
    rows = {r["job_id"]: r for r in csv.DictReader((sweep / "report" / "runs.csv").open())}
    row = rows[victim.name]
    if name == ".hydra/overrides.yaml" and how == "empty":  # no overrides: a pending job, listed as such
        assert row["readable"] == "True" and row["state"] == "pending"
        return
    assert row["readable"] == "False" and Path(name).name in row["problem"], row
    assert sum(r["readable"] == "True" for r in rows.values()) == len(rows) - 1  # the others still ranked


# race run: plan.json is the list of jobs to run (ids checked, nothing run when it is not what race wrote);
# a job's .hydra/config.yaml that is a link or a folder refuses the sweep before anything runs.

@pytest.mark.parametrize("name,how", [("plan.json", h) for h in DAMAGES]
                         + [("jobs/a/.hydra/config.yaml", h) for h in ("folder", "link")]
                         + [("jobs/a/.hydra", "link")])
def test_trust_table_race_run_refuses_before_running(tmp_path, name, how):
    from fake_job import command as fake_command
    from fake_job import make_sweep

    from race_cli.errors import RaceError
    from race_cli.pool.run import RunOptions, run_main

    sweep = make_sweep(tmp_path / "runs" / "s", {"a": {"iterations": 1, "seconds": 0.0}})
    if name == "jobs/a/.hydra":
        shutil.move(str(sweep / name), tmp_path / "outside-hydra")
        (sweep / name).symlink_to(tmp_path / "outside-hydra")
    else:
        damage(sweep / name, how, tmp_path / "outside")
    before = snapshot(tmp_path)
    with pytest.raises(RaceError) as err:
        run_main(RunOptions(sweep_dir=sweep, workers=1, report=False, live=False), job_command=fake_command,
                 say=lambda m: None)
    text = " ".join(err.value.problems)
    assert Path(name).name in text or (how == "folder" and "lack .hydra/config.yaml" in text), text
    assert snapshot(tmp_path) == before


# race train --job-dir: the job's config and overrides are read before anything is written; one that is not
# what race wrote is exit 2 with the file named, and the folder is left as it was.

# (an emptied overrides.yaml is not among them: no overrides is a valid list, and the job would run)
@pytest.mark.parametrize("name,how", [(n, h) for n in (".hydra/config.yaml", ".hydra/overrides.yaml") for h in DAMAGES
                                      if (n, h) != (".hydra/overrides.yaml", "empty")])
def test_trust_table_race_train_reads_the_job_config_before_writing(tmp_path, capsys, monkeypatch, name, how):
    sweep = _planned_sweep(tmp_path, capsys, monkeypatch)
    job = sweep / "jobs" / "job"
    damage(job / name, how, tmp_path / "outside")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 2 and "Traceback" not in text, text
    assert Path(name).name in text, text
    assert snapshot(tmp_path) == before


# race train resuming: checkpoint files and metrics.jsonl are checked before anything is cut (docs/security.md,
# "Checkpoints are checked before anything is cut"); a damaged one is exit 2 naming the file and the folder.

@pytest.mark.parametrize("how", DAMAGES)
@pytest.mark.parametrize("name", ["checkpoint/state.json", "checkpoint/trainable.safetensors", "checkpoint/optim.pt",
                                  "checkpoint/rng.pt", "metrics.jsonl"])
def test_trust_table_race_train_resume_refuses_a_damaged_file(resumable, tmp_path, capsys, monkeypatch,  # noqa: F811
                                                              name, how):
    job = Path(shutil.copytree(resumable, tmp_path / "job"))
    damage(job / name, how, tmp_path / "outside")
    kept = snapshot(job / "checkpoint") if (job / "checkpoint").is_dir() else None
    metrics = (job / "metrics.jsonl").read_bytes() if (job / "metrics.jsonl").is_file() else None
    code, text = cli(monkeypatch, capsys, tmp_path, "train", "--job-dir", str(job))
    assert code == 2 and "Traceback" not in text, text
    assert Path(name).name in text or "metrics.jsonl" in text, text
    assert (snapshot(job / "checkpoint") if kept is not None else None) == kept
    if metrics is not None:
        assert (job / "metrics.jsonl").read_bytes() == metrics  # never cut


# provenance.json: race report names it and skips the comparison (the ranking above stands), exit 0.

@pytest.mark.parametrize("how", DAMAGES)
def test_trust_table_provenance_that_is_not_what_race_wrote_is_named(validated, tmp_path, capsys, monkeypatch, how):
    _, val = validated
    val = Path(shutil.copytree(val, tmp_path / "val"))
    damage(val / "provenance.json", how, tmp_path / "outside")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "report", str(val), "--no-plots")
    assert code == 0 and "Traceback" not in text, text
    assert f"validation comparison skipped: {val / 'provenance.json'}" in text, text
    assert _changed(before, snapshot(tmp_path), ("val/report",)) == []


# a pilot's report/report.json: race validate refuses it (exit 2), naming it, and writes nothing.

@pytest.mark.parametrize("how", DAMAGES)
def test_trust_table_pilot_report_that_is_not_what_race_wrote_is_refused(validated, tmp_path, capsys, monkeypatch,
                                                                         how):
    pilot, _ = validated
    pilot = Path(shutil.copytree(pilot, tmp_path / "pilot"))
    damage(pilot / "report" / "report.json", how, tmp_path / "outside")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, "validate", str(pilot), "--seeds", "2", "--out", "v")
    assert code == 2 and "Traceback" not in text, text
    assert str(pilot / "report" / "report.json") in text and f"race report {pilot}" in text, text
    assert snapshot(tmp_path) == before


# --- path arguments: a file where a folder is needed -----------------------------------------------------------

@pytest.mark.parametrize("args,fragment", [
    (["validate", "afile"], "afile: not a sweep folder (no jobs/ inside)"),
    (["plan", "grid=none", "--calibrate-from", "afile"], "afile is not a sweep folder (no plan.json)"),
    (["plan", "grid=none", "--informative-from", "afile"], "afile is not a sweep folder (no plan.json)"),
    (["plan", "grid=none", "--seed-sd", "afile"], "--seed-sd afile: neither a number nor a sweep with a report"),
    (["plan", "grid=none", "--seed-sd", ""], "--seed-sd '' is empty"),
    (["report", "s", "--no-plots", "--out", "afile"], "afile"),
    (["validate", "pilot", "--seeds", "2", "--out", "afile"], "afile"),
])
def test_a_path_argument_that_is_a_file_is_named(validated, tmp_path, capsys, monkeypatch, args, fragment):
    pilot, _ = validated
    shutil.copytree(pilot, tmp_path / "pilot")
    build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    (tmp_path / "afile").write_text("a file, not a folder\n")
    before = snapshot(tmp_path)
    code, text = cli(monkeypatch, capsys, tmp_path, *args)
    assert code == 2 and fragment in text and "Traceback" not in text, text
    assert snapshot(tmp_path) == before
