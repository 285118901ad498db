"""The joint, budget-matched comparison: every (model, reward, G, μ) at the same FLOPs (no I/O but
`joint_table`'s reading of one .hydra/config.yaml per model).

The within-condition rankings (rank.py) answer *search or learning* inside one (model, reward,
budget, target). Every job of a grid at one budget spent the same FLOPs, so the paper's other two
questions are answered by ranking all of them together, per (budget, task, target) — a *joint
condition*:

- **bigger policy or smaller trained longer**: the best regime of each model size against each
  other, as the paired difference of their final scores and, separately, of their gains over
  their own starting policies (the larger policy starts higher; each sentence says which one it is);
- **stronger feedback or more policy compute**: the best regime of each reward system against
  the best of each other, at every model size and across sizes (the rule reward spends ~0 FLOPs
  on feedback, a reward model its share of the same budget);
- **search or learning**: cited from the within-condition recommendations.

Pairing. Every job of a joint condition is scored on the same evaluation items (the items come
from the task's eval set, `task.eval_seed`, not from the model or the job's seed; the report
checks that the item ids agree), so item noise is paired across models and rewards exactly as it
is across regimes within a condition. When the jobs share no item ids the comparison falls back to
job-level scores (seeds only, unpaired) and says so.

Statistics: race_cli/stats (variance parts, decisions, the gatekept graph), nothing re-derived here.
The joint regimes' noise is `variance.noise_of` over all of them, the seed variance moderated per reward
system over the joint condition's regimes (rule and reward-model training noise differ); the joint
ranking is `decisions.rank_decisions` (≈ best: REGWQ over every pair) and `gain_decisions` (> start:
Holm on bounds), the best share comes from `draws.draws_of`. A gain is over the regime's *own* model's
start: the iteration-0 evaluation, item by item, averaged over every job of that model in the joint
condition (the reward does not change iteration 0).

The claims (the sentences that can name a winner) share one familywise α per joint condition through a
gatekept graph (stats/gatekeeping.joint_design, Bretz et al. 2009): size and feedback start with α/2
each, split over their pairs, on the allocation-by-allocation claim (for feedback, across sizes first);
a claim shown passes its level on (to best against best and to the gains; feedback across sizes to each
size), and a pair's last claims pass theirs to the other pairs. Every interval scales the item part at its
n − 1 df and the pure seed part at the seed df (the residual split, `_half`). A best-versus-best sentence
names a side ahead only when one of its regimes beats *every* regime of the other side (intersection–
union), at Dunnett's many-to-one critical value over that side's k regimes (the other side's true best
plays the common arm): under any truth in which the other side's best is at least as good, the chance of
naming a winner is within the claim's share. A claim whose gate stays shut is not tested. A difference
not shown is reported as not separated (report/words.py), never as a winner. benchmarks/bench_joint.py
measures the error rates and the power.

Across budgets (several `budget.flops` in one sweep, or per-checkpoint budgets: `joint_compare`
takes a table of (budget, job, item scores), whatever their source), the best model size and
feedback per budget, and the budget from which the larger policy is ahead of the smaller.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from race_cli.report import words as W
from race_cli.report.rank import SHORT, _fmt, label
from race_cli.report.records import Joint

ALPHA = 0.05
AXES = ("model", "reward")  # the condition columns ranked across: what the within rankings hold fixed
GROUP = ("budget", "task", "target")  # a joint condition
MAX_MODELS, MAX_REWARDS = 12, 6  # beyond this a joint condition holds separate experiments, not one grid
# why no side is named, the verdict (report/words.py) with its explanation
NOT_TESTABLE = (f"{W.NOT_TESTABLE} per regime (the interval covers evaluation noise only; "
                "race report --assume-seed-sd supplies the missing term)")
GATED = (f"{W.NOT_TESTED}: the claims before it in its gatekept sequence (allocation by allocation first) were not "
         "all shown, so no share of the 5% reached it (interval at 1 − 5%/N, for reference)")
NO_INTERVAL = (f"{W.NO_INTERVAL} (nothing to estimate the noise from: one value per regime, or identical ones), "
               "so no winner is named")


# --- input: one row per (budget, target, job) -------------------------------------------------


def joint_table(data, targets: list[str], ranked: dict[str, pd.Series]) -> pd.DataFrame:
    """The joint comparison's input from a read sweep: one row per (budget, target, ranked job).

    Columns: budget, task, target, sweep, job_id, model, reward, the knobs, seed, value (the final
    score), start_value, ids / scores (per-item final scores, or None), start_ids / start (the
    iteration-0 per-item scores, or None), share_feedback, iterations. Another source (per-checkpoint
    budgets) feeds `joint_compare` the same columns.
    """
    rows = []
    knobs = list(data.knob_cols)
    for t in targets:
        read = ["sweep", "job_id", "budget_flops", "task", "model", "reward", "seed", f"eval/{t}",
                f"eval_initial/{t}", "share_feedback", "iterations_actual"] + knobs
        jobs = data.jobs.loc[ranked[t], [c for c in dict.fromkeys(read) if c in data.jobs]]
        for j in jobs.to_dict("records"):  # a dict per job (a row Series each is slow on large sweeps)
            key = (j["sweep"], j["job_id"], t)
            fin, ini = data.items.get(key), data.items_initial.get(key)
            row = {"budget": float(j["budget_flops"]), "task": j.get("task"), "target": t,
                   "sweep": j["sweep"], "job_id": j["job_id"], "model": j["model"], "reward": j["reward"],
                   "seed": j.get("seed"), "value": float(j[f"eval/{t}"]),
                   "start_value": float(pd.to_numeric(j.get(f"eval_initial/{t}", np.nan), errors="coerce")),
                   "ids": list(fin[0]) if fin else None, "scores": np.asarray(fin[1], float) if fin else None,
                   "start_ids": list(ini[0]) if ini else None,
                   "start": np.asarray(ini[1], float) if ini else None,
                   "share_feedback": float(pd.to_numeric(j.get("share_feedback", np.nan), errors="coerce")),
                   "iterations": float(pd.to_numeric(j.get("iterations_actual", np.nan), errors="coerce"))}
            row.update({k: j.get(k) for k in knobs})
            rows.append(row)
    return pd.DataFrame(rows)


def with_checkpoints(table: pd.DataFrame, data, cps, targets: list[str]) -> pd.DataFrame:
    """`table` (the jobs' final scores, `checkpoint` 1) plus, for every budget fraction 0 < f < 1 the jobs
    were evaluated at (eval.at), the same jobs at that checkpoint: budget f·C, the checkpoint's per-item
    scores and iteration, `checkpoint` f. The learning rate is constant after warm-up, so a job at f·C
    stands for a job with budget f·C (the anytime check in docs/measurements/embedded-study.md). A checkpoint budget
    that some jobs of the sweep ran as their whole budget is left to those jobs (they are not mixed)."""
    from race_cli.report.frontier import sweep_at
    from race_cli.report.rank import rankable

    table = table.assign(checkpoint=1.0)
    key = lambda b, k, t: (f"{float(b):.6g}", str(k), str(t))  # f·C may differ from a written budget by an ulp
    finals = {key(*r) for r in zip(table["budget"], table["task"], table["target"])}
    parts = [table]
    for f in (x for x in cps.fractions if 0.0 < x < 1.0):
        d = sweep_at(data, cps, f)
        part = joint_table(d, targets, {t: rankable(d.jobs, t) for t in targets})
        if not len(part):
            continue
        part["budget"] = f * part["budget"]
        part["iterations"] = [float(cps.points[(sw, j)][f]["iteration"]) for sw, j in zip(part["sweep"], part["job_id"])]
        part["checkpoint"] = f
        keep = [key(*r) not in finals for r in zip(part["budget"], part["task"], part["target"])]
        parts.append(part[keep])
    return pd.concat(parts, ignore_index=True)


def model_sizes(sweep_dirs: list[Path], jobs: pd.DataFrame, tries: int = 5) -> dict[str, int]:
    """Linear parameters (N_body + N_head, race_cli/cost/flops.py) of each model, read from the
    `model.arch` block of one job's .hydra/config.yaml (bounded, C-speed safe YAML, the model block alone:
    folder.job_config_section);
    a model none of whose first `tries` configs can be read is left out (its sentences then name it
    without calling it larger or smaller)."""
    from race_cli import folder
    from race_cli.cost.flops import Arch
    from race_cli.errors import RaceError

    where = {Path(d).resolve().name: Path(d) for d in sweep_dirs}
    out: dict[str, int] = {}
    for model, g in jobs.groupby("model", sort=True):
        for sweep, job_id in list(zip(g["sweep"], g["job_id"]))[:tries]:
            try:
                model_cfg = folder.job_config_section(folder.job_dir(where[sweep], job_id), "model")
                arch = Arch.from_config(model_cfg["arch"])
                out[str(model)] = int(arch.n_body + arch.n_head)
                break
            except (KeyError, TypeError, ValueError, AttributeError, RaceError):
                continue
    return out


# --- one joint condition ------------------------------------------------------------------------


def _regime_label(model, reward, knobs: dict) -> str:
    rest = label(knobs) if knobs else ""
    return f"{model} · {reward}" + (f" · {rest}" if rest and rest != "(one regime)" else "")


def _aligned(g: pd.DataFrame) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """(final [J, n], start [J, n] or None, method) on the item ids every job shares, sorted;
    (None, None, why) when the jobs cannot be paired item by item."""
    if any(v is None for v in g["ids"]):
        return None, None, "seeds only, unpaired (some jobs lack per-item scores)"
    id_lists = list(g["ids"])
    if any(len(set(i)) != len(i) for i in id_lists):
        return None, None, "seeds only, unpaired (a job lists an item id twice)"
    common = set(id_lists[0]).intersection(*map(set, id_lists[1:]))
    if not common:
        return None, None, ("seeds only, unpaired (the jobs share no item ids: different models or "
                            "rewards were scored on different items, so items cannot be paired)")
    cols = sorted(common)

    def pick(ids, sc) -> np.ndarray:
        if len(ids) == len(cols) and list(ids) == cols:
            return np.asarray(sc, float)
        at = {k: i for i, k in enumerate(ids)}
        return np.asarray(sc, float)[[at[k] for k in cols]]
    final = np.vstack([pick(i, s) for i, s in zip(id_lists, g["scores"])])
    most = max(len(i) for i in id_lists)
    method = (f"items (paired across models and rewards, n={len(cols)}) × seeds" if len(cols) == most else
              f"items (paired, {len(cols)} common ids of {most}) × seeds")
    start = None
    if all(i is not None and len(set(i)) == len(i) and common <= set(i) for i in g["start_ids"]):
        start = np.vstack([pick(i, s) for i, s in zip(g["start_ids"], g["start"])])
    return final, start, method


def _parts(noise, c: np.ndarray):
    from race_cli.stats.variance import contrast_parts

    return contrast_parts(noise, c)


def _half(parts, q) -> np.ndarray:
    """Half-widths with the residual split: Var = A + (S − E), the item part A (every item-level term of the
    contrast, the evaluation residual included) at its n − 1 df and the pure seed part S − E (the job-mean
    variance net of the residual it carries, floored at 0) at the seed df (stats/variance.Parts: A = item,
    E = resid, S = seed), through the half-width the rankings use (stats/quantiles.half_width, as
    stats/decisions does) with the residual moved into the item part.

    Why it differs from the rankings' split (stats/decisions: q_item²·A − q_resid²·E + q_seed²·S): there the
    residual E carried in the job means is scaled by the seed part's few-df quantile; here it stays in the
    item part at n − 1 df, which is narrower when the seed df are few. Both approximate the same variance and
    agree as the seed df grow; each procedure's error rates were measured with its own split (the rankings:
    benchmarks/bench_calibration.py; the joint claims: benchmarks/bench_joint.py, docs/report.md), so one
    split for both means measuring the other again."""
    from race_cli.stats.quantiles import half_width

    pure = np.maximum(parts.seed - parts.resid, 0.0)
    h = half_width(parts.item, 0.0, pure, q(parts.df_item), 0.0, q(parts.df_seed))
    return np.where(np.isnan(parts.item), np.nan, h)  # an item part that is not estimable: no interval


def _t(level: float):
    from race_cli.stats.quantiles import t_quantile

    return lambda df: t_quantile(level, df)


def _df95(parts, est_se: np.ndarray) -> np.ndarray:
    """One df summarising a combined 95% half-width (display only)."""
    from race_cli.stats.quantiles import df_for_t975

    h = _half(parts, _t(0.975))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(est_se > 0, df_for_t975(h / np.where(est_se > 0, est_se, 1.0)), math.inf)


def _versus(noise, a_idx: np.ndarray, b_idx: np.ndarray, sign: float, pick: tuple[int, int] | None = None):
    """Best of side A against best of side B, as a claim: a function of the claim's two-sided level L
    returning the difference A − B (raw units), its interval and the winner.

    A is named ahead when some regime a of A beats *every* regime of B (intersection–union) with
    critical values from Dunnett's many-to-one distribution over A's k_A regimes at one-sided L/2:
    under any truth in which B's best is at least as good as A's, the chance is ≤ L/2 (the true best
    b* of B plays the common arm; the correlation λ² is taken as the smallest share of any b's own
    seed part in a contrast a − b, so the bound holds by Slepian's inequality). B ahead likewise.
    Each variance part (item, residual, seed) is scaled at its own df. The interval shown is the
    point pair's difference ± that critical half-width.

    pick: the two regimes, when another comparison chose them (the gains of the final's bests)."""
    from race_cli.stats.gatekeeping import many_to_one_quantile

    R = len(noise.n_seeds)
    point = noise.m.mean(axis=1)
    if pick is None:
        pick = (int(a_idx[np.argmax(sign * point[a_idx])]), int(b_idx[np.argmax(sign * point[b_idx])]))
    a, b = pick
    testable = bool(noise.has_seed_noise)

    def side(win_idx: np.ndarray, lose_idx: np.ndarray, sgn: float):
        """est [W, L] of sgn·(w − l), the parts, and λ for Dunnett over the W candidates."""
        c = np.zeros((len(win_idx) * len(lose_idx), R))
        rows = np.arange(len(c))
        c[rows, np.repeat(win_idx, len(lose_idx))] += 1.0
        c[rows, np.tile(lose_idx, len(win_idx))] -= 1.0
        est = sgn * (c @ point)
        parts = _parts(noise, c)
        own = np.tile(noise.seed_var[lose_idx] / np.maximum(noise.n_seeds[lose_idx], 1), len(win_idx))
        with np.errstate(invalid="ignore", divide="ignore"):
            lam2 = np.where(parts.var > 0, own / np.where(parts.var > 0, parts.var, 1.0), 0.0)
        lam = float(np.sqrt(np.clip(np.nanmin(lam2), 0.0, 0.99))) if len(lam2) else 0.0
        return est, parts, lam

    sides = {"a": (a_idx, b_idx, sign), "b": (b_idx, a_idx, sign)}  # c = winner − loser, in the better direction
    pre = {k: side(*v) for k, v in sides.items()}
    pair = _parts(noise, np.eye(R)[[a]] - np.eye(R)[[b]])
    se = float(pair.se[0]) if np.isfinite(pair.se[0]) and pair.se[0] > 0 else math.nan
    df = float(_df95(pair, np.array([se]))[0]) if np.isfinite(se) else math.nan
    diff = float(point[a] - point[b])
    k = max(len(a_idx), len(b_idx))

    def at(L: float) -> dict:
        crit = {}
        for key, (win, lose, _) in sides.items():
            est, parts, lam = pre[key]
            q = lambda d, kw=len(win), lam=lam: many_to_one_quantile(L / 2, kw, lam, d)
            h = _half(parts, q).reshape(len(win), len(lose))
            ok = np.isfinite(h) & (parts.se.reshape(len(win), len(lose)) > 0)
            crit[key] = (est.reshape(len(win), len(lose)), h, ok, q)
        # the interval of the point pair: its own contrast at A's (or B's, the larger) Dunnett level
        kw = "a" if len(a_idx) >= len(b_idx) else "b"
        half = float(_half(pair, crit[kw][3])[0]) if np.isfinite(se) else math.nan
        beats = {key: bool(testable and (ok.all(axis=1) & (e - h > 0).all(axis=1)).any())
                 for key, (e, h, ok, _) in crit.items()}
        winner = "a" if beats["a"] else "b" if beats["b"] else None
        return {"a": a, "b": b, "diff": diff, "lo": diff - half, "hi": diff + half, "se": se, "df": df, "k": k,
                "level": 1 - L, "winner": winner, "testable": testable}

    return at


def _matched(noise, cols: dict, side: str, a_val, b_val, match: list[str], mask: np.ndarray, sign: float):
    """Side A against side B allocation by allocation, as a claim (a function of its two-sided level L):
    the mean over matched pairs (a regime of A and the regime of B equal to it on every `match` column)
    of A − B, with its interval at level 1 − L (one contrast of regime means: no selection), each
    variance part at its own df. None when no regime of A has a match on side B."""
    R = len(noise.n_seeds)
    point = noise.m.mean(axis=1)
    A = np.flatnonzero(mask & (cols[side] == a_val))
    B = np.flatnonzero(mask & (cols[side] == b_val))
    key = lambda r: tuple(str(cols[c][r]) for c in match)
    of_b = {key(r): r for r in B}
    pairs = [(a, of_b[key(a)]) for a in A if key(a) in of_b]
    if not pairs:
        return None
    c = np.zeros((1, R))
    for a, b in pairs:
        c[0, a] += 1.0 / len(pairs)
        c[0, b] -= 1.0 / len(pairs)
    diff = float(sign * (c @ point)[0])
    parts = _parts(noise, c)
    se0 = float(parts.se[0])
    ok = np.isfinite(se0) and se0 > 0
    testable = bool(noise.has_seed_noise)
    df = float(_df95(parts, np.array([se0]))[0]) if ok else math.nan
    ahead = int(sum(sign * (point[a] - point[b]) > 0 for a, b in pairs))

    def at(L: float) -> dict:
        half = float(_half(parts, _t(1 - L / 2))[0]) if ok else math.nan
        lo, hi = diff - half, diff + half
        winner = ("a" if lo > 0 else "b" if hi < 0 else None) if ok and testable else None
        return {"pairs": pairs, "diff": diff, "lo": lo, "hi": hi, "se": se0 if ok else math.nan, "df": df, "k": 1,
                "level": 1 - L, "winner": winner, "a_ahead": ahead, "testable": testable}

    return at


def _gain_noise(noise, start_rows: np.ndarray, sign: float):
    """The noise of the gains: each regime's items minus its own model's pooled start, signed (the start is
    common to a model's jobs, so the seed spreads are the final scores')."""
    from dataclasses import replace

    return replace(noise, m=sign * (noise.m - start_rows))


def _joint_noise(codes: np.ndarray, table: np.ndarray, R: int, rewards: np.ndarray):
    """The joint condition's variance model (stats/variance.py): per-item paired scores, seed variance
    moderated per reward system over the condition's regimes of that reward (rule and reward-model
    training noise differ: one pool would understate a rule contrast's seed part)."""
    from dataclasses import replace

    from race_cli.stats import variance as V

    noise = V.noise_of(codes, table, R)
    sv, sd, out = np.zeros(R), np.zeros(R), np.zeros(R, dtype=bool)
    for rw in dict.fromkeys(rewards):
        idx = rewards == rw
        prior = V.fit_prior(noise.job_var[idx], noise.job_df[idx], key=str(rw))
        if not prior.df_total:
            continue
        sv[idx], sd[idx] = V.moderate(noise.job_var[idx], noise.job_df[idx], prior)
        out[idx] = V.outliers(noise.job_var[idx], noise.job_df[idx], prior)
    return replace(noise, seed_var=sv, seed_df=sd, outlier=out)


def _condition(g: pd.DataFrame, knobs: list[str], maximize: bool, n_boot: int, rng, alpha: float,
               level: float) -> tuple[dict, dict]:
    """One joint condition: (ranking columns, context for the sentences)."""
    from race_cli.stats import decisions as D
    from race_cli.stats.draws import draws_of, p_best

    sign = 1.0 if maximize else -1.0
    reg_cols = ["model", "reward"] + knobs
    codes, uniq = pd.factorize(pd.MultiIndex.from_frame(g[reg_cols].astype(object)))
    regs = [dict(zip(reg_cols, u)) for u in uniq]
    R = len(regs)
    final, start, method = _aligned(g)
    values = g["value"].to_numpy(float) if final is None else final.mean(axis=1)
    rewards = np.array([r["reward"] for r in regs], dtype=object)
    noise = _joint_noise(codes, final if final is not None else values, R, rewards)
    dec = D.rank_decisions(noise, maximize, level, alpha)
    draws = draws_of(noise, n_boot, rng)
    models = np.array([r["model"] for r in regs], dtype=object)
    job_model = g["model"].to_numpy(object)
    # --- gains over each regime's own model's start
    gnoise, start_of = None, np.full(R, np.nan)
    if start is not None:
        rows = np.zeros((R, start.shape[1]))
        for m in set(models):
            pooled = start[job_model == m].mean(axis=0)  # one checkpoint per model: pool its jobs' evals
            rows[models == m] = pooled
            start_of[models == m] = pooled.mean()
        gnoise = _gain_noise(noise, rows, sign)
    elif np.isfinite(g["start_value"].to_numpy(float)).all():
        sv = g["start_value"].to_numpy(float)
        per_model = {m: sv[job_model == m].mean() for m in set(models)}
        start_of = np.array([per_model[m] for m in models])
        gnoise = _joint_noise(codes, sign * (values - np.array([per_model[m] for m in job_model])), R, rewards)
    if gnoise is not None:
        gd = D.gain_decisions(gnoise, level, alpha)
    else:
        nan = np.full(R, np.nan)
        gd = {"gain": nan, "gain_ci_lo": nan, "gain_ci_hi": nan, "beats_start": np.zeros(R, bool)}
    per_reg = lambda col: np.array([g.loc[codes == r, col].astype(float).mean() for r in range(R)])
    point = dec["mean"]
    ranks = 1 + (sign * point[None, :] > sign * point[:, None]).sum(axis=1)
    cols = {"regime": np.array([_regime_label(r["model"], r["reward"], {k: r[k] for k in knobs}) for r in regs],
                               dtype=object),
            "model": models, "reward": np.array([r["reward"] for r in regs], dtype=object),
            **{k: np.array([r[k] for r in regs], dtype=object) for k in knobs},
            "rank": ranks, "is_best": np.arange(R) == dec["best"],
            "mean": point, "ci_lo": dec["ci_lo"], "ci_hi": dec["ci_hi"], "tied_best": dec["tied_best"],
            "p_best": p_best(draws, maximize), "start": start_of, "gain": gd["gain"],
            "gain_ci_lo": gd["gain_ci_lo"], "gain_ci_hi": gd["gain_ci_hi"], "beats_start": gd["beats_start"],
            "share_feedback": per_reg("share_feedback"), "iterations": per_reg("iterations"),
            "n_seeds": noise.n_seeds, "n_items": np.full(R, noise.n), "method": np.full(R, method, dtype=object),
            "seed_noise": np.full(R, noise.has_seed_noise), "seed_df": noise.seed_df,
            "seed_outlier": noise.outlier}
    ctx = {"noise": noise, "gnoise": gnoise, "sign": sign, "cols": cols, "method": method}
    return cols, ctx


# --- sentences --------------------------------------------------------------------------------------


def _ci(lo: float, hi: float) -> str:
    return f"[{lo:+.3f}, {hi:+.3f}]" if np.isfinite(lo) and np.isfinite(hi) else "(no interval)"


def _knob_part(cols: dict, i: int, knobs: list[str], drop: tuple[str, ...]) -> str:
    parts = [str(cols[c][i]) for c in ("model", "reward") if c not in drop]
    kn = label({k: cols[k][i] for k in knobs}) if knobs else ""
    return " ".join(parts + ([kn] if kn and kn != "(one regime)" else []))


def _size_sentences(ctx: dict, knobs: list[str], sizes: dict[str, int], budget: float, decide) -> list[dict]:
    cols, noise, gnoise, sign = ctx["cols"], ctx["noise"], ctx["gnoise"], ctx["sign"]
    paired = _pairing(ctx)
    models = list(dict.fromkeys(cols["model"]))
    known = all(m in sizes for m in models)
    models.sort(key=lambda m: (sizes.get(m, 0), str(m)), reverse=True)  # largest first
    out = []
    for i, big in enumerate(models):
        for small in models[i + 1:]:
            A = np.flatnonzero(cols["model"] == big)
            B = np.flatnonzero(cols["model"] == small)
            v = decide(("size_final", big, small, None), _versus(noise, A, B, sign))
            a, b = v["a"], v["b"]
            it_a, it_b = cols["iterations"][a], cols["iterations"][b]
            longer = (f", {it_b / it_a:.1f}× the iterations" if known and np.isfinite(it_a) and np.isfinite(it_b)
                      and it_a > 0 else "")
            who = (lambda m, w: f"the {w} policy {m}") if known else (lambda m, w: m)
            verdict = _verdict(v, f"{who(big, 'larger')} is ahead at {_fmt(budget)} FLOPs",
                               f"{who(small, 'smaller')}, trained longer, is ahead at {_fmt(budget)} FLOPs",
                               f"neither size is ahead at {_fmt(budget)} FLOPs")
            q = "Bigger policy or smaller trained longer" if known else "Model size"
            text = (f"{q}, final scores: {big}'s best ({_knob_part(cols, a, knobs, ('model',))}, "
                    f"{cols['mean'][a]:.3f}) minus {small}'s best ({_knob_part(cols, b, knobs, ('model',))}, "
                    f"{cols['mean'][b]:.3f}{longer}) = {v['diff']:+.3f} {_ci(v['lo'], v['hi'])}, {paired} — "
                    f"{verdict}.")
            pair = {"a": big, "b": small, "a_regime": cols["regime"][a], "b_regime": cols["regime"][b]}
            out.append({"question": "size_final", **pair, **_num(v), "winner": _win(v, big, small), "text": text})
            out += _size_matched(ctx, knobs, big, small, known, budget, decide)
            if gnoise is None:
                out.append({"question": "size_gain", **pair, "winner": None,
                            "text": f"{q}, gains over their own starts: no starting evaluation was recorded."})
                continue
            gv = decide(("size_gain", big, small, None), _versus(gnoise, A, B, 1.0, pick=(a, b)))  # signed already
            verdict = _verdict(gv, f"{big} gains more from the budget",
                               f"{small} gains more from the budget",
                               "neither size gains more from the budget")
            text = (f"{q}, gains over their own starts (the same two regimes): {big} gains "
                    f"{cols['gain'][a]:+.3f} from {cols['start'][a]:.3f}, {small} {cols['gain'][b]:+.3f} from "
                    f"{cols['start'][b]:.3f}; difference {gv['diff']:+.3f} {_ci(gv['lo'], gv['hi'])}, "
                    f"{paired} — {verdict}.")
            out.append({"question": "size_gain", **pair, **_num(gv), "winner": _win(gv, big, small), "text": text})
    return out


def _size_matched(ctx: dict, knobs: list[str], big, small, known: bool, budget: float, decide) -> list[dict]:
    """Bigger policy or smaller trained longer at the same allocation: the larger minus the smaller at
    the same reward, G and μ, averaged over every allocation both ran (final scores; gains when the
    starts were recorded). The question a fixed split asks: at this split, which size does the budget
    buy better — not which size wins at its own best split (the best-against-best sentence)."""
    cols, sign = ctx["cols"], ctx["sign"]
    match = ["reward"] + knobs
    everywhere = np.ones(len(cols["model"]), bool)
    out = []
    q = "Bigger policy or smaller trained longer" if known else "Model size"
    what = "the same " + ", ".join(["reward"] + [SHORT.get(k, k) for k in knobs])
    for question, noise, sgn in (("size_matched", ctx["noise"], sign), ("size_gain_matched", ctx["gnoise"], 1.0)):
        if noise is None:
            continue
        fn = _matched(noise, cols, "model", big, small, match, everywhere, sgn)
        if fn is None:
            continue
        v = decide((question, big, small, None), fn)
        ratio = np.array([cols["iterations"][b] / cols["iterations"][a] for a, b in v["pairs"]])
        longer = (f"; {small} runs {np.nanmean(ratio):.1f}× the iterations" if known and np.isfinite(ratio).any()
                  else "")
        if question == "size_matched":
            verdict = _verdict(v, f"the larger policy {big} is ahead at {_fmt(budget)} FLOPs, averaged over "
                                  "these allocations" if known else f"{big} is ahead, averaged over these allocations",
                               f"the smaller policy {small}, trained longer, is ahead at {_fmt(budget)} FLOPs, "
                               "averaged over these allocations" if known else
                               f"{small} is ahead, averaged over these allocations",
                               f"neither size is ahead on average at {_fmt(budget)} FLOPs")
            head = f"{q}, allocation by allocation (final scores)"
        else:
            verdict = _verdict(v, f"{big} gains more from the budget, averaged over these allocations",
                               f"{small} gains more from the budget, averaged over these allocations",
                               "neither size gains more on average")
            head = f"{q}, allocation by allocation (gains over their own starts)"
        text = (f"{head}: {big} minus {small} at {what} ({len(v['pairs'])} allocations{longer}) averages "
                f"{v['diff']:+.3f} {_ci(v['lo'], v['hi'])}, {_pairing(ctx)}, {_ahead_count(v, big, small)} — "
                f"{verdict}.")
        out.append({"question": question, "a": big, "b": small, "n_pairs": len(v["pairs"]), **_num(v),
                    "winner": _win(v, big, small), "text": text})
    return out


def _pairing(ctx: dict) -> str:
    """How a sentence's difference was formed: "items paired", or the unpaired fallback's own words."""
    return "items paired" if str(ctx["method"]).startswith("items") else "seeds only, unpaired"


def _verdict(v: dict, a_ahead: str, b_ahead: str, tie: str) -> str:
    """The sentence's verdict (report/words.verdict, the findings' too): a side named only when the claim
    shows it ahead, else why none is, explained; `tie` follows "not separated: "."""
    if v["winner"] == "a":
        return a_ahead
    if v["winner"] == "b":
        return b_ahead
    word = W.verdict(None, interval=bool(np.isfinite(v["lo"])), testable=v.get("testable", True),
                     tested=v.get("gate") != "not tested")
    return {W.NO_INTERVAL: NO_INTERVAL, W.NOT_TESTABLE: NOT_TESTABLE, W.NOT_TESTED: GATED}.get(word, f"{word}: {tie}")


def _num(v: dict) -> dict:
    return {"diff": v["diff"], "ci_lo": v["lo"], "ci_hi": v["hi"], "se": v["se"], "df": v["df"], "k": v["k"],
            "level": v["level"], "gate": v.get("gate"), "weight": v.get("weight", math.nan)}


def _ahead_count(v: dict, a, b) -> str:
    """'a ahead in 5 of 6': the matched pairs' point differences, a reader's check on the average."""
    n = len(v["pairs"])
    return f"{a} ahead in {v['a_ahead']} of {n}" if v["a_ahead"] * 2 >= n else f"{b} ahead in {n - v['a_ahead']} of {n}"


def _win(v: dict, a: str, b: str) -> str | None:
    return a if v["winner"] == "a" else b if v["winner"] == "b" else None


def _feedback_sentences(ctx: dict, knobs: list[str], budget: float, decide) -> list[dict]:
    cols, noise, sign = ctx["cols"], ctx["noise"], ctx["sign"]
    paired = _pairing(ctx)
    fb = {r: np.nanmean(cols["share_feedback"][cols["reward"] == r]) for r in dict.fromkeys(cols["reward"])}
    rewards = sorted(fb, key=lambda r: (np.nan_to_num(fb[r], nan=1.0), str(r)))  # cheapest feedback first
    models = list(dict.fromkeys(cols["model"]))
    scopes = [(m, cols["model"] == m) for m in models] + ([("across sizes", np.ones(len(cols["model"]), bool))]
                                                           if len(models) > 1 else [])
    out = []
    for i, weak in enumerate(rewards):
        for strong in rewards[i + 1:]:
            for scope, mask in scopes:
                A = np.flatnonzero(mask & (cols["reward"] == weak))
                B = np.flatnonzero(mask & (cols["reward"] == strong))
                if not len(A) or not len(B):
                    continue
                v = decide(("feedback" if scope != "across sizes" else "feedback_all", weak, strong, scope),
                           _versus(noise, A, B, sign))
                a, b = v["a"], v["b"]
                drop = ("model", "reward") if scope != "across sizes" else ("reward",)
                share = lambda j: (f", {100 * cols['share_feedback'][j]:.0f}% of its FLOPs on feedback"
                                   if np.isfinite(cols["share_feedback"][j]) else "")
                desc = lambda j: ", ".join(x for x in [_knob_part(cols, j, knobs, drop), f"{cols['mean'][j]:.3f}"] if x)
                verdict = _verdict(v, f"{weak} is ahead: the budget buys more as policy compute than as "
                                      f"{strong}'s feedback",
                                   f"{strong} is ahead: its stronger feedback is worth its share of the budget",
                                   "neither reward system is ahead")
                where = f"with {scope}" if scope != "across sizes" else "across sizes"
                text = (f"Stronger feedback or more policy compute, {where} at {_fmt(budget)} FLOPs: the best "
                        f"{weak} regime ({desc(a)}{share(a)}) minus the best {strong} regime ({desc(b)}{share(b)}) "
                        f"= {v['diff']:+.3f} {_ci(v['lo'], v['hi'])}, {paired} — {verdict}.")
                out.append({"question": "feedback" if scope != "across sizes" else "feedback_all",
                            "scope": scope, "a": weak, "b": strong, "a_regime": cols["regime"][a],
                            "b_regime": cols["regime"][b], **_num(v), "winner": _win(v, weak, strong),
                            "text": text})
                match = (["model"] if scope == "across sizes" else []) + knobs
                fn = _matched(noise, cols, "reward", weak, strong, match, mask, sign)
                if fn is None:
                    continue
                mv = decide(("feedback_matched" if scope != "across sizes" else "feedback_all_matched", weak, strong,
                             scope), fn)
                what = "the same " + ", ".join((["model"] if scope == "across sizes" else [])
                                               + [SHORT.get(k, k) for k in knobs]) if match else "one allocation"
                verdict = _verdict(mv, f"{weak} is ahead on average: at these allocations the budget buys more as "
                                       f"policy compute than as {strong}'s feedback",
                                   f"{strong} is ahead on average: its feedback is worth its share of the budget "
                                   "at these allocations",
                                   "neither reward system is ahead on average")
                text = (f"Stronger feedback or more policy compute, allocation by allocation {where}: {weak} minus "
                        f"{strong} at {what} ({len(mv['pairs'])} allocations) averages {mv['diff']:+.3f} "
                        f"{_ci(mv['lo'], mv['hi'])}, {paired}, {_ahead_count(mv, weak, strong)} — {verdict}.")
                out.append({"question": "feedback_matched" if scope != "across sizes" else "feedback_all_matched",
                            "scope": scope, "a": weak, "b": strong, "n_pairs": len(mv["pairs"]), **_num(mv),
                            "winner": _win(mv, weak, strong), "text": text})
    return out


def _claims(ctx: dict, knobs: list[str], sizes: dict[str, int], budget: float, alpha: float) -> list[dict]:
    """Every comparison of one joint condition, familywise `alpha` by a gatekept graph
    (stats/gatekeeping.joint_design): each pair's allocation-by-allocation claim opens it at the pair's
    share of α, a rejected claim passes its level on (best against best, gains), and a pair's last claims
    pass theirs to the other pairs. A claim whose gate stayed shut is not tested (no winner named; its
    interval is shown at the Bonferroni share over every claim, for reference)."""
    from race_cli.stats.gatekeeping import graph_test, joint_design

    fns: dict[tuple, object] = {}

    def record(key: tuple, fn) -> dict:
        fns[key] = fn
        return fn(alpha)

    _size_sentences(ctx, knobs, sizes, budget, record)
    _feedback_sentences(ctx, knobs, budget, record)
    keys = list(fns)
    n = max(len(keys), 1)
    if keys:
        res = graph_test(joint_design(keys), lambda i, L: fns[keys[i]](L)["winner"] is not None, alpha)
        weight = dict(zip(keys, res.weight))
    else:
        weight = {}

    def decide(key: tuple, fn) -> dict:
        w = float(weight.get(key, 0.0))
        if w > 1e-12:
            return fn(w * alpha) | {"gate": "tested", "weight": w}
        return fn(alpha / n) | {"winner": None, "gate": "not tested", "weight": 0.0}

    return _size_sentences(ctx, knobs, sizes, budget, decide) + _feedback_sentences(ctx, knobs, budget, decide)


def _split_sentence(rec: pd.DataFrame | None, budget: float, task, target: str) -> dict | None:
    """Search or learning: the within-condition recommendations of this budget and target, cited."""
    if rec is None or not len(rec) or "target" not in rec:
        return None
    r = rec[rec["target"] == target]
    if "budget_flops" in r:
        r = r[np.isclose(r["budget_flops"].astype(float), budget)]
    if "task" in r and task is not None and not (isinstance(task, float) and math.isnan(task)):
        r = r[r["task"] == task]
    if not len(r):
        return None
    parts = []
    for _, x in r.iterrows():
        who = " ".join(str(x[c]) for c in ("model", "reward") if c in x)
        if not x.get("learned", False):
            parts.append(f"{who}: no regime beats its start")
        else:
            tied = int(x["n_tied"]) - 1
            parts.append(f"{who}: {x['best_regime']} best" + (f" ({tied} of the other {int(x['n_regimes']) - 1} "
                                                              f"≈ best)" if tied else " (the others distinguishably worse)"))
    return {"question": "split", "text": "Search or learning (the within-condition rankings): " + "; ".join(parts) + "."}


# --- across budgets ---------------------------------------------------------------------------------


def _across(ranking: pd.DataFrame, sentences: pd.DataFrame, sizes: dict[str, int]) -> list[dict]:
    """Per (task, target) with several budgets: the best size and feedback per budget, and the budget
    from which the larger policy is ahead of the smaller at every larger budget."""
    out = []
    if not len(ranking):
        return out
    for (task, target), g in ranking.groupby(["task", "target"], sort=False, dropna=False):
        budgets = sorted(g["budget"].unique())
        if len(budgets) < 2:
            continue
        s = sentences[(sentences["target"] == target) & sentences["task"].eq(task).fillna(False)
                      | ((sentences["target"] == target) & sentences["task"].isna() & pd.isna(task))]
        best = []
        for c in budgets:
            gb = g[g["budget"] == c]
            top = gb[gb["is_best"]].iloc[0]
            tied = gb[gb["tied_best"]]
            other_sizes = sorted(set(tied["model"]) - {top["model"]})
            other_fb = sorted(set(tied["reward"]) - {top["reward"]})
            best.append(f"{_fmt(c)}: {top['model']}" + (f" (≈ {', '.join(map(str, other_sizes))})" if other_sizes else "")
                        + f" with {top['reward']}" + (f" (≈ {', '.join(map(str, other_fb))})" if other_fb else ""))
        out.append({"task": task, "target": target, "question": "best_per_budget",
                    "text": f"Across budgets ({target}), the best model size and feedback at each budget "
                            f"(≈: not shown worse than the best, familywise 5%): " + "; ".join(best) + "."})
        for question, how in (("size_matched", "allocation by allocation"), ("size_final", "best against best")):
            out += _overtake(s[s["question"] == question], how, task, target, sizes)
    return out


def _overtake(sf: pd.DataFrame, how: str, task, target: str, sizes: dict[str, int]) -> list[dict]:
    """For each size pair, the budget from which the larger is ahead at every larger budget (by one
    kind of size comparison, `how`), with the bracketing budgets and an interpolated crossing."""
    out = []
    for (big, small), p in sf.groupby(["a", "b"], sort=False):
        p = p.sort_values("budget")
        cs = p["budget"].to_numpy(float)
        ahead = (p["winner"] == big).to_numpy()
        behind = (p["winner"] == small).to_numpy()
        d = p["diff"].to_numpy(float)
        cells = "; ".join(f"{_fmt(c)}: {x:+.3f} {_ci(lo, hi)}" for c, x, lo, hi in
                          zip(cs, d, p["ci_lo"], p["ci_hi"]))
        tail = np.flatnonzero(~np.logical_and.accumulate(ahead[::-1])[::-1])  # budgets not followed by ahead-only
        first = 0 if not len(tail) else int(tail[-1]) + 1
        larger = "the larger policy " + str(big) if big in sizes and small in sizes else str(big)
        if first >= len(cs):
            seen = ", ".join(_fmt(c) for c in cs[ahead])
            text = (f"{how.capitalize()}, {larger} is not seen to overtake {small} up to {_fmt(cs[-1])} FLOPs on {target}"
                    + (f": it is ahead at {seen} but not at every larger budget" if ahead.any() else "")
                    + f" (difference {big} − {small} per budget: {cells}).")
            c_at = lo_c = hi_c = math.nan
        else:
            below = np.flatnonzero(behind[:first])
            lo_c = cs[below[-1]] if len(below) else math.nan
            hi_c = cs[first]
            c_at = _crossing(cs, d, first)
            rng_txt = (f"between {_fmt(lo_c)} and {_fmt(hi_c)} FLOPs" if np.isfinite(lo_c) else
                       f"at or below {_fmt(hi_c)} FLOPs (it is never seen behind)")
            est = f" (interpolated crossing {_fmt(c_at)})" if np.isfinite(c_at) else ""
            text = (f"{how.capitalize()}, {larger} overtakes {small} on {target} {rng_txt}{est}, and stays ahead at every larger "
                    f"budget (difference {big} − {small} per budget: {cells}).")
        q = "overtake" if how == "best against best" else "overtake_matched"
        out.append({"task": task, "target": target, "question": q, "how": how, "a": big, "b": small,
                    "overtake_flops": c_at, "overtake_lo": lo_c, "overtake_hi": hi_c, "text": text})
    return out


def per_budget(sentences: pd.DataFrame) -> list[dict]:
    """One line per joint condition: its size and feedback answers with their intervals — what the
    terminal shows of a checkpoint budget, whose tables and sentences are in summary.md."""
    out = []
    if not len(sentences):
        return out
    parts = [("size_matched", "size, allocation by allocation"), ("size_final", "size, best against best"),
             ("feedback_all_matched", "feedback across sizes, allocation by allocation"),
             ("feedback_matched", "feedback, allocation by allocation")]
    for name, g in sentences.groupby("joint", sort=False):
        cells = []
        for q, what in parts:
            for _, r in g[g["question"] == q].iterrows():
                win = r["winner"] if isinstance(r["winner"], str) else None
                scope = f" with {r['scope']}" if q == "feedback_matched" else ""
                verdict = W.verdict(win, interval=bool(np.isfinite(r["ci_lo"])), tested=r.get("gate") != "not tested")
                cells.append(f"{what}{scope} {r['a']} − {r['b']} {r['diff']:+.3f} {_ci(r['ci_lo'], r['ci_hi'])} "
                             f"{verdict}")
        if cells:
            r0 = g.iloc[0]
            out.append({"joint": name, "budget": float(r0["budget"]), "task": r0["task"], "target": r0["target"],
                        "checkpoint": float(r0.get("checkpoint", 1.0)), "text": f"{name}: " + "; ".join(cells) + "."})
    return sorted(out, key=lambda r: (str(r["target"]), r["budget"]))


def _crossing(cs: np.ndarray, d: np.ndarray, first: int) -> float:
    """Where the point difference crosses zero, linear in log budget, just below budget `first`."""
    if first == 0 or d[first] <= 0 or d[first - 1] > 0:
        return math.nan
    x0, x1 = math.log(cs[first - 1]), math.log(cs[first])
    return float(math.exp(x0 + (x1 - x0) * (-d[first - 1]) / (d[first] - d[first - 1])))


# --- all joint conditions ---------------------------------------------------------------------------


def joint_compare(table: pd.DataFrame, knobs: list[str], maximize: dict[str, bool],
                  sizes: dict[str, int] | None = None, rec: pd.DataFrame | None = None,
                  n_boot: int = 1000, seed: int = 0, alpha: float = ALPHA, level: float = 0.95,
                  extra: tuple = ()) -> Joint:
    """The joint comparison of every joint condition (budget, task, target) of `table` (joint_table's
    columns), as a report/records.Joint (its ranking: one row per joint regime; its sentences: one row per
    comparison, `text` the sentence; across: several budgets); empty when no joint condition has two models
    or two reward systems (nothing to compare across)."""
    sizes = sizes or {}
    if not len(table):
        return Joint(ranking=pd.DataFrame(), sentences=pd.DataFrame(), sizes=dict(sizes))
    knobs = [k for k in knobs if k in table and table[k].nunique(dropna=True) > 1]
    rng = np.random.default_rng(seed)
    parts, sents, notes = [], [], []
    table = table.assign(task=table["task"].astype(object).where(table["task"].notna(), None))
    for (budget, task, target), g in table.groupby(list(GROUP), sort=True, dropna=False):
        if g["model"].nunique() < 2 and g["reward"].nunique() < 2:
            continue
        if g["model"].nunique() > MAX_MODELS or g["reward"].nunique() > MAX_REWARDS:
            notes.append(f"budget={_fmt(float(budget))} task={task} target={target}: {g['model'].nunique()} models "
                         f"and {g['reward'].nunique()} reward systems — more than {MAX_MODELS} and {MAX_REWARDS}, so "
                         "they are taken for separate experiments and not ranked jointly.")
            continue
        cols, ctx = _condition(g, knobs, maximize.get(target, True), n_boot, rng, alpha, level)
        cp = float(g["checkpoint"].iloc[0]) if "checkpoint" in g else 1.0
        of = f" (jobs at {cp:g} of {_fmt(float(budget) / cp)})" if cp < 1.0 else ""
        name = f"budget={_fmt(float(budget))}{of} task={task} target={target}"
        head = {"joint": name, "budget": float(budget), "task": task, "target": target, "checkpoint": cp}
        order = np.lexsort((cols["regime"].astype(str), cols["rank"]))
        parts.append(pd.DataFrame({**{k: [v] * len(order) for k, v in head.items()},
                                   **{k: np.asarray(v)[order] for k, v in cols.items()}}))
        found = _claims(ctx, knobs, sizes, float(budget), alpha)  # gatekept: any false winner at most α
        n_claims = sum(1 for f in found if "diff" in f)  # the sentences that could name a winner
        found = [f | {"n_claims": n_claims} for f in found]
        split = _split_sentence(rec, float(budget), task, target)
        found += [split] if split else []
        for claim in extra:  # e.g. report/bracket.search_learning: each its own familywise alpha
            found += claim(ctx, knobs, alpha)
        sents += [head | s for s in found]
    if not parts:
        return Joint(ranking=pd.DataFrame(), sentences=pd.DataFrame(), sizes=dict(sizes), notes=notes)
    ranking = pd.concat(parts, ignore_index=True)
    sentences = pd.DataFrame(sents)
    return Joint(ranking=ranking, sentences=sentences, across=_across(ranking, sentences, sizes),
                 per_budget=per_budget(sentences), sizes=dict(sizes), notes=notes)
