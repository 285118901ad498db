"""The report as one computed value: `build_report(options) -> Report`.

    report = build_report(ReportOptions([Path("runs/pilot")], bootstrap=1000))

Reads the sweep folders and computes every table the report shows — the rankings, fits,
recommendations, the frontier across budgets, the predictions, the joint comparison, the findings,
a validation sweep's verdicts and a raced sweep's states — and writes and prints nothing: the views
(report/views.py: the files' texts and the console) and the shell that writes them
(report/command.py) read the Report. `race run` ends on it (report/command.print_report_top), and its
race loop reads the same race states (report/race.py) from the sweep folder.

Bad input raises RaceError before anything is read past the arguments. Imports neither torch nor
transformers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.report.records import ConditionFit, Frontier, Joint, Target, Totals, Validation
from race_cli.report.table import CONDITION_COLS, maximize_target, read_sweeps

FORMATS = ("table", "csv", "json", "markdown")
MAX_BOOTSTRAP = 100_000


@dataclass(frozen=True)
class ReportOptions:
    """What `race report` was asked; cli.py builds it once, every step reads it from here."""

    sweep_dirs: tuple[Path, ...]  # sweep folders (several are combined); the first one's report/ gets the files
    target: str | None = None  # one evaluation target to rank, or None for every target the jobs recorded
    by: tuple[str, ...] | None = None  # condition columns (an entry may be "model,reward"); None: CONDITION_COLS
    fmt: str = "table"  # what stdout shows: table (the console) or one file's text (csv, json, markdown)
    out: Path | None = None  # folder for the files; None: <first sweep>/report
    plots: bool = True  # draw the PNGs (matplotlib is imported only then)
    bootstrap: int = 1000  # bootstrap draws for the best shares and the fits' intervals
    seed: int = 0  # seed of the bootstrap
    at_budget: str | None = None  # predict every regime here from its compute curve: '3e12' FLOPs or '3x'
    assume_seed_sd: float | None = None  # seed spread assumed where a condition has one seed per regime
    full: bool = True  # the console prints every section (False: the findings and where the rest is)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sweep_dirs", tuple(Path(d) for d in self.sweep_dirs))
        if self.by is not None:
            object.__setattr__(self, "by", tuple(self.by))
        if self.out is not None:
            object.__setattr__(self, "out", Path(self.out))

    @property
    def out_dir(self) -> Path:
        """Where the files go: --out, else the first sweep's report/."""
        return self.out if self.out is not None else folder.report_dir(self.sweep_dirs[0])


@dataclass
class Report:
    """Everything `race report` computed from the sweeps; its views print and write it.

    Tables are DataFrames as the report's modules return them (their columns: docs/report.md);
    `ranking` and `recommendations` carry a `target` column."""

    options: ReportOptions
    targets: tuple[Target, ...]  # the ranked evaluation targets, in order, each with its direction
    by: list[str]  # the condition columns
    jobs: Any  # DataFrame: every job of the sweeps, labelled (condition, regime) and `ranked`
    ranked: Any  # Series of bool: the jobs ranked on at least one target
    ranking: Any  # DataFrame: one row per (target, condition, regime) (report/rank.py)
    recommendations: Any  # DataFrame: one row per (target, condition) (report/recommend.py)
    fits: tuple[ConditionFit, ...]  # each condition's response fit, in ranking order (report/response.py)
    moves: list[str]  # how the recommended split moves along each condition column
    target_differences: list[str]  # where the best regime differs between targets
    totals: Totals  # training and evaluation FLOPs per phase
    reg_cols: list[str]  # the regime columns (the knobs that vary)
    curves: Any  # DataFrame: the jobs' learning curves (for the figures)
    frontier: Frontier  # the frontier across budgets (report/frontier.frontier_report)
    predictions: Any  # DataFrame at --at-budget (report/curve.py), else None
    joint: Joint  # the joint comparison (report/joint.joint_compare)
    findings: list[str]  # the findings lines (report/findings.py)
    settles: list  # findings.Settle per open call
    validation: Validation | None  # a validation sweep's verdicts (report/validation.compare), else None
    notes: list[str] = field(default_factory=list)  # said on stderr after the report (a skipped validation)
    race: list | None = None  # a raced sweep's RaceState per (target, condition), else None
    schedule: Any = None  # its stats/race.Schedule, else None
    files: list[str] = field(default_factory=list)  # the file names written (report/command.write_files)

    @property
    def out_dir(self) -> Path:
        return self.options.out_dir


