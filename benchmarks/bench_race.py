"""Whole races on known truth: error rates, coverage, power and cost of racing against fixed designs.

    python benchmarks/bench_race.py                         # 1,000 conditions per scenario (long)
    python benchmarks/bench_race.py --conditions 200        # quicker, noisier
    python benchmarks/bench_race.py --looks 2 3 4 --margin 0.05
    python benchmarks/bench_race.py --memory                # the race's sweeps held in memory, no folders

Each scenario is one synthetic sweep of `--conditions` conditions of 3 regimes (--regimes: 2-6), simulated item by item by
stats/race_sim, the simulator behind `race plan`'s price and benchmarks/bench_calibration.py (`true_p`: items ±0.2,
item × regime sd 0.05, per-regime seed sd 0.02·U(0.5, 1.5); 200 items × 4 samples, seed pools of 2 conditions,
`CommonNumbers` and the start evaluated once per condition, as `race run` evaluates). The race writes real
job folders look by look (tests/report_fixtures.write_job), reads them back (report/table.read_sweeps) and
decides through report/race.race_states and needed_seeds, as the run loop does; fixed designs of 2, 3 and 4
seeds are decided on the same simulated runs (their first seeds) through race_states with a one-look
schedule at the full α.

Seed effects (--seed-kind: uniform, normal, t3, collapse, spread3; stats/race_sim.seed_effects says what each is).

Truths (start 0.40, regimes 0.45 unless said):
- equal: every regime equal;
- +δ: regime μ=1 better than the two others by δ;
- within: regimes at 0.45 + (margin/2, 0, margin/4, ...): all within ±margin/2 of the best;
- tied (--tied): two regimes tied at 0.45, the others at 0.35 (a false "worse" drops one of the tied).

Measured: familywise false "worse" or false winner over all looks (a regime dropped, or a winner named,
whose truth is not below the best it was compared with); false "equivalent" (the best's truth above a
remaining regime's by more than the margin); coverage of the race's simultaneous best − regime intervals
and of the report's 95% intervals (mean and gain) on the finished raced sweep; separated (winner = the
truly best), equivalent, undecided and no-gain shares; mean seeds per regime and jobs per condition; and
"kept & worse": final records in which a regime neither dropped nor the best has its printed best − regime
interval above 0 (one claim per record: must be 0).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from bench_calibration import BUDGET, CRN_SHARE, N_ITEMS, P_GRID, POOL_SIZE, SAMPLES, SEED_SD, TARGET  # noqa: E402

from race_cli.stats import race_sim as S  # noqa: E402

DELTAS = [0.0, 0.03, 0.05, 0.08, 0.10, 0.12]
FIXED = (2, 3, 4)
FIXED_RUN = list(FIXED)  # the fixed designs of this run (main sets it from --fixed)
# (μ, p) of each regime: the default grid's three (bench_calibration.P_GRID), then more update counts for
# --regimes up to 6 (the GPU pilot's G × μ grid has 6 regimes per condition)
ALL_REGIMES = list(P_GRID) + [(8, 0.97), (16, 0.98), (32, 0.99)]
GRID = list(P_GRID)  # the regimes of this run (main sets it from --regimes)
SEED_KINDS = S.SEED_KINDS
SEED_KIND = ["uniform"]  # the seed effects of this run (main sets it from --seed-kind)
START = 0.40
EVAL_ITEMS = [None]  # --eval-items: the race's evaluation look scores finished runs on this many items (main sets it)
# What the evaluation route and the seed route cost, measured on the default run (2026-12-03, docs/measurements/
# race.md): a tiny job's final policy scored at 3.6 ms per added item (2 samples; median of 40 re-evaluations under
# load, plus ~7 s of setup per job), a tiny job 61 s (mean of 55). Seconds below are jobs x these.
EVAL_S_PER_ITEM, EVAL_SETUP_S, JOB_S = 0.0036, 7.0, 61.0
START_SAMPLES = 16  # the start evaluated once per condition, 4× the samples of a job's final evaluation
BASE = 0.45


# --- the truths and their simulated runs -----------------------------------------------------------


def truth(kind: str, delta: float, margin: float) -> np.ndarray:
    R = len(GRID)
    if kind == "tied":  # two best tied, the others far below: REGWQ's least favourable shape for "worse"
        return BASE + np.array([0.0, 0.0] + [-0.10] * (R - 2))
    if kind == "within":
        return BASE + np.array([margin / 2, 0.0] + [margin / 4] * (R - 2))
    return BASE + np.array([delta] + [0.0] * (R - 1))


def simulate_condition(rng: np.random.Generator, accs, cap: int, start_samples: int = START_SAMPLES):
    """bench_calibration.simulate_condition's truth under common random numbers, every seed up to the cap,
    with the start evaluated once for the condition with `start_samples` per item: (final [R, cap, n], start
    [n]). P = acc_r + d_i + g_ri + e_rs (stats/race_sim.true_p: items ±0.2, item × regime sd 0.05, seed effects
    of SEED_KIND)."""
    n = EVAL_ITEMS[0] or N_ITEMS  # with an evaluation look, its items: the first N_ITEMS are the seed looks'
    P, d = S.true_p(rng, accs, cap, n, SEED_SD, SEED_KIND[0])  # [R, cap, n], [n]
    fin = S.CommonNumbers.draw(rng, n, SAMPLES, CRN_SHARE).scores(rng, P)  # [R, cap, n]
    ini = rng.binomial(start_samples, np.clip(START + d, 0, 1)) / start_samples
    return fin, ini


def simulate(n: int, kind: str, delta: float, margin: float, cap: int, seed: int):
    """Per condition: (name, accs, final scores [R, cap, n_items], start scores [n_items]); seed s of a
    regime is row s whatever design reads it, so the race and the fixed designs share their runs."""
    key = [seed, int(round(delta * 1000)), {"better": 0, "within": 1, "tied": 2}[kind]]
    # uniform seeds draw the runs the harness drew before issue 52 (the same key), so its rows compare the
    # decision rules on identical runs; each other kind draws its own
    rng = np.random.default_rng(key + ([] if SEED_KIND[0] == "uniform" else [SEED_KINDS.index(SEED_KIND[0])]))
    out = []
    for c in range(n):
        accs = truth(kind, delta, margin)
        fin, ini = simulate_condition(rng, accs, cap)
        out.append((f"c{c:05d}", accs, fin, ini))
    return out


def _cond(name: str, c: int) -> dict:
    return {"model": name, "budget_flops": BUDGET, "reward": f"rule{c // POOL_SIZE}", "task": TARGET}


# --- a sweep in memory (fixed designs, --memory) -------------------------------------------------------


def memory_sweep(sims, seeds_of, evaluated_of=None) -> object:
    """A SweepData of the runs seeds_of(c, r) gives (a seed count per condition and regime); with evaluated_of,
    the runs of seeds below evaluated_of(c, r) also hold their scores on every simulated item (eval-more.json)."""
    from race_cli.report.table import SweepData

    ids = [f"i{i:05d}" for i in range(N_ITEMS)]
    rows, items, initial, more, more0 = [], {}, {}, {}, {}
    for c, (name, _, fin, ini) in enumerate(sims):
        cond = _cond(name, c)
        for r, (mu, _) in enumerate(GRID):
            for s in range(seeds_of(c, r)):
                jid = f"{name}_G4_mu{mu}_s{s}"
                row = {"sweep": "synthetic", "job_id": jid, "state": "done", "readable": True, **cond,
                       "group_size": 4, "updates_per_batch": mu, "seed": s,
                       f"eval/{TARGET}": float(fin[r, s, :N_ITEMS].mean()),
                       f"eval_initial/{TARGET}": float(ini[:N_ITEMS].mean())}
                items[("synthetic", jid, TARGET)] = (ids, fin[r, s, :N_ITEMS])
                initial[("synthetic", jid, TARGET)] = (ids, ini[:N_ITEMS])
                if evaluated_of is not None and s < evaluated_of(c, r):
                    every = [f"i{i:05d}" for i in range(fin.shape[-1])]
                    more[("synthetic", jid, TARGET)], more0[("synthetic", jid, TARGET)] = (every, fin[r, s]), (every, ini)
                    row["eval_more_items"] = fin.shape[-1]
                rows.append(row)
    return SweepData(jobs=pd.DataFrame(rows), items=items, items_initial=initial,
                     knob_cols=["group_size", "updates_per_batch"], targets=[TARGET], items_more=more,
                     items_initial_more=more0)


# --- the race --------------------------------------------------------------------------------------


def _write(jobs_dir: Path, sims, c: int, r: int, s: int, rng) -> None:
    from report_fixtures import Regime, write_job

    name, _, fin, ini = sims[c]
    mu, p = GRID[r]
    write_job(jobs_dir, _cond(name, c), Regime(4, mu, p), s, {TARGET: fin[r, s]}, rng, iterations=2,
              eval_every=2, start={TARGET: ini})


def run_race(sims, schedule, folder: Path | None) -> tuple[list, object, int]:
    """Race the simulated conditions: (final states, the finished sweep's SweepData, reads). folder None: in
    memory (the same states; faster)."""
    from race_cli.report.race import needed_evaluations, needed_seeds, race_states
    from race_cli.report.table import read_sweeps

    index = {name: c for c, (name, *_) in enumerate(sims)}
    mu_of = {mu: r for r, (mu, _) in enumerate(GRID)}
    have = np.zeros((len(sims), len(GRID)), dtype=int)
    want = np.full_like(have, schedule.looks[0])
    evaluated = np.zeros_like(have)  # per condition and regime: runs below this seed scored on the evaluation items
    if schedule.eval_items and folder is not None:
        raise SystemExit("--eval-items runs the race in memory only: add --memory")
    rng = np.random.default_rng(7)
    jobs_dir = folder / "jobs" if folder is not None else None
    reads = 0
    while True:
        for c, r in zip(*np.nonzero(want > have)):
            if jobs_dir is not None:
                for s in range(have[c, r], want[c, r]):
                    _write(jobs_dir, sims, c, r, s, rng)
            have[c, r] = want[c, r]
        data = read_sweeps([folder]) if folder is not None else memory_sweep(
            sims, lambda c, r: have[c, r], (lambda c, r: evaluated[c, r]) if schedule.eval_items else None)
        reads += 1
        states = race_states(data, schedule)
        need = needed_seeds(states)
        asked = 0
        for key, (n, _) in needed_evaluations(states).items():  # the evaluation look: no new job, more items
            kv = dict(key)
            c, r = index[kv["model"]], mu_of[int(kv["updates_per_batch"])]
            asked += evaluated[c, r] < n
            evaluated[c, r] = max(evaluated[c, r], n)
        if asked:
            continue
        if not need:
            run_race.evaluated = evaluated
            return states, data, reads
        for key, n in need.items():
            kv = dict(key)
            c, r = index[kv["model"]], mu_of[int(kv["updates_per_batch"])]
            want[c, r] = max(want[c, r], n)
        if not (want > have).any():
            raise RuntimeError("the race asks for no new jobs but is not finished")


# --- scoring ------------------------------------------------------------------------------------------


def score(states, sims, margin: float, data=None) -> dict:
    """Error rates, coverage and outcome shares of the final states (and the report's intervals on data)."""
    acc_of = {name: accs for name, accs, *_ in sims}
    r_of = {f"μ={mu}": r for r, (mu, _) in enumerate(GRID)}
    n = len(states)
    fw = fe = sep = eq = und = nog = cont = clash = 0
    cov = cov_n = 0
    looks = []
    for st in states:
        a = acc_of[st.condition_values["model"]]
        top = a.max()
        false = any(a[r_of[g]] >= a[r_of[b]] for g, (_, b) in st.dropped.items())
        is_winner = st.state == "winner"
        if is_winner:
            others = [g for g in r_of if g != st.best]
            false |= any(a[r_of[g]] >= a[r_of[st.best]] for g in others)
        fw += false
        clash += any(lo > 0 for g, (_, lo, _) in st.intervals.items() if g != st.best and g not in st.dropped)
        is_eq = st.state == "equivalent"
        if is_eq:
            remaining = [g for g in st.seeds if g not in st.dropped]
            fe += (top - min(a[r_of[g]] for g in remaining)) > margin
        sep += is_winner and a[r_of[st.best]] == top and (a < top).sum() == len(a) - 1
        eq += is_eq
        und += st.state == "undecided"
        nog += st.gain == "no_gain"
        cont += st.state == "continue"
        looks.append(st.look)
        for g, (gap, lo, hi) in st.intervals.items():
            if g == st.best:
                continue
            t = a[r_of[st.best]] - a[r_of[g]]
            cov += lo <= t <= hi
            cov_n += 1
    out = {"conditions": n, "false_worse_or_winner": fw / n, "false_equivalent": fe / n, "separated": sep / n,
           "equivalent": eq / n, "undecided": und / n, "no_gain": nog / n, "continue": cont / n,
           "cover_race_intervals": cov / max(cov_n, 1), "mean_look": float(np.mean(looks)), "kept_and_worse": clash}
    if data is not None:
        out |= report_coverage(data, acc_of)
    return out


def report_coverage(data, acc_of) -> dict:
    """Coverage of the report's 95% intervals (regime mean, gain over the start) on a finished sweep."""
    from race_cli.report.rank import rank_all

    rk = rank_all(data, TARGET, ["model", "budget_flops", "reward", "task"], n_boot=20, seed=0)
    a = np.array([acc_of[m][[f"μ={mu}" for mu, _ in GRID].index(g)] for m, g in zip(rk["model"], rk["regime"])])
    cf = ((rk["ci_lo"] <= a) & (a <= rk["ci_hi"])).mean()
    g = a - START
    cg = ((rk["gain_ci_lo"] <= g) & (g <= rk["gain_ci_hi"])).mean()
    return {"cover_report_mean": float(cf), "cover_report_gain": float(cg)}


def jobs_of(data) -> int:
    return int((data.jobs["state"] == "done").sum())


# --- the scenarios ------------------------------------------------------------------------------------


def scenario(kind: str, delta: float, n: int, schedule, seed: int, memory: bool, tmp: Path) -> dict:
    from race_cli.report.race import race_states
    from race_cli.stats.race import Schedule

    sims = simulate(n, kind, delta, schedule.margin, max(schedule.cap, max(FIXED)), seed)
    R = len(GRID)
    t0 = time.perf_counter()
    folder = None if memory else tmp / f"{kind}-{delta:.3f}"
    states, data, reads = run_race(sims, schedule, folder)
    wall = time.perf_counter() - t0
    jobs = jobs_of(data)
    row = {"kind": kind, "delta": delta, "design": "race" + (f" + eval {schedule.eval_items}" if schedule.eval_items
                                                               else ""),
           "looks": list(schedule.looks), "reads": reads,
           "wall_s": wall, "jobs_per_condition": jobs / n, "seeds_per_regime": jobs / (n * R)}
    ev = int(run_race.evaluated.sum()) if schedule.eval_items else 0
    row["evaluated_per_condition"] = ev / n  # finished runs scored on the evaluation items
    row["job_s_per_condition"] = jobs / n * JOB_S
    row["eval_s_per_condition"] = ev / n * (EVAL_SETUP_S + (schedule.eval_items or N_ITEMS) * EVAL_S_PER_ITEM) \
        if ev else 0.0
    row |= score(states, sims, schedule.margin, data)
    if kind == "better":  # the plan's simulator (stats/race_sim) at this row's truth and seed kind
        row["plan_seeds_per_regime"] = S.expected_race(schedule, delta, SEED_SD, kind=SEED_KIND[0]).seeds_per_regime
    out = [row]
    if schedule.eval_items:  # the seed-only race on the same runs (its split over its own looks), for comparison
        from dataclasses import replace

        plain = replace(schedule, eval_items=None)
        st0, d0, _ = run_race(sims, plain, None)
        j0 = jobs_of(d0)
        out.append({"kind": kind, "delta": delta, "design": "race (seeds only)", "jobs_per_condition": j0 / n,
                    "seeds_per_regime": j0 / (n * R), "evaluated_per_condition": 0.0,
                    "job_s_per_condition": j0 / n * JOB_S, "eval_s_per_condition": 0.0}
                   | score(st0, sims, schedule.margin))
    for s in FIXED_RUN:
        fixed = Schedule((s,), alpha=schedule.alpha, margin=schedule.margin)
        fd = memory_sweep(sims, lambda c, r, s=s: s)
        st = race_states(fd, fixed)
        r2 = {"kind": kind, "delta": delta, "design": f"fixed {s}", "jobs_per_condition": s * R,
              "seeds_per_regime": float(s)}
        out.append(r2 | score(st, sims, schedule.margin, fd if s == 2 else None))
    return out


def print_table(rows: list[dict], schedule) -> None:
    print(f"\nRace {list(schedule.looks)} (α {schedule.alpha}, {schedule.spending}, margin ±{schedule.margin}) "
          f"against fixed designs; {rows[0]['conditions']} conditions per row, {len(GRID)} regimes, "
          f"seed effects {SEED_KIND[0]}\n")
    head = ["truth", "design", "separated", "equivalent", "undecided", "no gain", "false worse/winner",
            "false equiv.", "kept & worse", "cover race", "cover report", "seeds/regime", "jobs/condition",
            "plan seeds/regime", "re-evaluated/condition", "job s + eval s /condition"]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    for r in rows:
        t = {"within": "within ±m/2", "tied": "two tied, the rest −0.10"}.get(r["kind"]) or (
            "equal" if r["delta"] == 0 else f"+{r['delta']:.2f}")
        cr = f"{r['cover_report_mean']:.3f}/{r['cover_report_gain']:.3f}" if "cover_report_mean" in r else "–"
        print(" | ".join([t, r["design"], f"{r['separated']:.3f}", f"{r['equivalent']:.3f}", f"{r['undecided']:.3f}",
                          f"{r['no_gain']:.3f}", f"{r['false_worse_or_winner']:.3f}", f"{r['false_equivalent']:.3f}",
                          str(r["kept_and_worse"]), f"{r['cover_race_intervals']:.3f}", cr, f"{r['seeds_per_regime']:.2f}",
                          f"{r['jobs_per_condition']:.2f}",
                          f"{r['plan_seeds_per_regime']:.2f}" if "plan_seeds_per_regime" in r else "–",
                          f"{r['evaluated_per_condition']:.2f}" if "evaluated_per_condition" in r else "–",
                          f"{r['job_s_per_condition']:.0f} + {r['eval_s_per_condition']:.0f}"
                          if "job_s_per_condition" in r else "–"]))


def main(argv: list[str] | None = None) -> list[dict]:
    global N_ITEMS, SAMPLES, SEED_SD  # --items, --samples, --seed-sd: what every simulated job gets
    from race_cli.stats.race import DEFAULT_ALPHA, DEFAULT_LOOKS, DEFAULT_MARGIN, DEFAULT_SPENDING, Schedule

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conditions", type=int, default=1000, help="conditions per scenario")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--looks", type=int, nargs="+", default=list(DEFAULT_LOOKS))
    ap.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    ap.add_argument("--alpha", type=float, default=DEFAULT_ALPHA)
    ap.add_argument("--spending", default=DEFAULT_SPENDING)
    ap.add_argument("--deltas", type=float, nargs="+", default=DELTAS)
    ap.add_argument("--no-within", action="store_true", help="skip the within-margin truth")
    ap.add_argument("--tied", action="store_true", help="also two tied best regimes and the rest 0.10 below")
    ap.add_argument("--memory", action="store_true", help="hold the race's sweeps in memory (no job folders)")
    ap.add_argument("--regimes", type=int, default=len(P_GRID), choices=range(2, len(ALL_REGIMES) + 1),
                    help="regimes per condition (3: the default grid's μ = 1, 2, 4; 6: as many as the GPU pilot)")
    ap.add_argument("--seed-kind", choices=SEED_KINDS, default="uniform",
                    help="the seed effects' shape (module docstring): uniform (before issue 52), normal, t3, collapse, "
                         "spread3")
    ap.add_argument("--fixed", type=int, nargs="*", default=list(FIXED), help="fixed designs decided on the same runs")
    ap.add_argument("--eval-items", type=int, default=None,
                    help="the race's evaluation look: finished runs scored on this many items (> the 200 of the seed "
                         "looks; needs --memory and the bonferroni split)")
    ap.add_argument("--items", type=int, default=N_ITEMS, help="items per job's evaluation (grid=tiny: 1200)")
    ap.add_argument("--samples", type=int, default=SAMPLES, help="sampled completions per item (grid=tiny: 2)")
    ap.add_argument("--seed-sd", type=float, default=SEED_SD, help="each regime's seed sd is this x U(0.5, 1.5)")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args(argv)
    N_ITEMS, SAMPLES, SEED_SD = a.items, a.samples, a.seed_sd
    EVAL_ITEMS[0] = a.eval_items
    GRID[:] = ALL_REGIMES[:a.regimes]
    SEED_KIND[0] = a.seed_kind
    FIXED_RUN[:] = a.fixed
    schedule = Schedule(tuple(a.looks), a.alpha, a.margin, a.spending, a.eval_items)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="race-bench-") as tmp:
        plan = [("better", d) for d in a.deltas] + ([] if a.no_within else [("within", 0.0)])
        plan += [("tied", 0.0)] if a.tied else []
        for kind, d in plan:
            rows += scenario(kind, d, a.conditions, schedule, a.seed, a.memory, Path(tmp))
            print(f"  {kind} {d:+.2f}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    print_table(rows, schedule)
    print(f"\n{time.perf_counter() - t0:.0f} s in all")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1, default=float))
    return rows


if __name__ == "__main__":
    main()
