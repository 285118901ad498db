"""Calibration of the validation design: runner-up control, fresh items, seeds sized by power.

    python benchmarks/bench_validate_design.py                  # 1,000 conditions per scenario (~minutes)
    python benchmarks/bench_validate_design.py --conditions 200 # quicker, noisier

Synthetic pilots and validations with a known truth, built item by item and read by the functions the
real commands use: the pilot's variance model (stats/variance: noise_of, fit_pools, pooled), the seed plan
of `race validate` (plan/validate.plan_all_seeds: the gap shrunk for the winner's curse, the seeds by
power from the report's own test), and the validation report's test (report/validation: test_parts,
stats/validation_power.confirm_interval, verdict). Job folders are not written (the report's reading of
them is covered by benchmarks/bench_calibration.py); everything from the per-item scores on is the code's.

The truth of one condition (the default pilot's shape: 3 regimes × 2 seeds, 200 items × 4 samples; one
sweep = 8 conditions sharing a reward, so the seed variance is pooled over 24 regimes as the report
pools it). Item i of regime r, seed s is scored as k = 4 samples, each correct with probability

    P = acc_r + d_i + g_ri + e_rs     d_i ~ U(-0.2, 0.2) item difficulty (paired across regimes)
                                      g_ri ~ N(0, 0.05²) item × regime interaction (regimes learn different items)
                                      e_rs ~ N(0, σ_r²), σ_r = 0.02·U(0.5, 1.5): heterogeneous seed spread

(clipped to [0.02, 0.98], which the ranges above reach rarely). The validation reruns the pilot's best
and its control with n fresh seeds each (n from the plan) on fresh items (new d and g: another eval
seed) or, for comparison, on the pilot's own items (the old design: d and g reused).

Scenarios:
- null: all regimes equal (acc 0.5): the share of conditions "confirmed" (false confirmed; nominal
  0.025 one-sided, bound 0.05), with the runner-up control on fresh items, on the pilot's items, and
  the lowest-ranked control on fresh items;
- power: regime effects acc = 0.5 + N(0, 0.03²); the plan sizes the seeds for the pilot's best −
  runner-up gap less its selection bias (or for --gap 0.05); the validation is then simulated with a
  true gap equal to the gap the plan says it confirms with 80% power (the gap it was sized for, or the
  larger one --max-seeds allows): the share confirmed must be >= 0.8.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from race_cli.plan.validate import plan_all_seeds  # noqa: E402
from race_cli.report import validation as V  # noqa: E402
from race_cli.stats import validation_power as VP  # noqa: E402
from race_cli.stats.variance import fit_pools, noise_of  # noqa: E402

N_ITEMS, SAMPLES, PILOT_SEEDS, REGIMES = 200, 4, 2, 3
ITEM_HALF, INTER_SD, SEED_SD = 0.2, 0.05, 0.02
PER_SWEEP = 8  # conditions sharing one seed pool (the default grid: 8 conditions)
REGS = ["μ=1", "μ=2", "μ=4"]


def _scores(acc: np.ndarray, d: np.ndarray, g: np.ndarray, sd: np.ndarray, seeds: int,
            rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """codes [J], per-item scores [J, n] of len(acc) regimes × `seeds` jobs."""
    codes, rows = [], []
    for r in range(len(acc)):
        for _ in range(seeds):
            p = np.clip(acc[r] + d + g[r] + rng.normal(0, sd[r]), 0.02, 0.98)
            rows.append(rng.binomial(SAMPLES, p) / SAMPLES)
            codes.append(r)
    return np.array(codes), np.vstack(rows)


def _items(rng, n_reg):
    return rng.uniform(-ITEM_HALF, ITEM_HALF, N_ITEMS), rng.normal(0, INTER_SD, (n_reg, N_ITEMS))


def run_sweep(rng: np.random.Generator, kind: str, control: str, gap: float | None, reuse: bool) -> list[dict]:
    """One pilot sweep of PER_SWEEP conditions, its validation plan, and one validation per condition."""
    conds, noises, truth = [], {}, {}
    for c in range(PER_SWEEP):
        acc = np.full(REGIMES, 0.5) if kind == "null" else 0.5 + rng.normal(0, 0.03, REGIMES)
        sd = SEED_SD * rng.uniform(0.5, 1.5, REGIMES)
        d, g = _items(rng, REGIMES)
        codes, table = _scores(acc, d, g, sd, PILOT_SEEDS, rng)
        name = f"c{c}"
        noises[name] = (noise_of(codes, table, REGIMES), REGS)
        truth[name] = (acc, sd, d, g)
    pools = fit_pools([n for n, _ in noises.values()], ["reward=rule"] * PER_SWEEP)
    for name, (nz, regs) in noises.items():
        point = nz.pooled(pools["reward=rule"]).point  # the report's best: the highest mean
        order = list(np.argsort(-point, kind="stable"))
        best, ctl = order[0], (order[1] if control == "runner-up" else order[-1])
        conds.append({"condition": name, "values": {"reward": "rule"}, "control": REGS[ctl],
                      "validated": [{"regime": REGS[best]}, {"regime": REGS[ctl]}], "_idx": (best, ctl)})
    plan_all_seeds(conds, noises, "arithmetic", power=VP.DEFAULT_POWER, gap=gap, max_seeds=VP.DEFAULT_MAX_SEEDS,
                   seeds=None, margin=0.0, control=control)
    # --- the validations, pooled over the sweep's validated regimes as the validation report pools them
    vals = []
    for e in conds:
        acc, sd, d, g = truth[e["condition"]]
        b, c = e["_idx"]
        pp = e["power_plan"]
        n = int(pp["seeds"])
        if kind == "null":
            true_gap = 0.0
            va = acc[[b, c]]
        else:  # the gap the plan says it confirms with 80% power (the sized gap, or the capped seeds' larger one)
            true_gap = pp["gap"] if not pp["capped"] else pp["detectable_gap"]
            va = np.array([0.5 + true_gap / 2, 0.5 - true_gap / 2])
        if reuse:
            vd, vg = d, g[[b, c]]
        else:
            vd, vg = _items(rng, 2)
        codes, table = _scores(va, vd, vg, sd[[b, c]], n, rng)
        vals.append((e, noise_of(codes, table, 2), true_gap))
    vpools = fit_pools([v[1] for v in vals], ["reward=rule"] * len(vals))
    out = []
    for e, nz, true_gap in vals:
        nz = nz.pooled(vpools["reward=rule"])
        parts = VP.test_parts(nz, np.array([1.0, -1.0]))
        diff = float(nz.point[0] - nz.point[1])
        lo, hi = (float(x[0]) for x in VP.confirm_interval(diff, parts))
        pp = e["power_plan"]
        out.append({"verdict": V.verdict(lo, hi) if nz.has_seed_noise else V.NOT_TESTABLE, "seeds": pp["seeds"],
                    "capped": pp["capped"], "gap": pp["gap"], "detectable": pp["detectable_gap"],
                    "true_gap": true_gap, "planned_se": pp["se"], "se": float(parts.se[0])})
    return out


SCENARIOS = [  # (name, kind, control, --gap, reuse pilot items)
    ("null · runner-up · fresh items", "null", "runner-up", None, False),
    ("null · runner-up · pilot's items (old)", "null", "runner-up", None, True),
    ("null · lowest · fresh items", "null", "lowest", None, False),
    ("power · runner-up · fresh · shrunk gap", "effect", "runner-up", None, False),
    ("power · runner-up · fresh · --gap 0.05", "effect", "runner-up", 0.05, False),
]


def run_scenario(name: str, kind: str, control: str, gap: float | None, reuse: bool, n: int, seed: int) -> dict:
    rng = np.random.default_rng([seed, SCENARIOS.index((name, kind, control, gap, reuse))])
    t0 = time.perf_counter()
    rows = []
    while len(rows) < n:
        rows += run_sweep(rng, kind, control, gap, reuse)
        if len(rows) % 200 == 0:  # progress, to stderr: conditions so far and the share confirmed
            print(f"  {name}: {len(rows)} conditions, confirmed {np.mean([r['verdict'] == V.CONFIRMED for r in rows]):.3f}",
                  file=sys.stderr, flush=True)
    rows = rows[:n]
    conf = np.array([r["verdict"] == V.CONFIRMED for r in rows])
    seeds = np.array([r["seeds"] for r in rows])
    capped = np.array([r["capped"] for r in rows])
    se_ratio = np.array([r["se"] / r["planned_se"] for r in rows])
    return {"scenario": name, "conditions": n, "confirmed": float(conf.mean()),
            "confirmed_capped": float(conf[capped].mean()) if capped.any() else math.nan,
            "confirmed_uncapped": float(conf[~capped].mean()) if (~capped).any() else math.nan,
            "seeds_median": float(np.median(seeds)), "seeds_mean": float(seeds.mean()), "capped": float(capped.mean()),
            "true_gap_median": float(np.median([r["true_gap"] for r in rows])),
            "se_realised_over_planned": float(np.median(se_ratio)), "seconds": time.perf_counter() - t0}


def print_table(res: list[dict]) -> None:
    print(f"\nValidation design: {res[0]['conditions']} conditions per scenario (sweeps of {PER_SWEEP}, pilot "
          f"{REGIMES} regimes × {PILOT_SEEDS} seeds, {N_ITEMS} items × {SAMPLES} samples, seed sd 0.02·U(0.5, 1.5), "
          f"item × regime sd {INTER_SD}); power {VP.DEFAULT_POWER}, at most {VP.DEFAULT_MAX_SEEDS} seeds\n")
    head = ["scenario", "confirmed", "(uncapped / capped)", "seeds median (mean)", "capped", "true gap median",
            "se realised / planned"]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    for r in res:
        print(" | ".join([r["scenario"], f"{r['confirmed']:.3f}",
                          f"{r['confirmed_uncapped']:.3f} / {r['confirmed_capped']:.3f}",
                          f"{r['seeds_median']:.0f} ({r['seeds_mean']:.2f})", f"{r['capped']:.2f}",
                          f"{r['true_gap_median']:.3f}", f"{r['se_realised_over_planned']:.2f}"]))
    print("\nnull rows: 'confirmed' is the false-confirmation rate (nominal 0.025, bound 0.05); power rows: the "
          "share confirmed at the gap the plan says it confirms with 80% power (>= 0.8).")


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conditions", type=int, default=1000, help="conditions per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="run the scenarios whose name contains this")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    res = []
    for sc in SCENARIOS:
        if a.only and a.only not in sc[0]:
            continue
        r = run_scenario(*sc, a.conditions, a.seed)
        print(f"{sc[0]}: {r['seconds']:.0f} s", file=sys.stderr, flush=True)
        res.append(r)
    print_table(res)
    if a.json:
        a.json.write_text(json.dumps(res, indent=1))
    return res


if __name__ == "__main__":
    main()
