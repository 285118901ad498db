"""Calibration and power of race's intervals and verdicts on synthetic sweeps with a known truth.

    python benchmarks/bench_calibration.py                      # 1,000 conditions per scenario (minutes)
    python benchmarks/bench_calibration.py --conditions 200     # quicker, noisier
    python benchmarks/bench_calibration.py --code /path/to/old  # the same sweeps through another checkout
    python benchmarks/bench_calibration.py --validations        # also the validation verdicts (job folders)
    python benchmarks/bench_calibration.py --seed-kind normal t3 collapse spread3 --sampling crn  # seed shapes

Pilots are simulated item by item and handed to the real ranking code (race_cli.report.rank.rank_all,
what `race report` runs after reading the job folders) as one sweep per scenario, so the sweep-wide seed
pool works as on a real sweep: conditions come in pools of POOL_SIZE (= 2: the default grid's two model
sizes share a reward system on a target; each pool is given its own reward label). Validations are
written as real job folders (tests/report_fixtures.py) and read by the validation's compare().

Truth of one condition (stats/race_sim.true_p, the simulator the plan's price and bench_race.py draw from
too): R = 3 regimes (μ = 1, 2, 4). Item i of regime r, seed s, sample j is correct with probability

    P = acc_r + d_i + g_ri + e_rs    d_i ~ U(±0.2) item difficulty (shared: paired)
                                     g_ri ~ N(0, 0.05²), centred per regime: item × regime interaction
                                     e_rs: the training run's luck, sd_r = 0.02·U(0.5, 1.5) per regime
                                     (heterogeneous seed spread), of one of race_sim's SEED_KINDS (--seed-kind):
                                     uniform U(±√3·sd_r) (the default, the harness before issue 52), normal,
                                     t3 (t, 3 df), collapse (normal, 1 seed in 10 loses 0.15), spread3
                                     (normal, one regime's sd 3 × 0.02)

so the regime's expected score over items and runs is acc_r (collapse: acc_r − 0.015); 200 items × 4 samples. The start
(P = start + d_i) is scored by every job's own evaluation (the design before issue 33) under independent
sampling, or once for the condition under CRN. Sampling is either independent per job, or with common random
numbers (`crn`: on a third of the (item, sample) pairs, CRN_SHARE, every job of the condition draws one
uniform U_ij, correct when U_ij < P; elsewhere each job draws its own — what evaluation with common random
numbers does on real policies, whose completions part after a differing token; the start is one
evaluation shared by the condition's jobs, as `race run` evaluates it).

Scenarios (each `--conditions` conditions, 2 seeds unless said):
- null: acc_r = start = 0.45: coverage (final, gain, the selected best's simultaneous interval),
  familywise false "worse" (some regime not ≈ best), false "beats its start";
- effect: acc_r = 0.47 + N(0, 0.03²), start 0.42: coverage, the winner's curse against expected_drop;
- separation δ: acc = (0.45 + δ, 0.45, 0.45): the share of pilots in which the better regime is the
  only ≈ best, for δ in DELTAS (and coverage);
- one seed: null truth, 1 seed: decisions made (must be none), and with the seed sd assumed (0.02).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("RACE_CODE", ROOT))  # --code sets it before race_cli is imported
sys.path[:0] = [str(CODE), str(ROOT / "tests")]



def _simulator():
    """stats/race_sim of this checkout, whichever checkout ranks (--code): both rank the same sweeps."""
    if CODE == ROOT:
        from race_cli.stats import race_sim

        return race_sim
    import importlib.util

    spec = importlib.util.spec_from_file_location("race_sim_here", ROOT / "race_cli" / "stats" / "race_sim.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


S = _simulator()  # the truth: the one simulator the plan's price and bench_race.py draw from too
P_GRID = [(1, 0.83), (2, 0.91), (4, 0.95)]  # (μ, p): the default grid, G=4, rule reward
ITEM_HALF = S.ITEM_HALF
INTERACTION_SD = S.ITEM_REGIME_SD
SEED_SD = S.SEED_SD
N_ITEMS = S.N_ITEMS
SAMPLES = S.SAMPLES
BUDGET = 8e11
TARGET = "arithmetic"
POOL_SIZE = 2
DELTAS = [0.03, 0.05, 0.08, 0.10, 0.12]
SCENARIOS = [(0.03, 2), (0.03, 3), (0.06, 2), (0.06, 3)]  # validations: (seed sd, seeds)
# Common random numbers as measured, not as idealised: two policies' completions of one keyed sample stay
# alike on about a third of samples (benchmarks/bench_crn.py on the G=4 pilot, docs/measurements/embedded-study.md: CRN
# removes 33-35% of the binomial part between two seeds of a regime, 24-27% between distant regimes); once
# two completions part at one token, the rest is drawn independently. The truth's own constant: the plan's
# model (race_cli/stats/power.CRN_SHARE) is what this harness checks.
CRN_SHARE = 1 / 3
MAX_GAP = 0.38  # best 0.5 + gap/2, control 0.5 − gap/2: P stays in [0, 1] with items ±0.2 and seeds ±0.104


# --- pilots in memory, read by the ranking ------------------------------------------------------


def simulate_condition(rng: np.random.Generator, accs, start: float, seeds: int, crn: bool, kind: str = "uniform"):
    """Final and start per-item scores [R·s, n] of one condition (rows regime-major), seed effects of `kind`."""
    R, n, k = len(accs), N_ITEMS, SAMPLES
    P, d = S.true_p(rng, accs, seeds, n, SEED_SD, kind)  # [R, s, n], [n]
    P0 = np.clip(start + d, 0, 1)  # [n]
    if crn:  # the start is one evaluation shared by all jobs
        cn = S.CommonNumbers.draw(rng, n, k, CRN_SHARE)
        fin = cn.scores(rng, P)
        ini = np.broadcast_to(cn.scores(rng, P0), (R, seeds, n))
    else:
        fin = rng.binomial(k, P) / k
        ini = rng.binomial(k, np.broadcast_to(P0, (R, seeds, n))) / k
    return fin.reshape(R * seeds, n), ini.reshape(R * seeds, n)


def sweep_data(conds: list[tuple[str, np.ndarray, np.ndarray]], seeds: int):
    """A SweepData of simulated conditions [(name, final [R·s, n], start [R·s, n])], pools of POOL_SIZE."""
    from race_cli.report.table import SweepData

    ids = [f"i{i:03d}" for i in range(N_ITEMS)]
    rows, items, initial = [], {}, {}
    for c, (name, fin, ini) in enumerate(conds):
        for j in range(len(fin)):
            r, s = divmod(j, seeds)
            jid = f"{name}_mu{P_GRID[r][0]}_s{s}"
            rows.append({"sweep": "synthetic", "job_id": jid, "state": "done", "readable": True,
                         "model": name, "budget_flops": BUDGET, "reward": f"rule{c // POOL_SIZE}", "task": TARGET,
                         "updates_per_batch": P_GRID[r][0], f"eval/{TARGET}": float(fin[j].mean())})
            items[("synthetic", jid, TARGET)] = (ids, fin[j])
            initial[("synthetic", jid, TARGET)] = (ids, ini[j])
    return SweepData(jobs=pd.DataFrame(rows), items=items, items_initial=initial, knob_cols=["updates_per_batch"],
                     targets=[TARGET])


def rank_sweep(data, assume_seed_sd=None, n_boot: int = 50):
    from race_cli.report.rank import rank_all

    kw = {} if assume_seed_sd is None else {"assume_seed_sd": assume_seed_sd}
    return rank_all(data, TARGET, ["model", "budget_flops", "reward", "task"], n_boot=n_boot, seed=0, **kw)


def run_pilots(kind: str, n: int, rng: np.random.Generator, crn: bool, seeds: int = 2, delta: float = 0.0,
               assume_seed_sd: float | None = None, seed_kind: str = "uniform") -> dict:
    """n conditions of one kind ('null', 'effect', 'separation') ranked as one sweep, seed effects of
    `seed_kind` (stats/race_sim.SEED_KINDS); the counts."""
    truth, conds = {}, []
    for c in range(n):
        if kind == "null":
            accs, start = np.full(3, 0.45), 0.45
        elif kind == "effect":
            accs, start = 0.47 + rng.normal(0, 0.03, 3), 0.42
        else:
            accs, start = np.array([0.45 + delta, 0.45, 0.45]), 0.40
        fin, ini = simulate_condition(rng, accs, start, seeds, crn, seed_kind)
        name = f"c{c:05d}"
        conds.append((name, fin, ini))
        truth[name] = (accs, start)
    rk = rank_sweep(sweep_data(conds, seeds), assume_seed_sd)
    acc_of = {f"μ={mu}": i for i, (mu, _) in enumerate(P_GRID)}
    cov_f = cov_g = cov_w = rows = 0
    worse = beats = separated = decided = 0
    curse, drop = [], []
    for name, g in rk.groupby("model", sort=False):
        accs, start = truth[name]
        a = accs[[acc_of[r] for r in g["regime"]]]
        lo, hi = g["ci_lo"].to_numpy(), g["ci_hi"].to_numpy()
        cov_f += int(((lo <= a) & (a <= hi)).sum())
        gt = a - start
        cov_g += int(((g["gain_ci_lo"].to_numpy() <= gt) & (gt <= g["gain_ci_hi"].to_numpy())).sum())
        rows += len(g)
        b = int(np.flatnonzero(g["is_best"].to_numpy())[0])
        if "sel_lo" in g:
            cov_w += int(g["sel_lo"].iloc[b] <= a[b] <= g["sel_hi"].iloc[b])
        else:  # the old code: the best's plain interval
            cov_w += int(lo[b] <= a[b] <= hi[b])
        tied = g["tied_best"].astype(bool).to_numpy()
        worse += int((~tied).any())
        beats += int(g["beats_start"].astype(bool).any())
        decided += int((~tied).any() or g["beats_start"].astype(bool).any())
        if kind == "separation":
            top = int(np.argmax(a))
            separated += int(tied[top] and tied.sum() == 1)
        curse.append(float(g["mean"].iloc[b] - a[b]))
        drop.append(float(g["expected_drop"].iloc[0]))
    m = rk.groupby("model", sort=False).size().shape[0]
    pool = str(rk["pool"].iloc[0]) if "pool" in rk else str(rk["noise"].iloc[0])
    return {"kind": kind, "seed_kind": seed_kind, "crn": crn, "seeds": seeds, "delta": delta, "conditions": m,
            "coverage_final": cov_f / rows, "coverage_gain": cov_g / rows, "coverage_winner": cov_w / m,
            "false_worse": worse / m, "false_beats": beats / m, "decided": decided / m,
            "separated": separated / m, "winners_curse": float(np.mean(curse)), "expected_drop": float(np.mean(drop)),
            "pool": pool}


# --- validations: written as job folders with a known truth ------------------------------------------------------


def _cond(name: str) -> dict:
    return {"model": name, "budget_flops": BUDGET, "reward": "rule", "task": TARGET}


def _scores(prob: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return rng.binomial(SAMPLES, prob) / SAMPLES


def write_condition(jobs_dir: Path, name: str, accs: list[float], start: float, regimes: list[tuple[int, float]],
                    n_seeds: int, seed_sd: float, rng: np.random.Generator, first_seed: int = 0) -> dict:
    """Write one condition's jobs; returns {regime label: [job ids]}."""
    from report_fixtures import Regime, write_job

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


