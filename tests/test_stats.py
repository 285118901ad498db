"""race_cli/stats/: quantiles against scipy, the moderated seed variance, and the decisions' error rates on
simulated statistics with known truth (seconds, seeded)."""

from __future__ import annotations

import dataclasses

import math

import numpy as np
import pytest
from scipy.stats import studentized_range

from race_cli.stats import decisions as D
from race_cli.stats import quantiles as Q
from race_cli.stats import variance as V
from race_cli.stats.power import Design, separation_power


def test_the_bracketed_bisection_is_the_plain_one_bit_for_bit():
    """_range_q_of decides the bisection's steps outside a bracket around the quantile by monotonicity instead
    of evaluating range_cdf there: the 50-step bisection written out here (the reference) gives the same float."""
    def plain(level, k, df):
        lo, hi = 1e-3, 3999.0
        for _ in range(50):
            mid = math.sqrt(lo * hi)
            lo, hi = (mid, hi) if Q.range_cdf(mid, k, df) < level else (lo, mid)
        return math.sqrt(lo * hi)

    rng = np.random.default_rng(5)
    for _ in range(150):
        level = float(rng.choice([0.95, 0.99, 0.9999, rng.uniform(0.5, 0.99999)]))
        k = int(rng.integers(3, 20))
        df = Q._sig(float(rng.choice([rng.uniform(0.6, 10), rng.uniform(10, 500), math.inf])))
        assert Q._range_q_of(level, k, df) == plain(level, k, df), (level, k, df)


def test_t_quantile_of_many_df_is_elementwise_stdtrit():
    """A simulation's thousands of df (a few distinct) are evaluated once each: the same floats as scipy's
    stdtrit elementwise, NaN, 0, inf and the array's shape included."""
    from scipy.special import stdtrit

    rng = np.random.default_rng(4)
    for shape in [(2000, 4), (65,), (30, 3, 3)]:
        for df in (rng.choice([1.5, 3.0, 7.25, math.inf, math.nan, 0.0, 120.0], size=shape),
                   rng.uniform(0.5, 50, size=shape)):
            level = float(rng.uniform(0.5, 0.9999))
            want = stdtrit(np.where(np.isfinite(df), df, 1e300), level)
            assert np.array_equal(Q.t_quantile(level, df), want, equal_nan=True)


@pytest.mark.parametrize("k,df", [(3, 3), (3, 6), (6, 10), (12, 3), (3, 199), (3, math.inf)])
def test_range_quantile_matches_scipy(k, df):
    assert Q.range_quantile(0.95, k, df) == pytest.approx(studentized_range.ppf(0.95, k, df), rel=2e-5)


def test_range_of_two_is_t():
    # |Z1 − Z2|/s = √2 |T|: q(0.95; 2, 5) = √2 · t_{0.975, 5} = √2 · 2.5706
    assert Q.range_quantile(0.95, 2, 5) == pytest.approx(math.sqrt(2) * 2.570582, rel=1e-6)


def test_dunnett_one_sided_matches_simulation():
    rng = np.random.default_rng(1)
    z = rng.standard_normal((200_000, 3))
    s = np.sqrt(rng.chisquare(10, 200_000) / 10)
    t = ((z[:, 1:] - z[:, [0]]) / math.sqrt(2) / s[:, None]).max(axis=1)
    from race_cli.stats.gatekeeping import dunnett_quantile  # the one Dunnett the report uses (λ² = ρ = 0.5)

    lam = np.full(2, math.sqrt(0.5))
    assert dunnett_quantile(0.05, lam, 10) == pytest.approx(np.quantile(t, 0.95), abs=0.02)
    assert dunnett_quantile(0.05, lam, math.inf) == pytest.approx(1.916, abs=0.005)  # Dunnett's table


def test_t_functions_are_scipy():
    assert Q.t_quantile(0.975, 3) == pytest.approx(3.182446, rel=1e-6)
    assert Q.t_sf(1.959964, math.inf) == pytest.approx(0.025, abs=1e-6)


