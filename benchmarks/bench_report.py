"""Time `race report` on a large synthetic sweep: 5,000 finished jobs, where does the time go?

    python benchmarks/bench_report.py [--jobs 5000] [--items 200] [--repeats 5] [--plots]

Builds the sweep once (tests/report_fixtures.py: 50 conditions × 20 regimes × 5 seeds by
default, 200 per-item scores per job), then runs reading, ranking (1000 bootstrap draws),
fits (with their p* bootstrap intervals) and writing the CSV/markdown files `repeats` times
and prints the median of each stage. Every job carries its iteration-0 evaluation, so the
ranking also bootstraps each regime's gain over its start. Target: reading + ranking under
3 s on the 2-core dev machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from race_cli.report import recommend as R  # noqa: E402
from race_cli.report import render  # noqa: E402
from race_cli.report.rank import label_jobs, rank_all, rankable, regime_columns  # noqa: E402
from race_cli.report.table import CONDITION_COLS, read_sweeps  # noqa: E402
from report_fixtures import Regime, build_sweep, peaked  # noqa: E402


def make_sweep(root: Path, n_jobs: int, n_items: int) -> Path:
    """50 conditions (5 models × 5 budgets × 2 rewards) × 20 regimes × 5 seeds = 5,000 jobs."""
    seeds = (0, 1, 2, 3, 4)
    regimes = [Regime(g, mu, round(0.06 + 0.5 * k / 19, 3))
               for k, (g, mu) in enumerate((g, mu) for g in (2, 4, 8, 16, 32) for mu in (1, 2, 3, 4))]
    n_cond = max(1, n_jobs // (len(regimes) * len(seeds)))
    conds = [{"model": f"m{m}", "budget_flops": 10.0 ** (11 + b), "reward": r, "task": "arithmetic"}
             for m in range(5) for b in range(5) for r in ("rule", "prm")][:n_cond]
    return build_sweep(root, acc=peaked(0.25, top=0.6, width=0.12), conditions=conds,
                       regimes=regimes, seeds=seeds, n_items=n_items, item_sd=0.1)


def run_once(sweep: Path, out: Path, plots: bool) -> dict[str, float]:
    t = {}
    t0 = time.perf_counter()
    data = read_sweeps([sweep])
    t["read"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    draws: dict = {}
    ranking = rank_all(data, "arithmetic", CONDITION_COLS, n_boot=1000, seed=0, draws_out=draws)
    t["rank"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fits = R.fit_all(ranking, True, draws)
    rec = R.recommend(ranking, fits, CONDITION_COLS)
    moves = R.frontier_moves(rec, CONDITION_COLS + ["target"])
    t["fit+recommend"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ranked = rankable(data.jobs, "arithmetic")
    jobs = label_jobs(data.jobs, CONDITION_COLS, regime_columns(data.jobs[ranked], data.knob_cols, CONDITION_COLS))
    jobs["ranked"] = ranked
    totals = R.compute_totals(jobs)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.csv").write_text(jobs.to_csv(index=False))
    (out / "ranking.csv").write_text(ranking.to_csv(index=False))
    (out / "summary.md").write_text(render.markdown_summary(jobs, ranked, ranking, rec, moves, totals,
                                                            ["arithmetic"], {"arithmetic": True}, 1000, []))
    t["write csv+md"] = time.perf_counter() - t0
    if plots:
        from race_cli.report.plots import write_plots

        t0 = time.perf_counter()
        write_plots(out, jobs, ranking, rec, fits, data.curves, ["arithmetic"], [], CONDITION_COLS)
        t["plots"] = time.perf_counter() - t0
    t["jobs"], t["conditions"] = len(jobs), len(rec)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--plots", action="store_true", help="also time the PNGs (imports matplotlib)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sweep = make_sweep(Path(tmp) / "sweep", a.jobs, a.items)
        print(f"built {a.jobs} jobs in {time.perf_counter() - t0:.1f} s")
        runs = [run_once(sweep, Path(tmp) / "report", a.plots) for _ in range(a.repeats)]
    print(f"{runs[0]['jobs']} jobs, {runs[0]['conditions']} conditions, {a.items} items, 1000 bootstrap draws")
    stages = [k for k in runs[0] if k not in ("jobs", "conditions")]
    for k in stages:
        vals = [r[k] for r in runs]
        print(f"  {k:15s} median {statistics.median(vals):6.3f} s   (min {min(vals):.3f}, max {max(vals):.3f})")
    rr = [r["read"] + r["rank"] for r in runs]
    print(f"  read+rank       median {statistics.median(rr):6.3f} s   target < 3 s")


if __name__ == "__main__":
    main()
