"""stats/race.py: the schedule, the α split, the per-look decision on hand-built conditions (unequal seed
counts included), and a small calibration of the decisions on simulated null conditions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from race_cli.errors import RaceError
from race_cli.stats import decisions as D
from race_cli.stats import variance as V
from race_cli.stats.quantiles import range_quantile
from race_cli.stats.race import (CALIBRATED_FACTOR, DEFAULT_LOOKS, SPENDINGS, Schedule, active_noise, decide_look,
                                 default_spending, make_schedule, pair_bounds,
                                 take_regime)

# --- the schedule ------------------------------------------------------------------------------------


@pytest.mark.parametrize("looks", [(), (1, 2), (3, 2), (2, 2, 3), (2, 2.5)])
def test_schedule_refuses_bad_looks(looks):
    with pytest.raises(RaceError, match="looks"):
        Schedule(looks)


@pytest.mark.parametrize("kw, word", [({"alpha": 0.0}, "alpha"), ({"alpha": 0.7}, "alpha"), ({"margin": 0.0}, "margin"),
                                      ({"margin": 1.5}, "margin"), ({"spending": "pocock"}, "spending")])
def test_schedule_refuses_bad_settings(kw, word):
    with pytest.raises(RaceError, match=word):
        Schedule((2, 3), **kw)


def test_schedule_json_round_trip_and_refusals():
    s = Schedule((2, 3, 4), 0.05, 0.08, "bonferroni-obf")
    assert Schedule.from_json(s.to_json()) == s
    assert Schedule.from_json({"looks": [2, 4]}) == Schedule((2, 4))
    for bad in ([2, 3], {"looks": "2,3"}, {"looks": [2, 3], "alpha": "0.05"}, {"looks": [2, 3], "magrin": 0.1}, {}):
        with pytest.raises(RaceError):
            Schedule.from_json(bad)


def test_make_schedule():
    assert make_schedule(4).looks == (2, 3, 4)
    assert make_schedule(6).looks == (2, 3, 4, 6)
    assert make_schedule(9).looks == (2, 3, 4, 6, 9)
    assert make_schedule(2).looks == (2,)  # one look: a fixed design
    assert make_schedule(5, first=3).looks == (3, 4, 5)
    assert make_schedule(max(DEFAULT_LOOKS)).looks == DEFAULT_LOOKS
    with pytest.raises(RaceError):
        make_schedule(1)


@pytest.mark.parametrize("spending", SPENDINGS)
@pytest.mark.parametrize("looks", [(2,), (2, 3), (2, 3, 4), (2, 3, 4, 6, 9)])
def test_spending_sums_to_alpha(spending, looks):
    s = Schedule(looks, 0.05, 0.08, spending)
    levels = [s.level(k) for k in range(len(looks))]
    assert all(x > 0 for x in levels)
    # the union bound: Σ α_k = α; the calibrated split spends factor·α nominally (valid by measurement only)
    total = CALIBRATED_FACTOR * 0.05 if spending == "calibrated" else 0.05
    assert sum(levels) == pytest.approx(total, abs=1e-12)
    assert [s.spent(k) for k in range(len(looks))] == pytest.approx(np.cumsum(levels).tolist())
    assert s.spent(-1) == 0.0
    with pytest.raises(IndexError):
        s.level(len(looks))


def test_spending_values_by_hand():
    assert Schedule((2, 3, 4)).level(1) == pytest.approx(0.05 / 3)
    # O'Brien–Fleming type: 2 − 2Φ(z_0.975/√t) at t = 2/4 and 3/4; Φ by erf
    phi = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))
    obf = Schedule((2, 3, 4), spending="bonferroni-obf")
    assert obf.spent(0) == pytest.approx(2 - 2 * phi(1.959964 / math.sqrt(0.5)), rel=1e-5)  # 0.00557
    assert obf.spent(1) == pytest.approx(2 - 2 * phi(1.959964 / math.sqrt(0.75)), rel=1e-5)  # 0.02363
    poc = Schedule((2, 3, 4), spending="bonferroni-pocock")
    assert poc.spent(0) == pytest.approx(0.05 * math.log(1 + (math.e - 1) * 0.5))  # 0.03101


def test_the_calibrated_split_is_the_default_only_where_it_was_measured():
    """docs/measurements/race.md measured the calibrated split at looks 2-3-4, α 0.05, with 3 and 6 regimes:
    there it is the default; one more regime, another α or another look count falls back to Bonferroni."""
    assert default_spending((2, 3, 4), 0.05, 3) == "calibrated"
    assert default_spending([2, 3, 4], 0.05, 6) == "calibrated"
    assert default_spending((2, 3, 4), 0.05, 7) == "bonferroni"
    assert default_spending((2, 3, 4), 0.10, 3) == "bonferroni"
    assert default_spending((2, 3, 4, 6), 0.05, 3) == "bonferroni"
    assert default_spending((2, 4), 0.05, 3) == "bonferroni"


# --- the decision on hand-built conditions ----------------------------------------------------------


def _noise(values: list[list[float]], items: int = 0, rng=None):
    """A condition from per-regime job means (job-level values), or with `items` per-item columns around them."""
    codes = np.concatenate([[r] * len(v) for r, v in enumerate(values)])
    vals = np.concatenate(values)
    if items:
        noise = rng.normal(0, 0.02, (len(vals), items))
        noise -= noise.mean(axis=1, keepdims=True)
        return V.noise_of(codes, vals[:, None] + noise)
    return V.noise_of(codes, vals)


def test_winner_equivalent_undecided_and_continue():
    s = Schedule((2, 3, 4), 0.05, 0.08)
    winner = _noise([[0.60, 0.61, 0.60], [0.40, 0.41, 0.40], [0.40, 0.40, 0.41]])
    equiv = _noise([[0.50, 0.51, 0.49], [0.50, 0.49, 0.51], [0.505, 0.495, 0.50]])  # gaps <= 0.005, sd 0.01
    wide = _noise([[0.50, 0.60, 0.40], [0.52, 0.42, 0.62], [0.40, 0.50, 0.30]])
    w, e, u = decide_look([winner, equiv, wide], [None] * 3, s, 1)
    assert (w.state, w.best, w.worse, w.active) == ("winner", 0, (1, 2), ())
    assert e.state == "equivalent" and e.active == () and e.worse == ()
    # sd 0.1 between seeds at 3 seeds: nothing can be separated or shown within 0.08 at the cap of 4
    assert u.state == "undecided" and u.power < 0.8 and "power" in u.reason
    (last,) = decide_look([wide], [None], s, 2)
    assert last.state == "undecided" and "cap" in last.reason  # nothing continues past the cap
    # a 0.04 gap with sd 0.01 between seeds: neither shown nor hopeless at 2 seeds
    mid = _noise([[0.54, 0.55], [0.50, 0.51], [0.51, 0.50]])
    (c,) = decide_look([mid], [None], s, 0)
    assert c.state == "continue" and c.power >= 0.8 and set(c.active) == {0, 1, 2}


def test_the_gain_call_sits_beside_the_allocation_call_never_instead():
    """A winner whose regimes did not beat their start stays the winner (the allocation question), with
    gain "no_gain" beside it and the best's measured gain; with a clear gain it reads "gain"; no start: None."""
    s = Schedule((2, 3, 4), 0.05, 0.08)
    winner = _noise([[0.60, 0.61, 0.60], [0.40, 0.41, 0.40], [0.40, 0.40, 0.41]])
    flat = _noise([[0.00, 0.01, -0.01], [0.0, 0.01, -0.01], [0.01, 0.0, -0.01]])  # gains over the start ~0
    big = _noise([[0.20, 0.21, 0.20], [0.10, 0.11, 0.10], [0.10, 0.10, 0.11]])
    (a,) = decide_look([winner], [flat], s, 1)
    (b,) = decide_look([winner], [big], s, 1)
    (c,) = decide_look([winner], [None], s, 1)
    assert (a.state, a.gain, a.best) == ("winner", "no_gain", 0)
    assert a.best_gain == pytest.approx(0.0)  # (0.00 + 0.01 − 0.01) / 3
    assert (b.state, b.gain) == ("winner", "gain") and b.best_gain == pytest.approx(0.61 / 3)
    assert (c.state, c.gain) == ("winner", None) and math.isnan(c.best_gain)


