"""The per-condition noise model the validation comparison still uses (race_cli/report/validation.py,
race_cli/plan/validate.py); the report's ranking uses race_cli/stats, where this is headed. Its t
functions are scipy's (race_cli/stats/quantiles.py).

One condition's jobs form a table: regime r has n_r seeds, each scored on the same n items
(paired across regimes). Within a regime the per-item score of seed s on item i is modelled
as a two-way random-effects table,

    y[s, i] = mu_r + a_i + b_s + e_si      (item effect a, seed effect b, residual e)

and the estimand is mu_r: the regime's expected score over items *and* training runs. The
variance of its estimate, the mean of the table, is

    Var = s2_a/n + s2_b/n_r + s2_e/(n·n_r),

estimated without bias by   [var_i(item means)/n − MS_resid/(n·n_r)] + MS_seed/(n·n_r)   (ANOVA
mean squares: the bracket is the item part, the rest the seed part with its residual; the
bracket is floored at zero, the seed part never is, so a small seed mean square cannot shrink
the variance below the seed level). The item part is each regime's own; the seed part (MS_seed, MS_resid) is *pooled
over the condition's regimes* that have two or more seeds — a two-seed regime alone has one
degree of freedom — so even a one-seed regime of a condition with replicated regimes gets the
seed term. Any contrast of regime means (a gap best − other, best − control) gets the same
treatment with the items paired: var_i(contrast of item means)/n + seed term × Σ c_r²/n_r.
Intervals scale each part by the t quantile at its own degrees of freedom (Banerjee's combination),
summarised as one effective df. Without per-item scores the table has one column
(n = 1) and everything comes from the seeds. With one seed everywhere there is no seed term:
the interval covers evaluation noise only, and the caller must say so.

Decisions with familywise error control:
- `worse` (not ≈ best): the gap best − regime exceeds its Bonferroni interval over all
  R(R−1)/2 pairs (the best is chosen from the same data, so every pair is in the family);
  under all-equal truth the chance that any regime is called worse is at most `alpha`;
- `beats_start`: Holm's step-down over the R one-sided tests gain > 0 (familywise
  alpha/2 = 2.5% one-sided, so one regime alone gets exactly its 95% interval's verdict).

Bootstrap-like draws [B, R] of the regime means (items resampled with weights shared by every
regime, plus normal seed noise with the pooled variance scaled per draw by df/χ²_df, so each
margin is t-shaped) feed what has no closed form: the share of draws in which a regime is best,
the winner's-curse drop of the pilot's best, and the response fit's p* interval.
benchmarks/bench_calibration.py measures every rule here on synthetic sweeps with known truth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from race_cli.stats import quantiles as _q

ALPHA = 0.05


# --- Student's t: scipy's (race_cli/stats/quantiles.py) ------------------------------------------

t_quantile = _q.t_quantile  # (level, df)
t_cdf = lambda t, df: 1.0 - _q.t_sf(t, df)  # noqa: E731  P(T <= t)


# --- variance components of one condition -------------------------------------------------


@dataclass
class Noise:
    """One condition's noise: per-regime item means, and the pooled seed mean squares."""

    m: np.ndarray  # [R, n] seed-averaged per-item scores (n = 1 without per-item scores)
    n_seeds: np.ndarray  # [R]
    ms_seed: float  # pooled n·var(job means) over regimes with >= 2 seeds (nan: none)
    df_seed: float  # its degrees of freedom: Σ (n_r − 1); 0 when no regime has two seeds
    ms_resid: float  # pooled residual mean square of the seed × item tables (0 when n = 1)
    df_resid: float

    @property
    def n(self) -> int:
        return self.m.shape[1]

    @property
    def has_seed_noise(self) -> bool:
        return self.df_seed > 0

    @property
    def seed_var(self) -> float:
        """Estimated variance of one training run's effect on the mean score, s2_b (>= 0)."""
        if not self.has_seed_noise:
            return 0.0
        return max(0.0, (self.ms_seed - self.ms_resid) / self.n)


def noise_of(codes: np.ndarray, table: np.ndarray, n_reg: int | None = None) -> Noise:
    """Variance components of one condition.

    codes [J] regime index of each job (0..R-1); table [J, n] per-item scores of every job on the
    same items in the same order, or [J] job-level values (then n = 1).
    """
    codes = np.asarray(codes)
    table = np.asarray(table, float)
    if table.ndim == 1:
        table = table[:, None]
    n_reg = int(codes.max()) + 1 if n_reg is None else n_reg
    n = table.shape[1]
    n_seeds = np.bincount(codes, minlength=n_reg)
    m = np.zeros((n_reg, n))
    np.add.at(m, codes, table)
    m /= np.maximum(n_seeds, 1)[:, None]
    ss_seed = ss_res = 0.0
    df_s = 0
    for r in np.flatnonzero(n_seeds >= 2):
        y = table[codes == r]  # [n_r, n]
        job = y.mean(axis=1)
        ss_seed += n * float(((job - job.mean()) ** 2).sum())
        if n > 1:
            ss_res += float(((y - job[:, None] - m[r][None, :] + job.mean()) ** 2).sum())
        df_s += len(y) - 1
    df_e = df_s * (n - 1)
    return Noise(m=m, n_seeds=n_seeds, ms_seed=ss_seed / df_s if df_s else math.nan, df_seed=float(df_s),
                 ms_resid=ss_res / df_e if df_e else 0.0, df_resid=float(df_e) if df_e else math.inf)


