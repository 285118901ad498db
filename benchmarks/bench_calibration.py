"""Calibration of race's intervals and verdicts on synthetic sweeps with a known truth.

    python benchmarks/bench_calibration.py                    # 1,000 conditions per scenario (~minutes)
    python benchmarks/bench_calibration.py --conditions 200   # quicker, noisier
    python benchmarks/bench_calibration.py --scenario 0.06,2  # one scenario

Every simulated condition is written as real job folders (tests/report_fixtures.py's writer:
summary.json with per-item scores at the end and at iteration 0, ledger.json, metrics.jsonl,
status.json) and read back by the real code: `race report`'s run_report for pilots, and the
validation's compare() (what `race report` runs on a sweep with provenance.json) for
validations. Nothing is recomputed here; the harness only counts.

The truth of one condition: R = 3 regimes at the default grid's update fractions p (0.83,
0.91, 0.95). Item i of regime r, seed s is scored as k = 4 sampled completions, each correct
with probability

    P = acc_r + d_i + e_s      d_i ~ U(-0.2, 0.2) item difficulty, shared by every job (paired)
                               e_s ~ U(-h, h), h = sd·√3: the training run's luck, SD = sd

so the regime's expected score over items and training runs is exactly acc_r. The starting
policy is evaluated by every job on the same items (its own k samples, P = start + d_i).
Scenarios: seed spread sd ∈ {0.03, 0.06} × seeds per regime ∈ {2, 3}. Per scenario:

- null pilots (all regimes equal, no gain: acc_r = start = 0.45): coverage, familywise false
  "worse" (some regime not ≈ best), false "beats its start" (some regime beats it), spurious p*
  (a p* recommended under a flat truth);
- effect pilots (acc_r = 0.47 + N(0, 0.03²) per regime, start 0.42): coverage of the final and
  gain intervals, the P(best) reliability table, the winner's curse (the best's estimate minus
  its truth, against the report's expected drop);
- validations, best and control, the same seeds: under the null (equal) the share "confirmed";
  at the stated gap Δ the share confirmed (power). Δ is the smallest gap with power >= 0.8 for
  that design, found from the null validations' own standard errors and degrees of freedom
  (the estimate shifts with the truth), then checked on fresh validations simulated at Δ
  (best 0.5 + Δ/2, control 0.5 − Δ/2; a Δ above MAX_GAP cannot be simulated and prints "–").
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from race_cli.report import stats as S  # noqa: E402
from race_cli.report import validation as V  # noqa: E402
from race_cli.report.command import run_report  # noqa: E402
from race_cli.report.table import read_sweeps  # noqa: E402
from report_fixtures import Regime, write_job  # noqa: E402

P_GRID = [(1, 0.83), (2, 0.91), (4, 0.95)]  # (μ, p): the default grid, G=4, rule reward
ITEM_HALF = 0.2
N_ITEMS = 200
SAMPLES = 4
BUDGET = 8e11
TARGET = "arithmetic"
SCENARIOS = [(0.03, 2), (0.03, 3), (0.06, 2), (0.06, 3)]
BINS = [0.0, 0.2, 0.4, 0.6, 0.8, 1.0001]
MAX_GAP = 0.38  # best 0.5 + gap/2, control 0.5 − gap/2: P stays in [0, 1] with items ±0.2 and seeds ±0.104


# --- writing sweeps with a known truth ------------------------------------------------------


def _cond(name: str) -> dict:
    return {"model": name, "budget_flops": BUDGET, "reward": "rule", "task": TARGET}


def _scores(prob: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.binomial(SAMPLES, prob) / SAMPLES


def write_condition(jobs_dir: Path, name: str, accs: list[float], start: float, regimes: list[tuple[int, float]],
                    n_seeds: int, seed_sd: float, rng: np.random.Generator, first_seed: int = 0) -> dict:
    """Write one condition's jobs; returns {regime label: [job ids]}."""
    d = rng.uniform(-ITEM_HALF, ITEM_HALF, N_ITEMS)
    h = seed_sd * math.sqrt(3.0)
    out: dict[str, list[str]] = {}
    for (mu, p), acc in zip(regimes, accs):
        for s in range(first_seed, first_seed + n_seeds):
            e = rng.uniform(-h, h)
            fin = _scores(acc + d + e, rng)
            ini = _scores(start + d, rng)
            jid = write_job(jobs_dir, _cond(name), Regime(4, mu, p), s, {TARGET: fin}, rng, iterations=2,
                            eval_every=2, start={TARGET: ini})
            out.setdefault(f"μ={mu}", []).append(jid)
    return out


def _condition_label(name: str) -> str:
    return f"model={name} budget_flops=8e+11 reward=rule task={TARGET} target={TARGET}"


# --- pilots ---------------------------------------------------------------------------------


