"""Variance components of a sweep: per-item paired scores, seed variance pooled across the sweep
with empirical-Bayes moderation (numpy/scipy, no I/O).

One condition's jobs form a table: regime r has n_r seeds, each scored on the same n items (paired
across regimes). Score of seed s of regime r on item i:

    y[r, s, i] = mu_r + a_i + g_ri + b_rs + e_rsi

(item effect a, item × regime interaction g, seed effect b with a regime-specific variance σ_b,r², and
evaluation residual e, which may be correlated across jobs when evaluation uses common random
numbers). A contrast θ = Σ c_r mu_r is estimated by Σ c_r m_r (m_r the regime's mean over its seeds
and items); its variance has three parts, each estimated with its own degrees of freedom:

- item   A = var_i(Σ c_r m_ri) / n                 n − 1 df: items, interaction and residual
- resid  E = Σ c_r²/n_r · MS_resid / n             (n − 1)·Σ(n_r − 1) df: the seed × item residual
- seed   S = Σ c_r²/n_r · s̃_r²                     d̃_r df: the variance of one job's mean score

so that Var(θ̂) = (A − E) + S: the item part net of the residual it shares with the job means, plus
the job-mean (seed) part. s_r², the variance of regime r's job means (n_r − 1 df), is moderated as
limma moderates few-replicate variances (Smyth 2004): a scaled-F prior (s0², d0) is fitted to every
regime of a *pool* (the caller's key: one reward system on one target by default) where Bartlett's test
finds the pool's spreads unequal (p < 0.05; limma's moment estimate of d0 from a handful of one-df spreads
is too noisy to use otherwise), and

    s̃_r² = (d0·s0² + d_r·s_r²) / (d0 + d_r),   d̃_r = min(d0 + d_r, Σ_pool d_r)

(d0 = ∞ when the pool's spreads agree with one common variance: then every regime uses the pooled
variance, with the pool's total df combined with HETERO_DF, 1/(1/Σd + 1/12), for the heterogeneity a
handful of spreads cannot show; finite d0 keeps per-regime variances where the data show
heterogeneity). A regime whose spread is improbably large under the prior (F test, Bonferroni over
the pool at 5%) is flagged as an outlier. A pool without any two-seed regime has no seed variance:
its intervals cover evaluation noise only, unless a seed sd is assumed (`assume_seed_sd`).

References

- Moderated variances (`fit_prior`, `moderate`, `_trigamma_inverse`): Smyth, G. K. (2004), "Linear models and
  empirical Bayes methods for assessing differential expression in microarray experiments", Statistical
  Applications in Genetics and Molecular Biology 3(1), Article 3, doi:10.2202/1544-6115.1027.
- One common variance (`homogeneity_p`): Bartlett, M. S. (1937), "Properties of sufficiency and statistical
  tests", Proceedings of the Royal Society A 160(901):268–282.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import special

OUTLIER_ALPHA = 0.05  # familywise over a pool's regimes
HETERO_DF = 12.0  # prior df of seed variances within a reward system that a handful of 1-df spreads cannot tell
# apart: 12 df is var(log σ²) = trigamma(6) ≈ 0.18, regimes' seed sd within about 0.66-1.52× of the pool's (95%), as
# between two model sizes pooled under one reward. Fewer df trade separation for false "worse" calls; 12 is the
# value that keeps false "worse" under 5% on the calibration harness (docs/measurements/report-calibration.md)
HETERO_ALPHA = 0.05  # Bartlett's test: per-regime variances only where the pool's spreads differ at this level


# --- the prior: limma's fitFDist without covariates --------------------------------------------


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (Newton's iteration of limma's trigammaInverse)."""
    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        dif = tri * (1 - tri / x) / float(special.polygamma(2, y))
        y += dif
        if -dif / y < 1e-8:
            break
    return y


@dataclass(frozen=True)
class SeedPrior:
    """The fitted prior of one pool: s0² (a job mean's variance), d0 (its prior df), the pool's
    total df Σ d_r and regime count; `assumed` when the variance was supplied, not measured."""

    key: str
    s0_sq: float
    d0: float
    df_total: float
    n_regimes: int
    assumed: bool = False

    @property
    def measured(self) -> bool:
        return self.df_total > 0 or self.assumed


