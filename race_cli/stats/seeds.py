"""Collapsed seeds: a training run far below its siblings (numpy, no I/O).

A GRPO run that diverges or collapses is common; the variance model treats it as one more seed draw, which
widens every interval of its pool, and nothing points at it. The rule here marks it:

    d_j = median(score of j's siblings) − score_j      (siblings: the other seeds of j's regime; signed so
                                                         that d_j > 0 is worse when lower is better too)
    s   = 1.4826 · median |d| over every job of the sweep's pool on that target (a robust sd of d: a few
          collapsed seeds do not move it, as they would a standard deviation)
    collapsed: d_j > COLLAPSE_K · s  and  d_j > COLLAPSE_FLOOR

With normal seed effects d is normal and d > 3 s happens to about 1 job in 1,000 (0.00058 of 12,000 jobs
simulated at seed sd 0.02); a seed one in ten that loses 0.15 at that seed sd is marked in 0.76 of cases
at 2 seeds per regime and 0.94 at 4 (the collapsed seeds inflate s a little; at 4 robust sds the marks
fell to 0.33 and 0.70). The floor keeps identical seeds
(s = 0) from marking a difference of evaluation noise. A mark informs, it removes nothing: the ranking and
the race keep every seed (benchmarks/bench_race.py measures their error control with collapsing seeds).
"""

from __future__ import annotations

import numpy as np

COLLAPSE_K = 3.0  # robust sds of the sibling difference (tests/test_collapsed_seeds.py measures 3, 3.5, 4)
COLLAPSE_FLOOR = 0.03  # and at least this far below its siblings (score scale)
MAD_SD = 1.4826  # sd of a normal per median absolute deviation


def sibling_gaps(codes: np.ndarray, values: np.ndarray, maximize: bool = True) -> np.ndarray:
    """d_j per job: the median of its regime's other seeds minus its own score (worse is positive); nan for a
    job without siblings."""
    codes, values = np.asarray(codes), np.asarray(values, float)
    sign = 1.0 if maximize else -1.0
    out = np.full(len(values), np.nan)
    for r in np.unique(codes):
        at = np.flatnonzero(codes == r)
        if len(at) < 2:
            continue
        for j in at:
            sib = values[at[at != j]]
            sib = sib[np.isfinite(sib)]
            if len(sib) and np.isfinite(values[j]):
                out[j] = sign * (float(np.median(sib)) - values[j])
    return out


def collapsed(gaps: list[np.ndarray], k: float = COLLAPSE_K, floor: float = COLLAPSE_FLOOR) -> list[np.ndarray]:
    """Per condition of one pool, which jobs are collapsed by the rule above (gaps: sibling_gaps of each)."""
    every = np.concatenate([np.asarray(g, float) for g in gaps]) if gaps else np.zeros(0)
    every = every[np.isfinite(every)]
    s = MAD_SD * float(np.median(np.abs(every))) if len(every) else np.nan
    bar = max(k * s, floor) if np.isfinite(s) else np.inf
    return [np.nan_to_num(np.asarray(g, float), nan=-np.inf) > bar for g in gaps]
