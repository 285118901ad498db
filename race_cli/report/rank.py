"""Rank allocation regimes within each condition (no I/O; statistics from race_cli/stats).

A *condition* is a group of jobs that share the `by` columns (default: model, budget,
reward system, task) scored on one evaluation target. Within it a *regime* is
one setting of the allocation knobs (group_size G, updates_per_batch μ, prompts per
iteration, and any condition column left out of `by`); seeds are repeats of a regime.

Intervals and decisions come from race_cli/stats: per regime, item noise (paired across regimes:
every job scored the same item ids) plus training (seed) noise, whose variance is pooled over every
regime of the sweep with the same reward system and moderated per regime (empirical Bayes), each part
at its own degrees of freedom. Per regime it reports:

- `mean`, `ci_lo`, `ci_hi`: the regime's mean target and its 95% interval; `sel_lo`, `sel_hi`: the same
  simultaneous over the condition's regimes, the interval that still holds for the regime the data
  picked as best (used wherever the best's value is reported or predicted);
- `p_best`: the share of draws (items resampled, seed noise added) in which the regime is best —
  a ranking score, not a calibrated probability (shown as "best share");
- `tied_best` ("≈ best"): not shown worse than the pilot-best regime by the step-down studentized range
  over all pairs (REGWQ, familywise 5%); `gap_ci_lo` the gap's lower bound at the range's first step;
- `start`, `gain`, `gain_ci_lo/hi`: the starting policy's score (the condition's iteration-0
  evaluations, pooled: one checkpoint), the improvement over it (final − start; start − final for
  a lower-is-better target) and its interval, items paired; `beats_start` by Holm on one-sided
  bounds over the regimes (familywise 2.5%). A ranking in which no regime beats its start orders
  regimes that did not learn: it is not a finding;
- `testable`: False with one seed per regime and no --assume-seed-sd: then no regime is called worse
  or "> start" (intervals cover evaluation noise only: "not testable with one seed");
- `seed_sd`, `seed_df`, `seed_outlier`, `pool`, `noise`: the seed variance used, its df, whether the
  regime's own spread is an outlier against the pool's prior, and which pool it came from;
- `collapsed_seeds`: the regime's seeds far below their siblings, by stats/seeds.py's stated rule
  ('<job id> −0.150 against its siblings'; empty when none): marked, never dropped;
- `expected_drop`: the winner's curse of the condition's best (stats.decisions.winners_curse);
- `p`, `p_policy` (learning / (search + learning)) and the shares, from the actual ledgers.

The older two-stage bootstrap (bootstrap_regimes, summarize_draws) stays for callers that want
raw draws; the ranking does not use it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from race_cli.report.words import NOT_TESTABLE
from race_cli.fmt import value as _fmt  # a knob's value in a label (joint.py, labels.py import it from here)
from race_cli.report.table import CONDITION_COLS, SweepData

SHORT = {"group_size": "G", "updates_per_batch": "μ", "update_group_size": "m", "prompts_per_iter": "B",
         "budget_flops": "C", "model": "model", "reward": "reward"}


# --- regimes ---------------------------------------------------------------------------


def regime_columns(jobs: pd.DataFrame, knob_cols: list[str], by: list[str]) -> list[str]:
    """Allocation columns that vary: the knobs, plus condition columns not grouped by, minus `by`."""
    cols = [k for k in knob_cols if k not in by and k in jobs and jobs[k].nunique(dropna=True) > 1]
    cols += [c for c in CONDITION_COLS if c not in by and c not in cols and c in jobs
             and jobs[c].nunique(dropna=True) > 1]
    if "update_group_size" in cols and "group_size" in jobs and (jobs["update_group_size"] == jobs["group_size"]).all():
        cols.remove("update_group_size")  # no job down-samples: m is G everywhere, "G=8 m=8" says nothing more
    return cols


def label(values: dict[str, object]) -> str:
    """{'group_size': 4, 'updates_per_batch': 2} -> 'G=4 μ=2'."""
    return " ".join(f"{SHORT.get(k, k)}={_fmt(v)}" for k, v in values.items()) or "(one regime)"


def condition_label(values: dict[str, object]) -> str:
    return " ".join(f"{k}={_fmt(v)}" for k, v in values.items()) or "(all jobs)"


def label_jobs(jobs: pd.DataFrame, by: list[str], reg_cols: list[str]) -> pd.DataFrame:
    """A copy of `jobs` with `condition` and `regime` label columns (as the ranking names them)."""
    out = jobs.copy()
    cond_vals = out[by].astype(object).to_numpy() if by else np.empty((len(out), 0))
    reg_vals = out[reg_cols].astype(object).to_numpy() if reg_cols else np.empty((len(out), 0))
    out["condition"] = [condition_label(dict(zip(by, v))) for v in cond_vals]
    out["regime"] = [label(dict(zip(reg_cols, v))) for v in reg_vals]
    return out


# --- the bootstrap ---------------------------------------------------------------------


def bootstrap_regimes(regime_of_job: np.ndarray, values: np.ndarray, scores: np.ndarray | None,
                      n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap draws of every regime's mean target: array [n_boot, R].

    regime_of_job [J] ints 0..R-1; values [J] job-level targets (used when scores is None);
    scores [J, n] per-item scores on the same item order for every job, or None.
    One draw: item weights shared by all jobs (paired), then each regime's seeds resampled.
    """
    return bootstrap_many(regime_of_job, [(values, scores)], n_boot, rng)[0]