# --- arguments ---------------------------------------------------------------------------------------


def check_options(o: ReportOptions) -> None:
    """Every problem with the arguments at once (RaceError), before a file is read."""
    import math

    problems = []
    if not o.sweep_dirs:
        problems.append("no sweep folder given. Expected: race report runs/<sweep> [runs/<other> ...].")
    if o.fmt not in FORMATS:
        problems.append(f"--format {o.fmt!r} is not one of {', '.join(FORMATS)}.")
    if o.bootstrap < 100:
        problems.append(f"--bootstrap {o.bootstrap} is too few draws for a 95% interval; use at least 100 "
                        "(1000 is the default).")
    elif o.bootstrap > MAX_BOOTSTRAP:
        problems.append(f"--bootstrap {o.bootstrap}: at most {MAX_BOOTSTRAP} draws (1000 is the default; "
                        "more only costs time and memory).")
    if o.target is not None and (not o.target or "/" in o.target):
        problems.append(f"--target {o.target!r}: give an evaluation target's name (the <target> of "
                        "eval/<target>/accuracy), e.g. --target gsm8k; leave it out to rank every target.")
    if problems:
        raise RaceError(*problems)
    sd = o.assume_seed_sd
    if sd is not None and not (math.isfinite(sd) and 0 < sd < 1):
        raise RaceError(f"--assume-seed-sd {sd}: expected a seed spread on the score scale, "
                        "greater than 0 and below 1 (e.g. 0.02, the default grid's measured 0.016-0.026).")


def _check_target(jobs, target: str, targets: list[str]) -> None:
    col = f"eval/{target}"
    if col in jobs and ((jobs["state"] == "done") & jobs[col].notna()).any():
        return
    if not jobs["readable"].all() and not ((jobs["state"] == "done") & jobs["readable"].astype(bool)).any():
        raise RaceError(*_nothing_to_rank(jobs, target))  # every finished job unreadable: say why, not which targets
    counts = ", ".join(f"{k} {v}" for k, v in jobs["state"].value_counts().items())
    if targets:
        raise RaceError(f"no finished job recorded eval/{target} (jobs: {counts}).",
                        f"Targets the jobs recorded: {', '.join(targets)}; try --target {targets[0]}.")
    raise RaceError(f"no finished job recorded any evaluation target (jobs: {counts}).",
                    "Expected summary.json with an `eval` block in jobs/<job_id>/; run `race run` to "
                    "finish the sweep, then report again.")


def _check_by(jobs, by: list[str], knob_cols: list[str]) -> None:
    known = list(dict.fromkeys(CONDITION_COLS + knob_cols + [c for c in ("seed",) if c in jobs]))
    bad = [c for c in by if c not in jobs.columns or c == "seed"]
    if bad:
        raise RaceError(f"--by {', '.join(bad)}: not a column a condition can be grouped by.",
                        f"Expected some of: {', '.join(c for c in known if c != 'seed')}.")


def _nothing_to_rank(jobs, target: str) -> list[str]:
    """Why no job can be ranked: the states and unreadable files, a line each."""
    lines = [f"no job can be ranked by {target}: a ranked job is done, readable, and recorded eval/{target}."]
    for state, n in jobs["state"].value_counts().items():
        lines.append(f"{n} job(s) {state}")
    problems = jobs.loc[~jobs["readable"].astype(bool), "problem"].value_counts()
    for problem, n in problems.items():
        lines.append(f"{n} job(s) unreadable: {problem}")
    lines.append("Run or resume the sweep (race run --sweep-dir DIR), then report again.")
    return lines


