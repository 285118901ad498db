"""What a race resolves at its cap: the smallest equivalence margin and the smallest gap (numpy/scipy, no I/O).

A race's last look decides on Tukey–Kramer simultaneous intervals at its level α_K (stats/race.decide_look):
a regime is worse when best − regime − h > 0, the condition is equivalent when every pair's |m_i − m_j| + h
lies below the margin. At the cap (every regime at `cap` seeds) the design is a fixed one, so its pilots
are simulated at the level of the statistics exactly as stats/power.separation_power simulates them (the
expected variance parts of a gap, stats/power.gap_parts; the seed part scaled by χ²_df/df) and read by the
same rule:

- `smallest_margin(design, alpha)`: the margin equivalence reaches with 80% power when every regime is
  truly equal: the 0.80 quantile of range(means) + h. A declared margin below it is one the race cannot
  show at its cap: such calls end undecided;
- `smallest_race_gap(design, alpha)`: the smallest gap at which a regime better than every other by it is
  named the winner with 80% power.

`race plan` prints both per condition beside the declared margin (plan/race_price.resolution_lines).
"""

from __future__ import annotations

import math

import numpy as np

from race_cli.stats.draws import chi2_scale
from race_cli.stats.power import N_SIM, POWER, Design, _smallest, gap_parts


def _pilots(d: Design, delta: float, alpha: float, n_sim: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(means [n_sim, R] with regime 0 better by delta, Tukey–Kramer half-width h [n_sim] of every pair)."""
    from race_cli.stats.quantiles import half_width, range_quantile

    R = d.regimes
    rng = np.random.default_rng(seed)
    p = gap_parts(d)
    z = rng.standard_normal((n_sim, R))
    scale = chi2_scale(d.df_seed, n_sim, rng)
    point = np.zeros((n_sim, R))
    point[:, 0] = delta
    point += math.sqrt(float(p.var[0]) / 2) * z  # gaps have variance var
    q = lambda df: range_quantile(1 - alpha, R, df) / math.sqrt(2.0)
    h = half_width(p.item[0], p.resid[0], p.seed[0] * scale, q(p.df_item), q(p.df_resid), q(float(p.df_seed[0])))
    return point, np.asarray(h, float)


def winner_power(d: Design, delta: float, alpha: float, n_sim: int = N_SIM, seed: int = 0) -> float:
    """Share of simulated pilots in which regime 0, better than every other by delta, is named the winner."""
    if d.regimes < 2 or d.df_seed <= 0:
        return 0.0
    point, h = _pilots(d, delta, alpha, n_sim, seed)
    lo = point[:, :1] - point[:, 1:] - h[:, None]
    return float((lo > 0).all(axis=1).mean())


def smallest_race_gap(d: Design, alpha: float, power: float = POWER) -> float:
    """The smallest gap named the winner with probability `power` (nan: none up to 1, or nothing testable)."""
    return _smallest(lambda x: winner_power(d, x, alpha), power)


def smallest_margin(d: Design, alpha: float, power: float = POWER, n_sim: int = N_SIM, seed: int = 0) -> float:
    """The smallest equivalence margin shown with probability `power` when every regime is truly equal."""
    if d.regimes < 2 or d.df_seed <= 0:
        return math.nan
    point, h = _pilots(d, 0.0, alpha, n_sim, seed)
    return float(np.quantile(point.max(axis=1) - point.min(axis=1) + h, power))