def bootstrap_many(regime_of_job: np.ndarray, series: list[tuple[np.ndarray, np.ndarray | None]],
                   n_boot: int, rng: np.random.Generator) -> list[np.ndarray]:
    """bootstrap_regimes for several per-job quantities at once, with the *same* draws.

    series: (values [J], scores [J, n] or None) per quantity, e.g. the final score and the
    gain over the start (final − initial, item by item). Every quantity with per-item scores
    must list the same n items in the same order: one draw of item weights serves them all,
    and one draw of seeds per regime, so the draws of different quantities are paired.
    Returns one array [n_boot, R] per quantity.
    """
    n_reg = int(regime_of_job.max()) + 1
    with_items = [i for i, (_, sc) in enumerate(series) if sc is not None]
    job_means: list[np.ndarray] = [np.broadcast_to(v, (n_boot, len(v))) for v, _ in series]  # [B, J]
    if with_items:
        n = series[with_items[0]][1].shape[1]
        pick = rng.integers(0, n, size=(n_boot, n)) + n * np.arange(n_boot)[:, None]
        w = np.bincount(pick.ravel(), minlength=n_boot * n).reshape(n_boot, n)  # [B, n] counts
        stacked = np.vstack([series[i][1] for i in with_items])  # [J·q, n]
        # float32 halves the cost; exact for 0/1 scores (integer sums < 2^24), ~1e-7 relative otherwise
        means = (w.astype(np.float32) @ stacked.T.astype(np.float32)).astype(float) / n  # [B, J·q]
        n_jobs = len(regime_of_job)
        for k, i in enumerate(with_items):
            job_means[i] = means[:, k * n_jobs:(k + 1) * n_jobs]
    outs = [np.empty((n_boot, n_reg)) for _ in series]
    n_seeds = np.bincount(regime_of_job, minlength=n_reg)
    order = np.argsort(regime_of_job, kind="stable")  # job indices grouped by regime
    starts = np.concatenate([[0], np.cumsum(n_seeds)[:-1]])
    for k in np.unique(n_seeds):  # regimes with k seeds are resampled together
        regs = np.flatnonzero(n_seeds == k)
        jobs_of = order[starts[regs][:, None] + np.arange(k)]  # [R_k, k] job indices
        pick = rng.integers(0, k, size=(n_boot, len(regs), k))  # seeds with replacement
        chosen = jobs_of[np.arange(len(regs))[None, :, None], pick]  # [B, R_k, k]
        for out, jm in zip(outs, job_means):
            out[:, regs] = jm[np.arange(n_boot)[:, None, None], chosen].mean(axis=2)
    return outs


