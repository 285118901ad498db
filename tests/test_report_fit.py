"""Response fits of the target to p: the right curve is chosen, and the fallback is taken when due."""

from __future__ import annotations

import math

import numpy as np
import pytest

from race_cli.report.fit import fit_response, loo_mse

GRID = np.array([0.08, 0.14, 0.25, 0.40, 0.60])  # the fixture's p grid
STEP = (0.60 - 0.08) / 200  # resolution of the fit's optimum search (201 points)


def test_exact_quadratic_in_log_p_recovers_its_peak():
    # y = 0.6 - 0.25 (ln p - ln 0.25)^2 peaks at p = 0.25 (d/dlnp = 0 there); noise-free,
    # so the quadratic in log p has zero LOO error and every other curve a positive one.
    y = 0.6 - 0.25 * (np.log(GRID) - math.log(0.25)) ** 2
    f = fit_response(GRID, y)
    assert f.model == "quadratic in log p"
    assert not f.fallback
    assert f.loo_mse["quadratic in log p"] < 1e-20 < min(v for k, v in f.loo_mse.items() if k != f.model)
    assert abs(f.p_star - 0.25) <= STEP
    assert abs(f.y_star - 0.6) < 1e-4  # the curve's maximum value


def test_exact_quadratic_in_p_recovers_its_peak():
    # y = 0.5 - 2 (p - 0.3)^2: maximum 0.5 at p = 0.3
    y = 0.5 - 2 * (GRID - 0.3) ** 2
    f = fit_response(GRID, y)
    assert f.model == "quadratic in p" and not f.fallback
    assert abs(f.p_star - 0.3) <= STEP
    np.testing.assert_allclose(f.coef, [-2.0, 1.2, 0.32], atol=1e-9)  # -2p² + 1.2p - 0.18 + 0.5


def test_minimizing_a_loss_finds_the_trough():
    y = 0.2 + 2 * (GRID - 0.3) ** 2  # a loss: lowest at p = 0.3
    f = fit_response(GRID, y, maximize=False)
    assert not f.fallback and abs(f.p_star - 0.3) <= STEP


def test_optimum_on_the_grid_edge_falls_back_to_the_pilot_best():
    y = 0.35 + 0.5 * GRID  # rising: the best p is the largest one tried
    f = fit_response(GRID, y)
    assert f.model == "linear in p"
    assert f.fallback and "edge" in f.reason and "highest" in f.reason
    assert f.p_star == 0.60 and f.y_star == pytest.approx(0.65)  # the pilot-best point itself


def test_concave_up_peaks_on_the_edge_too():
    # y = 0.4 + 2 (p - 0.3)^2 has a trough in the middle; its maximum on the grid is at an end.
    # Pilot values at the ends: p=0.08 -> 0.4 + 2·0.22² = 0.4968; p=0.60 -> 0.4 + 2·0.3² = 0.58.
    y = 0.4 + 2 * (GRID - 0.3) ** 2
    f = fit_response(GRID, y)
    assert f.fallback and "edge" in f.reason
    assert f.p_star == 0.60 and f.y_star == pytest.approx(0.58)


def test_constant_response_falls_back():
    f = fit_response(GRID, np.full(5, 0.5))
    assert f.model == "constant" and f.fallback and "does not respond" in f.reason


def test_too_few_distinct_p_falls_back():
    p = np.array([0.1, 0.1, 0.3, 0.3, 0.3])
    y = np.array([0.40, 0.42, 0.50, 0.52, 0.49])
    f = fit_response(p, y)
    assert f.fallback and "2 distinct p" in f.reason
    assert f.p_star == 0.3 and f.y_star == 0.52


def test_two_regimes_cannot_fit_a_curve():
    f = fit_response(np.array([0.1, 0.3]), np.array([0.4, 0.5]))
    assert f.fallback and f.p_star == 0.3


def test_tight_clusters_of_p_count_as_one_value():
    # Two tight clusters of p (spacing 4e-6, as runs of one knob setting differ by their real
    # token counts): a curve through them would be fixed by the micro-spacing alone.
    p = np.array([0.1, 0.100004, 0.100008, 0.5, 0.500004])
    f = fit_response(p, 0.5 - 2 * (p - 0.3) ** 2)
    assert f.fallback and "only 2 distinct p values" in f.reason


def test_loo_by_hand():
    # Constant fit to y = [0, 0, 3]: leaving out 3 predicts 0 (error 9); leaving out a 0
    # predicts mean(0, 3) = 1.5 (error 2.25, twice). LOO MSE = (9 + 2.25 + 2.25) / 3 = 4.5.
    assert loo_mse(np.array([1.0, 2.0, 3.0]), np.array([0.0, 0.0, 3.0]), 0) == pytest.approx(4.5)


def test_noisy_peak_is_found_over_many_seeds():
    # Regime means with noise of sd 0.01 around the log-quadratic peak at 0.25: the recommended
    # p (fit or fallback) must land on the grid's interior point nearest the peak, or the fit
    # near it, in nearly every repeat.
    truth = 0.6 - 0.25 * (np.log(GRID) - math.log(0.25)) ** 2
    hits = 0
    for s in range(50):
        y = truth + np.random.default_rng(s).normal(0, 0.01, len(GRID))
        f = fit_response(GRID, y)
        hits += 0.14 < f.p_star < 0.40
    assert hits >= 48
