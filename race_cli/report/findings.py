"""The findings: what a pilot answers, on one screen, first in the console and at the top of summary.md.

    lines, settles = findings(report, samples=infer_samples(data.items), workers=2)

Per target and condition: the regime that wins (the only one "≈ best"), or "not separated" with the
gap between the best and its runner-up and that gap's lower bound; a condition where no regime beats
its start says so. Per target, the joint comparison's model-size and feedback answers (allocation by
allocation, report/joint.py) in one line each. Then what to validate (the `race validate` command) and,
for every call left open, what would settle it: the seeds per regime (or, beyond MAX_SEEDS, the items)
at which the report's own test separates the observed gap with 80% power (race_cli/stats/power.py,
the model `race plan` prints), with the extra jobs, FLOPs and wall time that costs.

A raced sweep (plan.json's race record) words each condition's call as its race state instead
(report/words.race_state: winner, equivalent within ±margin, undecided with its price, no gain, or still
racing, at which look), and one line states the schedule and its margin.

Everything here reads the tables rank.py, recommend.py and joint.py return; a column a newer or older
version does not have turns its line into "–", never an error (the findings must not hide the report).
Pure (no I/O): views/render.py's `print_findings` and `markdown_summary` print the lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from race_cli.report import words as W
from race_cli.report.bracket import QUESTION as SEARCH_LEARNING, Launch, edge_lines
from race_cli.report.words import number as _num, signed as _signed

MAX_SEEDS = 32  # seeds per regime the settle search goes to before it asks for items instead
MAX_ITEMS = 20_000
POWER_SIMS = 600  # simulated pilots per power evaluation (binomial sd near 0.8: 0.016)


@dataclass
class Settle:
    """What would settle one open call."""

    condition: str
    label: str
    seeds: int | None  # seeds per regime (None: more than MAX_SEEDS)
    items: int | None  # items at the current seeds, when seeds alone would not do
    extra_jobs: int
    flops: float
    seconds: float | None


def short_label(first: dict[str, Any], varying: list[str]) -> str:
    """'tiny-s rule': the condition columns that differ across the sweep (budget as '8e+11').
    first: the condition's first ranking row, {column: value}."""
    parts = []
    for c in varying:
        v = first.get(c)
        parts.append(f"{_num(v):.3g}" if c == "budget_flops" else _short(v))
    return " ".join(parts) or str(first.get("condition", ""))


def _short(v: Any) -> str:
    """'prm:tiny-prm' -> 'tiny-prm' (the reward model's name says it is one)."""
    text = str(v)
    return text.split(":", 1)[1] if text.startswith("prm:") else text


def _varying(ranking: pd.DataFrame) -> list[str]:
    cols = [c for c in ("model", "reward", "budget_flops", "task") if c in ranking]
    return [c for c in cols if ranking[c].nunique(dropna=False) > 1] or cols[:1]


def infer_samples(items: dict | None) -> int:
    """Samples per item k from per-item scores (fractions j/k of k sampled completions); 1 when unknown."""
    vals = []
    for _, (_, scores) in list((items or {}).items())[:20]:
        vals.extend(np.asarray(scores, float)[:200].tolist())
    v = np.asarray([x for x in vals if np.isfinite(x)])
    if not len(v):
        return 1
    for k in range(1, 65):
        if np.allclose(v * k, np.round(v * k), atol=1e-6):
            return k
    return 1


# --- what would settle an open call ------------------------------------------------------------


def _largest(values) -> float:
    """The largest value that is not NaN (Series.max skips them), NaN when there is none."""
    v = np.asarray(values, float)
    v = v[~np.isnan(v)]
    return float(v.max()) if len(v) else math.nan


