"""The graphical (gatekept) procedure and Dunnett's many-to-one critical value (race_cli/stats/gatekeeping.py):
reference values, and the familywise error measured on simulated tests whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from race_cli.stats.gatekeeping import (Graph, dunnett_cdf, dunnett_quantile, fixed_sequence, gatekeeping_graph,
                                        graph_test_p, holm_graph)


def _holm(p, alpha):
    """Holm's step-down written out (the textbook rule) as the reference."""
    order = np.argsort(p, kind="stable")
    out = np.zeros(len(p), bool)
    for k, i in enumerate(order):
        if p[i] > alpha / (len(p) - k):
            break
        out[i] = True
    return out


def test_holm_is_a_graph():
    rng = np.random.default_rng(0)
    for _ in range(300):
        p = rng.uniform(0, 0.06, 5)
        assert (graph_test_p(holm_graph(5), p, 0.05).rejected == _holm(p, 0.05)).all()


def test_fixed_sequence_stops_at_the_first_failure():
    # H1 at 0.05: 0.01 rejected; H2 then at 0.05: 0.04 rejected; H3 at 0.05: 0.2 not; H4 never reached
    r = graph_test_p(fixed_sequence(4), np.array([0.01, 0.04, 0.2, 0.001]), 0.05)
    assert r.rejected.tolist() == [True, True, False, False]
    assert r.weight.tolist() == [1.0, 1.0, 1.0, 0.0]


def test_weights_move_along_the_edges():
    # entry A (1/2) and B (1/2); A passes to C: with A rejected at 0.025, C is tested at 0.025
    g = gatekeeping_graph({"A": 0.5, "B": 0.5}, {"A": {"C": 1.0}, "C": {"B": 1.0}})
    r = graph_test_p(g, np.array([0.02, 0.04, 0.024]), 0.05)  # names: A, B, C
    assert g.names == ("A", "B", "C")
    # A rejected (0.02 <= 0.025) -> C at 0.025: rejected -> B gets 0.5 + 0.5 -> tested at 0.05: rejected
    assert r.rejected.tolist() == [True, True, True]
    r = graph_test_p(g, np.array([0.03, 0.04, 0.001]), 0.05)
    assert r.rejected.tolist() == [False, False, False] and r.weight[2] == 0.0  # C's gate stayed shut


def test_a_bad_graph_is_refused():
    with pytest.raises(ValueError, match="sum to at most 1"):
        Graph(("a", "b"), np.array([0.7, 0.7]), np.zeros((2, 2)))
    with pytest.raises(ValueError, match="diagonal"):
        Graph(("a",), np.array([1.0]), np.ones((1, 1)))


def test_familywise_error_of_a_gatekept_graph_under_every_configuration():
    # 4 hypotheses, two families gatekept in sequence (the joint comparison's shape): correlated normal
    # test statistics, a subset of them true (mean 0) and the rest false (mean 3); any rejection of a
    # true one is a familywise error. Measured over 8,000 draws per configuration: <= 0.05 plus 2
    # binomial standard errors (2 × 0.0024).
    g = gatekeeping_graph({"m1": 0.5, "m2": 0.5}, {"m1": {"b1": 1.0}, "m2": {"b2": 1.0}, "b1": {"m2": 1.0},
                                                   "b2": {"m1": 1.0}})
    rng = np.random.default_rng(1)
    cov = np.full((4, 4), 0.5) + 0.5 * np.eye(4)
    for false in ([], [0], [0, 2], [1, 2, 3]):
        mu = np.zeros(4)
        mu[false] = 3.0
        z = rng.multivariate_normal(mu, cov, size=8_000)
        p = stats.norm.sf(z)
        err = np.mean([graph_test_p(g, row, 0.05).rejected[[i for i in range(4) if i not in false]].any()
                       for row in p])
        assert err <= 0.05 + 2 * 0.0024, (false, err)
        if not false:
            assert err >= 0.03  # the whole α is used under the global null (Bonferroni 0.05, correlated)


