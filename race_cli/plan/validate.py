"""`race validate`: turn a pilot's recommendation into a validation sweep, with its provenance.

    race run grid=none model=tiny-s grpo.group_size=4,8 --sweep-dir runs/pilot   # the pilot
    race validate runs/pilot --replicate               # preview + write runs/pilot-validate-rep/
    race run --sweep-dir runs/pilot-validate-rep        # run it like any sweep
    race report runs/pilot-validate-rep                 # ... and see whether the pilot's call held

Reads the pilot's report (`<pilot>/report/report.json`, written by `race report`) and, per
condition, takes the regime it recommends (the pilot's best; with --tied also every regime
the report could not tell from it, with --top K the K regimes with the highest best share) plus
a control: the pilot's runner-up, its closest rival (--control lowest: its lowest-ranked regime),
so that "confirmed" means the call holds against the regime most likely to beat it.
Evaluation is narrowed to the validated target, at the pilot's fractions of the run (eval.every
times the budget factor), on fresh items: task.eval_seed is the pilot's + 1 (eval_freshness counts
the items the two sets share; a target whose set does not depend on the eval seed is reused, and
the preview says so). Each becomes N jobs with fresh seeds at the validation budget (--budget X, or
--scale K times the pilot's), composed from the pilot job's own overrides and budget-matched by
`race plan`'s solver and sweep writer (race_cli/plan/build.py: build_plan, write_sweep), so the free
knob T is solved exactly as for any plan.

Seeds: fresh ones (the pilot's largest seed + 1, ...), so the validation does not reuse the pilot's
luck; how many per condition comes from the power (plan_all_seeds): the pilot's variance model (seed
variance pooled over its conditions of one reward system and moderated, the item × regime part, the
evaluation residual: stats/validation_power.pair_parts) gives the parts of the validation's best − control
test for n seeds (stats/validation_power.planned_parts), and the fewest n whose test (simulated through
the report's own interval) confirms the gap with probability --power (0.8) is taken, at most
--max-seeds; that probability is the expected power over the pilot's uncertainty about its own variance
estimates (two seeds per regime know a seed variance only roughly; taken as the truth they promised
0.8 and gave 0.75-0.77 in benchmarks/bench_validate_design.py). The gap is --gap, or the pilot's
best − control gap less its winner's-curse bias. --seeds N fixes the count and prints what it buys.

The sweep folder gets `provenance.json` (race_cli/report/validation.py defines it): the pilot sweep,
the recommendation with its interval, the pilot's predicted order, the seed plan, the evaluation items
and which job runs which pilot regime. The folder and its provenance appear together or not at all.
No torch import.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.plan.validate_design import (_finite, eval_freshness, fresh_eval_seed, pilot_eval_seed, pilot_noise,  # noqa: F401
                                           plan_all_seeds, plan_seeds)
from race_cli.stats.validation_power import DEFAULT_MAX_SEEDS, DEFAULT_POWER

REPORT_JSON = folder.report_dir("") / "report.json"  # relative to the pilot's folder
CONDITION_COLS = ("model", "budget_flops", "reward", "task")  # as race_cli/report/table.py
PER_JOB_KEYS = ("grid", "seed", "budget.flops")  # overrides the validation sets itself
DEFAULT_SCALE = 2.0
DEFAULT_SEEDS = None  # seeds per regime: sized by power (--power, --gap, --max-seeds) unless --seeds N
CONTROLS = ("runner-up", "lowest")


@dataclass
class Pick:
    """One pilot regime of one condition chosen for validation."""

    condition: str  # the pilot's condition label
    regime: str  # the pilot's regime label, e.g. "G=8 μ=1"
    role: str  # "pilot best" | "≈ best" | "top K" | "control"
    overrides: list[str]  # the pilot job's concrete overrides, less grid/seed/budget.flops
    pilot_budget: float
    budget: float = 0.0  # the validation budget
    pilot_jobs: list[str] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)  # filled once the plan is built


# --- reading the pilot's report (defensively: other report versions may add or nest fields) ----


def load_pilot_report(pilot: Path) -> dict:
    """The pilot's report.json; RaceError when the pilot or its report is missing or unreadable."""
    from race_cli.io import LinkRefused, inside, read_json

    if not pilot.is_dir() or not folder.jobs_dir(pilot).is_dir():
        raise RaceError(f"{pilot}: not a sweep folder (no jobs/ inside).",
                        "Expected the pilot's folder, e.g. race validate runs/tiny-<hash>.")
    folder.refuse_linked_jobs(pilot)  # as race run and race report refuse them
    path = pilot / REPORT_JSON
    try:
        inside(path, pilot)  # a report/ linked elsewhere would hand over another sweep's recommendation
    except LinkRefused as e:
        raise RaceError(f"{e.filename} is a symbolic link: race report writes {REPORT_JSON} itself and race never "
                        "follows links inside a sweep (docs/security.md).",
                        f"Remove the link, then rewrite the report with `race report {pilot}`.") from None
    if path.exists() and not path.is_file():
        raise RaceError(f"{path} is not a plain file (a folder or a device): race report writes it as a file.",
                        f"Remove it, then rewrite the report with `race report {pilot}`.")
    if not path.is_file():
        raise RaceError(f"{pilot} has no report ({REPORT_JSON} is missing): there is no recommendation to validate.",
                        f"Run `race report {pilot}` first (after `race run` has finished its jobs), "
                        f"then `race validate {pilot}`.")
    try:
        doc = read_json(path)
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise RaceError(f"{path} is unreadable ({type(e).__name__}: {str(e)[:120]}).",
                        f"Rewrite it with `race report {pilot}`.") from None
    if not isinstance(doc, dict):
        raise RaceError(f"{path} is not a race report (expected a JSON object).",
                        f"Rewrite it with `race report {pilot}`.")
    return doc


