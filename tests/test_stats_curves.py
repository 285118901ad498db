"""The pure compute-curve helpers (race_cli/stats/curves.py) on data with a known truth."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from race_cli.stats.curves import B_RANGE, at_bound, seed_covariance, t_scale


def test_seed_covariance_recovers_a_known_covariance_net_of_evaluation_noise():
    # 300 regimes × 2 seeds, 4 checkpoints, 200 items × 4 samples. One run's effect across the checkpoints:
    # sd 0.02 growing to 0.03, correlation 0.6 between any two checkpoints (not 1: a lucky run is not
    # lucky at every checkpoint alike). The binomial evaluation noise adds ~0.2/4/200 = 2.5e-4 to each job
    # mean's variance, independently per checkpoint; the estimate must remove it.
    rng = np.random.default_rng(0)
    sd = np.array([0.02, 0.024, 0.027, 0.03])
    corr = np.full((4, 4), 0.6) + 0.4 * np.eye(4)
    cov = corr * np.outer(sd, sd)
    R, S, n = 300, 2, 200
    codes = np.repeat(np.arange(R), S)
    item = rng.uniform(-0.2, 0.2, n)
    runs = rng.multivariate_normal(np.zeros(4), cov, size=R * S)  # [J, F]
    p = np.clip(0.45 + item[None, None, :] + runs[:, :, None], 0, 1)
    scores = rng.binomial(4, p) / 4  # [J, F, n]
    est, df = seed_covariance(codes, scores)
    assert df == R * (S - 1)
    # relative error of a variance from 300 df: sqrt(2/300) = 8%; tolerance 3 of those on the diagonal
    assert np.diag(est) == pytest.approx(sd ** 2, rel=0.25)
    off = est / np.sqrt(np.outer(np.diag(est), np.diag(est)))
    assert off[np.triu_indices(4, 1)] == pytest.approx(0.6, abs=0.15)
    # without removing the evaluation noise the variances would be ~2.5e-4 too large (p(1 − p)/4/200)
    raw = np.diag(np.cov((scores.mean(axis=2)[::2] - scores.mean(axis=2)[1::2]).T)) / 2
    assert (raw > sd ** 2 + 1e-4).all()


def test_seed_covariance_without_replicated_regimes_is_zero():
    est, df = seed_covariance(np.arange(3), np.zeros((3, 4, 10)))
    assert df == 0 and (est == 0).all()


def test_t_scale_reads_the_scale_from_quartiles():
    rng = np.random.default_rng(1)
    for df in (3.0, 6.0, np.inf):
        x = 0.1 + 0.02 * (rng.standard_t(df, 20_000) if np.isfinite(df) else rng.standard_normal(20_000))
        assert t_scale(x, df) == pytest.approx(0.02, rel=0.03)
    # a 0.17% tail bound from 200 draws: t quantile × scale; the sample percentile would be the most extreme draw
    x = rng.standard_t(6.0, 200)
    q = stats.t.ppf(1 - 0.05 / 30, 6.0)
    assert q * t_scale(x, 6.0) == pytest.approx(q, rel=0.25)


def test_at_bound():
    hb, ha = at_bound([0.5, 1.0, 0.0], [B_RANGE[0], 2.0, 2.0], 0.0, 1.0)
    assert hb.tolist() == [True, False, False] and ha.tolist() == [False, True, True]
