"""Did the pilot's call hold? Compare a validation sweep (`race validate`) with its pilot.

    race validate runs/<pilot> --scale 2 --seeds 3     # writes runs/<pilot>-validate-x2/
    race run --sweep-dir runs/<pilot>-validate-x2
    race report runs/<pilot>-validate-x2               # the ranking, then this comparison

`race validate` stores its provenance in `<validation sweep>/provenance.json` (PROVENANCE):
the pilot sweep, the target, and per pilot condition the recommendation with its interval,
the pilot's whole predicted order (rank, mean, interval, best share, gain over the start per
FLOP) and which validation jobs run which pilot regime, in which role (recommended, top-K,
control). `race report` recognises a validation sweep by that file and, per condition:

- ranks the validated regimes again on the validation jobs (the pilot report's intervals:
  items paired, seed variance pooled over the validation's regimes of one reward system, race_cli/stats/);
- tests the pilot's call as a paired difference, best − control (the control: the pilot's runner-up,
  or with `race validate --control lowest` its lowest-ranked regime), with its 95% interval and the
  one-sided confidence level at which best > control holds (1 − p; a confidence level, not the
  probability that the best is better): the call is CONFIRMED when the interval lies above zero (or
  above `--margin`, fixed before running), REVERSED when it lies below zero, NOT SEPARATED otherwise;
  with one seed per regime there is no seed variance to test against and the verdict is NOT TESTABLE
  (unless an assumed seed sd supplies the missing term, `assume_seed_sd`); the summary counts only
  confirmed calls. Seed variance is pooled over the validation's regimes of one reward system
  (stats/variance, moderated as in the pilot's report); the test's interval is
  stats/validation_power.confirm_interval on the contrast's variance parts (stats/validation_power.test_parts), the
  function `race validate` simulates to size the seeds, so the plan's power is the test's. benchmarks/bench_calibration.py and
  benchmarks/bench_validate_design.py measure its false-confirmation rate and power;
- gives Spearman's rank correlation between the pilot's order and the validation's only when
  at least four regimes were validated (with two or three it is nearly always ±1 or ±0.5);
- sets the gain over the starting policy against the pilot's: at the same budget (--replicate)
  the two gains; at a larger budget (--scale, --budget) the absolute gains and the marginal gain
  per FLOP between the two budgets, (gain_val − gain_pilot) / (C_val − C_pilot).

Everything above the file writers is pure. No torch import.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.io import atomic_write_json, read_json
from race_cli.report.records import MIN_RHO_REGIMES, Validation
from race_cli.report.words import CONFIRMED, NOT_SEPARATED, NOT_TESTABLE, PENDING, REVERSED
from race_cli.report.words import VALIDATION_CAVEAT as CAVEAT
from race_cli.report.words import number as _num
from race_cli.stats.validation_power import spearman, test_parts

PROVENANCE = "provenance.json"  # in the validation sweep's root folder
KIND = "race-validation"
VERSION = 1
# the verdicts on best − control in the validation (a paired difference with its 95% interval): report/words.py


# --- provenance (the one file format both commands agree on) -----------------------------


def write_provenance(sweep_dir: str | Path, prov: dict) -> Path:
    """Write provenance.json atomically (temp file + rename); returns its path."""
    path = Path(sweep_dir) / PROVENANCE
    atomic_write_json(path, {"kind": KIND, "version": VERSION, **prov})
    return path


def read_provenance(sweep_dir: str | Path) -> dict | None:
    """The provenance of a validation sweep, None for an ordinary sweep; RaceError when malformed."""
    path = Path(sweep_dir) / PROVENANCE
    if path.is_symlink() or (path.exists() and not path.is_file()):  # a verdict must not vanish in silence
        raise RaceError(f"{path} is not a plain file ({'a symbolic link' if path.is_symlink() else 'a folder'}).",
                        "It is written by `race validate`; remove it and rerun race validate on the pilot with the "
                        "same options to rewrite it.")
    if not path.is_file():
        return None
    try:
        prov = read_json(path)
    except (ValueError, OSError) as e:
        raise RaceError(f"{path} is unreadable ({type(e).__name__}).",
                        "It is written by `race validate`; rerun it on the pilot with the same options "
                        "to rewrite it.") from None
    problems = []
    if not isinstance(prov, dict) or prov.get("kind") != KIND:
        problems.append(f"{path} is not a race validation provenance file (kind != {KIND!r}).")
    elif not isinstance(prov.get("conditions"), list) or not isinstance(prov.get("jobs"), dict):
        problems.append(f"{path} lacks its `conditions` list or `jobs` map.")
    elif (shape := _shape_problem(prov)):
        problems.append(f"{path}: {shape}.")
    elif prov.get("version", 0) > VERSION:
        problems.append(f"{path} has version {prov['version']}, newer than this race reads ({VERSION}).")
    if problems:
        raise RaceError(*problems, "Rewrite it with `race validate PILOT ...` (same options).")
    return prov


def check_labels(sweep_dir: str | Path, prov: dict, jobs: pd.DataFrame) -> None:
    """RaceError when provenance.json labels a validation job with a regime or condition its own files
    (summary.json: the values race train wrote from the job's config) disagree with; the message names
    both. Checked: every job the comparison counts (done, readable). The budget is left out: a scale-up
    runs the pilot's regime at another budget on purpose."""
    from race_cli.report.labels import label_mismatch
    from race_cli.report.rank import label

    path = Path(sweep_dir) / PROVENANCE
    tags, conds = prov.get("jobs") or {}, {c.get("condition"): c for c in prov.get("conditions") or []
                                            if isinstance(c, dict)}
    counted = jobs[(jobs["state"] == "done") & jobs["readable"].astype(bool)] if len(jobs) else jobs
    problems = []
    for row in counted.to_dict("records"):
        tag = tags.get(row["job_id"])
        if tag is None:
            continue
        regime = tag.get("regime") if isinstance(tag, dict) else None
        own = label_mismatch(regime, row, skip=("budget_flops",)) if regime is not None else "no regime"
        if own is not None:
            problems.append(f"job {row['job_id']} is labelled regime {regime!r} there, but its own files say {own!r}")
            continue
        values = (conds.get(tag.get("condition")) or {}).get("values") or {}
        claimed = label({k: v for k, v in values.items() if k != "budget_flops"}) if isinstance(values, dict) else ""
        own = label_mismatch(claimed, row)
        if own is not None:
            problems.append(f"job {row['job_id']} is placed in condition {tag.get('condition')!r} ({claimed}) there, "
                            f"but its own files say {own!r}")
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise RaceError(f"{path}: {problems[0]}{more}. A label that disagrees with the jobs would report a regime "
                        "that never ran.",
                        "The file was edited or is damaged: plan the validation again (race validate PILOT, same "
                        "options, into a new folder), or remove provenance.json to report this sweep as an "
                        "ordinary one.")


def check_provenance(sweep_dirs: list[Path], data) -> None:
    """`race report`'s check before it writes anything: a validation sweep's provenance.json labels
    agree with its jobs (`check_labels`). A provenance file that cannot be read is left to
    `report_validation`, which names it and skips the comparison."""
    if len(sweep_dirs) != 1:
        return
    try:
        prov = read_provenance(sweep_dirs[0])
    except RaceError:
        return
    if prov is not None:
        check_labels(sweep_dirs[0], prov, data.jobs)


def _shape_problem(prov: dict) -> str | None:
    """What the comparison reads of a provenance file and does not find there, or None: the target, each
    condition's name, recommendation, predicted order and validated regimes, each job's condition and
    regime. A damaged file is named and the comparison skipped, never a traceback."""
    def strs(d: Any, *keys: str) -> bool:
        return isinstance(d, dict) and all(isinstance(d.get(k), str) for k in keys)

    if not isinstance(prov.get("target"), str):
        return "no `target` string"
    for c in prov["conditions"]:
        if not strs(c, "condition") or not strs(c.get("recommendation"), "best_regime"):
            return "a condition without its name or its recommendation's best_regime"
        for key, fields in (("predicted_order", ("regime",)), ("validated", ("regime", "role"))):
            if not isinstance(c.get(key), list) or not all(strs(r, *fields) for r in c[key]):
                return f"condition {c['condition']!r}: `{key}` is not a list of regimes"
        if not {v["regime"] for v in c["validated"]} <= {r["regime"] for r in c["predicted_order"]}:
            return f"condition {c['condition']!r} validates a regime its predicted order does not rank"
    bad = next((j for j, t in prov["jobs"].items() if not strs(t, "condition", "regime")), None)
    if bad is not None:
        return f"job {str(bad)[:60]!r} has no condition and regime"
    return None


# --- pure statistics --------------------------------------------------------------------


def verdict(diff_lo: float, diff_hi: float, margin: float = 0.0) -> str:
    """CONFIRMED / NOT_SEPARATED / REVERSED from the interval of best − control (an improvement,
    signed so that positive means the pilot's best is better); PENDING without an interval."""
    if not (np.isfinite(diff_lo) and np.isfinite(diff_hi)):
        return PENDING
    if diff_lo > margin:
        return CONFIRMED
    if diff_hi < 0:
        return REVERSED
    return NOT_SEPARATED


def _interval(lo: float, hi: float, nd: int = 3) -> str:
    return f"[{lo:.{nd}f}, {hi:.{nd}f}]" if np.isfinite(lo) and np.isfinite(hi) else "(no interval)"


def condition_sentence(c: dict) -> str:
    """One paragraph per condition: the test of best − control, with the evidence."""
    best, tgt = c["pilot_best"], c["target"]
    at = f"at {c['budget']:.3g} FLOPs" if np.isfinite(_num(c.get("budget"))) else "at the validation budget"
    if c["verdict"] == PENDING:
        if c.get("n_regimes") == 1:
            return (f"Pending: only {c.get('val_best', best)} has finished validation jobs ({c['n_done']} of "
                    f"{c['n_jobs']} jobs done); the test needs the pilot's best and its control.")
        if c.get("n_regimes", 0) >= 2 and not c.get("control"):
            return f"Pending: no control was validated for {best}, so best − control cannot be tested."
        return (f"Pending: the pilot's best, {best}, or its control has no finished validation job yet "
                f"({c['n_done']} of {c['n_jobs']} jobs done).")
    margin = _num(c.get("margin"))
    over = f" {margin:g}" if np.isfinite(margin) and margin != 0 else " zero"
    conf = _num(c.get("one_sided_conf"))
    d = (f"best − control = {c['diff']:+.3f} [{c['diff_lo']:+.3f}, {c['diff_hi']:+.3f}]"
         + (f", best − control >{over} at one-sided confidence {conf:.3f} (1 − p; a confidence level, "
            "not a probability)" if np.isfinite(conf) else ""))
    pair = f"{best} ({tgt} {c['best_val_mean']:.3f}) against the control {c['control']} ({c['control_val_mean']:.3f})"
    if c["verdict"] == NOT_TESTABLE:
        return (f"{NOT_TESTABLE.capitalize()} {at}: {pair}, best − control = {c['diff']:+.3f} with an interval "
                f"for evaluation noise only {_interval(c['diff_lo'], c['diff_hi'])}: one training run per "
                "regime cannot tell a better regime from a lucky seed. Rerun race validate with --seeds 2 or "
                "more, or report with an assumed seed sd (--assume-seed-sd X) and say so.")
    if c["verdict"] == CONFIRMED:
        s = f"Confirmed {at}: {pair}, {d}: the interval lies above{over}"
    elif c["verdict"] == REVERSED:
        s = f"Reversed {at}: {pair}, {d}: the control is better"
    else:
        s = f"Not separated {at}: {pair}, {d}: the interval reaches{over}"
    exp = _num(c.get("pilot_expected"))
    if np.isfinite(exp):
        s += (f". The pilot predicted {c['pilot_best_mean']:.3f} for its best, about {exp:.3f} after its "
              f"expected drop (winner's curse)")
    rho = c.get("spearman")
    if rho is not None and np.isfinite(rho):
        s += (f"; rank correlation with the pilot's order ρ = {rho:+.2f} "
              f"{_interval(c['spearman_lo'], c['spearman_hi'], 2)} over {c['n_regimes']} regimes")
    g_val, g_pil = _num(c.get("best_val_gain")), _num(c.get("best_pilot_gain"))
    if np.isfinite(g_val) and np.isfinite(g_pil):
        if c.get("scaled"):
            s += (f"; gain over the start {g_pil:+.3f} at the pilot's {c['pilot_budget']:.3g} FLOPs → "
                  f"{g_val:+.3f} at {c['budget']:.3g}")
            m = _num(c.get("marginal_gain_per_flop"))
            if np.isfinite(m):
                s += f" (marginal gain per FLOP between the budgets {m:.3g})"
        else:
            s += f"; gain over the start {g_pil:+.3f} in the pilot, {g_val:+.3f} here"
    s += "."
    if "evaluation noise only" in str(c.get("noise", "")):
        s += " One seed per regime: these intervals cover evaluation noise only, not training (seed) noise."
    if "assumed" in str(c.get("noise", "")):
        s += f" One seed per regime: the verdict rests on an assumed seed sd ({c['noise'].split('assumed ')[1]})."
    lo = c.get("best_val_gain_ci_lo")
    if lo is not None and np.isfinite(lo) and lo <= 0:
        s += f" {best} did not beat its starting policy beyond noise in the validation: not a finding."
    return s


def summary_sentence(conds: list[dict], margin: float = 0.0, skipped: list[str] | None = None) -> str:
    """How many calls were confirmed (only confirmed ones count), with the caveat."""
    decided = [c for c in conds if c["verdict"] in (CONFIRMED, NOT_SEPARATED, REVERSED)]
    untestable = sum(c["verdict"] == NOT_TESTABLE for c in conds)
    pending = sum(c["verdict"] == PENDING for c in conds)
    skip = f"; {len(skipped)} condition(s) skipped (nothing beat its start in the pilot)" if skipped else ""
    one = (f"; {untestable} condition(s) {NOT_TESTABLE} per regime (no verdict)" if untestable else "")
    if not decided:
        return f"No condition can be judged yet ({pending} pending{one}{skip}). {CAVEAT}"
    n = {v: sum(c["verdict"] == v for c in decided) for v in (CONFIRMED, NOT_SEPARATED, REVERSED)}
    over = f"above the margin {margin:g}" if margin else "above zero"
    s = (f"The pilot's call was confirmed in {n[CONFIRMED]} of {len(decided)} condition(s) (best − control "
         f"interval {over}); not separated in {n[NOT_SEPARATED]}, reversed in {n[REVERSED]}")
    if pending:
        s += f"; {pending} condition(s) pending"
    return s + f"{one}{skip}. {CAVEAT}"


# --- one condition ------------------------------------------------------------------------


def _gain_inputs(jobs: pd.DataFrame, target: str, initial: dict, items: dict,
                 keys: list[tuple[str, str]], sign: float = 1.0) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-job gain over the start [J] and, when every job kept both on the same items, per-item gains [J, n].

    sign = -1 for a lower-is-better target, so a gain is always an improvement.
    """
    gain = sign * (pd.to_numeric(jobs[f"eval/{target}"], errors="coerce")
                   - pd.to_numeric(jobs.get(f"eval_initial/{target}", np.nan), errors="coerce")).to_numpy(float)
    rows, ids0 = [], None
    for k in keys:
        fin, ini = items.get((*k, target)), initial.get(k)
        if fin is None or ini is None or list(fin[0]) != list(ini[0]):
            return gain, None
        ids0 = list(fin[0]) if ids0 is None else ids0
        if list(fin[0]) != ids0:  # items must pair by position across jobs too
            return gain, None
        rows.append(sign * (np.asarray(fin[1], float) - np.asarray(ini[1], float)))
    return np.mean(rows, axis=1), np.vstack(rows)


def condition_noise(cond: dict, jobs: pd.DataFrame, items: dict, initial: dict, target: str,
                    maximize: bool = True) -> dict | None:
    """The validated regimes of one condition that have finished jobs, and their variance models (scores
    and gains over the start, each the condition's own until pooled); None when none has finished."""
    from race_cli.report.rank import _item_matrix
    from race_cli.stats.variance import noise_of

    validated = [v["regime"] for v in cond["validated"]]
    regs = [r for r in validated if r in set(jobs["pilot_regime"])]
    if not regs:
        return None
    jobs = jobs[jobs["pilot_regime"].isin(regs)]
    codes = np.array([regs.index(r) for r in jobs["pilot_regime"]])
    keys = list(zip(jobs["sweep"], jobs["job_id"]))
    scores, method, _ = _item_matrix(keys, target, items)
    values = jobs[f"eval/{target}"].to_numpy(float) if scores is None else scores.mean(axis=1)
    sign = 1.0 if maximize else -1.0
    g_values, g_scores = _gain_inputs(jobs, target, initial, items, keys, sign)
    gnoise = (noise_of(codes, g_scores if g_scores is not None else g_values, len(regs))
              if np.isfinite(g_values).all() else None)
    return {"regs": regs, "jobs": jobs, "codes": codes, "method": method,
            "noise": noise_of(codes, scores if scores is not None else values, len(regs)), "gnoise": gnoise}


def compare_condition(cond: dict, jobs: pd.DataFrame, items: dict, initial: dict, target: str,
                      n_boot: int, rng: np.random.Generator, maximize: bool = True,
                      margin: float = 0.0, prior=None, gprior=None, inputs: dict | None = None,
                      ) -> tuple[dict, pd.DataFrame]:
    """One pilot condition against its validation jobs -> (condition row, per-regime table).

    cond: one entry of provenance["conditions"]; jobs: the validation jobs of this condition
    that can be ranked (done, readable, target recorded), with a `pilot_regime` column.
    prior, gprior: the validation sweep's seed-variance pools (stats/variance.SeedPrior) for scores and
    gains; None keeps the condition's own; an assumed prior (--assume-seed-sd) supplies a one-seed
    validation's missing seed term. Without seed variance the verdict is NOT_TESTABLE.
    inputs: condition_noise's result, when the caller has it already.
    """
    from race_cli.stats import decisions as D
    from race_cli.stats import validation_power as VP
    from race_cli.stats.draws import draws_of

    order = cond["predicted_order"]  # the pilot's ranking of this condition, best first
    pilot = {r["regime"]: r for r in order}
    validated = [v["regime"] for v in cond["validated"]]
    roles = {v["regime"]: v["role"] for v in cond["validated"]}
    planned_jobs = sum(len(v.get("job_ids", [])) for v in cond["validated"])
    pilot_budget = _num((cond.get("values") or {}).get("budget_flops"))
    row: dict[str, Any] = {"condition": cond["condition"], "target": target, "budget": cond.get("budget"),
                           "pilot_budget": pilot_budget,
                           "scaled": bool(np.isfinite(pilot_budget) and np.isfinite(_num(cond.get("budget")))
                                          and abs(_num(cond.get("budget")) / pilot_budget - 1) > 1e-9),
                           "pilot_best": cond["recommendation"]["best_regime"],
                           "pilot_best_mean": _num(cond["recommendation"].get("best_mean")),
                           "pilot_best_ci_lo": _num(cond["recommendation"].get("best_ci_lo")),
                           "pilot_best_ci_hi": _num(cond["recommendation"].get("best_ci_hi")),
                           "n_jobs": planned_jobs, "n_done": len(jobs), "control": cond.get("control"),
                           "margin": margin}
    drop = _num(cond["recommendation"].get("expected_drop"))
    if np.isfinite(drop) and np.isfinite(row["pilot_best_mean"]):
        row["pilot_expected"] = row["pilot_best_mean"] - (drop if maximize else -drop)
    inp = inputs if inputs is not None else condition_noise(cond, jobs, items, initial, target, maximize)
    regs = inp["regs"] if inp is not None else []
    table = pd.DataFrame({"condition": cond["condition"], "regime": validated,
                          "role": [roles[r] for r in validated],
                          "pilot_rank": [pilot[r].get("rank") for r in validated],
                          "pilot_mean": [_num(pilot[r].get("mean")) for r in validated],
                          "pilot_ci_lo": [_num(pilot[r].get("ci_lo")) for r in validated],
                          "pilot_ci_hi": [_num(pilot[r].get("ci_hi")) for r in validated],
                          "pilot_p_best": [_num(pilot[r].get("p_best")) for r in validated],
                          "pilot_gain": [_num(pilot[r].get("gain")) for r in validated],
                          "pilot_gain_per_flop": [_num(pilot[r].get("gain_per_flop")) for r in validated]})
    if not regs:
        row.update(verdict=PENDING, n_regimes=0)
        row["sentence"] = condition_sentence(row)
        return row, _with_predictions(table, cond, row)

    # --- the validation's own ranking of the regimes it ran (items paired, seed variance pooled)
    jobs, codes, method = inp["jobs"], inp["codes"], inp["method"]
    n_seeds = np.bincount(codes, minlength=len(regs))
    noise = inp["noise"].pooled(prior) if prior is not None else inp["noise"]
    assumed = prior is not None and prior.assumed
    dec = D.rank_decisions(noise, maximize)
    point = dec["mean"]
    sign = 1.0 if maximize else -1.0
    stats = pd.DataFrame({"regime": regs, "mean": point, "ci_lo": dec["ci_lo"], "ci_hi": dec["ci_hi"],
                          "tied_best": dec["tied_best"], "is_best": np.arange(len(regs)) == dec["best"],
                          "rank": 1 + (sign * point[None, :] > sign * point[:, None]).sum(axis=1)})

    # --- gain over the start (an improvement: signed), per FLOP
    flops = np.bincount(codes, weights=pd.to_numeric(jobs.get("flops_total", np.nan), errors="coerce")
                        .to_numpy(float), minlength=len(regs)) / n_seeds
    if inp["gnoise"] is not None:
        gnoise = inp["gnoise"].pooled(gprior) if gprior is not None else inp["gnoise"]
        gd = D.gain_decisions(gnoise)
        g_point, g_lo, g_hi = gd["gain"], gd["gain_ci_lo"], gd["gain_ci_hi"]
    else:
        g_point = g_lo = g_hi = np.full(len(regs), np.nan)
    stats["gain"], stats["gain_ci_lo"], stats["gain_ci_hi"] = g_point, g_lo, g_hi
    with np.errstate(invalid="ignore", divide="ignore"):
        stats["gain_per_flop"] = np.where(flops > 0, g_point / flops, np.nan)
    stats["flops_total"] = flops
    stats["n_seeds"] = n_seeds
    stats["method"] = method
    pool = (f"pooled over the validation's {prior.key} regimes ({prior.df_total:.0f} df"
            + (f", prior df {prior.d0:.1f})" if math.isfinite(prior.d0) else ")")
            if prior is not None and not assumed else "pooled over the validated regimes of this condition")
    stats["noise"] = (f"one seed per regime: seed sd assumed {math.sqrt(prior.s0_sq):g} (not measured)" if assumed
                      else f"seed variance {pool}" if noise.has_seed_noise
                      else "one seed per regime: evaluation noise only")

    # --- compare with the pilot's order (ρ only over enough regimes to mean something)
    pred = np.array([-float(pilot[r].get("rank") or 0) for r in regs])  # higher = predicted better
    rho = lo = hi = np.nan
    if len(regs) >= MIN_RHO_REGIMES:
        draws = draws_of(noise, n_boot, rng)
        rho = float(spearman(pred, sign * point))
        rhos = spearman(pred, sign * draws)
        rhos = rhos[np.isfinite(rhos)]
        lo, hi = (np.quantile(rhos, [0.025, 0.975]) if len(rhos) else (np.nan, np.nan))
    best_i = int(dec["best"])
    row.update(n_regimes=len(regs), spearman=rho, spearman_lo=float(lo), spearman_hi=float(hi),
               val_best=regs[best_i], val_best_mean=float(point[best_i]), noise=stats["noise"].iloc[0])
    ctl = row["control"]
    if row["pilot_best"] in regs:
        i = regs.index(row["pilot_best"])
        row.update(best_val_mean=float(point[i]), best_val_ci_lo=float(stats["ci_lo"][i]),
                   best_val_ci_hi=float(stats["ci_hi"][i]), best_val_gain=float(g_point[i]),
                   best_val_gain_ci_lo=float(g_lo[i]), best_val_gain_per_flop=float(stats["gain_per_flop"][i]),
                   best_pilot_gain=_num(pilot[row["pilot_best"]].get("gain")),
                   best_pilot_gain_per_flop=_num(pilot[row["pilot_best"]].get("gain_per_flop")))
        pf = _num(pilot[row["pilot_best"]].get("flops_total"))
        if row["scaled"] and np.isfinite(pf) and flops[i] > pf:
            row["marginal_gain_per_flop"] = (row["best_val_gain"] - row["best_pilot_gain"]) / (flops[i] - pf)
    if row["pilot_best"] in regs and ctl in regs:  # the test: best − control, paired, signed
        i, j = regs.index(row["pilot_best"]), regs.index(ctl)
        c = np.zeros(len(regs))
        c[i], c[j] = 1.0, -1.0
        parts = test_parts(noise, c)
        diff = sign * float(point[i] - point[j])
        dlo, dhi = (float(x[0]) for x in VP.confirm_interval(diff, parts))
        row.update(diff=diff, diff_se=float(parts.se[0]), diff_df_seed=float(parts.df_seed[0]),
                   diff_lo=dlo, diff_hi=dhi, one_sided_conf=VP.confidence_level(diff, parts, margin),
                   control_val_mean=float(point[j]),
                   verdict=verdict(dlo, dhi, margin) if noise.has_seed_noise else NOT_TESTABLE)
    else:
        row["verdict"] = PENDING
    row["sentence"] = condition_sentence(row)
    table = table.merge(stats.rename(columns={c: f"val_{c}" for c in stats.columns if c != "regime"}),
                        on="regime", how="left")
    return row, _with_predictions(table, cond, row)


def _with_predictions(table: pd.DataFrame, cond: dict, row: dict) -> pd.DataFrame:
    """Both stored predictions (endpoint, compute curve) against the realised means (report/predicted.py)."""
    from race_cli.report.predicted import add_predictions, predictor_summary

    table = add_predictions(table, cond)
    for name, s in predictor_summary(table).items():
        row.update({f"{name}_mae": s["mae"], f"{name}_covered": s["covered"], f"{name}_n": s["n"]})
    return table


# --- the whole validation sweep (I/O at the edges) -------------------------------------------


def pool_key(values: dict) -> str:
    """The seed-variance pool of a condition (its values: model, budget_flops, reward, task): its reward
    system, as the pilot's report pools (rule and model rewards spread differently)."""
    return f"reward={values['reward']}" if "reward" in values else "all conditions"


def _initial_items(sweep_dir: Path, sweep: str, job_ids: list[str], target: str) -> dict:
    """{(sweep, job_id): (ids, scores)} from summary.json's eval_items_initial, where a job kept it."""
    out = {}
    for jid in job_ids:
        try:
            s = read_json(folder.summary_file(folder.job_dir(sweep_dir, jid)))
            d = (s.get("eval_items_initial") or {}).get(target)
            if d is not None:
                out[(sweep, jid)] = (list(d["ids"]), np.asarray(d["scores"], dtype=float))
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def compare(sweep_dir: Path, prov: dict, data, n_boot: int = 1000, seed: int = 0,
            assume_seed_sd: float | None = None) -> Validation:
    """Every pilot condition of the provenance against the validation jobs in `data` (SweepData), as a
    report/records.Validation."""
    from race_cli.report.table import maximize_target
    from race_cli.report.rank import rankable

    check_labels(sweep_dir, prov, data.jobs)
    target = prov["target"]
    jobs = data.jobs.copy()
    tag = prov["jobs"]
    jobs["pilot_condition"] = [(tag.get(j) or {}).get("condition") for j in jobs["job_id"]]
    jobs["pilot_regime"] = [(tag.get(j) or {}).get("regime") for j in jobs["job_id"]]
    ok = rankable(jobs, target) & jobs["pilot_regime"].notna()
    jobs = jobs[ok]
    initial = _initial_items(sweep_dir, sweep_dir.resolve().name, list(jobs["job_id"]), target)
    rng = np.random.default_rng(seed)
    maximize = maximize_target(target)
    settings = prov.get("settings") or {}
    margin = _num(settings.get("margin"))
    margin = margin if np.isfinite(margin) else 0.0
    from race_cli.stats.variance import assumed_prior, fit_pools

    # seed variance pooled over the validation's regimes of one reward system (as the pilot's report pools)
    conds = prov["conditions"]
    inputs = [condition_noise(c, jobs[jobs["pilot_condition"] == c["condition"]], data.items, initial, target,
                              maximize) for c in conds]
    keys = [pool_key(c.get("values") or {}) for c in conds]
    have = [(i, k) for i, k in zip(inputs, keys) if i is not None]
    pools = fit_pools([i["noise"] for i, _ in have], [k for _, k in have]) if have else {}
    gkeys = [(i, k) for i, k in have if i["gnoise"] is not None]
    gpools = fit_pools([i["gnoise"] for i, _ in gkeys], [k for _, k in gkeys]) if gkeys else {}
    rows, tables = [], []
    for cond, inp, key in zip(conds, inputs, keys):
        prior, gprior = pools.get(key), gpools.get(key)
        if assume_seed_sd is not None and (prior is None or not prior.df_total):
            prior = gprior = assumed_prior(assume_seed_sd)
        row, table = compare_condition(cond, jobs[jobs["pilot_condition"] == cond["condition"]], data.items,
                                       initial, target, n_boot, rng, maximize, margin, prior, gprior, inp)
        rows.append(row)
        tables.append(table)
    regimes = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    return Validation(target=target, maximize=maximize, conditions=rows, regimes=regimes,
                      summary=summary_sentence(rows, margin, prov.get("skipped") or []), pilot=prov.get("pilot", {}),
                      margin=margin, skipped=prov.get("skipped") or [], design=design_sentence(settings),
                      predictors=_predictor_sentences(regimes, rows))


def _predictor_sentences(regimes: pd.DataFrame, rows: list[dict]) -> dict[str, str | None]:
    """Per condition, how well the pilot's predictions held (report/predicted.predictor_sentence), read off its
    rows of the regimes table as validation.md shows them."""
    from race_cli.report.predicted import predictor_sentence

    out = {}
    for c in rows:
        t = regimes[regimes["condition"] == c["condition"]]
        out[c["condition"]] = predictor_sentence(t) if "endpoint_pred" in t and len(t) else None
    return out


def design_sentence(settings: dict) -> str:
    """What the validation was planned as: its control, its items, its seeds (from provenance settings)."""
    ev = settings.get("eval_items") or {}
    control = settings.get("control", "lowest")
    s = f"Control: the pilot's {'runner-up (its closest rival)' if control == 'runner-up' else 'lowest-ranked regime'}."
    if ev:
        s += (f" Items: task.eval_seed {ev.get('eval_seed')} against the pilot's {ev.get('pilot_eval_seed')}: "
              f"{ev.get('note', 'not checked')}.")
    else:
        s += " Items: the pilot's (planned before fresh items were drawn)."
    if settings.get("seeds_by") == "power":
        s += (f" Seeds: per condition, the fewest for power {settings.get('power'):g} at the gap sized for (at most "
              f"{settings.get('max_seeds')}); the plan is in provenance.json (conditions[].power_plan).")
    return s


