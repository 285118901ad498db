"""Re-measure the CPU rates `race plan` prices the default grid with (race_cli/cost/walltime.py CPU_RATES).

    python benchmarks/rate_probe.py --runs 3                 # 3 quiet runs of the default grid (~7 min each)
    python benchmarks/rate_probe.py --from runs/tiny-a runs/tiny-b   # only read finished sweeps

On an idle machine (nothing else running: the probe refuses to start above a load average of 0.5
per core unless --force), each run is a fresh `race run` of the default grid into a temporary
folder; its ledgers give per model the FLOP/s of every phase, the seconds per evaluation point and
the setup seconds per job (plan/measured.sweep_rates: what `race plan --calibrate-from` reads). The
probe prints each run's figures, their medians, each run's planned against actual wall time, and a
CPU_RATES block to paste into walltime.py with the machine it came from (CPU model, cores, load
before and after, date). Figures from a loaded machine are not idle rates: quote the load with them.

Steps for whoever re-measures:
1. a fresh clone, `pip install -e .[dev]`, `race zoo --build` (so no run pays for the zoo);
2. nothing else running (`uptime`: load average well under 1 per core);
3. `python benchmarks/rate_probe.py --runs 3`; paste the printed block over CPU_RATES, keeping
   the comment above it, and the printed REFERENCE_SECONDS into race_cli/plan/cpu_probe.py (the probe
   of the same machine, so that a plan elsewhere scales the rates by how much faster it is);
4. `race plan` then `race run` on the same clone: the run's end line prints planned vs actual.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load() -> float:
    return os.getloadavg()[0]


def run_grid(folder: Path) -> float:
    """One `race run` of the default grid into `folder`; its wall seconds."""
    t = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "race_cli", "run", "--sweep-dir", str(folder)],
                         capture_output=True, text=True, cwd=ROOT)
    if res.returncode != 0:
        sys.exit(f"race run failed ({res.returncode}):\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    print(res.stdout.strip().splitlines()[-1])  # the end line: planned vs actual wall time
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3, help="quiet runs of the default grid (default 3)")
    ap.add_argument("--from", dest="sweeps", nargs="+", type=Path, help="finished sweeps to read instead of running")
    ap.add_argument("--force", action="store_true", help="run even on a loaded machine (then say so)")
    args = ap.parse_args()

    from race_cli.plan.measured import sweep_rates

    cores = os.cpu_count() or 1
    before = load()
    sweeps = list(args.sweeps or [])
    if not sweeps:
        if before > 0.5 * cores and not args.force:
            sys.exit(f"load average {before:.2f} on {cores} cores: not an idle machine. Stop what runs, or --force "
                     "(and quote the load with the figures).")
        tmp = Path(tempfile.mkdtemp(prefix="rate-probe-"))
        for i in range(args.runs):
            wall = run_grid(tmp / f"run{i}")
            print(f"run {i + 1}/{args.runs}: {wall:.0f} s wall, load now {load():.2f}")
            sweeps.append(tmp / f"run{i}")
    after = load()

    per_model: dict[str, list] = {}
    for s in sweeps:
        for model, r in sweep_rates(s).items():
            per_model.setdefault(model, []).append(r)
            fps = ", ".join(f"{p} {v:.3g}" for p, v in r.flops_per_s.items())
            print(f"{s.name} {model}: {fps} FLOP/s; eval {r.eval_s:.2f} s/point; setup {r.overhead_s:.2f} s/job")

    med = lambda xs: statistics.median(xs)
    print(f"\n# Measured {time.strftime('%Y-%m-%d')} on {cpu_model()}, {cores} cores, load {before:.2f} before / "
          f"{after:.2f} after; median of {len(sweeps)} run(s) of the default grid (benchmarks/rate_probe.py).")
    print("CPU_RATES: dict[str, Rates] = {")
    for model, rs in per_model.items():
        fps = {p: med([r.flops_per_s[p] for r in rs]) for p in ("rollout", "update", "reward")}
        body = ", ".join(f'"{p}": {v:.3g}' for p, v in fps.items())
        print(f'    "{model}": Rates({{{body}}}, eval_s={med([r.eval_s for r in rs]):.2f}, '
              f'overhead_s={med([r.overhead_s for r in rs]):.1f},\n'
              f'                    source=CPU_SOURCE),')
    print("}")
    # the same machine's probe: race plan scales CPU_RATES by REFERENCE_SECONDS / the probe where it runs
    from race_cli.plan.cpu_probe import run_probe

    print(f"# race_cli/plan/cpu_probe.py, probed on the same machine now:\nREFERENCE_SECONDS = {run_probe():.4g}")


if __name__ == "__main__":
    main()