def _design(g: pd.DataFrame | dict[str, np.ndarray], k: int):
    """The power model's design of one condition (stats/power.py Design), or None when unknown.
    g: the condition's ranking rows, a DataFrame or {column: values} (`_conditions`)."""
    from race_cli.stats.power import Design

    most = _largest(g["n_items"]) if "n_items" in g else math.nan
    n = int(most) if math.isfinite(most) else 0
    seeds = int(np.nanmin(g["n_seeds"])) if "n_seeds" in g else 1
    sds = np.asarray(g["seed_sd"], float) if "seed_sd" in g else np.array([math.nan])
    sd = float(np.nanmedian(sds)) if np.isfinite(sds).any() else math.nan  # one seed: no spread measured
    if n < 2 or not math.isfinite(sd):
        return None
    sd = max(float(sd), 0.005)
    unit = 10.0 ** (math.floor(math.log10(sd)) - 1)
    sd = math.ceil(round(sd / unit, 9)) * unit  # up to two significant digits (round first: 0.022/0.001 is not 22)
    return Design(n=n, k=k, seeds=max(seeds, 1), regimes=len(g["regime"]),  # every ranking row has a regime
                  seed_sd=sd,  # sd up to 2 digits: designs repeat
                  crn=k > 1)  # sampled evaluation draws common random numbers, as race plan prices it


_POWERS: dict[tuple, float] = {}  # (kind, design, effect) -> power: a sweep's conditions share designs


def _power(kind: str, d, effect: float) -> float:
    """The report's power for one design and effect (stats/power.py), remembered: a sweep's conditions share
    designs, and the settle search asks the same ones again."""
    from race_cli.stats import power as P

    key = (kind, d, effect)
    if key not in _POWERS:
        if len(_POWERS) > 65536:
            _POWERS.clear()
        _POWERS[key] = (P.separation_power if kind == "separation" else P.gain_power)(d, effect, n_sim=POWER_SIMS)
    return _POWERS[key]


def _compute(queries: list[tuple]) -> None:
    """Remember the powers of (kind, design, effect) queries not yet known: the separation ones in one batch
    (stats/power.separation_powers: the same values as one call each), gains one by one."""
    from race_cli.stats import power as P

    want = list(dict.fromkeys(q for q in queries if q not in _POWERS))
    seps = [(d, e) for kind, d, e in want if kind == "separation"]
    if len(_POWERS) + len(want) > 65536:
        _POWERS.clear()
    for (d, e), pw in zip(seps, P.separation_powers(seps, n_sim=POWER_SIMS)):
        _POWERS[("separation", d, e)] = pw
    for kind, d, e in want:
        if kind != "separation":
            _power(kind, d, e)


def _first(ask, lo: int, cap: int):
    """The smallest integer in [lo, cap] whose query ask(x) reaches POWER (power rises with x), by doubling
    then bisection; None when even cap does not. A generator: it yields each query and is sent its power
    (`settle` answers one search, `_settle_all` many in lockstep)."""
    from race_cli.stats.power import POWER

    if lo > cap:
        return None
    hi = lo
    while not (yield ask(hi)) >= POWER:
        if hi >= cap:
            return None
        lo, hi = hi + 1, min(cap, hi * 2)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if (yield ask(mid)) >= POWER else (mid + 1, hi)
    return hi


def _settle_steps(g: dict[str, np.ndarray], label: str, k: int, wall_s: float | None, workers: int):
    """`settle` as a generator: yields the (kind, design, effect) queries its search asks, is sent their
    powers, and returns the Settle (or None)."""
    from race_cli.stats import power as P

    d = _design(g, k)
    if d is None:
        return None
    learned = bool(g["beats_start"].any()) if "beats_start" in g else True
    if learned:  # the open call: separate the best from the runner-up
        if "tied_best" not in g or int(g["tied_best"].sum()) <= 1 or len(g["regime"]) < 2:
            return None
        effect, kind = abs(_num(g["gap_to_best"][1])), "separation"
    else:  # or: does the best beat its start?
        effect, kind = (_num(g["gain"][0]) if "gain" in g else math.nan), "gain"
    if not math.isfinite(effect) or effect <= 0:
        return Settle(str(g["condition"][0]), label, None, None, 0, 0.0, None)
    effect = math.floor(effect * 1000) / 1000  # to 0.001, down: never more power than the gap observed
    lo = max(d.seeds + 1, 2)
    # out of reach at the most seeds (or items) searched: say so without searching (most open calls of a
    # large sweep are gaps within noise); otherwise the fewest that reach 80%
    seeds = None
    if lo <= MAX_SEEDS and (yield (kind, P.with_seeds(d, MAX_SEEDS), effect)) >= P.POWER:
        seeds = yield from _first(lambda s: (kind, P.with_seeds(d, s), effect), lo, MAX_SEEDS)
    items = None
    if seeds is None:
        base = d if d.seeds >= 2 else P.with_seeds(d, 2)
        if (yield (kind, replace(base, n=MAX_ITEMS), effect)) >= P.POWER:
            items = yield from _first(lambda n: (kind, replace(base, n=n), effect), d.n + 1, MAX_ITEMS)
    if seeds is None and items is None:
        return Settle(str(g["condition"][0]), label, None, None, 0, math.nan, None)
    s_new = seeds if seeds is not None else base.seeds
    extra = max(0, s_new - d.seeds) * d.regimes
    budget = _num(g["budget_flops"][0]) if "budget_flops" in g else math.nan
    flops = extra * budget if math.isfinite(budget) else math.nan
    secs = None
    if wall_s is not None and math.isfinite(wall_s) and extra:
        from race_cli.cost.walltime import grid_seconds

        secs = grid_seconds([wall_s] * extra, max(1, min(workers, extra)))
    return Settle(str(g["condition"][0]), label, seeds, items, extra, flops, secs)