def homogeneity_p(log_s_sq: np.ndarray, d: np.ndarray, pooled: float) -> float:
    """Bartlett's test of one common variance over G spreads (log s², d df each): p-value of
    M/C ~ χ²_{G−1}, M = Σd·ln s_p² − Σ d ln s², C = 1 + (Σ 1/d − 1/Σd) / (3(G − 1))."""
    G, tot = len(d), float(d.sum())
    m = tot * math.log(pooled) - float((d * log_s_sq).sum())
    c = 1 + (float((1 / d).sum()) - 1 / tot) / (3 * (G - 1))
    # χ² survival function as scipy.stats.chi2.sf computes it (special.chdtrc), without importing
    # scipy.stats (slow to import); M >= 0 by Jensen, floored at 0 against rounding (chdtrc is nan below 0)
    return float(special.chdtrc(G - 1, max(m / c, 0.0)))


def fit_prior(s_sq: np.ndarray, d: np.ndarray, key: str = "") -> SeedPrior:
    """Fit (s0², d0) to sample variances s_sq [G] with d [G] degrees of freedom (d = 0 entries are
    ignored). limma's moment estimator on log s²; d0 = inf when the spreads are no more variable
    than one common variance makes them (then s0² is the pooled Σ d s² / Σ d)."""
    s_sq, d = np.asarray(s_sq, float), np.asarray(d, float)
    ok = (d > 0) & np.isfinite(s_sq)
    s_sq, d = s_sq[ok], d[ok]
    tot = float(d.sum())
    if tot == 0:
        return SeedPrior(key, math.nan, 0.0, 0.0, 0)
    pooled = float((d * s_sq).sum() / tot)
    if len(s_sq) < 3 or pooled <= 0:
        return SeedPrior(key, pooled, math.inf, tot, len(s_sq))
    floor = 1e-6 * pooled  # a zero spread would be log(0): held at a millionth of the pool's
    z = np.log(np.maximum(s_sq, floor))
    if homogeneity_p(z, d, pooled) >= HETERO_ALPHA:  # no evidence against one common variance: pool it
        return SeedPrior(key, pooled, math.inf, tot, len(s_sq))
    e = z - special.digamma(d / 2) + np.log(d / 2)
    emean = float(e.mean())
    evar = float(((e - emean) ** 2).sum() / (len(e) - 1) - special.polygamma(1, d / 2).mean())
    if evar <= 0:
        return SeedPrior(key, pooled, math.inf, tot, len(s_sq))
    d0 = 2 * _trigamma_inverse(evar)
    s0 = math.exp(emean + float(special.digamma(d0 / 2)) - math.log(d0 / 2))
    return SeedPrior(key, s0, d0, tot, len(s_sq))


def moderate(s_sq: np.ndarray, d: np.ndarray, prior: SeedPrior) -> tuple[np.ndarray, np.ndarray]:
    """Moderated variances and their df: (d0 s0² + d s²)/(d0 + d), min(d0 + d, Σ d) (d = 0: the prior)."""
    s_sq, d = np.asarray(s_sq, float), np.asarray(d, float)
    s = np.where(d > 0, s_sq, 0.0)
    if prior.assumed:
        return np.full(len(d), prior.s0_sq), np.full(len(d), math.inf)
    if not math.isfinite(prior.d0):
        # one pooled variance for every regime, whose own may still differ from it by as much as the project
        # has measured (HETERO_DF): the predictive df of a regime's variance combines both
        return np.full(len(d), prior.s0_sq), np.full(len(d), 1.0 / (1.0 / prior.df_total + 1.0 / HETERO_DF))
    v = (prior.d0 * prior.s0_sq + d * s) / (prior.d0 + d)
    return v, np.minimum(prior.d0 + d, prior.df_total)


def outliers(s_sq: np.ndarray, d: np.ndarray, prior: SeedPrior, alpha: float = OUTLIER_ALPHA) -> np.ndarray:
    """Regimes whose spread is too large for the prior: F = s²/s0² against F(d, d0 or Σ d), Bonferroni
    over the pool's regimes. [G] bool (False where d = 0 or the prior is assumed)."""
    s_sq, d = np.asarray(s_sq, float), np.asarray(d, float)
    if prior.assumed or not prior.df_total or not prior.s0_sq > 0:
        return np.zeros(len(d), dtype=bool)
    d2 = prior.d0 if math.isfinite(prior.d0) else prior.df_total
    with np.errstate(invalid="ignore", divide="ignore"):
        p = special.fdtrc(np.maximum(d, 1), d2, s_sq / prior.s0_sq)  # scipy.stats.f.sf's own function
    return (d > 0) & (p < alpha / max(prior.n_regimes, 1))


# --- one condition ------------------------------------------------------------------------------


