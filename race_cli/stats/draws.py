"""Draws of a condition's regime means for what has no closed form (numpy, no I/O): the share of
draws in which each regime is best (a ranking score, not a probability) and the response fit's p*.

One draw: items resampled with one weight vector shared by every regime (paired), plus seed noise
N(0, σ_b,r²/n_r) per regime with the moderated seed variance (stats/variance.py) rescaled per draw by
df/χ²_df, so each margin is t-shaped with the pool's degrees of freedom.

References

- The (paired, multinomial-weight) bootstrap: Efron, B. & Tibshirani, R. J. (1993), An Introduction to the
  Bootstrap, Chapman & Hall. Not scipy.stats.bootstrap: it resamples one statistic of independent samples at
  a time, while a draw here shares one item weight vector across every regime (paired) and adds a seed term
  per regime at the pool's df, which its interface cannot express.
"""

from __future__ import annotations

import math

import numpy as np

from race_cli.stats.variance import Noise


def chi2_scale(df: float, n: int, rng: np.random.Generator) -> np.ndarray:
    """[n] draws of χ²_df/df: a variance's estimate over its truth at df degrees of freedom (ones where df
    is infinite or past 1e6: known). The power simulations (stats/power.py, stats/validation_power.py)
    scale their seed parts by it."""
    return rng.chisquare(df, n) / df if math.isfinite(df) and df < 1e6 else np.ones(n)


def item_weights(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Multinomial item counts [B, n]: one bootstrap resample of n items per row."""
    pick = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
    return np.bincount(pick.ravel(), minlength=n_boot * n).reshape(n_boot, n)


def draws_of(noise: Noise, n_boot: int, rng: np.random.Generator, weights: np.ndarray | None = None) -> np.ndarray:
    """Draws [B, R] of the regime means. weights [B, n]: item counts to reuse (two quantities of the
    same jobs then share their item draws); drawn here when None."""
    m, n = noise.m, noise.n
    point = m.mean(axis=1)
    out = np.broadcast_to(point, (n_boot, len(point))).copy()
    if n > 1:
        if weights is None:
            weights = item_weights(n, n_boot, rng)
        out = (weights.astype(np.float32) @ m.T.astype(np.float32)).astype(float) / n
    if noise.has_seed_noise:
        s2 = noise.pure_seed_var if n > 1 else noise.seed_var  # [R]
        df = np.where(np.isfinite(noise.seed_df), noise.seed_df, 1e6)
        chi = rng.chisquare(float(df.min()), size=(n_boot, 1))  # one scale per draw: the pool's estimate
        scale = np.sqrt(df.min() / chi)
        out += scale * rng.standard_normal((n_boot, len(point))) * np.sqrt(s2 / np.maximum(noise.n_seeds, 1))
    return out


def p_best(draws: np.ndarray, maximize: bool = True) -> np.ndarray:
    """Share of draws in which each regime is the best (ties split). [R]"""
    d = draws if maximize else -draws
    is_top = d >= d.max(axis=1, keepdims=True) - 1e-12
    with np.errstate(invalid="ignore", divide="ignore"):  # a draw with a NaN regime has no best: NaN, said as "–"
        return (is_top / is_top.sum(axis=1, keepdims=True)).mean(axis=0)