# --- validations ------------------------------------------------------------------------------


def run_validations(root: Path, n: int, gap: float, seed_sd: float, n_seeds: int,
                    rng: np.random.Generator) -> list[dict]:
    """n validations (best truly `gap` above the control), written with provenance.json and read
    by the validation code the report runs; the condition rows (verdict, diff, its interval)."""
    from race_cli.report import validation as V
    from race_cli.report.table import read_sweeps

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
    return res.conditions


def detectable_gap(rows: list[dict], power: float = 0.85) -> float:
    """Smallest gap (to 0.005) at which `power` of these null validations would be confirmed:
    the estimate shifts by the gap, its standard error and degrees of freedom stay. Aimed at
    0.85 so that the check at that gap (where the binomial noise differs a little) clears 0.8."""
    lo = np.array([r["diff_lo"] for r in rows])
    for g in np.arange(0.005, 1.0, 0.005):
        if np.mean(lo + g > 0) >= power:
            return round(float(g), 3)
    return math.nan


def run_validation_scenario(tmp: Path, n: int, seed_sd: float, n_seeds: int, seed: int) -> dict:
    """False "confirmed" under the null and the power at the gap the null's intervals imply."""
    from race_cli.report import validation as V

    rng = np.random.default_rng([seed, int(seed_sd * 1000), n_seeds])
    null = run_validations(tmp / f"val0-{seed_sd}-{n_seeds}", n, 0.0, seed_sd, n_seeds, rng)
    gap = detectable_gap(null)
    eff = [] if not gap <= MAX_GAP else run_validations(tmp / f"valg-{seed_sd}-{n_seeds}", n, gap, seed_sd,
                                                         n_seeds, rng)
    return {"seed_sd": seed_sd, "n_seeds": n_seeds, "conditions": n,
            "false_confirmed": float(np.mean([r["verdict"] == V.CONFIRMED for r in null])),
            "false_reversed": float(np.mean([r["verdict"] == V.REVERSED for r in null])),
            "gap": gap if eff else math.nan,
            "power": float(np.mean([r["verdict"] == V.CONFIRMED for r in eff])) if eff else math.nan}


