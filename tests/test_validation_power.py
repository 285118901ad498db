"""The validation's seed plan averages its power over the pilot's uncertainty about its own variance
estimates (stats/validation_power: PlannedParts, confirm_power), checked against reference integrals."""

import math

import numpy as np
import pytest
from scipy import integrate
from scipy.stats import chi2, nct, norm, t

from race_cli.stats import validation_power as VP


def test_expected_power_over_the_pilots_seed_variance_matches_the_integral():
    # The seed part alone (one value per job, no items): job-mean variances 4e-4 in both regimes, n = 4
    # seeds -> planned seed part 8e-4/4 = 2e-4 (se 0.01414); pilot prior d0 = 3 -> the test's df
    # min(3 + 4 − 1, 2·3) = 6. Known truth: the power at Δ = 0.04 is the noncentral t's,
    # P(T_{6, 0.04/0.01414} > t_{0.975, 6}) = 0.657.
    pp = VP.PairParts(item_var=0.0, seed_var=(4e-4, 4e-4), resid_var=0.0, n_items=1, prior_d0=3.0, seed_df=10.0)
    q = VP.planned_parts(pp, 4)
    assert (q.seed[0], q.df_seed[0], q.seed_df_pilot) == pytest.approx((2e-4, 6.0, 10.0))
    tq, gap, v = t.ppf(0.975, 6), 0.04, 2e-4
    known = nct.sf(tq, 6, gap / math.sqrt(v))
    # The pilot estimated that 2e-4 with 10 df: the truth is 2e-4 · 10/X, X ~ χ²_10 (the scaled inverse χ²),
    # and the expected power is ∫ P(T_{6, Δ/sqrt(2e-4 · 10/x)} > t_{0.975, 6}) χ²_10(x) dx.
    expected, _ = integrate.quad(lambda x: nct.sf(tq, 6, gap / math.sqrt(v * 10 / x)) * chi2.pdf(x, 10), 0, np.inf)
    assert expected == pytest.approx(0.619, abs=0.001) and known == pytest.approx(0.657, abs=0.001)
    assert VP.confirm_power(gap, q, n_sim=200_000) == pytest.approx(expected, abs=0.004)
    # the same parts taken as the truth (a plain Parts, as the plan did before) promise the larger figure
    plain = VP.Parts(q.item, q.resid, q.seed, q.df_item, q.df_resid, q.df_seed)
    assert VP.confirm_power(gap, plain, n_sim=200_000) == pytest.approx(known, abs=0.004)


def test_a_pilot_that_knows_its_components_plans_as_before():
    # per-regime seed variances (a finite prior d0) and infinite df everywhere: no truth is drawn, the same
    # random numbers, the same power to the last digit as the parts taken as the truth
    pp = VP.PairParts(item_var=0.01, seed_var=(4e-4, 4e-4), resid_var=0.2, n_items=400, prior_d0=5.0)
    q = VP.planned_parts(pp, 4)
    plain = VP.Parts(q.item, q.resid, q.seed, q.df_item, q.df_resid, q.df_seed)
    assert VP.confirm_power(0.04, q) == VP.confirm_power(0.04, plain)
    assert VP.detectable_gap(q) == VP.detectable_gap(plain)


def test_a_pooled_seed_variance_reads_the_pool_while_the_pairs_own_stray_from_it():
    # The pilot's pool has one variance (d0 = inf), so the validation's test will read its own pool's: the
    # seed part alone, job-mean variances 4e-4, n = 4, a pool so large (1e7 df) that its estimate is exact:
    # the half-width is t_{0.975, h}·0.01414 (h = 1/(1/1e7 + 1/HETERO_DF) ≈ HETERO_DF, the test's df), while
    # the pair's own variance is 2e-4·(H_b + H_c)/2, H ~ χ²_h/h each: 2e-4·X/(2h), X ~ χ²_2h.
    # P(confirmed) = ∫ Φ((Δ − half)/sqrt(2e-4·x/(2h))) χ²_2h(x) dx.
    pp = VP.PairParts(item_var=0.0, seed_var=(4e-4, 4e-4), resid_var=0.0, n_items=1)
    q = VP.planned_parts(pp, 4, 2, pool_df=1e7)
    h, v, gap = VP.HETERO_DF, 2e-4, 0.04
    assert q.pooled and q.df_seed[0] == pytest.approx(h, rel=1e-5)
    half = t.ppf(0.975, q.df_seed[0]) * math.sqrt(v)
    lo, hi = chi2.ppf([1e-12, 1 - 1e-12], 2 * h)
    expected, _ = integrate.quad(lambda x: norm.cdf((gap - half) / math.sqrt(v * x / (2 * h))) * chi2.pdf(x, 2 * h),
                                 lo, hi, limit=200)
    assert VP.confirm_power(gap, q, n_sim=200_000) == pytest.approx(expected, abs=0.003)  # binomial sd 0.001
    # the same parts taken as the truth, the test's estimate at its own df around it: a smaller power here
    plain = VP.Parts(q.item, q.resid, q.seed, q.df_item, q.df_resid, q.df_seed)
    assert VP.confirm_power(gap, plain, n_sim=200_000) < expected - 0.01