def _draw_stats(point: np.ndarray, draws: np.ndarray, level: float = 0.95,
                maximize: bool = True) -> dict[str, np.ndarray]:
    """Column arrays of summarize_draws (no DataFrame: the report calls this per condition)."""
    sign = 1.0 if maximize else -1.0
    a = (1 - level) / 2
    lo, hi = np.quantile(draws, [a, 1 - a], axis=0)
    d = sign * draws
    top = d.max(axis=1, keepdims=True)
    is_top = d >= top - 1e-12  # [B, R]
    p_best = (is_top / is_top.sum(axis=1, keepdims=True)).mean(axis=0)
    best = int(np.argmax(sign * point))
    gap = d[:, [best]] - d  # [B, R] best minus regime, in the "better" direction
    gap_lo = np.quantile(gap, a, axis=0)
    ranks = 1 + (sign * point[None, :] > sign * point[:, None]).sum(axis=1)  # "min" ranks, 1 = best
    return {"mean": point, "ci_lo": lo, "ci_hi": hi, "p_best": p_best,
            "gap_to_best": sign * (point[best] - point), "gap_ci_lo": gap_lo,
            "tied_best": gap_lo <= 0, "rank": ranks, "is_best": np.arange(len(point)) == best}


def summarize_draws(point: np.ndarray, draws: np.ndarray, level: float = 0.95,
                    maximize: bool = True) -> pd.DataFrame:
    """Per regime: interval, best share, rank and whether it is within the bootstrap's interval of the best.

    point [R] point estimates; draws [B, R] bootstrap draws (higher is better unless
    maximize=False).
    """
    return pd.DataFrame(_draw_stats(point, draws, level, maximize))


# --- one condition, then all -------------------------------------------------------------


def _item_matrix(keys: list[tuple[str, str]], target: str,
                 items: dict) -> tuple[np.ndarray | None, str, tuple | None]:
    """Stack per-item scores of these jobs in sorted item-id order: (matrix, method, columns).

    Sorting by id makes the bootstrap independent of the order a job listed its items in.
    columns = (ids in column order, the id list every job shared or None, its argsort);
    without a common set of items: (None, why not, None).
    """
    got = [items.get((s, j, target)) for s, j in keys]
    if any(g is None for g in got):
        return None, "seeds only (some jobs lack per-item scores)", None
    ids0 = got[0][0]
    if all(g[0] == ids0 for g in got):  # the usual case; columns in sorted-id order, as below
        order = np.argsort(np.asarray(ids0, dtype=object), kind="stable")
        ids = [ids0[i] for i in order]
        return (np.vstack([g[1] for g in got])[:, order], f"items (paired, n={len(ids0)}) × seeds",
                (ids, ids0, order))
    common = set(ids0).intersection(*[set(g[0]) for g in got[1:]])
    if not common:
        return None, "seeds only (jobs share no item ids)", None
    order = sorted(common)
    mat = np.vstack([pd.Series(g[1], index=g[0]).loc[order].to_numpy() for g in got])
    most = max(len(g[0]) for g in got)
    if len(order) == most:  # same ids, listed in different orders
        return mat, f"items (paired, n={most}) × seeds", (order, None, None)
    return mat, f"items (paired, {len(order)} common ids of {most}) × seeds", (order, None, None)


def _start_matrix(keys: list[tuple[str, str]], target: str, items_initial: dict,
                  columns: tuple) -> np.ndarray | None:
    """Per-item scores of the starting policy on exactly the final matrix's columns, or None."""
    got = [items_initial.get((s, j, target)) for s, j in keys]
    if any(g is None for g in got):
        return None
    ids, ids0, order = columns
    if ids0 is not None and all(g[0] == ids0 for g in got):  # listed as the final scores were
        return np.vstack([g[1] for g in got])[:, order]
    rows = []
    for g in got:
        if g[0] == ids:
            rows.append(g[1])
            continue
        sr = pd.Series(g[1], index=g[0])
        if sr.index.has_duplicates or not set(ids) <= set(sr.index):
            return None
        rows.append(sr.loc[ids].to_numpy())
    return np.vstack(rows)


