"""Numbers for people: the percent and significant-digit formats of `race plan`'s tables and the report's."""

from __future__ import annotations

import math


def pct(x: float | None, digits: int = 1) -> str:
    """0.1234 -> '12.3%' (digits after the point); None or a non-finite value -> '–'."""
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"


def g3(x: float) -> str:
    """3e+12 -> '3e+12', 0.1234 -> '0.123' (three significant digits); a non-finite value -> '–'."""
    return f"{x:.3g}" if math.isfinite(x) else "–"


def value(v: object) -> str:
    """A knob's value in a label: 2.0 -> '2', 1e12 -> '1e+12', 0.125 -> '0.125', 'rule' -> 'rule'."""
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e6:
        return str(int(v))
    if isinstance(v, float):
        return f"{v:.3g}"
    return str(v)


def pm(v: object, lo: object = None, hi: object = None, signed: bool = False) -> str:
    """'0.605 ± 0.056' (the interval's half-width: the narrow console's form, the files keep both ends); the
    value alone ('0.605', '+0.050' when signed) without a finite interval; '–' for a missing value."""
    x, a, b = _number(v), _number(lo), _number(hi)
    if not math.isfinite(x):
        return "–"
    text = f"{x:+.3f}" if signed else f"{x:.3f}"
    return f"{text} ± {(b - a) / 2:.3f}" if math.isfinite(a) and math.isfinite(b) else text


def _number(u: object) -> float:
    """u as a float; NaN for None or anything that is not a number."""
    try:
        return float(u)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan
