"""Time `race plan` on a 1,000-job grid (target: under one second on a 2-core machine).

    python benchmarks/bench_plan.py [--repeats 5]

Runs the real command in fresh processes (`python -m race_cli plan ... --format json`), so
the figure includes interpreter start-up and imports, as a user sees it, and prints the
median and spread, plus the in-process time of build_plan alone.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

GRID = ["grid=none", "model=tiny-s,tiny-m", "grpo.group_size=range(2,12)",
        "grpo.updates_per_batch=1,2,3,4,5", "seed=range(10)", "--yes", "--format", "json"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()

    walls = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "race_cli", "plan", *GRID], capture_output=True, text=True)
        walls.append(time.perf_counter() - t)
        if res.returncode != 0:
            sys.exit(f"race plan failed: {res.stderr}")
    import json

    n = len(json.loads(res.stdout)["jobs"])

    from race_cli.plan.build import build_plan

    build_plan(GRID[:5], yes=True)  # warm imports and caches
    inner = []
    for _ in range(args.repeats):
        t = time.perf_counter()
        build_plan(GRID[:5], yes=True)
        inner.append(time.perf_counter() - t)
    print(f"race plan, {n} jobs, {args.repeats} runs: median {statistics.median(walls):.3f} s "
          f"(min {min(walls):.3f}, max {max(walls):.3f}) end to end in a fresh process; "
          f"build_plan alone median {statistics.median(inner):.3f} s")


if __name__ == "__main__":
    main()
