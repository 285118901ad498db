"""Regime and condition labels read back from a file, checked against the jobs they name.

A label ("G=4 μ=2", "model=tiny-s") is what the report prints for the values a job's own files hold
(report/rank.py `label`). Two files carry labels race wrote earlier and reads back later: a
validation sweep's provenance.json (which pilot regime each validation job runs) and a pilot's
report/report.json (which jobs ran each regime `race validate` picks). Both are data from a sweep
folder (docs/security.md): a relabelled regime would be printed, compared and validated as a
regime that never ran. So a label read back is taken apart here (`claimed_values`) and every
value it claims is compared with the job's own (`label_mismatch`); a disagreement is refused by the
caller, naming the file, the job, the label and what the job's files say. Pure, no I/O.
"""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from race_cli.report.rank import SHORT, _fmt, label

FIELD_OF = {short: name for name, short in SHORT.items()}  # "G" -> "group_size"; other names are their own


def claimed_values(text: str) -> dict[str, str]:
    """rank.label's inverse: 'G=4 μ=2' -> {'group_size': '4', 'updates_per_batch': '2'}, values as
    printed; '(one regime)' -> {}. ValueError for text that is not a label."""
    text = str(text).strip()
    if text in ("(one regime)", "(all jobs)"):
        return {}
    out: dict[str, str] = {}
    for token in text.split():
        key, eq, value = token.partition("=")
        if not eq or not key or not value or FIELD_OF.get(key, key) in out:
            raise ValueError(f"{text!r} is not a label race writes ('key=value' pairs, each key once)")
        out[FIELD_OF.get(key, key)] = value
    return out


def _missing(v: Any) -> bool:
    """None, NaN or pandas' NA: a value the job's files do not hold."""
    if v is None or isinstance(v, str):
        return v is None
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def label_mismatch(text: str, own: dict, skip: Iterable[str] = ()) -> str | None:
    """None when every value the label `text` claims (but those in `skip`) is the job's own value in
    `own` (a row of the report's job table); else the label the job's own values give for the same
    keys ('G=4 μ=1'), or a sentence when `text` is no label at all. A value the job does not record
    is a disagreement: a label cannot be checked against nothing."""
    try:
        claimed = claimed_values(text)
    except ValueError as e:
        return str(e)
    keys = [k for k in claimed if k not in set(skip)]
    mine = {k: own.get(k) for k in keys}
    if all(not _missing(v) and _fmt(_plain(v)) == claimed[k] for k, v in mine.items()):
        return None
    return label({k: ("(not recorded)" if _missing(v) else _plain(v)) for k, v in mine.items()})


def _plain(v: Any) -> Any:
    """numpy / pandas scalars as Python numbers, so `_fmt` prints them as the report does."""
    item = getattr(v, "item", None)
    return item() if callable(item) and not isinstance(v, (str, bytes)) else v