def contrast_se(noise: Noise, c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard error and effective degrees of freedom (Banerjee) of contrasts of regime means.

    c [K, R] contrast weights (a row e_r is regime r's mean; e_a − e_b a paired gap). Returns
    (se [K], df [K]); df = inf when the item part alone is known exactly, nan se when there is
    nothing to estimate a variance from (one value per regime, no items).
    """
    c = np.atleast_2d(np.asarray(c, float))
    n = noise.n
    k = (c ** 2 / np.maximum(noise.n_seeds, 1)).sum(axis=1)  # [K] Σ c_r² / n_r
    if n > 1:
        a = (c @ noise.m).var(axis=1, ddof=1) / n  # [K] item part, its own per contrast
        df_a = n - 1.0
    else:
        a, df_a = np.zeros(len(c)), math.inf
    if noise.has_seed_noise:
        b = k * noise.ms_seed / n
        e = k * noise.ms_resid / n
        # (A − E) estimates the item part alone (≈ 0 for a paired gap, whose item effects cancel),
        # B the seed part with its residual: always positive, never clipped below the seed level
        item = np.maximum(a - e, 0.0)
        v = item + b
        # degrees of freedom: Banerjee's combination — each
        # part scaled by its own t quantile, sqrt(t_a² I + t_s² B) — expressed as the df whose
        # t quantile gives the same 95% half-width. Satterthwaite's estimate undercovered with
        # two seeds (0.927 measured), as it grows exactly when B is drawn small.
        ta, ts = _t975(df_a), _t975(noise.df_seed)
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.sqrt((ta ** 2 * item + ts ** 2 * b) / np.where(v > 0, v, 1.0))
        df = np.where(v > 0, _df_for_t975(q), math.inf)
        df = np.where((item == 0) & (b > 0), noise.df_seed, df)  # the seed part alone: exactly its df
        df = np.where((b == 0) & (item > 0), df_a, df)  # the item part alone (seeds agree): exactly its df
    else:
        v, df = a, np.full(len(c), df_a)
        if n == 1:
            return np.full(len(c), math.nan), np.full(len(c), math.nan)
    return np.sqrt(v), df


def mls_quantile(noise: Noise, c: np.ndarray, level: float) -> np.ndarray:
    """Multiplier of the standard error for a one-sided `level` bound of each contrast: the
    modified-large-sample combination sqrt(t_a² I + t_s² B) / sqrt(I + B) at that level (item part
    I with n − 1 df, seed part B with the pooled seed df). Used where `level` is far from 97.5%
    (Bonferroni), where one effective df matched at 97.5% would misstate the tail."""
    c = np.atleast_2d(np.asarray(c, float))
    n = noise.n
    k = (c ** 2 / np.maximum(noise.n_seeds, 1)).sum(axis=1)
    a = (c @ noise.m).var(axis=1, ddof=1) / n if n > 1 else np.zeros(len(c))
    ta = t_quantile(level, n - 1.0) if n > 1 else math.nan
    if not noise.has_seed_noise:
        return np.full(len(c), ta)
    b, e = k * noise.ms_seed / n, k * noise.ms_resid / n
    item = np.maximum(a - e, 0.0)
    ts = t_quantile(level, noise.df_seed)
    v = item + b
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.sqrt(((ta ** 2 * item) if n > 1 else 0.0) + ts ** 2 * b) / np.sqrt(np.where(v > 0, v, 1.0))
    return np.where(v > 0, q, ta if n > 1 else ts)


def _t975(df: float) -> float:
    return _q.t_quantile(0.975, df)


_df_for_t975 = _q.df_for_t975


def t_interval(est: np.ndarray, se: np.ndarray, df: np.ndarray, level: float = 0.95,
               ) -> tuple[np.ndarray, np.ndarray]:
    """est ± t_{df, (1+level)/2} · se, elementwise (nan where se is nan)."""
    q = np.array([t_quantile(0.5 + level / 2, d) if np.isfinite(s) and d > 0 else math.nan
                  for s, d in zip(np.atleast_1d(se), np.atleast_1d(df))])
    return est - q * se, est + q * se


def p_above(est: np.ndarray, se: np.ndarray, df: np.ndarray, margin: float = 0.0) -> np.ndarray:
    """One-sided p-values of H0: true value <= margin (nan where se is nan or 0)."""
    return np.array([1.0 - t_cdf((e - margin) / s, d) if np.isfinite(s) and s > 0 and d > 0 else math.nan
                     for e, s, d in zip(np.atleast_1d(est), np.atleast_1d(se), np.atleast_1d(df))])


def holm(pvals: np.ndarray, alpha: float) -> np.ndarray:
    """Holm's step-down: which hypotheses are rejected at familywise level alpha (nan: never)."""
    p = np.where(np.isfinite(pvals), pvals, np.inf)
    order = np.argsort(p, kind="stable")
    out = np.zeros(len(p), dtype=bool)
    for k, i in enumerate(order):
        if p[i] > alpha / (len(p) - k):
            break
        out[i] = True
    return out


# --- draws ----------------------------------------------------------------------------------


def draws_of(noise: Noise, n_boot: int, rng: np.random.Generator,
             weights: np.ndarray | None = None) -> np.ndarray:
    """Draws [B, R] of the regime means: items resampled (paired: one weight vector per draw
    for every regime), plus seed noise N(0, s2_b/n_r) whose variance is rescaled per draw by
    df/χ²_df (the seed variance is an estimate from few degrees of freedom).

    weights [B, n]: item counts to reuse (so two quantities of the same jobs share their item
    draws); drawn here when None.
    """
    m, n = noise.m, noise.n
    point = m.mean(axis=1)
    out = np.broadcast_to(point, (n_boot, len(point))).copy()
    if n > 1:
        if weights is None:
            weights = item_weights(n, n_boot, rng)
        out = (weights.astype(np.float32) @ m.T.astype(np.float32)).astype(float) / n
    if noise.has_seed_noise:
        s2 = noise.seed_var if n > 1 else noise.ms_seed
        scale = np.sqrt(noise.df_seed / rng.chisquare(noise.df_seed, size=(n_boot, 1)))
        out += scale * rng.standard_normal((n_boot, len(point))) * np.sqrt(s2 / np.maximum(noise.n_seeds, 1))
    return out


def item_weights(n: int, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Multinomial item counts [B, n]: one bootstrap resample of n items per row."""
    pick = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
    return np.bincount(pick.ravel(), minlength=n_boot * n).reshape(n_boot, n)


def p_best(draws: np.ndarray, maximize: bool = True) -> np.ndarray:
    """Share of draws in which each regime is the best (ties split). [R]"""
    d = draws if maximize else -draws
    is_top = d >= d.max(axis=1, keepdims=True) - 1e-12
    return (is_top / is_top.sum(axis=1, keepdims=True)).mean(axis=0)


def winners_curse(point: np.ndarray, draws: np.ndarray, maximize: bool = True) -> float:
    """Expected drop of the best point estimate when the regime is run again: the mean, over
    draws, of (the drawn best's estimate − its point estimate), in the better direction.

    The point estimates play the truth and each draw a fresh pilot; the best of R noisy means
    is biased upward by about this much (a plug-in estimate: when regimes truly tie it is low).
    """
    sign = 1.0 if maximize else -1.0
    d = sign * draws
    b = np.argmax(d, axis=1)
    rows = np.arange(len(d))
    return max(0.0, float(np.mean(d[rows, b] - sign * point[b])))  # >= 0 but for draw noise


# --- one condition's decisions ----------------------------------------------------------------


def rank_decisions(noise: Noise, maximize: bool = True, level: float = 0.95, alpha: float = ALPHA) -> dict:
    """Per regime: mean, its interval, gap to the best with a simultaneous interval, and
    whether it is distinguishably worse than the best (Bonferroni over every pair)."""
    R = len(noise.n_seeds)
    sign = 1.0 if maximize else -1.0
    point = noise.m.mean(axis=1)
    se, df = contrast_se(noise, np.eye(R))
    lo, hi = t_interval(point, se, df, level)
    best = int(np.argmax(sign * point))
    c = -np.eye(R)
    c[:, best] += 1.0  # best − regime (a zero row for the best itself)
    gap = sign * (c @ point)  # >= 0: how much worse than the best
    gse, gdf = contrast_se(noise, c)
    n_pairs = max(1, R * (R - 1) // 2)
    q = mls_quantile(noise, c, 1 - alpha / (2 * n_pairs))
    q = np.where(np.isfinite(gse), q, math.nan)
    gap_lo = gap - q * gse
    worse = np.where(np.isfinite(gap_lo), gap_lo > 0, False)
    worse[best] = False
    return {"mean": point, "se": se, "df": df, "ci_lo": lo, "ci_hi": hi, "best": best, "gap_to_best": gap,
            "gap_ci_lo": np.where(np.arange(R) == best, 0.0, gap_lo), "tied_best": ~worse}


def gain_decisions(noise: Noise, level: float = 0.95, alpha: float = ALPHA) -> dict:
    """Per regime: the gain (an improvement, already signed), its interval, and `beats_start`
    by Holm over the regimes at one-sided familywise alpha/2."""
    R = len(noise.n_seeds)
    g = noise.m.mean(axis=1)
    se, df = contrast_se(noise, np.eye(R))
    lo, hi = t_interval(g, se, df, level)
    pv = p_above(g, se, df)
    return {"gain": g, "gain_se": se, "gain_ci_lo": lo, "gain_ci_hi": hi, "gain_p": pv,
            "beats_start": holm(pv, alpha / 2)}