def _records(doc: dict, key: str) -> list[dict]:
    """Rows under `key`: at the top level and inside per-target sections (dicts or lists of dicts)."""
    out: list[dict] = []

    def take(node: Any, target: Any) -> None:
        rows = node.get(key) if isinstance(node, dict) else None
        if isinstance(rows, list):
            out.extend(dict(r, target=r.get("target", target)) for r in rows if isinstance(r, dict))

    take(doc, doc.get("target"))
    for name in ("targets", "sections", "per_target"):
        sub = doc.get(name)
        if isinstance(sub, dict):
            for t, node in sub.items():
                take(node, node.get("target", t) if isinstance(node, dict) else t)
        elif isinstance(sub, list):
            for node in sub:
                take(node, node.get("target") if isinstance(node, dict) else None)
    seen, uniq = set(), []
    for r in out:  # a row found both at the top and in a section counts once
        k = (r.get("sweep"), r.get("condition"), r.get("target"), r.get("regime"), r.get("job_id"),
             r.get("best_regime"))
        if k not in seen:
            seen.add(k)
            uniq.append(r)
    return uniq


def choose_target(doc: dict, recs: list[dict], target: str | None, pilot: Path) -> str:
    have = list(dict.fromkeys(str(r["target"]) for r in recs if r.get("target") is not None))
    if target is None:
        target = doc.get("target") if doc.get("target") in have else (have[0] if have else None)
    if target is None or target not in have:
        if not have:
            raise RaceError(f"{pilot}'s report has no recommendation: no condition had a ranked regime.",
                            f"Finish the pilot (race run --sweep-dir {pilot}), then `race report {pilot}` "
                            "and validate again.")
        raise RaceError(f"{pilot}'s report has no recommendation for target {target!r}; it recommends for "
                        f"{', '.join(have)}.",
                        f"Use --target {have[0]}, or `race report {pilot} --target {target}` first.")
    return target


