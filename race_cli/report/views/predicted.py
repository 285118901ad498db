"""A validation's predictions against what it realised, shown: per condition the table of both predictors
(the pilot's endpoint, its compute curve) and the sentence report/predicted.predictor_sentence wrote.
Computes nothing."""

from __future__ import annotations

import numpy as np
import pandas as pd

from race_cli.fmt import pm as _pm


PRED_HEAD = ["regime", "realised", "endpoint [95%]", "error", "in PI", "curve [95%]", "error", "in PI",
             "× observed"]  # in PI: the realised mean within the prediction interval (add_predictions)


def prediction_rows(t: pd.DataFrame) -> list[list[str]]:
    f = lambda v: "–" if not np.isfinite(v) else f"{v:.3f}"
    s = lambda v: "–" if not np.isfinite(v) else f"{v:+.3f}"
    y = lambda v: "–" if not np.isfinite(v) else ("yes" if v else "no")
    return [[r.regime, f(r.val_mean) if hasattr(r, "val_mean") else "–",
             f"{f(r.endpoint_pred)} [{f(float(r.endpoint_lo))}, {f(float(r.endpoint_hi))}]", s(r.endpoint_error),
             y(r.endpoint_covered), f"{f(r.curve_pred)} [{f(r.curve_lo)}, {f(r.curve_hi)}]"
             + (" ⚠" if getattr(r, "curve_warning", "") else ""), s(r.curve_error),
             y(r.curve_covered), "–" if not np.isfinite(r.curve_extrapolation) else f"{r.curve_extrapolation:.2f}"]
            for r in t.itertuples()]


def markdown_lines(t: pd.DataFrame, sentence: str | None) -> list[str]:
    from race_cli.report.views.render import md_table

    if "endpoint_pred" not in t or not len(t):
        return []
    out = [md_table(PRED_HEAD, prediction_rows(t)), ""]
    if (sent := sentence):
        out += [sent, ""]
    return out


NARROW = 120  # a console narrower than this (a pipe is 80) gets PRED_NARROW; summary.md keeps every column
PRED_NARROW = ["regime", "realised", "endpoint ± 95%", "error", "in PI", "curve ± 95%", "error", "in PI"]


def narrow_rows(t: pd.DataFrame) -> list[list[str]]:
    """PRED_NARROW cells: what fits 80 columns without breaking a number."""
    full = prediction_rows(t)
    return [[row[0], row[1], _pm(float(r.endpoint_pred), float(r.endpoint_lo), float(r.endpoint_hi)), row[3], row[4],
             _pm(float(r.curve_pred), float(r.curve_lo), float(r.curve_hi)) + (" ⚠" if getattr(r, "curve_warning", "")
                                                                               else ""), row[6], row[7]]
            for row, r in zip(full, t.itertuples())]


def print_lines(console, t: pd.DataFrame, sentence: str | None) -> None:
    from rich import box
    from rich.table import Table

    if "endpoint_pred" not in t or not len(t):
        return
    narrow = console.width < NARROW
    title = "predicted at the validation budget vs realised"
    if narrow:  # one space between columns, nothing folded: a number split over two lines misreads
        console.print(title, highlight=False)
        tab = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False)
    else:
        tab = Table(title=title, title_justify="left")
    for h in PRED_NARROW if narrow else PRED_HEAD:
        tab.add_column(h, justify="left" if h == "regime" else "right", no_wrap=True)
    for row in narrow_rows(t) if narrow else prediction_rows(t):
        tab.add_row(*row)
    console.print(tab)
    if narrow:
        console.print("Narrow console: the intervals' ends and × observed are in summary.md.", highlight=False)
    if (sent := sentence):
        console.print(sent, highlight=False)