def test_dunnett_cdf_matches_the_multivariate_t():
    for lam, df in [(np.full(3, 0.5 ** 0.5), 5.0), (np.array([0.3, 0.6, 0.7, 0.2]), 3.0), (np.full(6, 0.7), 2.0)]:
        k = len(lam)
        corr = np.outer(lam, lam)
        np.fill_diagonal(corr, 1.0)
        ref = stats.multivariate_t(shape=corr, df=df).cdf(np.full(k, 2.4), maxpts=500_000, random_state=1)
        assert dunnett_cdf(2.4, lam, df) == pytest.approx(ref, abs=4e-4)
    corr = np.full((6, 6), 0.49) + 0.51 * np.eye(6)
    ref = stats.multivariate_normal(cov=corr).cdf(np.full(6, 2.4))
    assert dunnett_cdf(2.4, np.full(6, 0.7), np.inf) == pytest.approx(ref, abs=1e-5)


def test_dunnett_cdf_of_equal_arms_is_the_general_quadrature_bit_for_bit():
    """k equal λ take one arm's Φ multiplied k times; the general [S, U, k] product (written out here as
    dunnett_cdf computes it for unequal λ) gives the same float, so the report's numbers do not move."""
    from scipy.special import ndtr

    from race_cli.stats.gatekeeping import _GH, _chi_nodes

    def general(c, lam, df):
        u, wu = _GH
        wu = wu / wu.sum()
        sd = np.sqrt(1.0 - lam ** 2)
        s, ws = (np.ones(1), np.ones(1)) if not np.isfinite(df) else _chi_nodes(float(df), 96 if df < 4 else 48)
        z = (c * s[:, None, None] - lam[None, None, :] * u[None, :, None]) / sd[None, None, :]
        return float(ws @ np.prod(ndtr(z), axis=2) @ wu)

    rng = np.random.default_rng(3)
    for _ in range(400):
        k, lam = int(rng.integers(2, 12)), float(rng.choice([0.0, rng.uniform(0, 0.98)]))
        df, c = float(rng.choice([np.inf, rng.uniform(1.2, 400)])), float(rng.uniform(-1, 6))
        assert dunnett_cdf(c, np.full(k, lam), df) == general(c, np.full(k, lam), df)


def test_dunnett_quantile_between_one_test_and_bonferroni():
    # k = 1: the t quantile; equal variances (ρ = 1/2) at 20 df, 5 arms one-sided 5%: scipy's multivariate t
    # puts 5% above the returned value (2.389)
    assert dunnett_quantile(0.025, np.array([0.6]), 3.0) == pytest.approx(stats.t.ppf(0.975, 3.0), abs=1e-9)
    q = dunnett_quantile(0.05, np.full(5, 0.5 ** 0.5), 20.0)
    corr = np.full((5, 5), 0.5) + 0.5 * np.eye(5)
    assert 1 - stats.multivariate_t(shape=corr, df=20).cdf(np.full(5, q), maxpts=500_000, random_state=1) == \
        pytest.approx(0.05, abs=5e-4)
    for df in (2.0, 5.0, np.inf):
        q = dunnett_quantile(0.01, np.full(6, 0.7), df)
        one = stats.t.ppf(0.99, df) if np.isfinite(df) else stats.norm.ppf(0.99)
        bonf = stats.t.ppf(1 - 0.01 / 6, df) if np.isfinite(df) else stats.norm.ppf(1 - 0.01 / 6)
        assert one < q < bonf
    # its error on simulated many-to-one t statistics of known truth: P(max T > c) = the level
    rng = np.random.default_rng(2)
    lam, df = np.array([0.5, 0.7, 0.6]), 4.0
    u, e = rng.standard_normal((200_000, 1)), rng.standard_normal((200_000, 3))
    s = np.sqrt(rng.chisquare(df, (200_000, 1)) / df)
    t = (lam * u + np.sqrt(1 - lam ** 2) * e) / s
    c = dunnett_quantile(0.01, lam, df)
    assert np.mean(t.max(axis=1) > c) == pytest.approx(0.01, abs=0.0008)
