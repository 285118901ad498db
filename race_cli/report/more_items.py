"""The ranking's items, extended where a sweep's finished jobs were scored on more of them (engine/reeval.py).

`with_more_items(data)` returns the SweepData the ranking reads, with each condition's per-item scores (final
and start) taken from the jobs' eval-more.json where every rankable job of the condition has one for the
target, and left as summary.json's where any lacks it: a ranking never mixes a job scored on 1,200 items
with one scored on 400 as if they were the same measurement. The ids stay paired (common random numbers:
every job's item i drew the same random numbers), and report/rank._item_matrix keeps the ids every job has
in common (a job leaves out an added item that was one of its training questions), so the ranking's method
line names how many items it used ("items (paired, n=1200) × seeds", or "1196 common ids of 1200").

`more_items_used(data, target, rows)` says how many items a set of jobs has in common on eval-more.json
(None when any lacks it): what the race's evaluation look reads (report/race.py).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from race_cli.report.rank import group_rows, rankable
from race_cli.report.table import CONDITION_COLS, SweepData


def _keys(data: SweepData, rows) -> list[tuple[str, str]]:
    jobs = data.jobs
    return [(str(jobs["sweep"].iat[i]), str(jobs["job_id"].iat[i])) for i in rows]


def more_items_used(data: SweepData, target: str, rows) -> int | None:
    """Items every job of `rows` (positions in data.jobs) holds on eval-more.json for `target`, final and start;
    None when any job lacks a re-evaluation (or rows is empty)."""
    keys = _keys(data, rows)
    if not keys:
        return None
    common: set[str] | None = None
    for s, j in keys:
        for got in (data.items_more.get((s, j, target)), data.items_initial_more.get((s, j, target))):
            if got is None:
                return None
            common = set(got[0]) if common is None else common & set(got[0])
    return len(common or ())


def swap_in_more(data: SweepData, target: str, rows) -> SweepData:
    """`data` with the per-item scores of the jobs `rows` on `target` replaced by their eval-more.json's (final
    and start); the caller checks every one has them (`more_items_used`)."""
    items, initial = dict(data.items), dict(data.items_initial)
    for s, j in _keys(data, rows):
        items[(s, j, target)] = data.items_more[(s, j, target)]
        initial[(s, j, target)] = data.items_initial_more[(s, j, target)]
    return replace(data, items=items, items_initial=initial)


def with_more_items(data: SweepData, by: list[str] | None = None) -> tuple[SweepData, dict[tuple, int]]:
    """(the SweepData the ranking reads, {(condition values, target): items used} where eval-more.json was)."""
    if not data.items_more:
        return data, {}
    by = list(CONDITION_COLS) if by is None else list(by)
    used: dict[tuple, int] = {}
    out = data
    for target in data.targets:
        ok = rankable(data.jobs, target).to_numpy()
        for key, rows in group_rows(data.jobs, by):
            rows = [i for i in rows if ok[i]]
            n = more_items_used(data, target, rows)
            if n:
                out = swap_in_more(out, target, rows)
                used[(tuple(_plain(v) for v in key), target)] = n
    return out, used


def _plain(v):
    return v.item() if isinstance(v, np.generic) else v