# --- the tables -------------------------------------------------------------------------------------


def pilot_scenarios(n: int, seed: int, crn_modes=(False, True), deltas=DELTAS, one_seed: bool = True,
                    separation_only: bool = False, seed_kind: str = "uniform") -> list[dict]:
    out = []
    for crn in crn_modes:
        # uniform seeds draw the pilots the harness drew before issue 52 (the same key); each other kind its own
        rng = np.random.default_rng([seed, int(crn)] + ([] if seed_kind == "uniform" else
                                                        [S.SEED_KINDS.index(seed_kind)]))
        plan = ([] if separation_only else [("null", {}), ("effect", {})]) + [("separation", {"delta": d})
                                                                               for d in deltas]
        one_seed = one_seed and not separation_only
        if one_seed:
            plan += [("null", {"seeds": 1}), ("null", {"seeds": 1, "assume_seed_sd": SEED_SD})]
        for kind, kw in plan:
            t0 = time.perf_counter()
            try:
                r = run_pilots(kind, n, rng, crn, seed_kind=seed_kind, **kw)
            except TypeError:  # an older checkout without --assume-seed-sd
                continue
            r["assumed"] = kw.get("assume_seed_sd")
            r["seconds"] = time.perf_counter() - t0
            print(f"{seed_kind} {'crn' if crn else 'independent'} {kind} {kw}: {r['seconds']:.0f} s", file=sys.stderr,
                  flush=True)
            out.append(r)
    return out


