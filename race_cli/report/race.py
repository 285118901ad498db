"""A raced sweep's state, computed from its folder alone (reads a SweepData; the statistics are stats/race.py).

`race_states(data, schedule)` replays the race from look 0. At look k a condition still racing uses only
its active regimes' jobs with seed < looks[k]; the sweep's seed pool (report/rank.condition_noises, the
ranking's own variance model) sees every regime's jobs up to the seeds it was given, the regimes dropped
and the conditions stopped earlier with theirs. A look is decided only when every job it needs, over the
whole sweep, is done (the pool spans conditions); until then the racing conditions wait at that look
("continue"). So a look's decision is a function of its own jobs only: jobs added for later looks never
change it, and a race stopped and rerun at any point replays to the same states.

`needed_seeds(states)` turns the states into what the run loop writes next: per regime, the seeds it
needs now.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from race_cli.report.rank import (condition_label, condition_noises, group_rows, label, rankable,
                                  regime_columns)
from race_cli.report.table import CONDITION_COLS, SweepData, maximize_target
from race_cli.stats.race import RaceState, Schedule, active_noise, decide_look, take_regime


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v


def race_states(data: SweepData, schedule: Schedule, by: list[str] | None = None,
                targets: list[str] | None = None) -> list[RaceState]:
    """Each (condition, target)'s race state: the latest look decided, or the look it waits for."""
    by = list(CONDITION_COLS) if by is None else list(by)
    targets = list(data.targets) if targets is None else list(targets)
    jobs = data.jobs
    if jobs.empty:
        return []
    reg_cols = regime_columns(jobs, data.knob_cols, by)
    regime = np.array([label({c: _plain(v) for c, v in zip(reg_cols, row)})
                       for row in jobs[reg_cols].astype(object).to_numpy()], dtype=object) if reg_cols else \
        np.full(len(jobs), label({}), dtype=object)
    seed = pd.to_numeric(jobs["seed"], errors="coerce").to_numpy(float) if "seed" in jobs else np.zeros(len(jobs))
    secs = (pd.to_numeric(jobs["seconds_total"], errors="coerce").to_numpy(float) if "seconds_total" in jobs
            else np.full(len(jobs), np.nan))
    out = []
    for target in targets:
        out += _race_target(data, schedule, by, target, reg_cols, regime, seed, secs)
    return out


def job_seconds(rows, regime, secs, names) -> dict[str, float]:
    """Per regime of `names`, the mean wall seconds of its jobs among `rows` (summary.json seconds.total:
    training and evaluation), where measured: what "take the cheapest" compares at equal FLOPs."""
    out = {}
    for g in names:
        v = secs[[i for i in rows if regime[i] == g]]
        v = v[np.isfinite(v)]
        if len(v):
            out[g] = float(v.mean())
    return out