@dataclass
class Noise:
    """One condition's noise. Before `pooled` it holds only the condition's own spreads."""

    m: np.ndarray  # [R, n] seed-averaged per-item scores (n = 1 without per-item scores)
    n_seeds: np.ndarray  # [R]
    job_var: np.ndarray  # [R] s_r²: variance of the regime's job means (nan below two seeds)
    job_df: np.ndarray  # [R] n_r − 1
    ms_resid: float  # pooled seed × item residual mean square (0 without items or seeds)
    df_resid: float
    seed_var: np.ndarray = field(default=None)  # [R] moderated s̃_r² (0 where no seed variance)
    seed_df: np.ndarray = field(default=None)  # [R] its df (0: none)
    outlier: np.ndarray = field(default=None)  # [R] spread flagged against the pool's prior
    prior: SeedPrior | None = None

    def __post_init__(self):
        R = len(self.n_seeds)
        if self.seed_var is None:  # the condition pooled on its own, until a sweep pool replaces it
            p = fit_prior(self.job_var, self.job_df)
            self.prior = p if p.df_total else None
            sv, sd = moderate(self.job_var, self.job_df, p) if p.df_total else (np.zeros(R), np.zeros(R))
            self.seed_var, self.seed_df = sv, sd
            self.outlier = np.zeros(R, dtype=bool)

    @property
    def n(self) -> int:
        return self.m.shape[1]

    @property
    def has_seed_noise(self) -> bool:
        return bool(np.all(self.seed_df > 0))

    @property
    def point(self) -> np.ndarray:
        return self.m.mean(axis=1)

    @property
    def pure_seed_var(self) -> np.ndarray:
        """σ_b,r²: the moderated job-mean variance net of its residual part (>= 0). [R]"""
        return np.maximum(self.seed_var - (self.ms_resid / self.n if self.n > 1 else 0.0), 0.0)

    def pooled(self, prior: SeedPrior) -> "Noise":
        """This condition with its seed variances moderated by a sweep pool's prior."""
        if prior is None or not prior.measured:
            R = len(self.n_seeds)
            return replace(self, seed_var=np.zeros(R), seed_df=np.zeros(R), outlier=np.zeros(R, dtype=bool),
                           prior=prior)
        sv, sd = moderate(self.job_var, self.job_df, prior)
        if prior.assumed and self.n > 1 and self.df_resid:
            sv = sv + self.ms_resid / self.n  # a job mean's variance: the assumed seed part plus its residual
        return replace(self, seed_var=sv, seed_df=sd, outlier=outliers(self.job_var, self.job_df, prior),
                       prior=prior)