def settle(g: dict[str, np.ndarray], label: str, k: int, wall_s: float | None, workers: int) -> Settle | None:
    """Seeds per regime (or items) at which the report's test separates the observed best − runner-up gap
    (or, with no regime beating its start, finds the best's gain) with 80% power; None when nothing is open
    or the design is unknown. g: one condition's rows, best first (`_conditions`)."""
    return _settle_all([(g, label, wall_s)], k, workers)[0]


def _settle_all(conds: list[tuple], k: int, workers: int) -> list[Settle | None]:
    """settle for many (g, label, wall_s) at once: the searches advance in lockstep, each round's new
    queries computed in one batch (`_compute`); the same answers as one search at a time."""
    steps = [_settle_steps(g, label, k, wall, workers) for g, label, wall in conds]
    out: list[Settle | None] = [None] * len(steps)
    asked: dict[int, tuple] = {}

    def advance(i: int, power: float | None) -> None:
        try:
            asked[i] = steps[i].send(power)
        except StopIteration as done:
            asked.pop(i, None)
            out[i] = done.value

    for i in range(len(steps)):
        advance(i, None)
    while asked:
        _compute(list(asked.values()))
        for i, q in list(asked.items()):
            advance(i, _power(*q))  # remembered by _compute (computed again only if the memory was full)
    return out


def short_settle(s: Settle) -> str:
    """'13 seeds', '17450 items', '> 32 seeds' or 'more budget' (nothing to detect: a gain not above zero)."""
    if s.seeds is not None:
        return f"{s.seeds} seeds"
    if s.items is not None:
        return f"{s.items} items"
    return "more budget" if s.extra_jobs == 0 and s.flops == 0.0 else f"> {MAX_SEEDS} seeds"


# --- the lines ---------------------------------------------------------------------------------


def _conditions(ranking: pd.DataFrame) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, dict[str, Any]]]:
    """({condition: its rows best first, {column: values}}, {condition: its first row in table order}),
    from one pass over the ranking (a DataFrame per condition and a pandas lookup per cell are slow on
    hundreds of conditions). Best first is the order DataFrame.sort_values("rank") gives (the same quicksort)."""
    from race_cli.report.recommend import condition_rows

    cols = {c: ranking[c].to_numpy() for c in ranking.columns}
    rows, first = {}, {}
    for cond, at in condition_rows(ranking).items():
        first[cond] = {c: a[at[0]] for c, a in cols.items()}
        if "rank" in cols:
            at = at[np.argsort(cols["rank"][at], kind="quicksort")]
        rows[cond] = {c: a[at] for c, a in cols.items()}
    return rows, first


def _call(g: dict[str, np.ndarray]) -> str:
    """'G=4 μ=2 wins by +0.050 (≥ +0.008)' or 'G=4 μ=2 ≈ G=4 μ=1, not separated: gap +0.021 (≥ -0.034)'.
    g: one condition's rows, best first (`_conditions`)."""
    best = str(g["regime"][0])
    if "testable" in g and not bool(np.where(pd.isna(g["testable"]), True, g["testable"]).astype(bool).any()):
        # one seed: nothing decided
        return f"{W.NOT_TESTABLE} ({best} gains {_signed(g['gain'][0])} on evaluation noise alone)"
    if "beats_start" in g and not bool(g["beats_start"].any()):
        return f"no regime beats its start ({best} gains {_signed(g['gain'][0])})"
    if len(g["regime"]) < 2:
        return f"{best} (one regime)"
    second = g["regime"][1]
    gap_lo = g["gap_ci_lo"][1] if "gap_ci_lo" in g else None
    gap, lo = _signed(g["gap_to_best"][1] if "gap_to_best" in g else None), _signed(gap_lo)
    tied = int(g["tied_best"].sum()) if "tied_best" in g else 0
    if tied == 1:  # the step-down test separated it (its first-step bound may still reach zero)
        return f"{best} wins by {gap} over {second}" + (f" (≥ {lo})" if _num(gap_lo) > 0 else "")
    return f"{best} ≈ {second}: gap {gap} (≥ {lo})" + (f", {tied} ≈ best" if tied > 2 else "")


def _joint_line(sent: pd.DataFrame, target: str, questions: tuple[str, ...], what: str) -> str | None:
    """One joint answer at the sweep's own budget: 'size: tiny-s − tiny-m -0.002 [-0.036, +0.033] …'."""
    need = {"question", "target", "diff", "ci_lo", "ci_hi", "a", "b"}
    if not len(sent) or not need <= set(sent.columns):
        return None
    s = sent[sent["target"] == target]
    if "checkpoint" in s:
        s = s[s["checkpoint"].astype(float) >= 1.0]
    for q in questions:
        row = s[s["question"] == q]
        if len(row):
            r = row.iloc[0]
            winner = r.get("winner")
            verdict = W.verdict(winner if isinstance(winner, str) else None,
                                interval=math.isfinite(_num(r["ci_lo"])) and math.isfinite(_num(r["ci_hi"])),
                                tested=str(r.get("gate", "")) != "not tested")
            scope = "" if "matched" in q else " (best vs best)"  # allocation by allocation: the legend says it
            return (f"{what}{scope}: {_short(r['a'])} − {_short(r['b'])} {_signed(r['diff'])} "
                    f"[{_signed(r['ci_lo'])}, {_signed(r['ci_hi'])}], {verdict}")
    return None