def choose_regimes(ranking: list[dict], rec: dict, top: int | None, tied: bool = False,
                   control: str = "runner-up") -> list[tuple[str, str]]:
    """[(regime, role)] of one condition: the pilot's best (or the top K by best share, or with `tied`
    every regime the report could not tell from the best), then the control: the pilot's runner-up
    (its closest rival, the default) or its lowest-ranked regime (control="lowest"); none when the
    condition ranked one regime.

    ranking: the pilot ranking rows of this condition; rec: its recommendation row.
    """
    order = sorted(ranking, key=lambda r: (_finite(r.get("rank")), -_finite(r.get("mean"))))
    names = [str(r["regime"]) for r in order]
    best = str(rec.get("best_regime") or names[0])
    if top is not None:
        by_pbest = sorted(order, key=lambda r: (-_finite(r.get("p_best")), _finite(r.get("rank"))))
        chosen = [str(r["regime"]) for r in by_pbest[:top]]
    elif tied:
        listed = [re.sub(r"\s*\(.*\)\s*$", "", s).strip() for s in str(rec.get("validate") or "").split(";")]
        chosen = [s for s in listed if s in names]
    else:
        chosen = []
    chosen = [best] + [c for c in chosen if c != best]
    others = [n for n in names if n != best]
    ctl = (others[0] if control == "runner-up" else others[-1]) if others else None
    # the control is the control even when --top K or --tied chose it as well (else a validation of
    # every regime would have no control, and no test)
    out = [(c, "pilot best" if c == best else "control" if c == ctl else ("top K" if top is not None else "≈ best"))
           for c in chosen]
    if ctl is not None and ctl not in chosen:
        out.append((ctl, "control"))
    return out


def validation_eval(overrides: list[str], target: str, factor: float) -> list[str]:
    """The pilot job's overrides with evaluation narrowed to the validated target, at the same
    fractions of the run: eval.at's budget fractions as they are, eval.every (when set) scaled by the
    budget factor (start and end always run)."""
    from race_cli.config.schema import EvalConf

    every = EvalConf().every
    kept = []
    for o in overrides:
        key, _, value = o.lstrip("+~").partition("=")
        if key == "eval.every":
            every = int(float(value)) if re.fullmatch(r"\s*\d+(\.\d*)?\s*", value) else every
        elif key not in ("eval.targets", "eval.max_items_by_target", "task.eval_seed"):
            kept.append(o)
    out = kept + [f"eval.targets=[{target}]"]
    if every is not None:  # eval.at (budget fractions, kept as given) needs no scaling
        out.append(f"eval.every={max(1, math.ceil(every * factor))}")
    return out


def predicted_order(ranking: list[dict], jobs: list[dict], target: str) -> list[dict]:
    """The pilot's ranking of one condition, best first, with its gain over the start per FLOP.

    A gain is an improvement: final minus start, or start minus final for a lower-is-better target.
    """
    from race_cli.report.table import maximize_target

    sign = 1.0 if maximize_target(target) else -1.0
    out = []
    for r in sorted(ranking, key=lambda r: (_finite(r.get("rank")), -_finite(r.get("mean")))):
        mine = [j for j in jobs if j.get("regime") == r["regime"] and j.get("state") == "done"]
        gains = [sign * (_finite(j.get(f"eval/{target}")) - _finite(j.get(f"eval_initial/{target}"))) for j in mine]
        flops = [_finite(j.get("flops_total")) for j in mine]
        pairs = [(g, f) for g, f in zip(gains, flops) if math.isfinite(g) and math.isfinite(f) and f > 0]
        gain = sum(g for g, _ in pairs) / len(pairs) if pairs else math.nan
        mean_flops = sum(f for _, f in pairs) / len(pairs) if pairs else math.nan
        row = {k: r.get(k) for k in ("regime", "rank", "mean", "ci_lo", "ci_hi", "p_best", "tied_best", "p",
                                     "n_seeds", "share_search", "share_learning", "share_feedback")}
        row.update({k: v for k, v in r.items() if k.startswith("gain")})  # the report's own gain fields
        row.update(gain_over_start=gain, flops_total=mean_flops,
                   gain_per_flop=gain / mean_flops if pairs else math.nan)
        out.append(row)
    return out


def regime_overrides(pilot: Path, job_ids: list[str]) -> tuple[list[str], list[str]]:
    """The pilot jobs' concrete overrides less grid/seed/budget.flops, and notes on disagreements."""
    from race_cli.io import inside, read_bounded
    from race_cli.report.table import parse_overrides

    seen: dict[str, list[str]] = {}
    for jid in job_ids:
        path = folder.job_overrides(folder.job_dir(pilot, jid))
        try:
            ovs = parse_overrides(read_bounded(inside(path, pilot), 4 * 2**20).decode("utf-8"))
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        kept = [o for o in ovs if o.lstrip("+~").partition("=")[0] not in PER_JOB_KEYS]
        seen.setdefault(" ".join(kept), kept)
    if not seen:
        raise RaceError(f"{pilot}: none of the jobs {', '.join(job_ids[:3])} has a readable .hydra/overrides.yaml, "
                        "so their regime cannot be re-planned.",
                        "Validate a pilot written by `race plan --out` / `race run` (the report must cover "
                        "this sweep's own jobs).")
    notes = []
    if len(seen) > 1:
        notes.append(f"jobs {', '.join(job_ids)} share a regime label but differ beyond seed and budget; "
                     f"the validation uses the overrides of the first: {next(iter(seen))}")
    return next(iter(seen.values())), notes


