"""Bootstrap ranking of regimes: recovers a known best, intervals cover the truth at a sane rate."""

from __future__ import annotations

import numpy as np
import pytest

from race_cli.report.rank import bootstrap_regimes, label, summarize_draws
from report_fixtures import simulate_scores

ACCS = [0.35, 0.45, 0.55, 0.60, 0.50]  # true accuracy per regime; regime 3 is the best


def _rank(accs, n_seeds=3, n_items=200, item_sd=0.2, seed_sd=0.03, rep=0, n_boot=1000):
    rng = np.random.default_rng(rep)
    reg, scores = simulate_scores(accs, n_seeds, n_items, item_sd, seed_sd, rng)
    point = np.array([scores[reg == r].mean() for r in range(len(accs))])
    draws = bootstrap_regimes(reg, scores.mean(axis=1), scores, n_boot, np.random.default_rng(10_000 + rep))
    return summarize_draws(point, draws)


def test_clear_best_is_recovered_with_high_probability():
    t = _rank(ACCS, n_items=2000, rep=1)
    assert int(np.argmax(t["mean"])) == 3 and t["is_best"].iloc[3]
    assert t["p_best"].iloc[3] > 0.95  # 0.60 vs 0.55 on 2000 paired items × 3 seeds
    assert t["p_best"].sum() == pytest.approx(1.0)
    assert list(t["rank"]) == [5, 4, 2, 1, 3]
    # 0.35 and 0.45 are far below the best: their gap interval excludes zero
    assert not t["tied_best"].iloc[0] and not t["tied_best"].iloc[1]


def test_equal_regimes_are_marked_indistinguishable():
    t = _rank([0.5, 0.5, 0.5], rep=2)
    assert t["tied_best"].all()
    assert t["p_best"].max() < 0.9  # no regime is called certain


def test_pairing_sharpens_comparisons():
    # Same items for every regime: item difficulty cancels in the paired gap. Here (10 seeds,
    # 300 items, item_sd 0.3) per regime the draws' variance is about item Var(d)/n =
    # (0.3²/3)/300 = 1.0e-4 (shared by both regimes) plus coin noise counted twice, 2·0.2175/3000
    # = 1.45e-4 (own), so sd(gap) / sd(independent gap) ≈ √(1 - 1.0/2.45) ≈ 0.77 (measured 0.85).
    # Resampling items independently per regime would give 1.0.
    rng = np.random.default_rng(3)
    reg, scores = simulate_scores([0.5, 0.55], 10, 300, 0.3, 0.01, rng)
    draws = bootstrap_regimes(reg, scores.mean(axis=1), scores, 2000, np.random.default_rng(4))
    paired_sd = np.std(draws[:, 1] - draws[:, 0])
    unpaired_sd = np.hypot(draws[:, 0].std(), draws[:, 1].std())
    assert paired_sd < 0.92 * unpaired_sd


def test_intervals_cover_the_truth_at_a_sane_rate():
    # 60 synthetic sweeps × 5 regimes = 300 intervals at nominal 95%.
    # Analytic sd of a regime's mean (3 seeds, 200 items, see report_fixtures for the model):
    #   items  Var(d)/n = (0.2²/3)/200           = 6.7e-5
    #   seeds  Var(e)/k = (0.03²/3)/3            = 1.0e-4
    #   coin   E[P(1-P)]/(n k) ≈ (0.25-0.0136)/600 = 3.9e-4   -> sd ≈ 0.0237, 95% width ≈ 0.093.
    # Resampling items and then seeds counts the coin-flip noise twice, so intervals come out
    # wider (measured ≈ 0.124) and coverage above nominal (measured 0.99). Too narrow (< 0.90)
    # or absurdly wide (> 1.6× analytic) fails.
    cover, width = [], []
    for rep in range(60):
        t = _rank(ACCS, rep=rep, n_boot=500)
        cover.extend((t["ci_lo"] <= ACCS) & (t["ci_hi"] >= ACCS))
        width.extend(t["ci_hi"] - t["ci_lo"])
    rate, w = np.mean(cover), np.mean(width)
    assert 0.90 <= rate <= 1.0, rate
    assert 0.093 * 0.9 < w < 0.093 * 1.6, w


def test_best_regime_is_found_in_most_noisy_repeats():
    # truth: 0.60 vs runner-up 0.55 on 200 items × 3 seeds; paired, so the gap's sd is about
    # 0.02 and the best should come out on top in most repeats, and never be called
    # distinguishable from itself.
    wins, true_best_tied = 0, 0
    for rep in range(30):
        t = _rank(ACCS, rep=100 + rep, n_boot=300)
        wins += bool(t["is_best"].iloc[3])
        true_best_tied += bool(t["tied_best"].iloc[3])
    assert wins >= 22
    assert true_best_tied >= 28  # the true best is (almost) always among the "≈ best" set


def test_seed_only_bootstrap_when_no_items():
    values = np.array([0.40, 0.42, 0.44, 0.60, 0.62, 0.64])
    reg = np.array([0, 0, 0, 1, 1, 1])
    draws = bootstrap_regimes(reg, values, None, 2000, np.random.default_rng(0))
    # resampling 3 seeds: every draw's mean lies within [min, max] of that regime's seeds
    assert draws[:, 0].min() >= 0.40 and draws[:, 0].max() <= 0.44
    assert draws[:, 1].min() >= 0.60 and draws[:, 1].max() <= 0.64
    t = summarize_draws(np.array([0.42, 0.62]), draws)
    assert t["p_best"].tolist() == [0.0, 1.0]


def test_labels():
    assert label({"group_size": 4.0, "updates_per_batch": 2}) == "G=4 μ=2"
    assert label({}) == "(one regime)"


def test_conditions_with_as_many_items_share_one_item_resample(tmp_path, monkeypatch):
    # one resample of item counts per item count and ranking (1 ms each, a second of a large sweep): each
    # condition's draws still bootstrap its own items around its own means
    from race_cli.report import rank as RK
    from race_cli.report.table import read_sweeps
    from race_cli.stats import draws as W
    from report_fixtures import DEFAULT_REGIMES, build_sweep, peaked

    conds = [{"model": m, "budget_flops": 1e12, "reward": "rule", "task": "arithmetic"} for m in ("a", "b", "c")]
    build_sweep(tmp_path / "s", acc=peaked(), conditions=conds, regimes=DEFAULT_REGIMES[:3], seeds=(0, 1),
                n_items=60)
    calls = []
    real = W.item_weights
    monkeypatch.setattr(W, "item_weights", lambda n, b, rng: calls.append(n) or real(n, b, rng))
    draws: dict = {}
    ranking = RK.rank_all(read_sweeps([tmp_path / "s"]), "arithmetic", ["model"], n_boot=2000, draws_out=draws)
    assert calls == [60]
    assert len(draws) == 3
    for cond, g in ranking.groupby("condition"):
        # item resampling is centred on the regime means; the seed noise added has mean 0: the draws'
        # mean is within a few of their standard errors of the means
        d = draws[cond]
        assert np.all(np.abs(d.mean(axis=0) - g["mean"].to_numpy()) < 4 * d.std(axis=0) / np.sqrt(len(d)) + 1e-9)
    a, b = (draws[c] for c in list(draws)[:2])
    assert not np.allclose(a - a.mean(axis=0), b - b.mean(axis=0))  # other items, other seed noise