def _race_target(data, schedule: Schedule, by, target, reg_cols, regime, seed, secs) -> list[RaceState]:
    jobs = data.jobs
    ok = rankable(jobs, target).to_numpy()
    maximize = maximize_target(target)
    looks = schedule.looks
    groups = group_rows(jobs, by)  # conditions from every job, done or not
    conds = [dict(zip(by, (_plain(v) for v in key))) for key, _ in groups]
    # per condition: regime label -> its columns (first job's), in first-appearance order
    regs = []
    for _, rows in groups:
        r: dict[str, dict] = {}
        for i in rows:
            r.setdefault(regime[i], {c: _plain(jobs[c].iat[i]) for c in reg_cols})
        regs.append(r)
    cond_of = np.empty(len(jobs), dtype=int)
    for c, (_, rows) in enumerate(groups):
        cond_of[rows] = c
    active = [list(r) for r in regs]  # regimes entering the next look
    last_look = [{g: None for g in r} for r in regs]  # regime -> the last look it took part in
    final: list[RaceState | None] = [None] * len(conds)  # the state once stopped
    states: list[RaceState | None] = [None] * len(conds)
    dropped: list[dict] = [{} for _ in conds]  # regime -> (look, best) where it was shown worse
    for k, s_k in enumerate(looks):
        racing = [c for c in range(len(conds)) if final[c] is None and not _evaluating(states[c])]
        if not racing:
            break
        # does look k have every job it needs?
        have = {}
        waiting = []
        for c in racing:
            rows = groups[c][1]
            done = {g: set() for g in active[c]}
            for i in rows:
                if ok[i] and regime[i] in done and np.isfinite(seed[i]) and 0 <= seed[i] < s_k:
                    done[regime[i]].add(int(seed[i]))
            have[c] = {g: len(v) for g, v in done.items()}
            if any(n < s_k for n in have[c].values()):
                waiting.append(c)
        if waiting:
            missing = sum(s_k - n for c in waiting for n in have[c].values())
            for c in racing:
                prev = f"{states[c].reason}; " if states[c] else ""
                states[c] = _state(conds[c], target, k, have[c], schedule.spent(k - 1), "continue",
                                   tuple(active[c]), states[c].best if states[c] else None, s_k, schedule,
                                   f"{prev}waiting for look {k}: {missing} job(s) of {s_k} seeds per active regime "
                                   "not done yet", regs[c], states[c].intervals if states[c] else None, dropped[c])
            break
        for c in racing:
            for g in active[c]:
                last_look[c][g] = k
        # the look's jobs: each regime's seeds up to the last look it took part in
        limit = np.array([looks[last_look[cond_of[i]].get(regime[i])]
                          if last_look[cond_of[i]].get(regime[i]) is not None else 0 for i in range(len(jobs))])
        use = ok & np.isfinite(seed) & (seed >= 0) & (seed < limit)
        got_conds, inputs, noises = condition_noises(data, target, by, maximize, jobs=jobs[use], reg_cols=reg_cols)
        index = {tuple(sorted((k2, _plain(v)) for k2, v in cd.items())): j for j, cd in enumerate(got_conds)}
        todo, ns, gs, labels = [], [], [], []
        for c in racing:
            j = index[tuple(sorted(conds[c].items()))]
            names = [label(r) for r in inputs[j]["regs"]]
            idx = [names.index(g) for g in active[c]]
            noise, gnoise = noises[j]
            todo.append(c)
            ns.append(active_noise(noise, idx))
            gs.append(None if gnoise is None else active_noise(gnoise, idx))
            labels.append(list(active[c]))
        for c, lab, d in zip(todo, labels, decide_look(ns, gs, schedule, k, maximize)):
            seeds = {g: s_k for g in lab}
            # the evaluation look next: these seeds' checkpoints on more items, no new job
            nxt = s_k if d.evaluate else looks[k + 1] if d.state == "continue" else None
            cont = tuple(lab[i] for i in d.active)
            iv = {lab[i]: (float(d.gap[i]), float(d.gap_lo[i]), float(d.gap_hi[i])) for i in range(len(lab))}
            dropped[c].update({lab[i]: (k, lab[d.best]) for i in d.worse})
            secs_k = job_seconds([i for i in groups[c][1] if use[i]], regime, secs, lab)
            kept = [lab[i] for i in range(len(lab)) if i not in d.worse]
            st = _state(conds[c], target, k, seeds, schedule.spent(k), d.state, cont, lab[d.best], nxt, schedule,
                        f"look {k} ({s_k} seeds, α {schedule.level(k):.4g}): {d.reason}", regs[c], iv,
                        dict(dropped[c]), gain=d.gain, best_gain=d.best_gain, job_seconds=secs_k,
                        take=take_regime(kept, secs_k) if d.state == "equivalent" else None,
                        next_items=schedule.eval_items if d.evaluate else None)
            states[c] = st
            if d.state == "continue":
                active[c] = list(cont)
            else:
                final[c] = st
        evaluating = [c for c in todo if _evaluating(states[c])]
        if evaluating:
            _evaluation_look(data, schedule, by, target, reg_cols, regime, secs, maximize, k, use, evaluating,
                             groups, conds, regs, active, states, final, dropped)
    return [s for s in states if s is not None]


def _evaluating(state: RaceState | None) -> bool:
    """The condition waits for (or is at) its evaluation look: it takes no more seed looks."""
    return state is not None and state.state == "continue" and state.next_items is not None


