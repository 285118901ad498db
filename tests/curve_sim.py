"""Synthetic pilots with known compute curves, for the curve fitter's tests and benchmarks/bench_curve.py.

The truth of one regime is the sigmoid R(C) = R0 + (A − R0) / (1 + (C_mid / C)^B). A pilot of it
evaluates at the default grid's checkpoints (fractions 0.25, 0.5, 0.75, 1 of C, each a little past
its fraction, as the first iteration boundary is) on n items with k sampled completions per item:

    P(correct on item i, seed s, compute c) = R(c) + d_i + e_s · g(c),    g(c) = (R(c) − R0) / (A − R0)

d_i ~ U(−item_half, item_half) the item's fixed difficulty (mean 0), e_s ~ N(0, seed_sd) the training
run's luck, growing with the progress g (every seed starts from the same checkpoint). A per-item score
is Binomial(k, P) / k, drawn afresh at every checkpoint. Defaults are the default grid's: 200 items,
4 samples, 2 seeds, C = 8e11, seed spread 0.02 (docs/measurements/embedded-study.md measured 0.016–0.026).
The regime's expected score at compute c is exactly R(c): what an interval should cover.
"""

from __future__ import annotations

import numpy as np

FRACTIONS = (0.25, 0.5, 0.75, 1.0)
TRUTH = {"r0": 0.31, "a": 0.45, "c_mid": 3e11, "b": 1.5}


def simulate(rng: np.random.Generator, truth: dict = TRUTH, budget: float = 8e11, seeds: int = 2,
             n: int = 200, k: int = 4, seed_sd: float = 0.02, item_half: float = 0.25,
             fractions=FRACTIONS):
    """(compute [S, F], scores [S, F, n], start [n]) of one regime's pilot."""
    from race_cli.report.curve import sigmoid

    d = rng.uniform(-item_half, item_half, n)
    start = rng.binomial(k, np.clip(truth["r0"] + d, 0, 1)) / k
    fr = np.asarray(fractions, float)
    comp = np.zeros((seeds, len(fr)))
    scores = np.zeros((seeds, len(fr), n))
    for s in range(seeds):
        e = rng.normal(0.0, seed_sd)
        for j, f in enumerate(fr):
            c = f * budget * rng.uniform(1.0, 1.02)  # the first boundary at or past f·C
            m = float(sigmoid(c, **truth))
            g = (m - truth["r0"]) / (truth["a"] - truth["r0"])
            comp[s, j] = c
            scores[s, j] = rng.binomial(k, np.clip(m + d + e * g, 0, 1)) / k
    return comp, scores, start