def check_pilot_labels(pilot: Path, regime: str, jobs: list[dict], own: dict[str, dict]) -> None:
    """RaceError when report.json's rows for the jobs of `regime` disagree with the pilot jobs' own files
    (the job table read_sweeps builds from them): a job the pilot does not hold, a regime label, a
    condition or a budget the job's summary.json does not give. The validation would otherwise be
    planned, and shown, as a regime that never ran (report/labels.py); the message names both."""
    from race_cli.report.labels import label_mismatch
    from race_cli.report.rank import label

    path = pilot / REPORT_JSON
    fix = f"The file was edited or is damaged: rewrite it with `race report {pilot}`, then validate again."
    for j in jobs:
        jid = str(j.get("job_id"))
        row = own.get(jid)
        if row is None:
            raise RaceError(f"{path} lists job {jid[:80]!r} under regime {regime!r}, but {pilot}/jobs/ holds no such "
                            "job.", fix)
        claims = [("regime", regime, label_mismatch(regime, row)),
                  ("condition", j.get("condition"), label_mismatch(str(j.get("condition")), row, skip=("target",))),
                  ("budget", j.get("budget_flops"), label_mismatch(label({"budget_flops": j.get("budget_flops")}),
                                                                    row))]
        for what, claimed, own_label in claims:
            if own_label is not None:
                raise RaceError(f"{path} labels pilot job {jid} with {what} {claimed!r}, but the job's own files "
                                f"say {own_label!r}. A label that disagrees with the jobs would validate a regime "
                                "that never ran.", fix)


# --- building the validation plan --------------------------------------------------------


def _budget_text(x: float) -> str:
    short = f"{x:g}"
    return short if float(short) == x else repr(float(x))


def _key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0]


def _name_jobs(jobs: list) -> dict[str, list[str]]:
    """Give every job a readable id from the overrides that vary across the whole validation."""
    from race_cli.config.sweep import job_id, unique_ids

    keys: list[str] = []
    values: dict[str, list[str | None]] = {}
    per_job = [{_key(o): o for o in j.overrides} for j in jobs]
    for d in per_job:
        for k in d:
            if k not in keys:
                keys.append(k)
    varying = [k for k in keys if len({d.get(k) for d in per_job}) > 1]
    for j, d in zip(jobs, per_job):
        j.axis_overrides = [d[k] for k in varying if k in d]
    for j, jid in zip(jobs, unique_ids([job_id(j.axis_overrides) for j in jobs], [j.overrides for j in jobs])):
        j.job_id = jid
    for k in varying:
        values[k] = list(dict.fromkeys(d[k].partition("=")[2] for d in per_job if k in d))
    return values