def run_pilots(root: Path, n: int, seed_sd: float, n_seeds: int, rng: np.random.Generator, n_boot: int) -> dict:
    """n null and n effect conditions in one sweep, reported by run_report; the counts."""
    from rich.console import Console

    jobs = root / "jobs"
    jobs.mkdir(parents=True)
    truth: dict[str, tuple[str, np.ndarray, float]] = {}
    for c in range(n):
        name = f"null{c:05d}"
        write_condition(jobs, name, [0.45] * 3, 0.45, P_GRID, n_seeds, seed_sd, rng)
        truth[_condition_label(name)] = ("null", np.full(3, 0.45), 0.45)
    for c in range(n):
        name = f"eff{c:05d}"
        accs = 0.47 + rng.normal(0, 0.03, 3)
        write_condition(jobs, name, list(accs), 0.42, P_GRID, n_seeds, seed_sd, rng)
        truth[_condition_label(name)] = ("effect", accs, 0.42)
    res = run_report([root], plots=False, bootstrap=n_boot, console=Console(file=io.StringIO(), width=200))
    rk, fits = res["ranking"], res["fits"]
    acc_of = {f"μ={mu}": i for i, (mu, _) in enumerate(P_GRID)}
    cov_f = cov_g = n_rows = 0
    false_worse = false_beats = spurious = n_null = 0
    pb, hit = [], []
    curse, drop = [], []
    for cond, g in rk.groupby("condition", sort=False):
        kind, accs, start = truth[cond]
        idx = [acc_of[r] for r in g["regime"]]
        a = accs[idx]
        cov_f += int(((g["ci_lo"].to_numpy() <= a) & (a <= g["ci_hi"].to_numpy())).sum())
        gt = a - start
        cov_g += int(((g["gain_ci_lo"].to_numpy() <= gt) & (gt <= g["gain_ci_hi"].to_numpy())).sum())
        n_rows += len(g)
        if kind == "null":
            n_null += 1
            false_worse += int((~g["tied_best"].astype(bool)).any())
            false_beats += int(g["beats_start"].astype(bool).any())
            spurious += int(not fits[cond].fallback)
        else:
            true_best = int(np.argmax(a))
            pb += list(g["p_best"].to_numpy())
            hit += list(np.arange(len(g)) == true_best)
            b = int(np.flatnonzero(g["is_best"].to_numpy())[0])
            curse.append(float(g["mean"].iloc[b] - a[b]))
            drop.append(float(g["expected_drop"].iloc[0]))
    pb, hit = np.array(pb), np.array(hit)
    table = []
    for lo, hi in zip(BINS[:-1], BINS[1:]):
        m = (pb >= lo) & (pb < hi)
        table.append((lo, min(hi, 1.0), int(m.sum()), float(pb[m].mean()) if m.any() else math.nan,
                      float(hit[m].mean()) if m.any() else math.nan))
    return {"coverage_final": cov_f / n_rows, "coverage_gain": cov_g / n_rows, "rows": n_rows,
            "false_worse": false_worse / n_null, "false_beats": false_beats / n_null,
            "spurious_p_star": spurious / n_null, "n_null": n_null, "reliability": table,
            "winners_curse": float(np.mean(curse)), "expected_drop": float(np.mean(drop))}


# --- validations ------------------------------------------------------------------------------


def run_validations(root: Path, n: int, gap: float, seed_sd: float, n_seeds: int,
                    rng: np.random.Generator) -> list[dict]:
    """n validations (best truly `gap` above the control), written with provenance.json and read
    by the validation code the report runs; the condition rows (verdict, diff, its interval)."""
    jobs = root / "jobs"
    jobs.mkdir(parents=True)
    conds, tags = [], {}
    for c in range(n):
        name = f"val{c:05d}"
        ids = write_condition(jobs, name, [0.5 + gap / 2, 0.5 - gap / 2], 0.42, [P_GRID[0], P_GRID[2]], n_seeds, seed_sd, rng,
                              first_seed=10)
        label = _condition_label(name)
        conds.append({"condition": label, "values": _cond(name), "budget": BUDGET, "control": "μ=4",
                      "recommendation": {"best_regime": "μ=1", "condition": label},
                      "predicted_order": [{"regime": "μ=1", "rank": 1}, {"regime": "μ=4", "rank": 3}],
                      "validated": [{"regime": r, "role": role, "job_ids": ids[r]}
                                    for r, role in (("μ=1", "pilot best"), ("μ=4", "control"))]})
        tags |= {j: {"condition": label, "regime": r} for r in ids for j in ids[r]}
    prov = {"target": TARGET, "pilot": {"sweep": "synthetic"}, "settings": {"margin": 0.0},
            "conditions": conds, "jobs": tags}
    V.write_provenance(root, prov)
    res = V.compare(root, V.read_provenance(root), read_sweeps([root]), n_boot=200)
    return res["conditions"]