def _gain_inputs(jobs: dict[str, np.ndarray], keys, target: str, data_initial: dict, columns, scores,
                 values: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, str]:
    """Per-job gain over the start and, when the start was scored item by item, per-item gains.

    jobs: the condition's job arrays (`_job_arrays`). Returns (gain values [J] or None, gain scores
    [J, n] or None, start values [J] or None, how the interval is drawn).
    """
    start = None
    if scores is not None:
        start = _start_matrix(keys, target, data_initial, columns)
    if start is not None:
        # the starting policy is one checkpoint for the whole condition: its per-item score is the
        # mean of every job's iteration-0 evaluation (each job sampled it afresh), so one job's
        # start-evaluation luck does not pass for training noise in its gain
        pooled = np.broadcast_to(start.mean(axis=0), start.shape)
        d = scores - pooled  # [J, n] item by item: final − start, same items (paired)
        return (d.mean(axis=1), d, pooled.mean(axis=1),
                f"items (paired with the start, pooled over the condition's {len(start)} jobs) × seeds")
    if "start" not in jobs:
        return None, None, None, "no starting evaluation recorded"
    init = jobs["start"]
    if not np.isfinite(init).all():
        return None, None, None, "no starting evaluation recorded for some jobs"
    return values - init, None, init, "seeds only (no per-item start scores)"


def rank_condition(jobs: pd.DataFrame, reg_cols: list[str], target: str, items: dict,
                   n_boot: int, rng: np.random.Generator, maximize: bool = True,
                   level: float = 0.95, items_initial: dict | None = None,
                   assume_seed_sd: float | None = None) -> pd.DataFrame:
    """Rank the regimes of one condition's ranked jobs (done, readable, target recorded), its seed
    variance pooled over its own regimes only."""
    from race_cli.stats import decisions as D

    arrays = _job_arrays(jobs, reg_cols, target)
    codes, regs = _number_regimes(_regime_rows(arrays, reg_cols), reg_cols)
    inp = _condition_inputs(arrays, codes, regs, reg_cols, target, items, items_initial or {})
    noise, gnoise = _noises(inp, _prior_for(inp["noise"], None, assume_seed_sd), maximize)
    dec = D.rank_decisions(noise, maximize, level)
    gd = D.gain_decisions(gnoise, level) if gnoise is not None else None
    return pd.DataFrame(_condition_columns(inp, noise, dec, gd, n_boot, rng, maximize)[0])


SHARE_COLS = ["p", "share_search", "share_learning", "share_feedback", "budget_spent", "flops_total",
              "informative_share"]  # per-job costs the ranking averages per regime


def _job_arrays(jobs: pd.DataFrame, reg_cols: list[str], target: str) -> dict[str, np.ndarray]:
    """The columns of `jobs` the ranking reads, as numpy arrays in row order: sweep, job_id, `value`
    (eval/<target>), `start` (eval_initial/<target> as numbers; absent when no job recorded it), the
    regime columns as objects and the SHARE_COLS present. Taken once for a whole sweep and cut per
    condition (`{k: a[rows] ...}`): a pandas lookup per condition and column cost seconds on 800 conditions."""
    out = {"sweep": jobs["sweep"].to_numpy(object), "job_id": jobs["job_id"].to_numpy(object),
           "value": jobs[f"eval/{target}"].to_numpy(float)}
    if f"eval_initial/{target}" in jobs:
        out["start"] = pd.to_numeric(jobs[f"eval_initial/{target}"], errors="coerce").to_numpy(float)
    out |= {c: jobs[c].astype(object).to_numpy() for c in reg_cols}
    out |= {c: jobs[c].to_numpy(float) for c in SHARE_COLS if c in jobs}
    return out


def _regime_rows(arrays: dict[str, np.ndarray], reg_cols: list[str]) -> tuple[tuple, ...]:
    """Each job's regime values, one tuple per job, each value as (type, value): 1 == True and 4 == 4.0,
    but a regime numbered for one must not be reused for the other (`_number_regimes` caches on these)."""
    columns = [arrays[c] for c in reg_cols]
    return tuple(tuple((type(a[i]), a[i]) for a in columns) for i in range(len(arrays["sweep"])))