def _targets_to_rank(jobs, target: str | None, targets: list[str]) -> list[str]:
    """--target NAME -> [NAME] (checked); no --target -> every target some finished job recorded."""
    if target is not None:
        _check_target(jobs, target, targets)
        return [target]
    done = jobs["state"] == "done"
    found = [t for t in targets if (done & jobs[f"eval/{t}"].notna()).any()]
    if not found:
        _check_target(jobs, targets[0] if targets else "accuracy", targets)
    return found


# --- the sections --------------------------------------------------------------------------------------


def _findings(rep: Report, items: dict | None) -> tuple[list[str], list]:
    """The findings lines of the Report `rep` (report/findings.py), items: the jobs' per-item scores (their
    samples per item); a failure there never hides the report below it."""
    from race_cli import machine
    from race_cli.report.bracket import read_launch
    from race_cli.report.findings import findings, infer_samples

    try:
        return findings(rep, samples=infer_samples(items), workers=machine.cpu_cores(),
                        launch=read_launch(rep.options.sweep_dirs[0]))
    except Exception as exc:  # noqa: BLE001 - the sections below still hold every figure
        return [f"Findings: not available ({type(exc).__name__}: {exc}); the sections below have every figure."], []


def _validation(o: ReportOptions, data) -> tuple[Validation | None, list[str]]:
    """A validation sweep (race validate wrote provenance.json): did the pilot's call hold? (None for an
    ordinary sweep.) A malformed provenance file is a note, never a failed report."""
    from race_cli.report.validation import compare, read_provenance

    if len(o.sweep_dirs) != 1:
        return None, []
    try:
        prov = read_provenance(o.sweep_dirs[0])
    except RaceError as e:
        return None, ["validation comparison skipped: " + " ".join(e.problems)]
    if prov is None:
        return None, []
    return compare(o.sweep_dirs[0], prov, data, o.bootstrap, o.seed, o.assume_seed_sd), []


def read_schedule(sweep: Path):
    """The race schedule of a sweep (stats/race.Schedule), or None for a fixed design: plan_file.read_race,
    the one reader race run uses too (a malformed record, or one changed since the race started, refused)."""
    from race_cli.plan_file import read_race

    plan = read_race(sweep, rows=False)
    return plan.schedule if plan is not None else None


def _race(sweep_dirs: list, data, by: list[str], targets: list[str]) -> tuple[list | None, Any, list[str]]:
    """(race states, schedule, notes) of a raced sweep, replayed from the jobs its plan.json lists
    (plan_file.race_jobs). A race is replayed only for one sweep by its own conditions, never under
    another shape (--by, several sweeps pooled): then (None, None, a note saying so)."""
    from race_cli.plan_file import race_jobs, read_race

    raced = [(d, p) for d in sweep_dirs for p in [read_race(d, rows=False)] if p is not None]
    if not raced:
        return None, None, []
    if len(sweep_dirs) > 1 or list(by) != list(CONDITION_COLS):
        why = ("several sweeps are reported together" if len(sweep_dirs) > 1 else
               f"--by {','.join(by)} groups the jobs otherwise than the race's conditions")
        return None, None, [f"race states not shown: {why}, and a race is replayed only for its own sweep by its "
                            "own conditions (model, budget, reward, task). Report "
                            f"{' and '.join(str(d) for d, _ in raced)} alone, without --by, to see them."]
    (sweep, plan), = raced
    from race_cli.report.race import race_states

    return race_states(race_jobs(data, plan, sweep), plan.schedule, by=by, targets=targets), plan.schedule, []