def build_validation(pilot: Path, *, budget: float | None = None, scale: float | None = None,
                     seeds: int | None = None, top: int | None = None, tied: bool = False,
                     target: str | None = None, typed: list[str] | None = None, replicate: bool = False,
                     margin: float = 0.0, unlearned: bool = False, control: str = "runner-up",
                     power: float = DEFAULT_POWER, gap: float | None = None,
                     max_seeds: int = DEFAULT_MAX_SEEDS) -> tuple[Any, dict, list[Pick], list[str]]:
    """(Plan, provenance, picks, notes) of the validation of `pilot`; RaceError on bad input.

    replicate: the pilot's own budget, fresh seeds (kept apart from a scale-up, so a verdict says
    which of the two it tested); margin: the improvement best − control must clear to be
    confirmed; unlearned: also validate conditions where no regime beat its start; control:
    "runner-up" (the pilot's closest rival) or "lowest"; seeds: a fixed count per regime, or None to
    size each condition by `power` for `gap` (default: the pilot's gap shrunk for the winner's curse),
    at most max_seeds."""
    from race_cli.plan.build import Plan, build_plan

    pilot = Path(pilot)
    _check_args(budget, scale, seeds, top, tied, replicate, margin, control, power, gap, max_seeds)
    if replicate:
        scale = 1.0
    elif budget is None and scale is None:
        scale = DEFAULT_SCALE
    doc = load_pilot_report(pilot)
    from race_cli.report.table import read_sweeps

    data = read_sweeps([pilot])  # the pilot's jobs, read from their own files: the labels are checked on them
    own_rows = {str(r["job_id"]): r for r in data.jobs.to_dict("records")}
    recs = _records(doc, "recommendations")
    target = choose_target(doc, recs, target, pilot)
    recs = [r for r in recs if r.get("target") == target and r.get("condition") is not None]
    ranking = [r for r in _records(doc, "ranking") if r.get("target") in (target, None)]
    jobs = _records(doc, "jobs")
    if jobs and not all("condition" in j and "regime" in j for j in jobs[:1]):
        raise RaceError(f"{pilot / REPORT_JSON} does not label its jobs with condition and regime.",
                        f"Rewrite it with this version: `race report {pilot}`.")

    picks: list[Pick] = []
    notes: list[str] = []
    conditions: list[dict] = []
    all_seeds = [int(s) for j in jobs if isinstance(s := j.get("seed"), (int, float)) and math.isfinite(s)]
    first_seed = max(all_seeds) + 1 if all_seeds else 0
    budgets_seen: set[float] = set()
    skipped: list[str] = []
    work: dict[str, tuple[list[dict], list[dict], dict]] = {}  # condition -> (ranking rows, jobs, recommendation)
    for rec in recs:
        cond = rec["condition"]
        if not unlearned and rec.get("learned") is False:
            skipped.append(f"{cond}: no regime beat its start in the pilot, so its ranking is not a finding "
                           "(--unlearned validates it anyway)")
            notes.append(skipped[-1])
            continue
        rows = [r for r in ranking if r.get("condition") == cond]
        # a ranked condition names its target; a job's condition does not (it is scored on every target)
        job_cond = rows[0].get("job_condition", cond) if rows else cond
        cjobs = [j for j in jobs if j.get("condition") in (cond, job_cond)]
        if not rows:
            notes.append(f"{cond}: the report has no ranking rows; skipped.")
            continue
        chosen = choose_regimes(rows, rec, top, tied, control)
        if not any(role == "control" for _, role in chosen):
            notes.append(f"{cond}: the pilot ranked one regime only, so there is no control to test its best "
                         "against; skipped.")
            continue
        entry = {"condition": cond, "values": {c: rec[c] for c in CONDITION_COLS if c in rec},
                 "recommendation": rec, "predicted_order": predicted_order(rows, cjobs, target),
                 "control": next((r for r, role in chosen if role == "control"), None), "validated": []}
        for regime, role in chosen:
            mine = [j for j in cjobs if j.get("regime") == regime and j.get("state") == "done"] or \
                   [j for j in cjobs if j.get("regime") == regime]
            if not mine:
                raise RaceError(f"{cond}: the report lists no job of regime {regime!r}.",
                                f"Rewrite the report with `race report {pilot}` and validate again.")
            ids = [str(j["job_id"]) for j in mine]
            check_pilot_labels(pilot, regime, mine, own_rows)
            ovs, more = regime_overrides(pilot, ids)
            notes += [f"{cond}, {regime}: {m}" for m in more]
            b = {x for j in mine if math.isfinite(x := _finite(j.get("budget_flops")))}
            if len(b) != 1:
                raise RaceError(f"{cond}, {regime}: cannot tell the pilot's budget (budget_flops {sorted(b)}).",
                                "Rewrite the report with `race report` and validate again.")
            pb = b.pop()
            budgets_seen.add(pb)
            picks.append(Pick(cond, regime, role, ovs, pb, budget if budget is not None else pb * scale, ids))
            entry["validated"].append({"regime": regime, "role": role, "pilot_jobs": ids, "overrides": ovs})
        conditions.append(entry)
        work[cond] = (rows, cjobs, rec)
    if not picks and skipped:
        raise RaceError(f"{pilot}: no condition to validate for target {target!r}: in every one no regime beat "
                        "its start, so there is no pilot call to test.",
                        "Give the pilot more budget or an easier task, or pass --unlearned to validate anyway.")
    if not picks:
        raise RaceError(f"{pilot}'s report has no recommendation to validate for target {target!r}.",
                        f"Finish the pilot (race run --sweep-dir {pilot}), then `race report {pilot}`.")
    if budget is not None and len(budgets_seen) > 1:
        raise RaceError(f"--budget {budget:g}: the pilot ran at several budgets "
                        f"({', '.join(f'{b:g}' for b in sorted(budgets_seen))}); one validation budget would "
                        "merge its conditions.", "Use --scale K to multiply each pilot budget instead.")

    # --- seeds per condition: fixed, or by power from the pilot's variance model
    sweep = pilot.resolve().name
    noises: dict[str, Any] = {}
    for entry in conditions:
        rows, cjobs, _ = work[entry["condition"]]
        regs = [str(r["regime"]) for r in rows]
        noises[entry["condition"]] = (pilot_noise(data, sweep, cjobs, regs, target), regs)
    plan_all_seeds(conditions, noises, target, power=power, gap=gap, max_seeds=max_seeds, seeds=seeds,
                   margin=margin, control=control)
    n_seeds_of = {e["condition"]: int(e["power_plan"]["seeds"]) for e in conditions}

    # --- fresh evaluation items: another task.eval_seed, the pilot's + 1
    ev_pilot = pilot_eval_seed(pilot, [i for pk in picks for i in pk.pilot_jobs])
    ev_fresh = fresh_eval_seed(ev_pilot)

    # --- one plan per pick, through race plan's own composer and solver; then one sweep
    plan_jobs = []
    for pk in picks:
        seed_list = list(range(first_seed, first_seed + n_seeds_of[pk.condition]))
        ovs = ["grid=none", *validation_eval(pk.overrides, target, pk.budget / pk.pilot_budget),
               f"task.eval_seed={ev_fresh}", f"budget.flops={_budget_text(pk.budget)}",
               "seed=" + ",".join(map(str, seed_list))]
        p = build_plan(ovs, too_many="Give fewer --seeds (each validated regime runs one job per seed).")
        for j in p.jobs:
            j.overrides = [o for o in j.overrides if _key(o) != "grid"]  # grid=none says nothing
        plan_jobs.append((pk, p.jobs))
    flat = [j for _, js in plan_jobs for j in js]
    fresh = eval_freshness(flat[0].config, ev_pilot, target)
    if fresh.get("fresh") is False:
        notes.append(f"evaluation items: {fresh['note']}")
    axes = _name_jobs(flat)
    for pk, js in plan_jobs:
        pk.job_ids = [j.job_id for j in js]
    what = ("a replication at its budgets" if replicate else 'budget ' + format(budget, 'g') if budget is not None
            else f'{scale:g}x its budgets')
    most = max(n_seeds_of.values())
    plan = Plan(typed=list(typed or []), grid={"name": "validate", "description":
                f"validation of pilot {pilot} ({what}, "
                f"seeds {first_seed}..{first_seed + most - 1}, task.eval_seed {ev_fresh})"}, axes=axes, jobs=flat)
    from race_cli.plan.wall import plan_wall

    plan.slots, plan.wall_source = plan_wall(flat)  # the slots and rates race run would use for the whole sweep

    # the compute curves' prediction at the validation budget, beside the endpoint ranking (report/predicted.py)
    from race_cli.report.predicted import curve_predictions_for_validation

    curves, why_not = curve_predictions_for_validation(pilot, target, budget, scale)
    if why_not:
        notes.append(why_not)
    for entry in conditions:
        entry["curve_prediction"] = curves.get(entry["condition"])
    by_regime = {(pk.condition, pk.regime): pk for pk in picks}
    for entry in conditions:
        for v in entry["validated"]:
            pk = by_regime[(entry["condition"], v["regime"])]
            v["job_ids"], v["budget"] = pk.job_ids, pk.budget
        entry["budget"] = next(v["budget"] for v in entry["validated"])
        entry["seeds"] = list(range(first_seed, first_seed + n_seeds_of[entry["condition"]]))
        mine = [j for j in flat if j.job_id in {i for v in entry["validated"] for i in v["job_ids"]}]
        entry["power_plan"]["jobs"] = len(mine)
        entry["power_plan"]["flops"] = float(sum(j.budget.ledger()["flops"]["total"] for j in mine)) if all(
            j.budget is not None for j in mine) else math.nan
        entry["power_plan"]["planned_seconds"] = float(sum(getattr(j.wall, "total", 0.0) or 0.0 for j in mine))
    prov = {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": ["race", "validate", *(typed or [])],
            "pilot": {"sweep": str(pilot.resolve()), "report": str((pilot / REPORT_JSON).resolve()),
                      "target": target, "caveat": doc.get("caveat")},
            "target": target,
            "skipped": skipped,
            "settings": {"budget": budget, "scale": scale, "replicate": replicate, "margin": margin,
                         "seeds": list(range(first_seed, first_seed + most)), "top": top, "tied": tied,
                         "control": control, "seeds_by": "fixed" if seeds is not None else "power",
                         "power": power, "gap": gap, "max_seeds": max_seeds,
                         "eval_items": {"pilot_eval_seed": ev_pilot, "eval_seed": ev_fresh, **fresh},
                         "selection": (f"top {top} by best share" if top is not None
                                       else "pilot best and its ≈ best" if tied else "pilot best")},
            "conditions": conditions,
            "jobs": {jid: {"condition": pk.condition, "regime": pk.regime, "role": pk.role}
                     for pk in picks for jid in pk.job_ids}}
    return plan, prov, picks, notes


