"""What a race resolves at its cap (stats/race_power.py) against races decided item by item, and the plan's
lines (plan/race_price.resolution_lines) for both shipped grids."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from race_fixture import simulated_look

from race_cli.stats.power import Design
from race_cli.stats.race import Schedule
from race_cli.stats.race_power import smallest_margin, smallest_race_gap, winner_power

# race_sim's truth: 200 items x 4 samples, item x regime sd 0.05, seed sd 0.02·U(0.5, 1.5), no common random
# numbers; 3 regimes at the cap of 4 seeds, pools of 2 conditions (3 regimes x 3 df each)
DESIGN = Design(n=200, k=4, seeds=4, regimes=3, seed_sd=0.02, pool_df=18.0)
ALPHA = 0.05


def _decided(gap: float, margin: float, n: int = 400, seed: int = 3) -> list:
    return simulated_look(np.random.default_rng(seed), n, 3, 4, 200, gap, Schedule((4,), ALPHA, margin))


def test_the_smallest_margin_is_shown_about_80_percent_of_the_time_when_all_are_equal():
    """At the margin stats/race_power says the cap shows with 80% power, races simulated item by item and
    decided by decide_look end equivalent in 0.80 of all-equal conditions (±0.08: 400 conditions, the
    statistic-level model's approximations); at 0.8 × that margin clearly less often."""
    m = smallest_margin(DESIGN, ALPHA)
    assert 0.04 < m < 0.15
    rate = np.mean([d.state == "equivalent" for d in _decided(0.0, m)])
    assert 0.72 <= rate <= 0.88, rate
    assert np.mean([d.state == "equivalent" for d in _decided(0.0, 0.8 * m)]) < rate - 0.15


def test_the_smallest_gap_names_the_winner_about_80_percent_of_the_time():
    g = smallest_race_gap(DESIGN, ALPHA)
    assert winner_power(DESIGN, g, ALPHA) >= 0.80 > winner_power(DESIGN, g - 0.01, ALPHA)
    rate = np.mean([d.state == "winner" and d.best == 0 for d in _decided(g, 0.01, seed=4)])
    assert 0.72 <= rate <= 0.88, rate
    assert winner_power(DESIGN, 0.0, ALPHA) <= ALPHA  # all equal: a winner is a false claim


def test_more_seeds_resolve_smaller_margins_and_gaps():
    from dataclasses import replace

    more = replace(DESIGN, seeds=8, pool_df=42.0)
    assert smallest_margin(more, ALPHA) < smallest_margin(DESIGN, ALPHA)
    assert smallest_race_gap(more, ALPHA) < smallest_race_gap(DESIGN, ALPHA)
    assert math.isnan(smallest_margin(replace(DESIGN, seeds=1, pool_df=None), ALPHA))


@pytest.mark.parametrize("grid, margin, reached", [("tiny", "0.05", True), ("pilot", "0.03", False)])
def test_race_plan_prints_the_margin_and_gap_each_condition_resolves_at_its_cap(grid, margin, reached):
    """Both shipped grids: one line per condition and target with the reachable margin and gap, the declared
    margin (the pilot's at most 0.05), and the note where the cap cannot show it: grid=tiny, priced at the seed
    spread its own run measured (seed_sd 0.0077), reaches ±0.05 at its cap of 8; grid=pilot, at the assumed 0.02
    and a cap of 4, does not reach ±0.03."""
    p = subprocess.run([sys.executable, "-m", "race_cli", "plan", f"grid={grid}"], capture_output=True, text=True,
                       timeout=300, env={"COLUMNS": "200", **__import__("os").environ})
    assert p.returncode == 0, p.stderr
    out = p.stdout + p.stderr
    flat = " ".join(out.split())  # the console folds long lines at its width
    head = flat[flat.index("race resolution at the cap"):]
    if reached:  # no note: the line ends where the evaluation route's price begins
        assert "note: " not in head.split("evaluation route:")[0]
        head, note = head.split("evaluation route:")[0], ""
    else:
        head, note = head[:head.index("note: ")], head[head.index("note: "):]
    assert f"declared margin ±{margin}" in head
    # one design in every condition (2 sizes x 2 reward systems x 2 targets on tiny; 4 sizes x 2 rewards x gsm8k
    # on the pilot): one line for all 8; designs that differ would get a line each
    assert "in each of its 8 condition x target" in head
    reach = float(head.split("is ±")[1].split(",")[0])
    gap = float(head.split("smallest gap ")[1].split()[0])
    assert (reach <= float(margin)) == reached and 0 < gap < 0.2
    if not reached:
        assert note.startswith(f"note: the declared margin ±{margin} lies below") and "in 8 of 8" in note


def test_designs_that_differ_get_a_line_each():
    from race_cli.plan.race_price import Resolution, resolution_lines

    rows = [Resolution("a C=1e+12 rule", "t", 4, 3, 0.0333, 0.10, 0.09),
            Resolution("bb C=1e+12 rule", "t", 4, 3, 0.0333, 0.07, 0.06)]
    lines = resolution_lines(rows, 0.08)
    assert lines[1:3] == ["  a C=1e+12 rule   t: margin ±0.100, gap 0.090", "  bb C=1e+12 rule  t: margin ±0.070, gap 0.060"]
    assert lines[3].startswith("note: the declared margin ±0.08 lies below what the race can show at its cap in 1 of 2")
    # ±0.08 is above the effect the price assumes (one regime better by 0.05): said, with what to declare
    assert lines[4].startswith("note: the declared margin ±0.08 is larger than the effect the price assumes (0.05)")
    assert "cannot answer the allocation question" in lines[4]
    for margin in (0.04, 0.05):  # at or below it (a 0.05 effect is never shown within ±0.05): no note
        assert not any("larger than the effect" in x for x in resolution_lines(rows, margin))