def test_prior_of_equal_variances_is_the_pool():
    # 40 regimes of 2 seeds with one common variance 4: the spreads look like χ²_1 draws, d0 = inf (or
    # large) and s0² close to the pooled 4
    rng = np.random.default_rng(0)
    s2 = 4.0 * rng.chisquare(1, 40)
    p = V.fit_prior(s2, np.ones(40))
    assert p.df_total == 40
    assert p.d0 > 10 and p.s0_sq == pytest.approx(4.0, rel=0.45)
    v, df = V.moderate(s2, np.ones(40), p)
    assert np.all(df <= 40)


def test_prior_sees_heterogeneity_and_flags_an_outlier():
    rng = np.random.default_rng(2)
    true = np.exp(rng.normal(0, 1.0, 60))  # variances spread over e^±2: the prior's d0 is small
    d = np.full(60, 3.0)
    s2 = true * rng.chisquare(3, 60) / 3
    p = V.fit_prior(s2, d)
    assert 1.0 < p.d0 < 20
    v, df = V.moderate(s2, d, p)
    # shrunk between each regime's own spread and the prior
    assert np.all((v - s2) * (p.s0_sq - s2) >= -1e-12)
    s2[0] = 1e4
    assert V.outliers(s2, d, V.fit_prior(s2, d))[0]


def _pairs(R, v, df_seed, n_sim, share_seed=0.6):
    off = 1 - np.eye(R)
    item = np.broadcast_to((1 - share_seed) * v * off, (n_sim, R, R))
    seed = np.broadcast_to(share_seed * v * off, (n_sim, R, R))
    return item, np.zeros((n_sim, R, R)), seed, np.full((n_sim, R, R), df_seed)


@pytest.mark.parametrize("R,df", [(3, 6), (6, 12)])
def test_regwq_familywise_error_under_all_equal(R, df):
    # all regimes equal; the seed part (60%) estimated with df degrees of freedom; item part exact.
    rng = np.random.default_rng(R)
    n = 20_000
    v = 1.0
    scale = rng.chisquare(df, n) / df
    point = math.sqrt(v / 2) * (math.sqrt(0.4) * rng.standard_normal((n, R)) + 0)  # item part of the means
    point = math.sqrt(v / 2) * rng.standard_normal((n, R))
    item, resid, seed, dfs = _pairs(R, v, df, n)
    seed = seed * scale[:, None, None]
    worse = D.worse_than_best(point, item, resid, seed, math.inf, math.inf, dfs)
    rate = worse.any(axis=1).mean()
    assert 0.02 < rate <= 0.055  # nominal 0.05 (the per-part bound is a little conservative)


def test_regwq_by_hand_and_batched_as_one_by_one():
    # three regimes, every gap with variance 1 (item part only, df inf): the range of all three is
    # tested first at q(0.95; 3, inf)/√2 = 3.3145/√2 = 2.344, then each adjacent pair (p = R − 1: full
    # level) at q(0.95; 2, inf)/√2 = 1.960, and only inside a set already called unequal
    R = 3
    off = 1.0 - np.eye(R)
    args = (off, np.zeros((R, R)), np.zeros((R, R)), math.inf, math.inf, np.zeros((R, R)))
    worse = lambda pt: D.worse_than_best(np.array(pt), *args).tolist()
    assert worse([0.0, -2.0, -2.5]) == [False, True, True]  # 2.5 > 2.344, then 2.0 > 1.960
    assert worse([0.0, -1.9, -2.5]) == [False, False, True]  # 1.9 < 1.960: only the last is worse
    assert worse([0.0, -1.9, -2.3]) == [False, False, False]  # 2.3 < 2.344: the range stops it all
    assert worse([-2.5, 0.0, -2.0]) == [True, False, True]  # the order of the regimes does not matter
    # a batch (leading axes, parts differing per pilot) gives what each pilot gives alone
    rng = np.random.default_rng(4)
    pts = rng.normal(0, 2, (2, 5, R))
    item = rng.uniform(0.2, 1.0, (2, 5, R, R))
    item = (item + np.swapaxes(item, -1, -2)) / 2 * off
    seed = rng.uniform(0, 0.5, (2, 5, R, R)) * off
    seed = (seed + np.swapaxes(seed, -1, -2)) / 2
    dfs = np.full((2, 5, R, R), 4.0)
    batch = D.worse_than_best(pts, item, np.zeros_like(item), seed, 199.0, math.inf, dfs)
    alone = np.array([[D.worse_than_best(pts[a, b], item[a, b], np.zeros((R, R)), seed[a, b], 199.0, math.inf,
                                         dfs[a, b]) for b in range(5)] for a in range(2)])
    assert batch.shape == (2, 5, R) and batch.any() and not batch.all()
    assert np.array_equal(batch, alone)


