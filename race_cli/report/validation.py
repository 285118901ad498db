"""Did the pilot's call hold? Compare a validation sweep (`race validate`) with its pilot.

    race validate runs/<pilot> --scale 2 --seeds 3     # writes runs/<pilot>-validate-x2/
    race run --sweep-dir runs/<pilot>-validate-x2
    race report runs/<pilot>-validate-x2               # the ranking, then this comparison

`race validate` stores its provenance in `<validation sweep>/provenance.json` (PROVENANCE):
the pilot sweep, the target, and per pilot condition the recommendation with its interval,
the pilot's whole predicted order (rank, mean, interval, P(best), gain over the start per
FLOP) and which validation jobs run which pilot regime, in which role (recommended, top-K,
control). `race report` recognises a validation sweep by that file and, per condition:

- ranks the validated regimes again on the validation jobs (same paired item × seed
  bootstrap as the pilot report, race_cli/report/rank.py);
- says whether the pilot's best stayed best, stayed ≈ best (the validation's paired
  interval of its gap to the best reaches 0), or did not hold;
- gives Spearman's rank correlation between the pilot's order and the validation's, with a
  bootstrap interval over the validation's items and seeds (the pilot's order is held fixed:
  it is the prediction being tested);
- sets the realised gain over the starting policy per training FLOP against the pilot's.

Everything above the file writers is pure. No torch import.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from race_cli import folder
from race_cli.errors import RaceError
from race_cli.io import atomic_write_json, atomic_write_text, dumps, read_json

PROVENANCE = "provenance.json"  # in the validation sweep's root folder
KIND = "race-validation"
VERSION = 1
CAVEAT = ("A pilot grid is a diagnostic, not a guarantee: a call that held here held for these "
          "regimes, at this budget, on this target; it says little about regimes the pilot did not rank.")

# verdicts: the pilot's best ...
HELD = "held"  # ... is the validation's best too
HELD_TIED = "held (≈ best)"  # ... is statistically indistinguishable from the validation's best
NOT_HELD = "did not hold"  # ... is beaten: the interval of its gap to the best excludes 0
PENDING = "pending"  # ... has no finished validation job yet


# --- provenance (the one file format both commands agree on) -----------------------------


def write_provenance(sweep_dir: str | Path, prov: dict) -> Path:
    """Write provenance.json atomically (temp file + rename); returns its path."""
    path = Path(sweep_dir) / PROVENANCE
    atomic_write_json(path, {"kind": KIND, "version": VERSION, **prov})
    return path


def read_provenance(sweep_dir: str | Path) -> dict | None:
    """The provenance of a validation sweep, None for an ordinary sweep; RaceError when malformed."""
    path = Path(sweep_dir) / PROVENANCE
    if not path.is_file():
        return None
    try:
        prov = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError, OSError) as e:
        raise RaceError(f"{path} is unreadable ({type(e).__name__}).",
                        "It is written by `race validate`; rerun it on the pilot with the same options "
                        "to rewrite it.") from None
    problems = []
    if not isinstance(prov, dict) or prov.get("kind") != KIND:
        problems.append(f"{path} is not a race validation provenance file (kind != {KIND!r}).")
    elif not isinstance(prov.get("conditions"), list) or not isinstance(prov.get("jobs"), dict):
        problems.append(f"{path} lacks its `conditions` list or `jobs` map.")
    elif prov.get("version", 0) > VERSION:
        problems.append(f"{path} has version {prov['version']}, newer than this race reads ({VERSION}).")
    if problems:
        raise RaceError(*problems, "Rewrite it with `race validate PILOT ...` (same options).")
    return prov


# --- pure statistics --------------------------------------------------------------------


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n along the last axis, ties sharing their average rank: [..., n] -> [..., n]."""
    x = np.asarray(x, dtype=float)
    return pd.DataFrame(x.reshape(-1, x.shape[-1])).rank(axis=1, method="average").to_numpy().reshape(x.shape)


