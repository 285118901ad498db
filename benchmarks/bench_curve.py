"""How far the compute curves may be extrapolated: coverage and error of the prediction interval at
X = k·C on synthetic pilots with the default grid's noise (tests/curve_sim.py: 200 items × 4 samples,
2 seeds, seed spread 0.02, checkpoints at 1/4 .. 1 of C = 8e11).

    python benchmarks/bench_curve.py [--pilots 60] [--draws 100] [--truth rising]

Prints, per factor k, the share of pilots whose 95% interval covered the truth R(k·C), the median
absolute error and the median interval width, for three true curves: one that has bent inside the
pilot (C_mid = 0.375·C), one bending at the pilot's end (C_mid = C) and one still rising (C_mid = 3·C);
then the coverage split by what the report sees: "silent" = no warning at k (report/curve.py:
not identified by the point fit or by BOUND_SHARE of the refits, not bent by BENT_SHARE of the refits
beyond UNBENT_MAX, beyond MAX_EXTRAPOLATION), and the earlier rule's split (the point fit's C_mid inside
the pilot). The report's limits are set from these figures (docs/frontier.md): a silent prediction must
cover >= 90% for every truth.
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
    from race_cli.report.curve import degenerate_warning, extrapolation_warning

    ap = argparse.ArgumentParser()
    ap.add_argument("--pilots", type=int, default=60)
    ap.add_argument("--draws", type=int, default=100)
    ap.add_argument("--truth", action="append", help="bent / bending / rising (repeatable; default all three)")
    args = ap.parse_args()
    t0 = time.time()
    print(f"{args.pilots} pilots per truth, {args.draws} refits each; coverage of the 95% interval at k·C")
    print(f"{'truth':26s} {'k':>4s} {'coverage':>9s} {'median |err|':>13s} {'median width':>13s}  "
          "silent: coverage (share silent) | point fit bent (the earlier rule): coverage (n)")
    for name, truth in TRUTHS.items():
        if args.truth and not any(name.startswith(t) for t in args.truth):
            continue
        rng = np.random.default_rng(0)
        rows = {k: [] for k in FACTORS}
        for rep in range(args.pilots):
            comp, scores, start = simulate(rng, truth)
            cc = fit_condition(np.zeros(2, int), ["r"], comp, scores, start, n_boot=args.draws, seed=rep)
            for k in FACTORS:
                p = predict_at(cc, k * C).iloc[0]
                tv = float(sigmoid(k * C, **truth))
                warned = bool(degenerate_warning(p["a"], p["b"], 0.0, 1.0, p["bound_share"])
                              or extrapolation_warning(p["extrapolation"], p["bent_share"], p["c_mid"] <= cc.c_max[0]))
                rows[k].append((p["pred_lo"] <= tv <= p["pred_hi"], abs(p["predicted"] - tv),
                                p["pred_hi"] - p["pred_lo"], p["c_mid"] <= cc.c_max[0], not warned))
        for k in FACTORS:
            a = np.array(rows[k], float)
            bent, silent = a[:, 3] > 0, a[:, 4] > 0
            sil = f"{a[silent, 0].mean():.2f} ({silent.mean():.2f})" if silent.any() else f"– ({silent.mean():.2f})"
            old = " ".join(f"{lab} {a[m, 0].mean():.2f} (n={int(m.sum())})" for lab, m in (("bent", bent), ("not", ~bent))
                           if m.any())
            print(f"{name:26s} {k:4.1f} {a[:, 0].mean():9.2f} {np.median(a[:, 1]):13.3f} {np.median(a[:, 2]):13.3f}  "
                  f"silent {sil} | {old}", flush=True)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