def test_holm_by_hand():
    # three gains with se 1 (item part only, df inf): one-sided familywise 2.5%: 1 − 0.025/3 → z 2.394,
    # then 1 − 0.025/2 → 2.241, then 1.960
    p = V.Parts(np.ones(3), np.zeros(3), np.zeros(3), math.inf, math.inf, np.zeros(3))
    assert D.holm_above(np.array([2.5, 2.3, 2.0]), p, 0.025).tolist() == [True, True, True]
    assert D.holm_above(np.array([2.5, 2.2, 2.0]), p, 0.025).tolist() == [True, False, False]
    assert D.holm_above(np.array([2.3, 2.2, 2.0]), p, 0.025).tolist() == [False, False, False]


def test_per_part_half_width():
    # item part 1 at df inf (z 1.96), seed part 1 at df 3 (t 3.182): sqrt(1.96² + 3.182²) = 3.737
    p = V.Parts(np.ones(1), np.zeros(1), np.ones(1), math.inf, math.inf, np.array([3.0]))
    iv = D.intervals(np.zeros(1), p)
    assert iv.high[0] == pytest.approx(math.sqrt(1.959964 ** 2 + 3.182446 ** 2), rel=1e-5)


def test_noise_without_its_own_pool_pools_the_same():
    # the ranking skips a condition's own prior fit (a sweep pool replaces it): pooled by the same prior,
    # both give the same noise, field by field
    rng = np.random.default_rng(5)
    codes = np.repeat(np.arange(4), 2)
    table = (rng.random((8, 30)) < 0.6).astype(float)
    own, bare = V.noise_of(codes, table, 4), V.noise_of(codes, table, 4, own_pool=False)
    assert own.has_seed_noise and not bare.has_seed_noise and bare.prior is None
    prior = V.fit_prior(rng.chisquare(1, 12) * 1e-3, np.ones(12), key="sweep")
    a, b = own.pooled(prior), bare.pooled(prior)
    for f in ("m", "job_var", "seed_var", "seed_df", "outlier"):
        assert np.array_equal(getattr(a, f), getattr(b, f), equal_nan=True), f
    assert (a.ms_resid, a.df_resid, a.prior) == (b.ms_resid, b.df_resid, b.prior)


def test_homogeneity_and_outlier_tails_are_scipy_stats():
    from scipy import stats

    s2, d = np.array([0.5, 1.0, 2.0, 4.0]), np.array([1.0, 2.0, 3.0, 1.0])
    pooled = float((d * s2).sum() / d.sum())
    G, tot = 4, d.sum()
    m = tot * math.log(pooled) - float((d * np.log(s2)).sum())
    c = 1 + ((1 / d).sum() - 1 / tot) / (3 * (G - 1))
    assert V.homogeneity_p(np.log(s2), d, pooled) == pytest.approx(stats.chi2.sf(m / c, G - 1), rel=1e-12)
    # equal spreads: M is 0 up to rounding, p = 1 (not nan, which would read as "heterogeneous")
    same = np.full(6, 0.3)
    assert V.homogeneity_p(np.log(same), np.ones(6), 0.3) == 1.0
    prior = V.SeedPrior("k", 1.0, 5.0, 10.0, 4)
    big = np.array([1.0, 30.0, 0.2, 9.0])
    p = stats.f.sf(big, np.ones(4), 5.0)
    assert V.outliers(big, np.ones(4), prior).tolist() == (p < V.OUTLIER_ALPHA / 4).tolist()
    assert V.outliers(big, np.ones(4), prior).any()


