"""What OpenMP's wait policy costs a CPU job alone, and what it saves when two runs share the cores.

    python benchmarks/bench_omp_wait.py                # 3 rounds: default against PASSIVE
    python benchmarks/bench_omp_wait.py --rounds 5 --settings default,GOMP_SPINCOUNT=10000

Each run is `race run` of two tiny-s jobs (G = 2 and 4) on one worker, so the job gets every core
as torch threads (the pool's cores // workers). A setting is `default` (OpenMP's own wait policy), `PASSIVE` (OMP_WAIT_POLICY=PASSIVE) or any
NAME=VALUE for the jobs' environment (GOMP_SPINCOUNT=10000: libgomp spins that many turns, then
sleeps). Each round times every setting, in an order that rotates from round to round:
  alone:    one run;
  together: two runs started at once (--no-together skips these).
With the default policy torch's OpenMP threads spin while they wait for each other; two spinning
teams on the same cores take turns at spinning. Prints each time, the medians and their ratios
to the first setting's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

GRID = ["grid=none", "model=tiny-s", "grpo.group_size=2,4", "grpo.prompts_per_iter=4", "budget.flops=1.5e10",
        "eval.every=4", "checkpoint.every=2", "task.num_eval=40", "--workers", "1"]


def _env(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update({"COLUMNS": "200", "RACE_CPU_PROBE": "off", "PYTHONPATH": str(ROOT)})
    if setting == "PASSIVE":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    elif setting != "default":
        name, _, value = setting.partition("=")
        env[name] = value
    return env


def timed(folder: Path, setting: str, copies: int) -> float:
    """Seconds until `copies` runs started at once have all ended."""
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, "-m", "race_cli", "run", *GRID, "--sweep-dir", str(folder / f"{k}")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=_env(setting))
             for k in range(copies)]
    for p in procs:
        _, err = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"race run failed ({p.returncode}): {err.decode()[-2000:]}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--settings", default="default,PASSIVE", help="comma-separated; the first is the baseline")
    ap.add_argument("--no-together", action="store_true", help="time single runs only")
    args = ap.parse_args()
    settings = args.settings.split(",")
    kinds = ((1, "alone"),) if args.no_together else ((1, "alone"), (2, "together"))
    times: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        n = 0
        for r in range(args.rounds):
            for copies, label in kinds:
                for setting in settings[r % len(settings):] + settings[:r % len(settings)]:
                    n += 1
                    secs = timed(Path(tmp) / f"run{n}", setting, copies)
                    times.setdefault((label, setting), []).append(secs)
                    print(f"round {r + 1}  {label:<8}  {setting:<20}  {secs:6.1f} s", flush=True)
    print()
    for _, label in kinds:
        base = statistics.median(times[(label, settings[0])])
        for setting in settings:
            med = statistics.median(times[(label, setting)])
            print(f"{label:<8}  {setting:<20}  median {med:6.1f} s   / {settings[0]} {med / base:5.2f}")


if __name__ == "__main__":
    main()