def build_report(o: ReportOptions) -> Report:
    """Read the sweeps and compute the whole report (RaceError on bad input); writes nothing."""
    import numpy as np
    import pandas as pd

    from race_cli.report import frontier as F
    from race_cli.report import joint as J
    from race_cli.report import recommend as R
    from race_cli.report.rank import label_jobs, rank_all, rankable, regime_columns

    check_options(o)
    sweep_dirs = list(o.sweep_dirs)
    if o.at_budget is not None:
        from race_cli.report.curve import parse_at_budget

        at = parse_at_budget(o.at_budget)
    data = read_sweeps(sweep_dirs)
    from race_cli.report.validation import check_provenance  # its labels, before anything is written

    check_provenance(sweep_dirs, data)
    by = list(CONDITION_COLS) if not o.by else [c.strip() for b in o.by for c in b.split(",") if c.strip()]
    _check_by(data.jobs, by, data.knob_cols)
    targets = _targets_to_rank(data.jobs, o.target, data.targets)
    maximize = {t: maximize_target(t) for t in targets}

    ranked_by = {t: rankable(data.jobs, t) for t in targets}
    ranked = np.logical_or.reduce([m.to_numpy() for m in ranked_by.values()])
    ranked = pd.Series(ranked, index=data.jobs.index)
    if not ranked.any():
        raise RaceError(*_nothing_to_rank(data.jobs, " or ".join(targets)))
    draws: dict = {}
    from race_cli.report.more_items import with_more_items  # eval-more.json's items where every job has them

    more = with_more_items(data, by)[0]
    parts = [rank_all(more, t, by, n_boot=o.bootstrap, seed=o.seed + i, maximize=maximize[t], draws_out=draws,
                      assume_seed_sd=o.assume_seed_sd)
             for i, t in enumerate(targets)]
    ranking = pd.concat([p for p in parts if len(p)], ignore_index=True)
    fits = R.fit_all(ranking, maximize, draws)
    rec = R.recommend(ranking, fits, by)
    moves = R.frontier_moves(rec, by + ["target"])
    diffs = R.target_differences(rec, ranking, by)
    totals = R.compute_totals(data.jobs)
    reg_cols = regime_columns(data.jobs[ranked], data.knob_cols, by)
    jobs = label_jobs(data.jobs, by, reg_cols)
    jobs["ranked"] = ranked
    if "condition" in jobs:  # each condition's totals, from one pass (summary.md prints them)
        totals = replace(totals, by_condition=R.totals_by(jobs, "condition"))

    front = F.frontier_report(sweep_dirs, data, targets, by, o.bootstrap, o.seed, maximize)
    pred = None
    if o.at_budget is not None:
        from race_cli.report import curve as CV

        pred = CV.predictions(data, front.checkpoints, targets, by, *at, seed=o.seed, maximize=maximize)
        if not len(pred):
            raise RaceError(f"--at-budget {o.at_budget}: no condition has per-item scores at three or more "
                            "checkpoint budgets to fit a compute curve to.",
                            "Expected jobs run with eval.at (e.g. [0, 0.25, 0.5, 0.75, 1]); rerun the pilot "
                            "with it, or report without --at-budget.")

    table = J.with_checkpoints(J.joint_table(data, targets, ranked_by), data, front.checkpoints, targets)
    from race_cli.report.bracket import search_learning

    joint = J.joint_compare(table, data.knob_cols, maximize,
                            J.model_sizes(sweep_dirs, data.jobs[ranked]), rec, n_boot=o.bootstrap, seed=o.seed,
                            extra=(search_learning,))  # report/bracket.py: search vs learning

    race, schedule, race_notes = _race(sweep_dirs, data, by, targets)  # each condition's state (report/race.py)
    validation, notes = _validation(o, data)
    rep = Report(options=o, targets=tuple(Target(t, maximize[t]) for t in targets), by=by, jobs=jobs, ranked=ranked,
                 ranking=ranking, recommendations=rec, fits=tuple(ConditionFit(c, f) for c, f in fits.items()),
                 moves=moves, target_differences=diffs, totals=totals, reg_cols=reg_cols, curves=data.curves,
                 frontier=front, predictions=pred, joint=joint, findings=[], settles=[], validation=validation,
                 notes=race_notes + notes, race=race, schedule=schedule)
    flines, settles = _findings(rep, data.items)  # the findings read the rest of the Report
    return replace(rep, findings=flines, settles=settles)
