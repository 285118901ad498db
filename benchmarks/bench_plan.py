"""Time `race plan` and measure its peak memory on grids of 1,000 to 100,000 jobs.

    python benchmarks/bench_plan.py                      # the 1,000-job grid, 5 runs (target: ~1 s)
    python benchmarks/bench_plan.py --jobs 1000 10000 100000 --repeats 3
    python benchmarks/bench_plan.py --trees /tmp/before /work/main [--runs 7] [--cold-runs 3]

Each size is the same grid shape, 2 models x 10 group sizes x 5 update counts (100 regimes) x
N/100 seeds, plus `--seed-only`: one regime x N seeds (`seed=range(0,N)`, the issue-36 case).
Runs the real command in fresh processes (`python -m race_cli plan ... --yes --format csv`), so
the figures include interpreter start-up, imports and printing the plan, as a user sees them:
median wall seconds (and the spread) and the peak resident memory of the process (wait4's
ru_maxrss). The machine's speed drifts: compare sizes run side by side, alternating.

With --trees it times what a user types instead, per source tree (PYTHONPATH=tree, e.g. a `git archive` of an
earlier commit and the checkout): `race plan` and `race plan grid=pilot` printing their tables at 80 columns,
warm (the tree's race cache holds a CPU probe reading and whatever an earlier identical run left there) and
cold (an empty race cache: a new machine's first plan, its CPU probe included where the tree waits for it; a
probe the tree leaves running in the background is waited for, untimed, before the next run). Trees and cases
alternate run by run; it prints every run's wall and CPU seconds (the command's own and its children's) and
the medians per tree, and the ratio of the medians.
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


# --- --trees: the default and the pilot plan as a user runs them, before and after a change ---------------

CASES = {"default": ["plan"], "pilot": ["plan", "grid=pilot"]}


def _probe_reading(cache, tree) -> None:
    """A race cache holding one CPU probe reading (0.018 s) keyed as the tree's probe keys this machine."""
    code = ("import json; from race_cli.plan import cpu_probe as P; entry = {'seconds': 0.018, 'probe': P.VERSION, "
            "'fingerprint': P.fingerprint()}; print(json.dumps({'version': 1, 'machines': {P.machine_key(): entry}}))")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=_env(tree, cache), cwd=tree)
    cache.mkdir(parents=True, exist_ok=True)
    (cache / "cpu-probe.json").write_text(got.stdout)


def _env(tree, cache) -> dict:
    import os

    return {**os.environ, "PYTHONPATH": str(tree), "RACE_CACHE": str(cache), "RACE_CPU_PROBE": "cached",
            "COLUMNS": "80", "CUDA_VISIBLE_DEVICES": ""}


def timed(tree, cache, args: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the command and its waited-for children) of one `race ARGS`."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "race_cli", *args], capture_output=True, text=True,
                         env=_env(tree, cache), cwd=tree)  # -m puts the current folder first on the path
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if res.returncode != 0:
        sys.exit(f"race {' '.join(args)} failed in {tree} ({res.returncode}): {res.stderr[-2000:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _wait_for_background_probe(cache) -> None:
    deadline = time.monotonic() + 300
    while (cache / "cpu-probe.running").exists() and time.monotonic() < deadline:
        time.sleep(0.5)


def trees_main(trees, runs: int, cold_runs: int) -> None:
    import shutil
    import tempfile
    from pathlib import Path

    tmp = Path(tempfile.mkdtemp(prefix="bench-plan-"))
    trees = [Path(t).resolve() for t in trees]
    warm = {i: tmp / f"warm{i}" for i in range(len(trees))}
    for i, tree in enumerate(trees):
        _probe_reading(warm[i], tree)
        for args in CASES.values():  # what an earlier identical run leaves in the race cache
            timed(tree, warm[i], args)
    got: dict = {}
    for r in range(max(runs, cold_runs)):
        order = list(range(len(trees)))[:: 1 if r % 2 == 0 else -1]  # alternate which tree goes first
        for case, args in CASES.items():
            for i in order:
                if r < runs:
                    got.setdefault((case, "warm", i), []).append(timed(trees[i], warm[i], args))
                if r < cold_runs:
                    cold = tmp / f"cold{i}-{case}-{r}"
                    got.setdefault((case, "cold", i), []).append(timed(trees[i], cold, args))
                    _wait_for_background_probe(cold)
                    shutil.rmtree(cold, ignore_errors=True)
    for (case, kind, i), xs in sorted(got.items()):
        walls, cpus = [w for w, _ in xs], [c for _, c in xs]
        print(f"{case:8s} {kind} tree {i} ({trees[i]}): wall " + " ".join(f"{w:.2f}" for w in walls)
              + f" | median {statistics.median(walls):.2f} s; CPU median {statistics.median(cpus):.2f} s")
    for case in CASES:
        for kind in ("warm", "cold"):
            if (case, kind, 0) in got and (case, kind, 1) in got:
                m = [statistics.median([w for w, _ in got[(case, kind, i)]]) for i in (0, 1)]
                c = [statistics.median([c for _, c in got[(case, kind, i)]]) for i in (0, 1)]
                print(f"{case} {kind}: wall {m[0]:.2f} -> {m[1]:.2f} s (x{m[0] / m[1]:.1f}), "
                      f"CPU {c[0]:.2f} -> {c[1]:.2f} s (x{c[0] / c[1]:.1f})")
    shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, nargs="+", default=[1000])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed-only", action="store_true", help="one regime x N seeds instead of 100 regimes")
    ap.add_argument("--trees", nargs="+", help="source trees to time the default and pilot plans in (see above)")
    ap.add_argument("--runs", type=int, default=7, help="--trees: warm runs per tree and case")
    ap.add_argument("--cold-runs", type=int, default=3, help="--trees: cold runs per tree and case")
    args = ap.parse_args()
    if args.trees:
        trees_main(args.trees, args.runs, args.cold_runs)
        return

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