def _evaluation_look(data, schedule: Schedule, by, target, reg_cols, regime, secs, maximize, k, use, conds_todo,
                     groups, conds, regs, active, states, final, dropped) -> None:
    """The evaluation look of the conditions that chose it at look k: the same jobs as look k (seeds < looks[k]
    of the active regimes), their final and start scored on schedule.eval_items items (eval-more.json, report/
    more_items.py), decided at the evaluation look's level; a condition whose jobs are not all re-evaluated
    on exactly those items waits ("continue", next_items). The seed pool is look k's, as at the seed look, less
    the evaluating conditions' regimes dropped before it (their jobs are not scored on the added items)."""
    from race_cli.report.more_items import more_items_used, swap_in_more

    s_k = schedule.looks[k]
    jobs = data.jobs
    n_more = (pd.to_numeric(jobs["eval_more_items"], errors="coerce").to_numpy(float) if "eval_more_items" in jobs
              else np.full(len(jobs), np.nan))
    ready, rows_of = [], {}
    for c in conds_todo:
        rows = [i for i in groups[c][1] if use[i] and regime[i] in active[c]]
        rows_of[c] = rows
        missing = [i for i in rows if n_more[i] != schedule.eval_items]
        if missing or not more_items_used(data, target, rows):
            prev = states[c]
            states[c] = replace(prev, reason=f"{prev.reason}; waiting for the evaluation look: {len(missing)} "
                                             f"job(s) to score on {schedule.eval_items} items")
            continue
        ready.append(c)
    if not ready:
        return
    swapped = data
    use_e = use.copy()
    for c in ready:
        swapped = swap_in_more(swapped, target, rows_of[c])
        # only the evaluated jobs (the active regimes'): a regime dropped earlier keeps its summary's items, and a
        # condition ranked on the items common to both would fall back to those
        use_e[[i for i in groups[c][1] if i not in set(rows_of[c])]] = False
    got_conds, inputs, noises = condition_noises(swapped, target, by, maximize, jobs=jobs[use_e], reg_cols=reg_cols)
    index = {tuple(sorted((k2, _plain(v)) for k2, v in cd.items())): j for j, cd in enumerate(got_conds)}
    ns, gs, labels = [], [], []
    for c in ready:
        j = index[tuple(sorted(conds[c].items()))]
        names = [label(r) for r in inputs[j]["regs"]]
        idx = [names.index(g) for g in active[c]]
        noise, gnoise = noises[j]
        ns.append(active_noise(noise, idx))
        gs.append(None if gnoise is None else active_noise(gnoise, idx))
        labels.append(list(active[c]))
    e = schedule.eval_look
    for c, lab, noise, d in zip(ready, labels, ns, decide_look(ns, gs, schedule, k, maximize,
                                                                  evaluated=[True] * len(ready))):
        iv = {lab[i]: (float(d.gap[i]), float(d.gap_lo[i]), float(d.gap_hi[i])) for i in range(len(lab))}
        dropped[c].update({lab[i]: (e, lab[d.best]) for i in d.worse})
        secs_k = job_seconds(rows_of[c], regime, secs, lab)
        kept = [lab[i] for i in range(len(lab)) if i not in d.worse]
        st = _state(conds[c], target, e, {g: s_k for g in lab}, schedule.spent(k) + schedule.level(e), d.state, (),
                    lab[d.best], None, schedule, f"evaluation look ({noise.n} items, {s_k} seeds, α "
                    f"{schedule.level(e):.4g}): {d.reason}", regs[c], iv, dict(dropped[c]), gain=d.gain,
                    best_gain=d.best_gain, job_seconds=secs_k,
                    take=take_regime(kept, secs_k) if d.state == "equivalent" else None)
        states[c] = final[c] = st


def _state(cond: dict, target: str, k: int, seeds: dict, spent: float, state: str, active: tuple, best,
           next_seeds, schedule: Schedule, reason: str, regs: dict, intervals: dict | None = None,
           dropped: dict | None = None, gain: str | None = None, best_gain: float = np.nan,
           job_seconds: dict | None = None, take: str | None = None, next_items: int | None = None) -> RaceState:
    act = active if state == "continue" else ()
    return RaceState(condition=condition_label(cond | {"target": target}), target=target, look=k,
                     seeds={g: int(n) for g, n in seeds.items()}, alpha_spent=float(spent), state=state,
                     active=tuple(act), best=best, next_seeds=next_seeds if state == "continue" else None,
                     margin=schedule.margin, reason=reason, condition_values=dict(cond),
                     active_values=tuple(dict(regs[g]) for g in act), intervals=intervals or {},
                     dropped=dict(dropped or {}), gain=gain,
                     best_gain=float(best_gain) if best_gain is not None and np.isfinite(best_gain) else None,
                     job_seconds=dict(job_seconds or {}), take=take,
                     next_items=next_items if state == "continue" else None)


def needed_seeds(states: list[RaceState]) -> dict[tuple, int]:
    """Per regime still racing, the seeds it needs now (the most over targets: one job serves every target).
    Key: sorted (column, value) pairs of the condition's columns followed by sorted ones of the regime's."""
    out: dict[tuple, int] = {}
    for st in states:
        if st.state != "continue" or st.next_seeds is None:
            continue
        cond = sorted(st.condition_values.items())
        for vals in st.active_values:
            key = tuple(cond + sorted(vals.items()))
            out[key] = max(out.get(key, 0), int(st.next_seeds))
    return out


def needed_evaluations(states: list[RaceState]) -> dict[tuple, tuple[int, int]]:
    """Per regime waiting for its condition's evaluation look, (seeds whose finished jobs it needs scored, items per
    target): the run loop re-evaluates those jobs (engine/reeval.py). Keys as needed_seeds'."""
    out: dict[tuple, tuple[int, int]] = {}
    for st in states:
        if not _evaluating(st):
            continue
        cond = sorted(st.condition_values.items())
        for vals in st.active_values:
            key = tuple(cond + sorted(vals.items()))
            seeds = max(out.get(key, (0, 0))[0], int(st.next_seeds))
            out[key] = (seeds, int(st.next_items))
    return out