def spearman(pred: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Spearman's ρ between one ordering score pred [R] and each row of obs [..., R].

    Pearson correlation of average ranks (the textbook 1 - 6Σd²/(n(n²-1)) when nothing ties);
    NaN where either side is constant (no order to compare).
    """
    rp = average_ranks(pred)
    ro = average_ranks(obs)
    a = rp - rp.mean()
    b = ro - ro.mean(axis=-1, keepdims=True)
    den = np.sqrt((a ** 2).sum() * (b ** 2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, (b * a).sum(axis=-1) / np.where(den > 0, den, 1.0), np.nan)


def verdict(pilot_best: str, stats: pd.DataFrame) -> str:
    """HELD / HELD_TIED / NOT_HELD / PENDING from the validation's per-regime stats.

    stats: one row per validated regime with a finished job, columns regime, is_best,
    tied_best (rank.summarize_draws); the pilot's best is looked up by its regime label.
    """
    row = stats[stats["regime"] == pilot_best]
    if row.empty:
        return PENDING
    if bool(row["is_best"].iloc[0]):
        return HELD
    return HELD_TIED if bool(row["tied_best"].iloc[0]) else NOT_HELD


def _num(v: Any) -> float:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return math.nan
    return v


def _interval(lo: float, hi: float, nd: int = 3) -> str:
    return f"[{lo:.{nd}f}, {hi:.{nd}f}]" if np.isfinite(lo) and np.isfinite(hi) else "(no interval)"


def condition_sentence(c: dict) -> str:
    """One sentence (or two) per condition: did the call hold, with the evidence."""
    best, tgt = c["pilot_best"], c["target"]
    at = f"at {c['budget']:.3g} FLOPs" if np.isfinite(_num(c.get("budget"))) else "at the validation budget"
    if c["verdict"] == PENDING:
        if c.get("n_regimes") == 1:
            return (f"Pending: only {c['val_best']} has finished validation jobs ({c['n_done']} of "
                    f"{c['n_jobs']} jobs done); a verdict needs at least two regimes to compare.")
        return (f"Pending: the pilot's best, {best}, has no finished validation job yet "
                f"({c['n_done']} of {c['n_jobs']} jobs done).")
    mean = f"{tgt} {c['best_val_mean']:.3f} {_interval(c['best_val_ci_lo'], c['best_val_ci_hi'])}"
    if c["verdict"] == HELD:
        s = f"Held: the pilot's best, {best}, is best again {at} ({mean})"
    elif c["verdict"] == HELD_TIED:
        s = (f"Held (≈ best): the pilot's best, {best} ({mean}), is statistically indistinguishable "
             f"from the validation's best, {c['val_best']} ({c['val_best_mean']:.3f}), {at}")
    else:
        s = (f"Did not hold: {c['val_best']} ({c['val_best_mean']:.3f}) beat the pilot's best, {best} "
             f"({mean}), {at}; the interval of the gap excludes 0")
    rho = c.get("spearman")
    if rho is not None and np.isfinite(rho):
        s += (f"; rank correlation with the pilot's order ρ = {rho:+.2f} "
              f"{_interval(c['spearman_lo'], c['spearman_hi'], 2)} over {c['n_regimes']} regimes")
        if c["n_regimes"] == 2:
            s += " (with 2 regimes ρ is ±1; --tied or --top K validates more)"
    g_val, g_pil = c.get("best_val_gain_per_flop"), c.get("best_pilot_gain_per_flop")
    if g_val is not None and np.isfinite(g_val) and g_pil is not None and np.isfinite(g_pil):
        s += f"; gain over the start per FLOP {g_val:.3g} vs the pilot's {g_pil:.3g}"
    s += "."
    if c.get("control") and c.get("control_not_below"):
        s += (f" The control ({c['control']}, the pilot's lowest-ranked) did not fall below the pilot's "
              "best here.")
    lo = c.get("best_val_gain_ci_lo")
    if lo is not None and np.isfinite(lo) and lo <= 0:
        s += f" {best} did not beat its starting policy beyond noise in the validation: not a finding."
    return s


def summary_sentence(conds: list[dict]) -> str:
    """The fraction of conditions where the call held, with the caveat."""
    decided = [c for c in conds if c["verdict"] != PENDING]
    pending = len(conds) - len(decided)
    if not decided:
        return f"No condition can be judged yet ({pending} pending). {CAVEAT}"
    held = [c for c in decided if c["verdict"] in (HELD, HELD_TIED)]
    exact = sum(c["verdict"] == HELD for c in held)
    s = (f"The pilot's call held in {len(held)} of {len(decided)} condition(s) "
         f"({100 * len(held) / len(decided):.0f}%: {exact} best again, {len(held) - exact} ≈ best)")
    if pending:
        s += f"; {pending} condition(s) pending"
    return s + f". {CAVEAT}"


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


def compare_condition(cond: dict, jobs: pd.DataFrame, items: dict, initial: dict, target: str,
                      n_boot: int, rng: np.random.Generator, maximize: bool = True) -> tuple[dict, pd.DataFrame]:
    """One pilot condition against its validation jobs -> (condition row, per-regime table).

    cond: one entry of provenance["conditions"]; jobs: the validation jobs of this condition
    that can be ranked (done, readable, target recorded), with a `pilot_regime` column.
    """
    from race_cli.report.rank import _item_matrix, bootstrap_regimes, summarize_draws

    order = cond["predicted_order"]  # the pilot's ranking of this condition, best first
    pilot = {r["regime"]: r for r in order}
    validated = [v["regime"] for v in cond["validated"]]
    roles = {v["regime"]: v["role"] for v in cond["validated"]}
    planned_jobs = sum(len(v.get("job_ids", [])) for v in cond["validated"])
    row: dict[str, Any] = {"condition": cond["condition"], "target": target, "budget": cond.get("budget"),
                           "pilot_best": cond["recommendation"]["best_regime"],
                           "pilot_best_mean": _num(cond["recommendation"].get("best_mean")),
                           "pilot_best_ci_lo": _num(cond["recommendation"].get("best_ci_lo")),
                           "pilot_best_ci_hi": _num(cond["recommendation"].get("best_ci_hi")),
                           "n_jobs": planned_jobs, "n_done": len(jobs), "control": cond.get("control")}
    regs = [r for r in validated if r in set(jobs["pilot_regime"])]
    table = pd.DataFrame({"condition": cond["condition"], "regime": validated,
                          "role": [roles[r] for r in validated],
                          "pilot_rank": [pilot[r].get("rank") for r in validated],
                          "pilot_mean": [_num(pilot[r].get("mean")) for r in validated],
                          "pilot_ci_lo": [_num(pilot[r].get("ci_lo")) for r in validated],
                          "pilot_ci_hi": [_num(pilot[r].get("ci_hi")) for r in validated],
                          "pilot_p_best": [_num(pilot[r].get("p_best")) for r in validated],
                          "pilot_gain_per_flop": [_num(pilot[r].get("gain_per_flop")) for r in validated]})
    if not regs:
        row.update(verdict=PENDING, n_regimes=0)
        row["sentence"] = condition_sentence(row)
        return row, table

    # --- the validation's own ranking of the regimes it ran (paired items × seeds)
    jobs = jobs[jobs["pilot_regime"].isin(regs)]
    codes = np.array([regs.index(r) for r in jobs["pilot_regime"]])
    keys = list(zip(jobs["sweep"], jobs["job_id"]))
    scores, method, _ = _item_matrix(keys, target, items)
    values = jobs[f"eval/{target}"].to_numpy(float) if scores is None else scores.mean(axis=1)
    n_seeds = np.bincount(codes, minlength=len(regs))
    point = np.bincount(codes, weights=values, minlength=len(regs)) / n_seeds
    draws = bootstrap_regimes(codes, values, scores, n_boot, rng)  # [B, R]
    stats = summarize_draws(point, draws, maximize=maximize)
    stats.insert(0, "regime", regs)
    if scores is None and (n_seeds < 2).any():  # one value, nothing to resample
        stats.loc[n_seeds < 2, ["ci_lo", "ci_hi"]] = np.nan

    # --- gain over the start, per FLOP
    sign = 1.0 if maximize else -1.0
    g_values, g_scores = _gain_inputs(jobs, target, initial, items, keys, sign)
    ok = np.isfinite(g_values)
    flops = np.bincount(codes, weights=pd.to_numeric(jobs.get("flops_total", np.nan), errors="coerce")
                        .to_numpy(float), minlength=len(regs)) / n_seeds
    if ok.all():
        g_point = np.bincount(codes, weights=g_values, minlength=len(regs)) / n_seeds
        g_draws = bootstrap_regimes(codes, g_values, g_scores, n_boot, rng)
        g_lo, g_hi = np.quantile(g_draws, [0.025, 0.975], axis=0)
        if g_scores is None:
            g_lo[n_seeds < 2] = g_hi[n_seeds < 2] = np.nan
    else:
        g_point = g_lo = g_hi = np.full(len(regs), np.nan)
    stats["gain"], stats["gain_ci_lo"], stats["gain_ci_hi"] = g_point, g_lo, g_hi
    with np.errstate(invalid="ignore", divide="ignore"):
        stats["gain_per_flop"] = np.where(flops > 0, g_point / flops, np.nan)
    stats["n_seeds"] = n_seeds
    stats["method"] = method

    # --- compare with the pilot's order
    pred = np.array([-float(pilot[r].get("rank") or 0) for r in regs])  # higher = predicted better
    if len(regs) >= 2:
        rho = float(spearman(pred, sign * point))
        rhos = spearman(pred, sign * draws)
        rhos = rhos[np.isfinite(rhos)]
        lo, hi = (np.quantile(rhos, [0.025, 0.975]) if len(rhos) else (np.nan, np.nan))
    else:
        rho, lo, hi = np.nan, np.nan, np.nan
    best_i = int(np.flatnonzero(stats["is_best"])[0])
    v = verdict(row["pilot_best"], stats) if len(regs) >= 2 else PENDING  # one regime: nothing to compare
    row.update(verdict=v, n_regimes=len(regs), spearman=rho, spearman_lo=float(lo), spearman_hi=float(hi),
               val_best=regs[best_i], val_best_mean=float(point[best_i]))
    if row["pilot_best"] in regs:
        i = regs.index(row["pilot_best"])
        row.update(best_val_mean=float(point[i]), best_val_ci_lo=float(stats["ci_lo"][i]),
                   best_val_ci_hi=float(stats["ci_hi"][i]), best_val_gain=float(g_point[i]),
                   best_val_gain_ci_lo=float(g_lo[i]), best_val_gain_per_flop=float(stats["gain_per_flop"][i]),
                   best_pilot_gain_per_flop=_num(pilot[row["pilot_best"]].get("gain_per_flop")))
        ctl = row["control"]
        if ctl in regs:  # the control should land below the pilot's best; say so when it does not
            j = regs.index(ctl)
            row["control_not_below"] = bool(sign * point[j] >= sign * point[i])
    row["sentence"] = condition_sentence(row)
    table = table.merge(stats.rename(columns={c: f"val_{c}" for c in stats.columns if c != "regime"}),
                        on="regime", how="left")
    return row, table


# --- the whole validation sweep (I/O at the edges) -------------------------------------------


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


def compare(sweep_dir: Path, prov: dict, data, n_boot: int = 1000, seed: int = 0) -> dict:
    """Every pilot condition of the provenance against the validation jobs in `data` (SweepData).

    Returns {"target", "conditions": [row], "regimes": DataFrame, "summary": sentence}.
    """
    from race_cli.report.table import maximize_target
    from race_cli.report.rank import rankable

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
    rows, tables = [], []
    for cond in prov["conditions"]:
        row, table = compare_condition(cond, jobs[jobs["pilot_condition"] == cond["condition"]], data.items,
                                       initial, target, n_boot, rng, maximize)
        rows.append(row)
        tables.append(table)
    return {"target": target, "maximize": maximize, "conditions": rows,
            "regimes": pd.concat(tables, ignore_index=True) if tables else pd.DataFrame(),
            "summary": summary_sentence(rows), "pilot": prov.get("pilot", {})}


def _f(v: Any, nd: int = 3) -> str:
    v = _num(v)
    return "–" if not np.isfinite(v) else f"{v:.{nd}f}"


def _g(v: Any) -> str:
    v = _num(v)
    return "–" if not np.isfinite(v) else f"{v:.3g}"


VAL_HEAD = ["role", "regime", "pilot: #  mean [95% CI]", "P(best)", "validation: #  mean [95% CI]", "≈ best",
            "gain/FLOP: pilot → val", "seeds"]


def regime_rows(t: pd.DataFrame) -> list[list[str]]:
    """Display cells of one condition's pilot-vs-validation table."""
    out = []
    for _, r in t.iterrows():
        ran = np.isfinite(_num(r.get("val_mean")))
        out.append([r["role"], r["regime"],
                    f"{r['pilot_rank']}  {_f(r['pilot_mean'])} [{_f(r['pilot_ci_lo'])}, {_f(r['pilot_ci_hi'])}]",
                    _f(r["pilot_p_best"], 2),
                    (f"{int(r['val_rank'])}  {_f(r['val_mean'])} [{_f(r['val_ci_lo'])}, {_f(r['val_ci_hi'])}]"
                     if ran else "not run yet"),
                    ("yes" if r["val_tied_best"] else "no") if ran else "–",
                    f"{_g(r['pilot_gain_per_flop'])} → {_g(r.get('val_gain_per_flop'))}",
                    str(int(r["val_n_seeds"])) if ran else "0"])
    return out


def markdown(res: dict) -> str:
    """validation.md: per condition the table and its sentence, then the summary."""
    from race_cli.report.render import md_table

    p = res["pilot"]
    out = ["# RACE validation: did the pilot's call hold?", "",
           f"Pilot: `{p.get('sweep', '?')}` (target `{res['target']}`). Rank correlation: Spearman's ρ "
           "between the pilot's order and the validation's means, 95% bootstrap interval over the "
           "validation's items and seeds (the pilot's order held fixed). Gain: over the starting "
           "policy (iteration 0), per training FLOP (model convention).", ""]
    for c in res["conditions"]:
        t = res["regimes"][res["regimes"]["condition"] == c["condition"]]
        out += [f"## {c['condition']}", "", md_table(VAL_HEAD, regime_rows(t)), "", c["sentence"], ""]
    out += ["## Summary", "", res["summary"], ""]
    return "\n".join(out)


def print_validation(console, res: dict) -> None:
    from rich.console import Console
    from rich.panel import Panel
    from rich.table import Table

    # a log or pipe gets room for the table's columns, as race run's summary does
    wide = console if console.is_terminal else Console(file=console.file, width=max(console.width, 140))
    console.print(f"[bold]Validation[/] of pilot {res['pilot'].get('sweep', '?')} on {res['target']}: "
                  "the pilot's prediction next to what happened")
    for c in res["conditions"]:
        t = Table(title=f"{c['condition']}  ·  {c['verdict']}", title_justify="left")
        for h in VAL_HEAD:
            t.add_column(h, justify="left" if h in ("role", "regime") else "right")
        for r in regime_rows(res["regimes"][res["regimes"]["condition"] == c["condition"]]):
            t.add_row(*r)
        wide.print(t)
        console.print(c["sentence"])
    console.print(Panel(res["summary"], title="did the pilot's call hold?", border_style="yellow"))


def report_validation(sweep_dirs: list[Path], data, out_dir: Path, fmt: str, console,
                      n_boot: int = 1000, seed: int = 0) -> dict | None:
    """The `race report` hook: None for an ordinary sweep; else compare, write and show.

    Writes validation.md, validation.csv (one row per condition) and validation_regimes.csv
    into out_dir. A malformed provenance file is a warning, never a failed report.
    """
    import sys

    if len(sweep_dirs) != 1:
        return None
    try:
        prov = read_provenance(sweep_dirs[0])
    except RaceError as e:
        sys.stderr.write("validation comparison skipped: " + " ".join(e.problems) + "\n")
        return None
    if prov is None:
        return None
    res = compare(Path(sweep_dirs[0]), prov, data, n_boot, seed)
    md = markdown(res)
    cond_cols = list(dict.fromkeys(k for c in res["conditions"] for k in c))  # pending rows have fewer
    texts = {"validation.md": md,
             "validation.csv": pd.DataFrame(res["conditions"], columns=cond_cols).to_csv(index=False),
             "validation_regimes.csv": res["regimes"].to_csv(index=False),
             "validation.json": dumps({k: v for k, v in res.items() if k != "regimes"}
                                      | {"regimes": json.loads(res["regimes"].to_json(orient="records"))})}
    for name, text in texts.items():
        atomic_write_text(out_dir / name, text)
    if fmt == "table" and console is not None:
        print_validation(console, res)
        console.print(f"Wrote {', '.join(texts)} to {out_dir}")
    else:
        if fmt == "markdown":
            sys.stdout.write("\n" + md)
        sys.stderr.write(f"Wrote {', '.join(texts)} to {out_dir}\n")
    res["files"] = list(texts)
    return res