def detectable_gap(rows: list[dict], power: float = 0.85) -> float:
    """Smallest gap (to 0.005) at which `power` of these null validations would be confirmed:
    the estimate shifts by the gap, its standard error and degrees of freedom stay. Aimed at
    0.85 so that the check at that gap (where the binomial noise differs a little) clears 0.8."""
    lo = np.array([r["diff_lo"] for r in rows])
    for g in np.arange(0.005, 1.0, 0.005):
        if np.mean(lo + g > 0) >= power:
            return round(float(g), 3)
    return math.nan


# --- the table ----------------------------------------------------------------------------------


def run_scenario(tmp: Path, n: int, seed_sd: float, n_seeds: int, seed: int, n_boot: int) -> dict:
    rng = np.random.default_rng([seed, int(seed_sd * 1000), n_seeds])
    t0 = time.perf_counter()
    out = run_pilots(tmp / f"pilot-{seed_sd}-{n_seeds}", n, seed_sd, n_seeds, rng, n_boot)
    null = run_validations(tmp / f"val0-{seed_sd}-{n_seeds}", n, 0.0, seed_sd, n_seeds, rng)
    gap = detectable_gap(null)
    if not gap <= MAX_GAP:  # the truth model cannot hold a larger gap without clipping probabilities
        eff, gap = [], math.nan
    else:
        eff = run_validations(tmp / f"valg-{seed_sd}-{n_seeds}", n, gap, seed_sd, n_seeds, rng)
    out |= {"false_confirmed": float(np.mean([r["verdict"] == V.CONFIRMED for r in null])),
            "false_reversed": float(np.mean([r["verdict"] == V.REVERSED for r in null])),
            "gap": gap, "power": float(np.mean([r["verdict"] == V.CONFIRMED for r in eff])) if eff else math.nan,
            "diff_se": float(np.median([r["diff_se"] for r in null])),
            "diff_df": float(np.median([r["diff_df"] for r in null])),
            "seconds": time.perf_counter() - t0, "seed_sd": seed_sd, "n_seeds": n_seeds, "conditions": n}
    return out


def print_table(results: list[dict]) -> None:
    print("\nCalibration (95% intervals; familywise 5%): synthetic conditions with known truth, "
          f"{results[0]['conditions']} null + {results[0]['conditions']} effect pilots and "
          f"{results[0]['conditions']} + {results[0]['conditions']} validations per scenario\n")
    head = ["seed sd", "seeds", "cover final", "cover gain", "false worse", "false > start", "spurious p*",
            "false confirmed", "power @ gap", "gap (se, df)", "curse / drop"]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    for r in results:
        print(" | ".join([f"{r['seed_sd']:.2f}", str(r["n_seeds"]), f"{r['coverage_final']:.3f}",
                          f"{r['coverage_gain']:.3f}", f"{r['false_worse']:.3f}", f"{r['false_beats']:.3f}",
                          f"{r['spurious_p_star']:.3f}", f"{r['false_confirmed']:.3f}", f"{r['power']:.3f}",
                          f"{r['gap']:.3f} ({r['diff_se']:.3f}, {r['diff_df']:.1f})",
                          f"{r['winners_curse']:+.3f} / {r['expected_drop']:.3f}"]))
    print("\nP(best) reliability (effect pilots: regime effects N(0, 0.03²)): share of regimes truly best, "
          "by the reported P(best)")
    print("P(best) bin | " + " | ".join(f"sd {r['seed_sd']:.2f}, {r['n_seeds']} seeds: n, mean P, truly best"
                                       for r in results))
    for k in range(len(BINS) - 1):
        cells = []
        for r in results:
            lo, hi, m, mp, fr = r["reliability"][k]
            cells.append(f"{m}, {mp:.2f}, {fr:.2f}" if m else "0, –, –")
        lo, hi = results[0]["reliability"][k][:2]
        print(f"[{lo:.1f}, {hi:.1f}) | " + " | ".join(cells))


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conditions", type=int, default=1000, help="conditions per kind and scenario")
    ap.add_argument("--scenario", action="append", help="SEED_SD,SEEDS (repeatable); default all four")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap", type=int, default=400, help="draws per condition (P(best), p*, curse)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    scen = [(float(s.split(",")[0]), int(s.split(",")[1])) for s in a.scenario] if a.scenario else SCENARIOS
    results = []
    with tempfile.TemporaryDirectory(prefix="race-calibration-") as tmp:
        for sd, k in scen:
            r = run_scenario(Path(tmp), a.conditions, sd, k, a.seed, a.bootstrap)
            print(f"scenario seed sd {sd}, {k} seeds: {r['seconds']:.0f} s", file=sys.stderr, flush=True)
            results.append(r)
        print_table(results)  # before the temporary sweeps (gigabytes at 1,000 conditions) are removed
        sys.stdout.flush()
        if a.json:
            a.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