def _number_regimes(rows: tuple[tuple, ...], reg_cols: list[str]) -> tuple[np.ndarray, list[dict]]:
    """(codes [J], regimes): each job's regime index 0..R-1 in order of first appearance, and each regime's
    {column: value} as pandas types them (pd.factorize over the jobs' values). rows: `_regime_rows`."""
    if not reg_cols:
        return np.zeros(len(rows), dtype=int), [{}]
    values = [np.array([row[i][1] for row in rows], dtype=object) for i in range(len(reg_cols))]
    codes, uniq = pd.factorize(pd.MultiIndex.from_arrays(values, names=reg_cols))
    return codes, [dict(zip(reg_cols, u)) for u in uniq]


def _condition_inputs(jobs: dict[str, np.ndarray], codes: np.ndarray, regs: list[dict], reg_cols: list[str],
                      target: str, items: dict, items_initial: dict) -> dict:
    """One condition's matrices and raw noise (the seed pool is applied later, over the sweep).

    jobs: the condition's `_job_arrays`; codes, regs: its regimes (`_number_regimes`)."""
    from race_cli.stats.variance import noise_of

    keys = list(zip(jobs["sweep"], jobs["job_id"]))
    scores, method, columns = _item_matrix(keys, target, items)
    values = jobs["value"] if scores is None else scores.mean(axis=1)
    gain_v, gain_s, start_v, gain_method = _gain_inputs(jobs, keys, target, items_initial, columns,
                                                        scores, values)
    n_reg = len(regs)
    shares = {c: jobs[c] for c in SHARE_COLS if c in jobs}
    return {"codes": codes, "regs": regs, "reg_cols": reg_cols, "scores": scores, "values": values,
            "job_ids": jobs["job_id"],
            "method": method, "gain_v": gain_v, "gain_s": gain_s, "start_v": start_v, "gain_method": gain_method,
            # pooled later (`_noises`): the condition's own prior would only be replaced
            "noise": noise_of(codes, scores if scores is not None else values, n_reg, own_pool=False),
            "shares": shares}


def _prior_for(noise, pooled, assume_seed_sd):
    """The seed prior a condition uses: the assumed one, else the sweep pool's, else its own regimes'."""
    from race_cli.stats import variance as V

    if assume_seed_sd is not None and not (noise.job_df > 0).any():
        return V.assumed_prior(assume_seed_sd)
    if pooled is not None:
        return pooled
    p = V.fit_prior(noise.job_var, noise.job_df, key="this condition")
    return p if p.df_total else None


def pool_key(cond: dict) -> str:
    """The seed-variance pool of a condition: its reward system (rule and model rewards spread differently;
    docs/report.md), on the ranking's one target; every regime of the sweep with that reward shares it."""
    return f"reward={cond['reward']}" if "reward" in cond else "all conditions"


def _noises(inp: dict, prior, maximize: bool) -> tuple:
    """(noise, gain noise or None) of one condition: its seed variances moderated by the pool's prior; the
    gain's is the final's seed noise with the start's item noise (per-item starts) or the job-level gains'
    own spread. A gain is always an improvement: final − start, or start − final for lower-is-better."""
    from race_cli.stats.variance import Noise, noise_of

    noise = inp["noise"].pooled(prior)
    gain_v, gain_s, scores = inp["gain_v"], inp["gain_s"], inp["scores"]
    if gain_v is None:
        return noise, None
    sign = 1.0 if maximize else -1.0
    if gain_s is not None:  # final − pooled start: the final's seed noise, the start's item noise
        return noise, Noise(m=sign * (noise.m - (scores - gain_s)[0][None, :]), n_seeds=noise.n_seeds,
                            job_var=noise.job_var, job_df=noise.job_df, ms_resid=noise.ms_resid,
                            df_resid=noise.df_resid, seed_var=noise.seed_var, seed_df=noise.seed_df,
                            outlier=noise.outlier, prior=noise.prior)
    gnoise = noise_of(inp["codes"], sign * gain_v, len(inp["regs"]))  # job-level gains: their own spread
    if prior is not None and prior.assumed:
        gnoise = gnoise.pooled(prior)
    return noise, gnoise


