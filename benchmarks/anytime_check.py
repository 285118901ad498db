"""The anytime check: does a job's checkpoint at C/2 stand in for a job whose whole budget is C/2?

    race run                                   # the pilot at C (eval.at includes 0.5)
    race plan budget.flops=4e11 --out runs/half && race run --sweep-dir runs/half
    python benchmarks/anytime_check.py runs/<pilot> runs/half [--fraction 0.5]

For every regime and target: the C/2 jobs' final scores against the C jobs' checkpoint at the same
fraction (same items, paired; seeds of both kinds pooled as in the report: race_cli/report/stats.py),
the difference (C/2 job − C job's checkpoint) with its 95% t interval. The learning rate is constant
after warm-up (grpo.warmup_iters: 0 in the default grid), so the two should agree within noise.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from race_cli.report import stats as S  # noqa: E402
from race_cli.report.frontier import read_checkpoints, sweep_at  # noqa: E402
from race_cli.report.rank import _item_matrix, label_jobs, rankable, regime_columns  # noqa: E402
from race_cli.report.table import read_sweeps  # noqa: E402


def main(argv: list[str]) -> None:
    full, half = Path(argv[0]), Path(argv[1])
    frac = float(argv[argv.index("--fraction") + 1]) if "--fraction" in argv else 0.5
    d_full, d_half = read_sweeps([full]), read_sweeps([half])
    cps, _ = read_checkpoints([full], d_full.jobs)
    at = sweep_at(d_full, cps, frac)
    by = ["model", "reward"]
    print(f"C/2 job (final) − C job's checkpoint at {frac:g}·C, paired over items, seed noise pooled; 95% t interval")
    print(f"{'model':7s} {'reward':13s} {'regime':8s} {'target':16s} {'C job @f':>9s} {'C/2 job':>8s} "
          f"{'diff [95% CI]':>24s} {'FLOPs C@f / C/2':>18s}")
    for t in d_full.targets:
        a = at.jobs[rankable(at.jobs, t)]
        b = d_half.jobs[rankable(d_half.jobs, t)]
        regs = regime_columns(a, d_full.knob_cols, by + ["budget_flops", "task"])
        a, b = label_jobs(a, by, regs), label_jobs(b, by, regs)
        rows = []
        for (m, r, reg), ga in a.groupby(["model", "reward", "regime"], sort=True):
            gb = b[(b["model"] == m) & (b["reward"] == r) & (b["regime"] == reg)]
            if not len(gb):
                continue
            ma, _, ca = _item_matrix(list(zip(ga["sweep"], ga["job_id"])), t, at.items)
            mb, _, cb = _item_matrix(list(zip(gb["sweep"], gb["job_id"])), t, d_half.items)
            if ma is None or mb is None or ca[0] != cb[0]:
                continue
            codes = np.r_[np.zeros(len(mb), int), np.ones(len(ma), int)]
            noise = S.noise_of(codes, np.vstack([mb, ma]), 2)
            se, df = S.contrast_se(noise, np.array([[1.0, -1.0]]))
            diff = float(mb.mean() - ma.mean())
            lo, hi = S.t_interval(np.array([diff]), se, df)
            rows.append(diff)
            fa, fb = float(ga["flops_at"].mean()), float(gb["flops_total"].mean())
            print(f"{m:7s} {str(r)[:13]:13s} {reg:8s} {t:16s} {ma.mean():9.3f} {mb.mean():8.3f} "
                  f"{diff:+.3f} [{lo[0]:+.3f}, {hi[0]:+.3f}]  {fa:.3g} / {fb:.3g}")
        if rows:
            print(f"  {t}: mean difference {np.mean(rows):+.3f} over {len(rows)} regimes")


if __name__ == "__main__":
    main(sys.argv[1:])