MAX_SEEDS = 512  # seeds per validated regime: one job each, the most a sweep plans without --yes
MAX_SCALE = 1e6  # a validation at a million times the pilot's budget is a typo (1e300 overflows the FLOP counts)


def _check_args(budget: float | None, scale: float | None, seeds: int | None, top: int | None, tied: bool = False,
                replicate: bool = False, margin: float = 0.0, control: str = "runner-up",
                power: float = DEFAULT_POWER, gap: float | None = None, max_seeds: int = DEFAULT_MAX_SEEDS) -> None:
    problems = []
    if replicate and (budget is not None or scale is not None):
        problems.append("--replicate with --budget or --scale: choose one (--replicate reruns at the pilot's own "
                        "budget; --scale K or --budget X validates at another budget).")
    if not (math.isfinite(margin) and margin >= 0):
        problems.append(f"--margin {margin}: expected an improvement >= 0 in the target's units, e.g. --margin 0.02.")
    if top is not None and tied:
        problems.append("--top and --tied both given: choose one (--top K takes the K regimes with the highest "
                        "best share; --tied every regime the pilot could not tell from its best).")
    if budget is not None and scale is not None:
        problems.append("--budget and --scale both given: choose one (--budget X sets every validation job's "
                        "budget; --scale K multiplies each pilot budget).")
    if budget is not None and not (math.isfinite(budget) and budget > 0):
        problems.append(f"--budget {budget}: expected a positive number of FLOPs, e.g. --budget 1e12.")
    if scale is not None and not (math.isfinite(scale) and 0 < scale <= MAX_SCALE):
        problems.append(f"--scale {scale:g}: expected a positive factor of at most {MAX_SCALE:g}, e.g. --scale 2.")
    if seeds is not None and seeds < 1:
        problems.append(f"--seeds {seeds}: expected at least 1 seed per regime (2 or more give a verdict).")
    elif seeds is not None and seeds > MAX_SEEDS:
        problems.append(f"--seeds {seeds}: expected at most {MAX_SEEDS} seeds per regime (default: sized by --power).")
    if control not in CONTROLS:
        problems.append(f"--control {control}: expected one of {', '.join(CONTROLS)} (runner-up: the pilot's "
                        "closest rival; lowest: its lowest-ranked regime).")
    if not (math.isfinite(power) and 0.5 <= power < 1):
        problems.append(f"--power {power:g}: expected a probability in [0.5, 1), e.g. --power 0.8.")
    if gap is not None and not (math.isfinite(gap) and gap > margin):
        problems.append(f"--gap {gap:g}: expected a positive gap above the margin ({margin:g}) in the target's "
                        "units, e.g. --gap 0.05.")
    if not 2 <= max_seeds <= MAX_SEEDS:
        problems.append(f"--max-seeds {max_seeds}: expected 2..{MAX_SEEDS} seeds per regime (default "
                        f"{DEFAULT_MAX_SEEDS}).")
    if top is not None and top < 1:
        problems.append(f"--top {top}: expected at least 1 regime per condition.")
    if problems:
        raise RaceError(*problems)