def noise_of(codes: np.ndarray, table: np.ndarray, n_reg: int | None = None, own_pool: bool = True) -> Noise:
    """Variance components of one condition.

    codes [J] regime index of each job (0..R−1); table [J, n] per-item scores of every job on the same
    items in the same order, or [J] job-level values (then n = 1). The seed variances are the
    condition's own until `Noise.pooled` applies a sweep pool's prior; own_pool=False leaves them empty
    (no seed variance, no prior) for a caller that always pools, sparing the condition's own prior fit.
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
    job = table.mean(axis=1)  # [J]
    job_var = np.full(n_reg, np.nan)
    ss_res, df_s = 0.0, 0
    for r in np.flatnonzero(n_seeds >= 2):
        y, jm = table[codes == r], job[codes == r]  # [n_r, n], [n_r]
        job_var[r] = float(jm.var(ddof=1))
        if n > 1:
            ss_res += float(((y - jm[:, None] - m[r][None, :] + jm.mean()) ** 2).sum())
        df_s += len(y) - 1
    df_e = df_s * (n - 1)
    empty = {} if own_pool else {"seed_var": np.zeros(n_reg), "seed_df": np.zeros(n_reg),
                                 "outlier": np.zeros(n_reg, dtype=bool)}
    return Noise(m=m, n_seeds=n_seeds, job_var=job_var, job_df=np.maximum(n_seeds - 1, 0).astype(float),
                 ms_resid=ss_res / df_e if df_e else 0.0, df_resid=float(df_e), **empty)


def assumed_prior(seed_sd: float, key: str = "assumed") -> SeedPrior:
    """A pool whose job-mean variance is supplied (`race report --assume-seed-sd`): s0² = sd², df = inf.
    With one seed per regime the per-item table already carries the evaluation residual, so sd² is the
    training-run part alone."""
    return SeedPrior(key, float(seed_sd) ** 2, math.inf, math.inf, 0, assumed=True)


# --- a sweep's pools --------------------------------------------------------------------------


def fit_pools(noises: list[Noise], keys: list[str]) -> dict[str, SeedPrior]:
    """One prior per pool key over every regime of the conditions carrying that key."""
    out = {}
    for k in dict.fromkeys(keys):
        s = np.concatenate([n.job_var for n, kk in zip(noises, keys) if kk == k])
        d = np.concatenate([n.job_df for n, kk in zip(noises, keys) if kk == k])
        out[k] = fit_prior(s, d, key=k)
    return out


# --- a contrast's parts -------------------------------------------------------------------------


@dataclass
class Parts:
    """The variance parts of contrasts [K] (see the module docstring) and their df."""

    item: np.ndarray
    resid: np.ndarray
    seed: np.ndarray
    df_item: float
    df_resid: float
    df_seed: np.ndarray

    @property
    def var(self) -> np.ndarray:
        return np.maximum(self.item - self.resid, 0.0) + self.seed

    @property
    def se(self) -> np.ndarray:
        return np.sqrt(self.var)


@dataclass
class NoiseStack:
    """Noises of conditions of one shape (`stack_key`) stacked on a leading axis C: what contrast parts read."""

    m: np.ndarray  # [C, R, n]
    n_seeds: np.ndarray  # [C, R]
    ms_resid: np.ndarray  # [C]
    df_resid: float  # shared by the stack
    seed_var: np.ndarray  # [C, R]
    seed_df: np.ndarray  # [C, R]
    has_seed_noise: bool  # shared by the stack

    @property
    def n(self) -> int:
        return self.m.shape[-1]


def stack_key(noise: Noise) -> tuple:
    """Conditions with one key stack: regimes, items, residual df and whether seed noise was measured."""
    return len(noise.n_seeds), noise.n, noise.df_resid, noise.has_seed_noise


def stack(noises: list[Noise]) -> NoiseStack:
    """The noises (one `stack_key`) on a leading axis."""
    first = noises[0]
    return NoiseStack(m=np.stack([x.m for x in noises]), n_seeds=np.stack([x.n_seeds for x in noises]),
                      ms_resid=np.array([x.ms_resid for x in noises], float), df_resid=first.df_resid,
                      seed_var=np.stack([x.seed_var for x in noises]), seed_df=np.stack([x.seed_df for x in noises]),
                      has_seed_noise=first.has_seed_noise)


def contrast_parts(noise: Noise, c: np.ndarray) -> Parts:
    """Parts of the contrasts c [K, R] (a row e_r is regime r's mean; e_a − e_b a paired gap)."""
    p = stacked_parts(stack([noise]), c)
    return Parts(p.item[0], p.resid[0], p.seed[0], p.df_item, p.df_resid, p.df_seed[0])


def stacked_parts(st: NoiseStack, c: np.ndarray) -> Parts:
    """contrast_parts for every condition of a stack at once: arrays [C, K], the same values."""
    c = np.atleast_2d(np.asarray(c, float))
    n, C, K = st.n, len(st.m), len(c)
    w = c ** 2 / np.maximum(st.n_seeds, 1)[:, None, :]  # [C, K, R] c_r² / n_r
    if n > 1:
        item = (c @ st.m).var(axis=-1, ddof=1) / n
        df_item = n - 1.0
    elif st.has_seed_noise:
        item, df_item = np.zeros((C, K)), math.inf  # job-level values: everything is in the seed part
    else:
        item, df_item = np.full((C, K), np.nan), math.inf  # one value per regime: nothing to estimate from
    resid = w.sum(axis=-1) * st.ms_resid[:, None] / n if (n > 1 and st.df_resid) else np.zeros((C, K))
    seed_df = st.seed_df[:, None, :]  # [C, 1, R]
    seed_r = w * st.seed_var[:, None, :]  # [C, K, R]
    seed = seed_r.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        den = np.where(seed_df > 0, seed_r ** 2 / np.where(seed_df > 0, seed_df, 1), 0.0).sum(axis=-1)
        df_seed = np.where(den > 0, seed ** 2 / np.where(den > 0, den, 1), np.where(seed > 0, np.inf, 0.0))
    # regimes moderated by one prior share its estimate: never more df than the most of any one of them
    top = np.where(seed_r > 0, seed_df, 0.0).max(axis=-1)
    df_seed = np.minimum(df_seed, np.where(seed > 0, top, df_seed))
    return Parts(item=item, resid=resid, seed=seed, df_item=df_item,
                 df_resid=st.df_resid if st.df_resid else math.inf, df_seed=df_seed)