def findings(rep, samples: int = 1, workers: int = 1, launch: Launch | None = None) -> tuple[list[str], list[Settle]]:
    """(lines, settles): the findings of the Report `rep` (report/build.py: its rankings, recommendations, joint
    comparison, jobs, targets and, for a raced sweep, its race states and schedule) as plain lines (no markup;
    the caller styles them) and what would settle each open call. See the module docstring. A raced
    condition's call is its race state (words.race_state), with its price when undecided, and the schedule is
    stated in one line. samples: samples per evaluated item (infer_samples), for the power model; workers: the
    job slots the settle line's wall time assumes; launch: the pilot's grid and typed overrides
    (bracket.read_launch), for the command that brackets a best at the grid's edge."""
    ranking, rec, joint, jobs = rep.ranking, rep.recommendations, rep.joint, rep.jobs
    race, schedule = rep.race, rep.schedule
    targets = [t.name for t in rep.targets]
    sweeps = [str(d) for d in rep.options.sweep_dirs]
    if not len(ranking) or "condition" not in ranking:
        return [], []
    varying = _varying(ranking)
    k = samples
    sent = joint.sentences if joint is not None else None
    sent = sent if isinstance(sent, pd.DataFrame) else pd.DataFrame()
    wall = _job_seconds(jobs)
    lines, settles = ["Findings: which regime, which size, does the reward model pay, what next"], []
    raced = {st.condition: st for st in race or []}
    rows, first = _conditions(ranking)
    labels = {cond: short_label(r, varying) for cond, r in first.items()}
    width = max(len(label) for label in labels.values())
    order = [cond for t in targets for cond in (ranking[ranking["target"] == t] if "target" in ranking
                                                    else ranking)["condition"].unique()]
    wall_of = lambda g, cond: wall.get(str(g["job_condition"][0]) if "job_condition" in g else cond)
    settled = dict(zip(order, _settle_all([(rows[c], labels[c], wall_of(rows[c], c)) for c in order], k, workers)))
    for target in rep.targets:
        t = target.name
        gt = ranking[ranking["target"] == t] if "target" in ranking else ranking
        if not len(gt):
            continue
        budgets = sorted({_num(b) for b in gt.get("budget_flops", pd.Series(dtype=float))} - {math.nan})
        at = f" at {budgets[0]:.3g} FLOPs" if len(budgets) == 1 else ""
        lines.append(f"{t} ({W.direction(target.maximize)}){at}:")
        for cond in gt["condition"].unique():
            g, label = rows[cond], labels[cond]
            st = raced.get(cond)
            line = f"  {label.ljust(width)}  {_call(g) if st is None else W.race_state(st)}{W.collapsed_note(g)}"
            s = settled[cond]
            if s is not None and (st is None or st.state == "undecided"):  # a race's other ends need no price
                settles.append(s)
                line += "; " + short_settle(s)
            lines.append(line)
        for questions, what in ((("size_matched", "size_final"), "size"),
                                (("feedback_all_matched", "feedback_all", "feedback_matched"), "feedback"),
                                ((SEARCH_LEARNING,), "search vs learning")):
            jl = _joint_line(sent, t, questions, what)
            if jl:
                lines.append("  " + jl)
    lines += edge_lines(ranking, launch, {c: st.best for c, st in raced.items() if st.best})  # report/bracket.py
    lines.append(validate_line(rec, sweeps))
    racing = sum(st.state == "continue" for st in race or [])
    if racing:  # a race under way: its open calls are the ones still racing, never "none"
        lines.append(f"open calls: {racing} still racing; the race's next looks give them seeds (race run resumes "
                     "it).")
        if settles:  # the race's undecided ends, with their price
            lines.append(settle_total(settles).replace("open calls:", "undecided calls:", 1))
    else:
        lines.append(settle_total(settles))
    if schedule is not None:
        lines.append(W.race_schedule(schedule))
    lines.append(LEGEND)
    return lines, settles


LEGEND = ("gap: best − runner-up (≥ its familywise lower bound); N seeds: per regime for 80% power on that gap; "
          "size, feedback: joint mean difference at equal G, μ; search vs learning: G×2 − μ×2 (own 5%).")


def _job_seconds(jobs: pd.DataFrame) -> dict[str, float]:
    """Mean wall seconds of a finished job per condition (summary.json seconds.total)."""
    if "seconds_total" not in jobs or "condition" not in jobs:
        return {}
    secs = pd.to_numeric(jobs["seconds_total"], errors="coerce")
    ok = jobs[secs.notna()]
    secs = secs[secs.notna()].to_numpy()
    # Series.mean: the float64 sum over the count (one grouping, no Series per condition)
    return {str(c): float(secs[at].sum(dtype=np.float64) / len(at))
            for c, at in ok.groupby("condition").indices.items()}


def validate_line(rec: pd.DataFrame, sweeps: list[str]) -> str:
    learned = rec[rec["learned"].astype(bool)] if "learned" in rec and len(rec) else rec.iloc[:0]
    if not len(learned):
        return "validate: nothing yet: no regime beats its start in any condition."
    sweep = sweeps[0] if sweeps else "runs/<pilot>"
    return f"validate: race validate {sweep} --replicate (best vs runner-up)"


def settle_total(settles: list[Settle]) -> str:
    from race_cli.cost.walltime import fmt_duration

    open_ = [s for s in settles if s.seeds is not None or s.items is not None]
    if not settles:
        return "open calls: none (every call above is settled at this design)."
    if not open_:
        return f"open calls: {len(settles)}, none settled by more seeds or items at this budget."
    jobs = sum(s.extra_jobs for s in open_)
    flops = sum(s.flops for s in open_ if math.isfinite(s.flops))
    secs = [s.seconds for s in open_ if s.seconds]
    return (f"to settle {len(open_)} open call(s) (80% power): +{jobs} jobs, {flops:.2g} FLOPs"
            + (f", ~{fmt_duration(sum(secs))} job time" if secs else "") + ".")