def test_drops_winner_and_intervals_are_one_claim():
    """Every regime the look drops has its printed best − regime interval above 0, and every regime it keeps
    has 0 inside (or below) its interval: one set of simultaneous intervals decides and is printed. Checked on
    600 simulated conditions at two truths, where the REGWQ drops and MCB intervals used before disagreed."""
    from race_cli.stats.race_sim import condition_scores

    rng = np.random.default_rng(5)
    s = Schedule((3,), 0.05, 0.08)
    for gap in (0.0, 0.05):
        runs = [condition_scores(rng, 3, 3, 100, 4, gap, 0.02) for _ in range(300)]
        codes = np.repeat(np.arange(3), 3)
        noises = [V.noise_of(codes, r.reshape(9, -1), 3) for r in runs]
        decs = decide_look(noises, [None] * len(noises), s, 0)
        for d in decs:
            for i in range(3):
                if i == d.best:
                    continue
                assert (i in d.worse) == (d.gap_lo[i] > 0)
            if d.state == "winner":
                assert all(d.gap_lo[i] > 0 for i in range(3) if i != d.best)
            if d.state == "equivalent":
                assert all(d.gap_hi[i] < s.margin for i in range(3) if i not in d.worse)
        assert sum(len(d.worse) for d in decs) > 0  # the check saw drops, not only empty records