def _condition_columns(inp: dict, noise, dec, gd, n_boot, rng, maximize,
                       weights: dict[int, np.ndarray] | None = None) -> tuple[dict, np.ndarray]:
    """The ranking table of one condition as column arrays, rows sorted best first; and the draws [B, R]
    of the regime means in that row order (the response fit bootstraps p* from them). noise: `_noises`;
    dec, gd: its stats/decisions.rank_decisions and gain_decisions records (gd None without a gain).

    weights: item resamples [B, n] by item count n, drawn on first use and shared by the conditions of one
    ranking that have as many items: each condition's draws stay a bootstrap of its own items (the draws of
    two conditions are never combined), and one resample per n is drawn instead of one per condition
    (each draw is a large array; hundreds of conditions share a handful of item counts).

    Intervals, ≈ best (REGWQ), beats its start (Holm on bounds), the winner's interval and curse, and the
    draws come from race_cli/stats: item noise per regime plus seed noise moderated by the sweep pool's
    prior."""
    from race_cli.stats import draws as W

    codes, regs, scores = inp["codes"], inp["regs"], inp["scores"]
    reg_cols = inp["reg_cols"]
    n_reg = len(regs)
    n_seeds = np.bincount(codes, minlength=n_reg)
    mean_of = lambda v: np.bincount(codes, weights=v, minlength=n_reg) / n_seeds  # per regime
    sign = 1.0 if maximize else -1.0
    weights = {} if weights is None else weights
    if noise.n > 1 and noise.n not in weights:
        weights[noise.n] = W.item_weights(noise.n, n_boot, rng)
    draws = W.draws_of(noise, n_boot, rng, weights.get(noise.n) if noise.n > 1 else None)
    point = dec["mean"]
    cols: dict[str, np.ndarray] = {"regime": np.array([label(r) for r in regs], dtype=object)}
    ranks = 1 + (sign * point[None, :] > sign * point[:, None]).sum(axis=1)  # "min" ranks, 1 = best
    cols.update({k: dec[k] for k in ("mean", "ci_lo", "ci_hi", "sel_lo", "sel_hi")})
    cols["p_best"] = W.p_best(draws, maximize)
    cols.update({k: dec[k] for k in ("gap_to_best", "gap_ci_lo", "tied_best")})
    cols["rank"], cols["is_best"] = ranks, np.arange(n_reg) == dec["best"]
    cols["se"], cols["df"] = dec["se"], dec["df"]
    seeded = noise.has_seed_noise
    cols["seed_sd"] = np.where(seeded, np.sqrt(noise.pure_seed_var), np.nan)
    cols["seed_df"] = np.where(seeded, noise.seed_df, 0.0)
    cols["seed_outlier"] = noise.outlier.copy()
    cols["expected_drop"] = np.full(n_reg, dec["expected_drop"])
    if gd is not None:
        cols.update({"start": mean_of(inp["start_v"]), "gain": gd["gain"], "gain_ci_lo": gd["gain_ci_lo"],
                     "gain_ci_hi": gd["gain_ci_hi"], "beats_start": gd["beats_start"]})
    else:
        nan = np.full(n_reg, np.nan)
        cols.update({"start": nan, "gain": nan.copy(), "gain_ci_lo": nan.copy(), "gain_ci_hi": nan.copy(),
                     "beats_start": np.zeros(n_reg, dtype=bool)})
    cols["testable"] = np.full(n_reg, bool(dec["testable"]))
    cols["pool"] = np.full(n_reg, pool_note(noise), dtype=object)
    cols["gain_method"] = np.full(n_reg, inp["gain_method"], dtype=object)
    cols.update({c: np.array([r[c] for r in regs], dtype=object) for c in reg_cols})
    cols["n_seeds"] = n_seeds
    cols["n_items"] = np.full(n_reg, 0 if scores is None else scores.shape[1])
    cols["method"] = np.full(n_reg, inp["method"], dtype=object)
    cols["noise"] = np.full(n_reg, noise_note(noise), dtype=object)
    cols["seed_noise"] = np.full(n_reg, seeded)
    for c, v in inp["shares"].items():
        cols[c] = mean_of(v)
    if "share_search" in cols and "share_learning" in cols:  # comparable across reward systems
        with np.errstate(invalid="ignore", divide="ignore"):
            cols["p_policy"] = cols["share_learning"] / (cols["share_search"] + cols["share_learning"])
    order = np.lexsort((cols["regime"].astype(str), cols["rank"]))
    return {k: v[order] for k, v in cols.items()}, draws[:, order]