def delta_at(rows: list[dict], power: float = 0.8) -> float:
    """The smallest δ at which `power` of pilots separate the better regime (linear between the table's δ)."""
    pts = sorted((r["delta"], r["separated"]) for r in rows)
    for (d0, p0), (d1, p1) in zip(pts, pts[1:]):
        if p0 < power <= p1:
            return d0 + (power - p0) / (p1 - p0) * (d1 - d0)
    return pts[0][0] if pts and pts[0][1] >= power else math.nan


def plan_delta(crn: bool, seeds: int = 2) -> float:
    from race_cli.stats.power import Design, smallest_separated

    return smallest_separated(Design(N_ITEMS, SAMPLES, seeds, 3, SEED_SD, pool_df=POOL_SIZE * 3 * (seeds - 1),
                                     item_regime_sd=INTERACTION_SD, crn=crn))


def print_tables(res: list[dict], with_plan: bool = True) -> None:
    if any(r["kind"] != "separation" for r in res):
        print_calibration(res)
    print_separation(res, with_plan)


def print_calibration(res: list[dict]) -> None:
    mode = lambda r: "common random numbers" if r["crn"] else "independent sampling"
    print(f"\nCalibration (95% intervals, familywise 5%): {res[0]['conditions']} conditions per row; 3 regimes × "
          f"2 seeds (one-seed rows: 1), {N_ITEMS} items × {SAMPLES} samples, {res[0]['seed_kind']} seed effects "
          f"of sd 0.02·U(0.5, 1.5) per regime, "
          f"item × regime sd {INTERACTION_SD}; seed pool {POOL_SIZE} conditions ({res[0]['pool']})\n")
    head = ["sampling", "truth", "cover final", "cover gain", "cover winner", "false worse", "false > start",
            "curse / drop"]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    for r in res:
        if r["kind"] == "separation" and r["delta"] not in (0.08,):
            continue
        kind = r["kind"] if r["seeds"] > 1 else ("null, 1 seed" + (f", --assume-seed-sd {r['assumed']}"
                                                                   if r["assumed"] else ""))
        if r["kind"] == "separation":
            kind = f"+{r['delta']:.2f} best"
        print(" | ".join([mode(r), kind, f"{r['coverage_final']:.3f}", f"{r['coverage_gain']:.3f}",
                          f"{r['coverage_winner']:.3f}", f"{r['false_worse']:.3f}" if r["kind"] == "null" else "–",
                          f"{r['false_beats']:.3f}" if r["kind"] == "null" else "–",
                          f"{r['winners_curse']:+.3f} / {r['expected_drop']:.3f}"]))


