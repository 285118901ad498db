"""The anytime check: does a job's checkpoint at C/2 stand in for a job whose whole budget is C/2?

    race run                                   # the pilot at C (eval.at includes 0.5)
    race plan budget.flops=4e11 --out runs/half && race run --sweep-dir runs/half
    python benchmarks/anytime_check.py runs/<pilot> runs/half [--fraction 0.5]

For every regime and target: the C/2 jobs' final scores against the C jobs' checkpoint at the same
fraction (same items, paired; seeds of both kinds pooled as in the report: race_cli/stats/variance.py),
the difference (C/2 job − C job's checkpoint) with its 95% t interval. The learning rate is constant
after warm-up (grpo.warmup_iters: 0 in the default grid), so the two should agree within noise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from race_cli.stats import decisions as D, quantiles as Q, variance as V  # noqa: E402
from race_cli.report.frontier import read_checkpoints, sweep_at  # noqa: E402
from race_cli.report.rank import _item_matrix, label_jobs, rankable, regime_columns  # noqa: E402
from race_cli.report.table import read_sweeps  # noqa: E402


def _holm(pvals: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down on p-values: which hypotheses are rejected at familywise alpha."""
    out = np.zeros(len(pvals), dtype=bool)
    for i, k in enumerate(np.argsort(pvals)):
        if pvals[k] > alpha / (len(pvals) - i):
            break
        out[k] = True
    return out


def main(argv: list[str]) -> None:
    full, half = Path(argv[0]), Path(argv[1])
    frac = float(argv[argv.index("--fraction") + 1]) if "--fraction" in argv else 0.5
    d_full, d_half = read_sweeps([full]), read_sweeps([half])
    cps, _ = read_checkpoints([full], d_full.jobs)
    at = sweep_at(d_full, cps, frac)
    by = ["model", "reward"]
    print(f"C/2 job (final) − C job's checkpoint at {frac:g}·C, paired over items; seed noise pooled over the "
          "condition's regimes (both kinds of job), as the report pools it; 95% interval")
    print(f"{'model':7s} {'reward':13s} {'regime':8s} {'target':16s} {'C job @f':>9s} {'C/2 job':>8s} "
          f"{'diff [95% CI]':>24s} {'FLOPs C@f / C/2':>18s}")
    n_all = n_out = 0
    pvals = []
    for t in d_full.targets:
        a = at.jobs[rankable(at.jobs, t)]
        b = d_half.jobs[rankable(d_half.jobs, t)]
        regs = regime_columns(a, d_full.knob_cols, by + ["budget_flops", "task"])
        a, b = label_jobs(a, by, regs), label_jobs(b, by, regs)
        diffs = []
        for (m, r), ca in a.groupby(["model", "reward"], sort=True):
            cb = b[(b["model"] == m) & (b["reward"] == r)]
            tables, codes, names, spent = [], [], [], []
            for reg, ga in ca.groupby("regime", sort=True):
                gb = cb[cb["regime"] == reg]
                if not len(gb):
                    continue
                ma, _, ia = _item_matrix(list(zip(ga["sweep"], ga["job_id"])), t, at.items)
                mb, _, ib = _item_matrix(list(zip(gb["sweep"], gb["job_id"])), t, d_half.items)
                if ma is None or mb is None or ia[0] != ib[0]:
                    continue
                k = 2 * len(names)  # group k: the C/2 jobs of this regime, k + 1: the C jobs' checkpoints
                tables += [mb, ma]
                codes += [np.full(len(mb), k), np.full(len(ma), k + 1)]
                names.append(reg)
                spent.append((float(ga["flops_at"].mean()), float(gb["flops_total"].mean())))
            if not names:
                continue
            noise = V.noise_of(np.concatenate(codes), np.vstack(tables), 2 * len(names))
            point = noise.m.mean(axis=1)
            for j, reg in enumerate(names):
                c = np.zeros((1, 2 * len(names)))
                c[0, 2 * j], c[0, 2 * j + 1] = 1.0, -1.0
                parts = V.contrast_parts(noise, c)
                diff = float(c[0] @ point)
                iv = D.intervals(np.array([diff]), parts)
                lo, hi = iv.low, iv.high
                pvals.append(float(2 * Q.t_sf(abs(diff) / parts.se[0], iv.df[0])))  # at the interval's effective df
                n_all += 1
                n_out += int(not lo[0] <= 0 <= hi[0])
                diffs.append(diff)
                fa, fb = spent[j]
                print(f"{m:7s} {str(r)[:13]:13s} {reg:8s} {t:16s} {point[2 * j + 1]:9.3f} {point[2 * j]:8.3f} "
                      f"{diff:+.3f} [{lo[0]:+.3f}, {hi[0]:+.3f}]  {fa:.3g} / {fb:.3g}")
        if diffs:
            print(f"  {t}: mean difference {np.mean(diffs):+.3f} over {len(diffs)} regimes")
    if n_all:
        held = _holm(np.array(pvals), 0.05)
        print(f"{n_out} of {n_all} intervals exclude zero (about {0.05 * n_all:.1f} expected by chance at 95% if "
              f"the assumption holds); after Holm's correction over the {n_all}, {int(held.sum())} differ.")


if __name__ == "__main__":
    main(sys.argv[1:])