ONE_SEED = ("one seed per regime: intervals cover evaluation noise only, not training (seed) noise; ≈ best and "
            f"> start {NOT_TESTABLE} (race report --assume-seed-sd X supplies the seed term)")


def pool_note(noise) -> str:
    """Which pool the seed variance came from, with its prior and degrees of freedom."""
    p = noise.prior
    if p is None or not noise.has_seed_noise:
        return "none (one seed per regime)"
    if p.assumed:
        return f"assumed seed sd {p.s0_sq ** 0.5:.3g} (--assume-seed-sd), df ∞"
    d0 = "∞" if not np.isfinite(p.d0) else f"{p.d0:.1f}"
    return (f"{p.key}: {p.n_regimes} regimes, {p.df_total:.0f} df, prior sd {p.s0_sq ** 0.5:.3g}, d0 {d0}; "
            f"seed df used {np.min(noise.seed_df):.1f}")


def noise_note(noise) -> str:
    if not noise.has_seed_noise:
        return ONE_SEED
    p = noise.prior
    if p is not None and p.assumed:
        return f"assumed seed sd {p.s0_sq ** 0.5:.3g} (--assume-seed-sd): the seed term is supplied, not measured"
    out = f"seed noise pooled over {p.n_regimes if p else 0} regimes of {p.key if p else 'this condition'} " \
          f"({np.min(noise.seed_df):.0f} df, moderated)"
    if noise.outlier.any():
        out += f"; {int(noise.outlier.sum())} regime(s) with an outlying seed spread"
    return out


def rankable(jobs: pd.DataFrame, target: str) -> pd.Series:
    """Jobs the ranking uses: done, readable, with a finite eval/<target>."""
    col = f"eval/{target}"
    if col not in jobs:
        return pd.Series(False, index=jobs.index)
    return (jobs["state"] == "done") & jobs["readable"].astype(bool) & np.isfinite(
        pd.to_numeric(jobs[col], errors="coerce"))


def group_rows(table: pd.DataFrame, by: list[str], sort: bool = True) -> list[tuple[tuple, np.ndarray]]:
    """(key, row positions) of each group of `table` by the `by` columns, as `table.groupby(by, dropna=False,
    sort=sort)` orders and keys them (a tuple of the `by` values; its rows in table order), from one
    grouping of the whole table: no DataFrame per group. No `by`: one group of every row, key ()."""
    if not by:
        return [((), np.arange(len(table)))]
    groups = table.groupby(by, dropna=False, sort=sort)
    number = groups.ngroup().to_numpy()
    keys = list(groups.size().index)
    rows = np.split(np.argsort(number, kind="stable"), np.cumsum(np.bincount(number, minlength=len(keys)))[:-1])
    return [(k if isinstance(k, tuple) else (k,), r) for k, r in zip(keys, rows)]


def condition_noises(data: SweepData, target: str, by: list[str], maximize: bool = True,
                     assume_seed_sd: float | None = None, jobs: pd.DataFrame | None = None,
                     reg_cols: list[str] | None = None) -> tuple[list[dict], list[dict], list[tuple]]:
    """Every condition's inputs and noises, as the ranking computes them: (condition values, inputs,
    (noise, gain noise or None)) per condition in group order. jobs: the rankable jobs to use (default: all
    of `data`'s); reg_cols: the regime columns (default: those varying among `jobs`). Seed variance is pooled
    over every regime of these jobs that shares a pool (`pool_key`), moderated per regime."""
    from race_cli.stats.variance import fit_pools

    jobs = data.jobs[rankable(data.jobs, target)] if jobs is None else jobs
    reg_cols = regime_columns(jobs, data.knob_cols, by) if reg_cols is None else reg_cols
    arrays = _job_arrays(jobs, reg_cols, target)
    regime_rows = _regime_rows(arrays, reg_cols)
    numbered: dict[tuple, tuple] = {}  # conditions whose jobs list the same regimes in the same order (most)
    conds, inputs = [], []
    for key, rows in group_rows(jobs, by):
        conds.append(dict(zip(by, key)))
        regimes = tuple(regime_rows[i] for i in rows)
        if regimes not in numbered:
            numbered[regimes] = _number_regimes(regimes, reg_cols)
        inputs.append(_condition_inputs({k: a[rows] for k, a in arrays.items()}, *numbered[regimes], reg_cols,
                                        target, data.items, data.items_initial))
    keys = [pool_key(c) for c in conds]
    pools = fit_pools([i["noise"] for i in inputs], keys)
    noises = [_noises(inp, _prior_for(inp["noise"], pools[k] if pools[k].df_total else None, assume_seed_sd),
                      maximize) for inp, k in zip(inputs, keys)]
    return conds, inputs, noises