def print_separation(res: list[dict], with_plan: bool) -> None:
    mode = lambda r: "common random numbers" if r["crn"] else "independent sampling"
    seps = [r for r in res if r["kind"] == "separation"]
    modes = sorted({r["crn"] for r in seps})
    print("\nSeparation: share of pilots in which a regime truly better by δ than both others is the only ≈ best "
          f"({seps[0]['seed_kind']} seed effects)\n")
    print("δ | " + " | ".join(mode({"crn": m}) for m in modes))
    print("|".join("---" for _ in range(len(modes) + 1)))
    for d in sorted({r["delta"] for r in seps}):
        print(f"+{d:.2f} | " + " | ".join(f"{r['separated']:.3f}" for m in modes for r in seps
                                          if r["crn"] == m and r["delta"] == d))
    line = ["δ at 80% (harness)"] + [f"{delta_at([r for r in seps if r['crn'] == m]):.3f}" for m in modes]
    print(" | ".join(line))
    if with_plan:
        try:
            print(" | ".join(["δ at 80% (race plan)"] + [f"{plan_delta(m):.3f}" for m in modes]))
        except ImportError:  # an older checkout: no race_cli.stats
            pass


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conditions", type=int, default=1000, help="conditions per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--code", type=Path, help="a checkout whose race_cli ranks the sweeps (e.g. the old code)")
    ap.add_argument("--validations", action="store_true", help="also the validation verdicts (job folders)")
    ap.add_argument("--separation-only", action="store_true", help="only the separation table")
    ap.add_argument("--seed-kind", nargs="+", choices=S.SEED_KINDS, default=["uniform"],
                    help="the seed effects' shape(s), one table each (stats/race_sim): uniform (before issue 52), "
                         "normal, t3, collapse, spread3")
    ap.add_argument("--sampling", choices=("independent", "crn", "both"), default="both")
    ap.add_argument("--deltas", type=float, nargs="+", default=DELTAS, help="the separation truths' δ")
    ap.add_argument("--no-one-seed", action="store_true", help="skip the one-seed rows")
    ap.add_argument("--json", type=Path, help="also write the results here")
    a = ap.parse_args(argv)
    modes = {"independent": (False,), "crn": (True,), "both": (False, True)}[a.sampling]
    res = []
    for kind in a.seed_kind:
        got = pilot_scenarios(a.conditions, a.seed, modes, a.deltas, not a.no_one_seed, a.separation_only, kind)
        print_tables(got, with_plan=a.code is None)
        res += got
    if a.validations:
        with tempfile.TemporaryDirectory(prefix="race-calibration-") as tmp:
            val = [run_validation_scenario(Path(tmp), a.conditions, sd, k, a.seed) for sd, k in SCENARIOS]
        print("\nValidations (best vs control, same seeds): seed sd | seeds | false confirmed | false reversed | "
              "power @ gap")
        for v in val:
            print(f"{v['seed_sd']:.2f} | {v['n_seeds']} | {v['false_confirmed']:.3f} | {v['false_reversed']:.3f} | "
                  f"{v['power']:.3f} @ {v['gap']:.3f}")
        res = res + val
    if a.json:
        a.json.write_text(json.dumps(res, indent=1, default=float))
    return res


if __name__ == "__main__":
    if "--code" in sys.argv and "RACE_CODE" not in os.environ:  # once, before race_cli is imported: which ranks
        os.environ["RACE_CODE"] = sys.argv[sys.argv.index("--code") + 1]
        os.execv(sys.executable, [sys.executable, *sys.argv])
    main()
