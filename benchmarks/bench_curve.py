"""How far the compute curves may be extrapolated: coverage and error of the prediction interval at
X = k·C on synthetic pilots with the default grid's noise (tests/curve_sim.py: 200 items × 4 samples,
2 seeds, seed spread 0.02, checkpoints at 1/4 .. 1 of C = 8e11).

    python benchmarks/bench_curve.py [--pilots 60] [--draws 100]

Prints, per factor k, the share of pilots whose 95% interval covered the truth R(k·C), the median
absolute error and the median interval width, for three true curves: one that has bent inside the
pilot (C_mid = 0.375·C), one bending at the pilot's end (C_mid = C) and one still rising (C_mid = 3·C).
It also splits the coverage by what the report can see: whether the fitted C_mid lies within the
observed compute (the curve has visibly bent). report/curve.py warns from these figures: beyond
MAX_EXTRAPOLATION (4x) always, and beyond 1x when the fitted curve has not bent.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from curve_sim import simulate  # noqa: E402
from race_cli.report.curve import fit_condition, predict_at, sigmoid  # noqa: E402

C = 8e11
FACTORS = (1.0, 1.5, 2.0, 3.0, 4.0)
TRUTHS = {"bent (C_mid = 0.375 C)": {"r0": 0.31, "a": 0.45, "c_mid": 3e11, "b": 1.5},
          "bending (C_mid = C)": {"r0": 0.31, "a": 0.50, "c_mid": 8e11, "b": 1.5},
          "rising (C_mid = 3 C)": {"r0": 0.31, "a": 0.60, "c_mid": 2.4e12, "b": 1.5}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pilots", type=int, default=60)
    ap.add_argument("--draws", type=int, default=100)
    args = ap.parse_args()
    t0 = time.time()
    print(f"{args.pilots} pilots per truth, {args.draws} refits each; coverage of the 95% interval at k·C")
    print(f"{'truth':26s} {'k':>4s} {'coverage':>9s} {'median |err|':>13s} {'median width':>13s}")
    for name, truth in TRUTHS.items():
        rng = np.random.default_rng(0)
        rows = {k: [] for k in FACTORS}
        for rep in range(args.pilots):
            comp, scores, start = simulate(rng, truth)
            cc = fit_condition(np.zeros(2, int), ["r"], comp, scores, start, n_boot=args.draws, seed=rep)
            for k in FACTORS:
                p = predict_at(cc, k * C).iloc[0]
                tv = float(sigmoid(k * C, **truth))
                bent = p["c_mid"] <= cc.c_max[0]  # the fitted half-gain point lies inside the pilot
                rows[k].append((p["pred_lo"] <= tv <= p["pred_hi"], abs(p["predicted"] - tv), p["pred_hi"] - p["pred_lo"],
                                bent))
        for k in FACTORS:
            a = np.array(rows[k], float)
            b = a[:, 3] > 0
            split = " ".join(f"{lab} {a[m, 0].mean():.2f} (n={int(m.sum())})" for lab, m in (("fit bent", b), ("fit not", ~b))
                             if m.any())
            print(f"{name:26s} {k:4.1f} {a[:, 0].mean():9.2f} {np.median(a[:, 1]):13.3f} {np.median(a[:, 2]):13.3f}   "
                  f"coverage when the fit {split}")
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
