"""How close the local pool's makespan comes to its lower bound, with simulated jobs of known durations.

    python benchmarks/bench_pool.py                 # 24 jobs, 4 slots, durations 0.5..4 s
    python benchmarks/bench_pool.py --jobs 40 --slots 8 --seed 1

Each job is tests/fake_job.py sleeping a known time (drawn log-uniformly, seeded), planned
FLOPs proportional to it, so the pool's longest-first order sees the true sizes. The jobs
sleep, so the 2 shared cores do not limit the slots. Lower bound = max(longest job, total
work / slots); the figure is makespan / lower bound (target <= 1.1). The time each job
really took (its process start, Python start-up, file writes) is counted in the makespan but
not in the bound: the ratio includes the pool's own overhead.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from fake_job import command, make_sweep  # noqa: E402

from race_cli.pool.local import LocalPool, cpu_slots  # noqa: E402


def lpt_makespan(durations: list[float], slots: int) -> float:
    """Makespan of longest-first list scheduling with zero overhead (what the pool's order gives)."""
    import heapq

    free = [0.0] * slots
    for d in sorted(durations, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + d)
    return max(free)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=24)
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--min-s", type=float, default=0.5)
    ap.add_argument("--max-s", type=float, default=4.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    rng = random.Random(a.seed)
    durations = [round(a.min_s * (a.max_s / a.min_s) ** rng.random(), 3) for _ in range(a.jobs)]
    specs = {f"j{i:02d}": {"seconds": d, "iterations": 2, "flops_per_iter": d * 1e9} for i, d in enumerate(durations)}
    bound = max(max(durations), sum(durations) / a.slots)
    with tempfile.TemporaryDirectory() as tmp:
        sweep = make_sweep(Path(tmp) / "bench", specs)
        rows = {j: {"planned_flops_total": 2 * s["flops_per_iter"]} for j, s in specs.items()}
        pool = LocalPool(sweep, list(specs), cpu_slots(a.slots, a.slots), plan_rows=rows, job_command=command)
        t0 = time.monotonic()
        results = pool.run()
        makespan = time.monotonic() - t0
    assert all(v == "done" for v in results.values()), results
    lpt = lpt_makespan(durations, a.slots)
    print(f"{a.jobs} jobs on {a.slots} slots, durations {min(durations):.2f}..{max(durations):.2f} s "
          f"(total {sum(durations):.1f} s, seed {a.seed})")
    print(f"lower bound max(longest, total/slots) = {bound:.2f} s")
    print(f"longest-first schedule without overheads = {lpt:.2f} s ({lpt / bound:.3f} x)")
    print(f"makespan = {makespan:.2f} s  ->  {makespan / bound:.3f} x the lower bound; process start-up and "
          f"polling add {(makespan - lpt) / (a.jobs / a.slots):.2f} s per job per slot")


if __name__ == "__main__":
    main()