# --- writing: the sweep and its provenance together, or nothing ----------------------------


def write_validation(plan: Any, prov: dict, out: Path) -> bool:
    """Write the sweep (race plan's writer) and provenance.json; False when `out` already holds it.

    A new folder is built under a temporary name and renamed into place, provenance included.
    An existing folder with the same plan keeps its provenance (the prediction made when the
    validation was planned); one with a different plan is refused by write_sweep.
    """
    from race_cli.plan.build import write_sweep
    from race_cli.report.validation import PROVENANCE, write_provenance

    out = Path(out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        written = write_sweep(plan, out)  # raises on a different plan or a non-sweep folder
        if written or not (out / PROVENANCE).is_file():
            write_provenance(out, prov)
            return True
        return False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        write_sweep(plan, tmp / "sweep")
        write_provenance(tmp / "sweep", prov)
        if out.exists():
            out.rmdir()  # empty
        os.replace(tmp / "sweep", out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def default_out(pilot: Path, budget: float | None, scale: float | None, replicate: bool = False) -> Path:
    tag = "rep" if replicate else f"C{budget:g}" if budget is not None else f"x{(scale or DEFAULT_SCALE):g}"
    return pilot.parent / f"{pilot.resolve().name}-validate-{tag}"


# --- the command ---------------------------------------------------------------------------


def validate_main(pilot: Path, *, budget: float | None = None, scale: float | None = None,
                  seeds: int | None = DEFAULT_SEEDS, top: int | None = None, tied: bool = False,
                  target: str | None = None, out: Path | None = None, dry_run: bool = False, typed: list[str] | None = None,
                  say: Callable[[str], None] | None = None, replicate: bool = False, margin: float = 0.0,
                  unlearned: bool = False, control: str = "runner-up", power: float = DEFAULT_POWER,
                  gap: float | None = None, max_seeds: int = DEFAULT_MAX_SEEDS) -> Path | None:
    """Preview the validation sweep, then write it (unless dry_run); RaceError on bad input."""
    import sys

    from rich.console import Console

    from race_cli.plan.render import print_plan
    from race_cli.plan.validate_preview import print_picks, print_power_plan

    pilot = Path(pilot)
    plan, prov, picks, notes = build_validation(pilot, budget=budget, scale=scale, seeds=seeds, top=top,
                                                tied=tied, target=target, typed=typed, replicate=replicate,
                                                margin=margin, unlearned=unlearned, control=control,
                                                power=power, gap=gap, max_seeds=max_seeds)
    out = Path(out) if out is not None else default_out(pilot, budget, scale, replicate)
    console = Console()  # the terminal's width: narrow tables at 80 columns and in a pipe
    print_picks(picks, prov, console)
    print_power_plan(prov, console)
    print_plan(plan, "table")
    err = Console(stderr=True)
    say = say or (lambda s: err.print(s, highlight=False))  # wrapped at the terminal's width
    for n in notes:
        say(f"note: {n}")
    if seeds == 1:
        from race_cli.report.words import NOT_TESTABLE

        say(f"note: one seed per regime: the validation report gives no verdict ('{NOT_TESTABLE}') "
            "unless it is given an assumed seed sd; 2 or more seeds measure the seed variance.")
    capped = [c["condition"] for c in prov["conditions"] if (c.get("power_plan") or {}).get("capped")]
    if capped:
        say(f"note: {len(capped)} condition(s) need more than --max-seeds {max_seeds} for power {power:g} at the "
            "gap sized for; they run --max-seeds and confirm only the larger gap shown (raise --max-seeds, or give "
            "--gap for the smallest gap that matters).")
    if dry_run:
        say(f"dry run: nothing written (would write {out}, {len(plan.jobs)} jobs)")
        return None
    written = write_validation(plan, prov, out)
    say(f"{'wrote' if written else 'unchanged (same validation already there)'}: {out}  ({len(plan.jobs)} jobs)")
    say(f"next: race run --sweep-dir {out}   then: race report {out}")
    sys.stdout.flush()
    return out
