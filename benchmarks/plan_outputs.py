"""Check that two source trees print the same `race plan`, byte for byte: a speed change must not move a number.

    python benchmarks/plan_outputs.py --trees /tmp/before /work/main [--cases default pilot ...]

Each case is one `race plan` command line (table, CSV and JSON, the default grid and grid=pilot with and
without --gpu, a fixed design, the power table), run per tree in a fresh interpreter (PYTHONPATH=tree) at 80
and 240 columns with no GPU visible and a race cache of its own holding one fixed CPU probe reading (so the
wall times do not depend on this machine's speed today). Every tree runs each case twice: with its race
cache empty and again with what the first run left there (the kept compositions and simulated races),
so a cache that returned anything but what it would compute shows up as a difference too. Prints one
line per case and the first differing lines; exits 1 if any case differs.

Make the "before" tree with `git archive <commit> | tar -x -C /tmp/before` (only the tracked files).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CASES = {
    "default": ["plan"],
    "default-power-table": ["plan", "--power-table"],
    "default-fixed": ["plan", "--no-race"],
    "default-csv": ["plan", "--format", "csv"],
    "default-json": ["plan", "--format", "json"],
    "pilot": ["plan", "grid=pilot"],
    "pilot-h100x8": ["plan", "grid=pilot", "--gpu", "H100x8"],
    "seeds-3": ["plan", "seed=0,1,2", "--no-race"],
}
PROBE_SECONDS = 0.018  # a fixed reading for cpu-probe.json: the same CPU rates in every tree and run


def probe_cache(root: Path, tree: Path) -> None:
    """A race cache holding one CPU probe reading for this machine, as the tree's own probe would key it."""
    code = ("import json; from race_cli.plan import cpu_probe as P; entry = {'seconds': %r, 'probe': P.VERSION, "
            "'fingerprint': P.fingerprint()}; print(json.dumps({'version': 1, 'machines': {P.machine_key(): entry}}))"
            % PROBE_SECONDS)
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu-probe.json").write_text(got.stdout)


def run(tree: Path, args: list[str], columns: int, cache: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(tree), "COLUMNS": str(columns), "CUDA_VISIBLE_DEVICES": "",
           "RACE_CACHE": str(cache), "RACE_CPU_PROBE": "cached"}
    env.pop("RACE_CONF_DIR", None)
    done = subprocess.run([sys.executable, "-m", "race_cli", *args], capture_output=True, text=True, env=env,
                          timeout=900, cwd=tree)  # -m puts the current folder first on sys.path: the tree's
    return f"exit {done.returncode}\n--- stdout\n{done.stdout}--- stderr\n{done.stderr}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", nargs=2, type=Path, required=True, metavar=("BEFORE", "AFTER"))
    ap.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    ap.add_argument("--columns", nargs="+", type=int, default=[80, 240])
    ap.add_argument("--save", type=Path, help="also write every output here (CASE.COLUMNS.TREE.RUN.txt)")
    args = ap.parse_args()
    differ = 0
    with tempfile.TemporaryDirectory() as tmp:
        caches = {}
        for i, tree in enumerate(args.trees):
            caches[i] = Path(tmp) / f"cache{i}"
            probe_cache(caches[i], tree.resolve())
        for name in args.cases:
            for cols in args.columns:
                outs = {}
                for i, tree in enumerate(args.trees):
                    for rep in ("cold", "warm"):
                        if rep == "cold":  # an empty cache but the probe reading: nothing kept yet
                            for sub in ("compose", "race-price"):
                                for f in (caches[i] / sub).glob("*.json") if (caches[i] / sub).is_dir() else []:
                                    f.unlink()
                        outs[(i, rep)] = run(tree.resolve(), CASES[name], cols, caches[i])
                        if args.save:
                            args.save.mkdir(parents=True, exist_ok=True)
                            (args.save / f"{name}.{cols}.{i}.{rep}.txt").write_text(outs[(i, rep)])
                ref = outs[(0, "cold")]
                bad = [k for k, v in outs.items() if v != ref]
                print(f"{name:22s} {cols:3d} columns: " + ("identical (2 trees x cold, warm)" if not bad else
                                                            f"DIFFERS in {bad}"), flush=True)
                for k in bad:
                    differ += 1
                    diff = difflib.unified_diff(ref.splitlines(), outs[k].splitlines(), "tree 0 cold",
                                                f"tree {k[0]} {k[1]}", lineterm="", n=0)
                    print("\n".join(list(diff)[:20]))
    print(json.dumps({"cases": len(args.cases) * len(args.columns), "differing": differ}))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
