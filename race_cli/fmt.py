"""Numbers for people: the one percent format of `race plan`'s tables and the report's."""

from __future__ import annotations

import math


def pct(x: float | None, digits: int = 1) -> str:
    """0.1234 -> '12.3%' (digits after the point); None or a non-finite value -> '–'."""
    return "–" if x is None or not math.isfinite(x) else f"{100 * x:.{digits}f}%"