def test_noise_of_pools_a_condition_and_moderates_by_a_sweep_prior():
    # two regimes × two seeds, two items: job means 0.5, 0.7 | 0.2, 0.2 → spreads 0.02, 0
    codes = np.array([0, 0, 1, 1])
    table = np.array([[0.4, 0.6], [0.6, 0.8], [0.2, 0.2], [0.1, 0.3]])
    nz = V.noise_of(codes, table)
    assert nz.job_var.tolist() == pytest.approx([0.02, 0.0])
    prior = V.SeedPrior("x", 0.01, math.inf, 10.0, 10)
    pooled = nz.pooled(prior)
    assert pooled.seed_var.tolist() == [0.01, 0.01]
    assert pooled.seed_df == pytest.approx([1 / (1 / 10 + 1 / V.HETERO_DF)] * 2)  # pooled, and how far a regime may differ
    p = V.contrast_parts(pooled, np.array([[1.0, -1.0]]))
    # seed part Σ c²/n_r s̃² = (1/2 + 1/2)·0.01; item part var_i of (0.5−0.15, 0.7−0.25) / 2
    assert p.seed[0] == pytest.approx(0.01)
    assert p.item[0] == pytest.approx(np.var([0.35, 0.45], ddof=1) / 2)
    assert p.df_seed[0] == pytest.approx(pooled.seed_df[0])


def test_winners_curse_under_a_tie_and_far_apart():
    dev = np.full(3, 0.01)
    # far apart: τ² large, almost no shrinkage
    assert D.winners_curse(np.array([1.0, 0.0, -1.0]), dev) < 0.02
    # within noise: shrunk to the mean, the whole excess m_best − m̄ is the curse
    assert D.winners_curse(np.array([0.05, 0.0, -0.05]), dev) == pytest.approx(0.05)


def test_separation_power_rises_with_the_gap_and_pool():
    d = Design(200, 4, 2, 3, 0.02, pool_df=6)
    assert separation_power(d, 0.03, n_sim=2000) < 0.2 < separation_power(d, 0.12, n_sim=2000)
    assert separation_power(d, 0.08, n_sim=2000) < separation_power(Design(200, 4, 2, 3, 0.02, pool_df=60), 0.08,
                                                                    n_sim=2000)
    assert separation_power(Design(200, 4, 1, 3, 0.02), 0.5) == 0.0  # one seed: nothing testable


def test_decisions_of_many_conditions_at_once_are_the_one_by_one_values():
    # the ranking decides every condition of one shape in one stack: the same arrays, bit for bit, as each
    # condition alone; shapes mixed (regimes, items, one seed, job-level values), order kept
    rng = np.random.default_rng(11)
    prior = V.fit_prior(rng.chisquare(1, 20) * 4e-4, np.ones(20), key="pool")

    def cond(R, seeds, n):
        codes = np.repeat(np.arange(R), seeds)
        acc = rng.uniform(0.3, 0.7, R)[codes]
        table = (rng.random((R * seeds, n)) < acc[:, None]).astype(float) if n > 1 else acc + rng.normal(0, .02, R * seeds)
        x = V.noise_of(codes, table, R)
        return x.pooled(prior) if seeds > 1 else x

    noises = [cond(3, 2, 50), cond(2, 3, 40), cond(3, 2, 50), cond(4, 2, 50), cond(3, 1, 50), cond(3, 2, 1),
              cond(3, 2, 50)]
    many, one = D.rank_decisions_many(noises), [D.rank_decisions(x) for x in noises]
    gmany, gone = D.gain_decisions_many(noises), [D.gain_decisions(x) for x in noises]
    for a, b in list(zip(many, one)) + list(zip(gmany, gone)):
        assert type(a) is type(b)
        for k in (f.name for f in dataclasses.fields(a)):
            if k == "parts":
                for f in ("item", "resid", "seed", "df_seed"):
                    assert np.array_equal(getattr(a[k], f), getattr(b[k], f), equal_nan=True), f
            else:
                assert np.array_equal(a[k], b[k], equal_nan=True), k
    assert sum(len(idx) for idx, _ in D._stacks(noises)) == 7 and len(D._stacks(noises)) == 5  # 3 alike
    assert not many[4].testable and many[0].testable  # one seed: nothing decided
    assert many[0]["mean"] is many[0].mean  # read by name too, as the dicts it replaced
