"""Time `race plan` and measure its peak memory on grids of 1,000 to 100,000 jobs.

    python benchmarks/bench_plan.py                      # the 1,000-job grid, 5 runs (target: ~1 s)
    python benchmarks/bench_plan.py --jobs 1000 10000 100000 --repeats 3

Each size is the same grid shape, 2 models x 10 group sizes x 5 update counts (100 regimes) x
N/100 seeds, plus `--seed-only`: one regime x N seeds (`seed=range(0,N)`, the issue-36 case).
Runs the real command in fresh processes (`python -m race_cli plan ... --yes --format csv`), so
the figures include interpreter start-up, imports and printing the plan, as a user sees them:
median wall seconds (and the spread) and the peak resident memory of the process (wait4's
ru_maxrss). The machine's speed drifts: compare sizes run side by side, alternating.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time


def grid(n_jobs: int, seed_only: bool) -> list[str]:
    if seed_only:
        return ["grid=none", f"seed=range(0,{n_jobs})"]
    if n_jobs % 100:
        sys.exit("--jobs: a multiple of 100 (100 regimes x N/100 seeds)")
    return ["grid=none", "model=tiny-s,tiny-m", "grpo.group_size=range(2,12)", "grpo.updates_per_batch=1,2,3,4,5",
            f"seed=range({n_jobs // 100})"]


# The child runs race's own entry point and, on exit, writes its peak resident memory to stderr.
CHILD = ("import atexit, resource, sys; atexit.register(lambda: sys.stderr.write("
         "'\\nbench-peak-kib %d\\n' % resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)); "
         "sys.argv = ['race'] + sys.argv[1:]; from race_cli.cli import main; main()")


def run_once(args: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak RSS in MiB, jobs printed) of one `race plan` in a fresh process."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-c", CHILD, "plan", *args, "--yes", "--format", "csv"],
                         capture_output=True, text=True)
    wall = time.perf_counter() - t
    if res.returncode != 0:
        sys.exit(f"race plan failed ({res.returncode}): {res.stderr[-2000:]}")
    peak = [ln for ln in res.stderr.splitlines() if ln.startswith("bench-peak-kib ")]
    return wall, int(peak[-1].split()[1]) / 1024 if peak else float("nan"), res.stdout.count("\n") - 1


def build_only(args: list[str]) -> float:
    """build_plan alone, in this process (imports and caches warm): expansion, composition, budgets."""
    from race_cli.plan.build import build_plan

    t = time.perf_counter()
    build_plan(args, yes=True, say=lambda text: None)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed-only", action="store_true", help="one regime x N seeds instead of 100 regimes")
    args = ap.parse_args()

    results: dict[int, list[tuple[float, float, int]]] = {n: [] for n in args.jobs}
    for _ in range(args.repeats):  # sizes alternate, so a slow spell of the machine hits all of them
        for n in args.jobs:
            results[n].append(run_once(grid(n, args.seed_only)))
    shape = "1 regime x N seeds" if args.seed_only else "100 regimes x N/100 seeds"
    build_only(grid(min(args.jobs), args.seed_only))  # warm imports and caches
    for n, runs in results.items():
        walls = [w for w, _, _ in runs]
        peak = max(p for _, p, _ in runs)
        printed = runs[-1][2]
        inner = statistics.median(build_only(grid(n, args.seed_only)) for _ in range(args.repeats))
        print(f"race plan, {printed} jobs ({shape}), {len(runs)} runs: median {statistics.median(walls):.2f} s "
              f"(min {min(walls):.2f}, max {max(walls):.2f}) end to end in a fresh process, peak memory "
              f"{peak:.0f} MiB; build_plan alone median {inner:.2f} s")


if __name__ == "__main__":
    main()