def test_expected_power_over_the_pilots_item_by_regime_variance_matches_the_integral():
    # The item part alone uncertain: 200 items, residual 0.0625 (4 samples at p = 0.5), the pilot's
    # item × regime variance 0.005 net of its residual share 0.0625·(1/2 + 1/2) = 0.0625 (its var_i of the
    # per-item gap 0.0675 on 199 df); seed parts 7.4e-4 per regime, known, at a df so large the test's
    # quantile is the normal's (prior_d0 = pool df = 1e7).
    k, e, iv, c, sv, n = 200, 0.0625, 0.005, 0.0625, 7.4e-4, 4
    pp = VP.PairParts(item_var=iv, seed_var=(sv, sv), resid_var=e, n_items=k, prior_d0=1e7, item_df=k - 1.0,
                      item_resid=c)
    q = VP.planned_parts(pp, n, 2, pool_df=1e7)
    qi, qe, qs = t.ppf(0.975, k - 1), t.ppf(0.975, 2 * (n - 1) * (k - 1)), norm.ppf(0.975)
    resid, seed = 2 * e / (n * k), 2 * sv / n  # 1.5625e-4, 3.7e-4

    def power(item_var: float, gap: float) -> float:  # the test, its parts at their expectation given the truth
        item = (item_var + 2 * e / n) / k
        h = math.sqrt(qi ** 2 * item - qe ** 2 * resid + qs ** 2 * seed)
        return norm.sf((h - gap) / math.sqrt(item - resid + seed))

    gap = 0.055
    # the truth's item × regime variance: max(0, 0.0675 · 199/X − 0.0625), X ~ χ²_199
    lo, hi = chi2.ppf([1e-12, 1 - 1e-12], k - 1)  # where χ²_199 has its mass (quad over [0, inf) misses it)
    expected, _ = integrate.quad(lambda x: power(max(0.0, (iv + c) * (k - 1) / x - c), gap) * chi2.pdf(x, k - 1),
                                 lo, hi, limit=200)
    assert power(iv, gap) == pytest.approx(0.789, abs=0.001) and expected == pytest.approx(0.783, abs=0.001)
    assert VP.confirm_power(gap, q, n_sim=200_000) == pytest.approx(expected, abs=0.003)  # binomial sd 0.001


def test_less_power_at_the_same_seeds_when_the_pilot_knows_its_variance_less():
    # the default pilot's shape: one pooled s0² from 24 one-df spreads, the item × regime variance from 199;
    # 8 conditions × 2 validated regimes pool 16·(n − 1) df. Against the pilot's estimates taken as known,
    # every seed count whose power is above a half (where power is concave: 4 seeds and up here) buys less
    # expected power, so the plan needs at least as many seeds for a gap of 0.05 and confirms a larger gap
    # with 80% power at 8
    base = dict(item_var=0.005, seed_var=(7.4e-4, 7.4e-4), resid_var=0.0625, n_items=200)
    known = VP.PairParts(**base)
    unsure = VP.PairParts(**base, seed_df=24.0, item_df=199.0, item_resid=0.0625)
    plan = lambda pp, n: VP.planned_parts(pp, n, 2, 16.0 * (n - 1))
    for n in range(4, 9):
        assert VP.confirm_power(0.05, plan(unsure, n)) < VP.confirm_power(0.05, plan(known, n))
    a = VP.seeds_for_power(lambda n: plan(known, n), 0.05)
    b = VP.seeds_for_power(lambda n: plan(unsure, n), 0.05)
    assert b.seeds >= a.seeds and not b.capped and b.power_at_gap >= 0.8
    assert b.seeds == 2 or VP.confirm_power(0.05, plan(unsure, b.seeds - 1)) < 0.8
    assert VP.detectable_gap(plan(unsure, 8)) > VP.detectable_gap(plan(known, 8))
