"""Build the whole embedded zoo from scratch in a temporary cache and print what each entry cost.

    python benchmarks/bench_zoo.py [--threads 2] [--keep DIR]

Prints, per entry: build seconds, optimisation steps, greedy and sampled (temperature 1)
accuracy on the 200 held-out arithmetic items, or the PRM's held-out step AUC; then the total.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2, help="torch threads for the builds")
    ap.add_argument("--keep", type=Path, default=None, help="cache folder to build into and keep (default: a temp folder)")
    ap.add_argument("names", nargs="*", help="entries to build (default: all)")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="race-bench-zoo-"))
    os.environ["RACE_CACHE"] = str(root)
    os.environ["RACE_ZOO_THREADS"] = str(args.threads)
    from race_cli import zoo

    names = args.names or list(zoo.RECIPES)
    rows, t0 = [], time.perf_counter()
    for name in names:
        t = time.perf_counter()
        info = json.loads((zoo.build(name) / "recipe.json").read_text())
        rows.append((name, time.perf_counter() - t, info))
    total = time.perf_counter() - t0
    print(f"\nzoo built in {root} with {args.threads} torch threads")
    print(f"{'entry':10} {'params':>8} {'seconds':>8} {'steps':>6} {'greedy':>7} {'sampled':>8} {'AUC':>6}")
    for name, sec, info in rows:
        fmt = lambda k: f"{info[k]:.3f}" if info.get(k) is not None else "-"
        print(f"{name:10} {info['params']:>8,} {sec:>8.1f} {info['steps']:>6} {fmt('greedy'):>7} {fmt('sampled'):>8} {fmt('auc'):>6}")
    print(f"{'total':10} {'':>8} {total:>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