def collapsed_marks(conds: list[dict], inputs: list[dict], maximize: bool = True) -> list[dict[str, str]]:
    """Per condition, regime label -> its collapsed seeds in words ('job-id −0.150 below its siblings'), by
    stats/seeds.py's rule over the seed pool the ranking pools (`pool_key`); regimes without one are absent."""
    from race_cli.stats.seeds import collapsed, sibling_gaps

    gaps = [sibling_gaps(inp["codes"], inp["values"], maximize) for inp in inputs]
    pools: dict[str, list[int]] = {}
    for c, cond in enumerate(conds):
        pools.setdefault(pool_key(cond), []).append(c)
    out: list[dict[str, str]] = [{} for _ in conds]
    for at in pools.values():
        for c, flag in zip(at, collapsed([gaps[c] for c in at])):
            inp = inputs[c]
            for j in np.flatnonzero(flag):
                name = label(inp["regs"][inp["codes"][j]])
                said = f"{inp['job_ids'][j]} {-gaps[c][j]:+.3f} against its siblings"
                out[c][name] = f"{out[c][name]}; {said}" if name in out[c] else said
    return out


def rank_all(data: SweepData, target: str, by: list[str], n_boot: int = 1000, seed: int = 0,
             maximize: bool = True, level: float = 0.95,
             draws_out: dict[str, np.ndarray] | None = None,
             assume_seed_sd: float | None = None) -> pd.DataFrame:
    """The ranking table of every condition: condition columns, then one row per regime.

    A condition is the `by` columns plus the evaluation target: `condition` labels both,
    `job_condition` only the `by` part (what a job belongs to, whatever it was scored on).
    Seed variance is pooled over every regime of the sweep that shares a pool (`pool_key`: the reward
    system), moderated per regime (race_cli/stats/variance.py). assume_seed_sd supplies the seed term
    where a condition has one seed per regime. draws_out, when given, receives {condition: draws [B, R]}.
    """
    from race_cli.stats import decisions as D

    rng = np.random.default_rng(seed)
    conds, inputs, noises = condition_noises(data, target, by, maximize, assume_seed_sd)
    parts: list[dict] = []  # column arrays per condition, joined once at the end (fast)
    decs = D.rank_decisions_many([n for n, _ in noises], maximize, level)  # all conditions at once
    has_gain = [i for i, (_, g) in enumerate(noises) if g is not None]
    gds: list[dict | None] = [None] * len(noises)
    for i, gd in zip(has_gain, D.gain_decisions_many([noises[i][1] for i in has_gain], level)):
        gds[i] = gd
    weights: dict[int, np.ndarray] = {}  # item resamples by item count, shared (`_condition_columns`)
    marks = collapsed_marks(conds, inputs, maximize)
    for cond, inp, (noise, _), dec, gd, mark in zip(conds, inputs, noises, decs, gds, marks):
        cols, draws = _condition_columns(inp, noise, dec, gd, n_boot, rng, maximize, weights)
        cols["collapsed_seeds"] = np.array([mark.get(r, "") for r in cols["regime"]], dtype=object)
        n = len(cols["regime"])
        name = condition_label(cond | {"target": target})
        if draws_out is not None:
            draws_out[name] = draws
        head = {"condition": [name] * n, "target": [target] * n}
        head.update({c: [v] * n for c, v in cond.items()})
        head["job_condition"] = [condition_label(cond)] * n
        parts.append(head | cols)
    if not parts:
        return pd.DataFrame()
    return pd.DataFrame({k: np.concatenate([np.asarray(p[k], dtype=object if isinstance(p[k], list)
                                                       else None) for p in parts])
                         for k in parts[0]}).infer_objects()