def test_unequal_seed_counts_use_each_pair_s_own_standard_error():
    # regimes with 5, 3 and 2 seeds (job-level values): the gap's seed part is s̃²(1/n_i + 1/n_j) (Tukey–Kramer)
    vals = [[0.50, 0.52, 0.48, 0.51, 0.49], [0.45, 0.47, 0.43], [0.46, 0.44]]
    noise = _noise(vals)
    assert noise.n_seeds.tolist() == [5, 3, 2]
    # the condition's own pool: 3 spreads (4 + 2 + 1 df) with Bartlett's p >= 0.05 -> one pooled variance
    d = np.array([4.0, 2.0, 1.0])
    s2 = np.array([np.var(v, ddof=1) for v in vals])
    pooled = float((d * s2).sum() / d.sum())
    df = 1 / (1 / 7 + 1 / V.HETERO_DF)
    pp = V.contrast_parts(noise, D.pair_contrasts(3))
    for i, j in [(0, 1), (0, 2), (1, 2)]:
        assert pp.seed[i * 3 + j] == pytest.approx(pooled * (1 / noise.n_seeds[i] + 1 / noise.n_seeds[j]))
        assert pp.df_seed[i * 3 + j] == pytest.approx(df)
    h = pair_bounds(pp, 3, 0.05)
    q = range_quantile(0.95, 3, df) / math.sqrt(2)  # Tukey–Kramer: the studentized range of 3 means
    assert h[0, 2] == pytest.approx(q * math.sqrt(pooled * (1 / 5 + 1 / 2)))
    assert h[0, 1] == pytest.approx(q * math.sqrt(pooled * (1 / 5 + 1 / 3)))
    (dec,) = decide_look([noise], [None], Schedule((2, 5), 0.05, 0.08), 1)  # the cap: α_1 = 0.025
    q1 = range_quantile(1 - 0.025, 3, df) / math.sqrt(2)
    assert dec.gap_hi[2] - dec.gap[2] == pytest.approx(q1 * math.sqrt(pooled * (1 / 5 + 1 / 2)))
    assert dec.gap[1] - dec.gap_lo[1] == pytest.approx(q1 * math.sqrt(pooled * (1 / 5 + 1 / 3)))
    # the subset the race keeps: regimes 0 and 2, their moderated variances kept
    sub = active_noise(noise.pooled(V.fit_prior(noise.job_var, noise.job_df)), [0, 2])
    assert sub.n_seeds.tolist() == [5, 2] and sub.seed_var.tolist() == pytest.approx([pooled, pooled])


# --- calibration: can fail ----------------------------------------------------------------------------


def test_small_calibration_on_null_and_shifted_conditions():
    """400 all-equal conditions (item × regime noise, heterogeneous seed sd 0.01-0.03, 100 items, seed pools
    of 2 conditions): the look's claims are wrong in at most α of them (+3 binomial sd), and the
    (Tukey–Kramer) intervals for best − each cover the truth in >= 0.93 when one regime is better by 0.05."""
    from race_fixture import simulated_look

    rng = np.random.default_rng(11)
    s = Schedule((3,), 0.05, 0.08)
    for gap in (0.0, 0.05):
        n = 400
        decs = simulated_look(rng, n, 3, 3, 100, gap, s)
        truth = np.array([gap, 0.0, 0.0])
        if gap == 0:
            false = np.mean([len(d.worse) > 0 or d.state == "winner" for d in decs])
            assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)
            continue
        cover = [d.gap_lo[i] <= truth[d.best] - truth[i] <= d.gap_hi[i] for d in decs for i in range(3) if i != d.best]
        assert np.mean(cover) >= 0.93
        false = np.mean([any(truth[i] >= truth[d.best] for i in d.worse) for d in decs])
        assert false <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / n)


def test_take_the_equivalent_regime_with_the_least_wall_time_per_job():
    """At equal FLOPs the regime to take is the fastest measured one among those kept; untimed ones wait."""
    secs = {"a": 52.0, "b": 41.0, "c": 12.0, "d": float("nan")}
    assert take_regime(["a", "b"], secs) == "b"
    assert take_regime(["a", "b", "d"], secs) == "b"  # d has no measured time
    assert take_regime(["d"], secs) is None and take_regime(["e"], secs) is None
    assert take_regime(["a", "b", "c"], secs) == "c"
