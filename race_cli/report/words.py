"""One wording per verdict: how the report says what race_cli/stats decided, wherever it is shown.

The joint comparison's sentences and per-budget lines (report/joint.py), the findings
(report/findings.py) and a raced sweep's states all word a verdict here, so one call reads the same
in the console, summary.md and report.json:

- a comparison of two sides: "<side> ahead", or why none is named — "not separated" (the
  test did not tell them apart: not a claim that they are equal), "not tested" (its gate in the
  gatekept sequence stayed shut), "not testable with one seed", "no interval";
- a race's state per condition (stats/race.py STATES): winner, equivalent within ±margin (beside the
  best's gain over its start, and the regime to take: the least wall time per job among the equivalent),
  undecided (with what would settle it), or still running, and at which look; "no regime shown to beat
  its start" is said beside the allocation call, never instead of it.
"""

from __future__ import annotations

import math
import re
from typing import Any

NOT_SEPARATED = "not separated"  # no side shown ahead; never read as "equal" (that is `equivalent`, with a margin)
NOT_TESTED = "not tested"  # its gate stayed shut: no share of the familywise α reached it
NOT_TESTABLE = "not testable with one seed"  # no seed variance: the interval covers evaluation noise only
NO_INTERVAL = "no interval"  # nothing to estimate the noise from

# a validation's verdict on best − control in the validation (report/validation.verdict decides it)
CONFIRMED = "confirmed"  # the interval lies above the margin (0 unless --margin)
REVERSED = "reversed"  # the interval lies below zero: the control is better
PENDING = "pending"  # the best or the control has no finished validation job yet
# NOT_SEPARATED: the interval reaches the margin and does not lie below zero; NOT_TESTABLE: one seed per regime

# the caveats: a pilot's report (console, summary.md, report.json) and a validation's summary
CAVEAT = ("A pilot grid is a diagnostic, not a promise of held-out gains; "
          "validate before committing compute.")
VALIDATION_CAVEAT = ("A pilot grid is a diagnostic, not a guarantee: a call that held here held for these "
                     "regimes, at this budget, on this target; it says little about regimes the pilot did not rank.")


def number(v: Any) -> float:
    """v as a float, NaN when it is not a number."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def signed(v: Any) -> str:
    """'+0.050', or '–' for a missing or non-finite value."""
    x = number(v)
    return "–" if not math.isfinite(x) else f"{x:+.3f}"


def direction(maximize: bool) -> str:
    """'higher is better' or 'lower is better': which way a target's score points (records.Target)."""
    return f"{'higher' if maximize else 'lower'} is better"


def verdict(winner: str | None, *, interval: bool = True, testable: bool = True, tested: bool = True) -> str:
    """The verdict of one comparison of two sides, in the report's words.

    winner: the side shown ahead (its name), or None; interval: the comparison has a finite interval;
    testable: seed variance was measured (or assumed); tested: its gate let it be tested."""
    if winner:
        return f"{winner} ahead"
    if not interval:
        return NO_INTERVAL
    if not testable:
        return NOT_TESTABLE
    if not tested:
        return NOT_TESTED
    return NOT_SEPARATED


# --- a race's states -----------------------------------------------------------------------------------


def margin_text(margin: Any) -> str:
    """'±0.050' (the equivalence margin, on the score scale)."""
    x = number(margin)
    return f"±{x:.3f}" if math.isfinite(x) else "±–"


def race_schedule_brief(schedule) -> str:
    """The race's schedule as race plan prints it above the price: 'race: 2 -> 3 -> 4 seeds per active regime,
    alpha 0.05 (<spending>), margin ±0.05'."""
    from race_cli.stats.race import SPENDING_WORDS

    looks = " -> ".join(map(str, schedule.looks))
    return (f"race: {looks} seeds per active regime, alpha {schedule.alpha:g} ({SPENDING_WORDS[schedule.spending]}), "
            f"margin ±{schedule.margin:g}")


def race_schedule(schedule) -> str:
    """The race a sweep ran (stats/race.Schedule), one line: its looks, α and margin."""
    from race_cli.stats.race import SPENDING_WORDS

    looks = " → ".join(str(n) for n in schedule.looks)
    return (f"race: looks at {looks} seeds per active regime, familywise α {schedule.alpha:g} over the looks "
            f"({SPENDING_WORDS[schedule.spending]}), equivalence margin {margin_text(schedule.margin)}; a raced condition's call "
            "is its race state at its last look (the rankings' intervals below are at the full α, for reference).")


_LOOK_PREFIX = re.compile(r"^look \d+ \([^)]*\): ")  # stats/race's reasons open with their look; said once here
_EVAL_PREFIX = re.compile(r"^evaluation look \((\d+) items[^)]*\): ")  # report/race's evaluation look, the same


def race_state(state) -> str:
    """One condition's race state (stats/race.RaceState) in words: the verdict, at which look (an index
    into the schedule's looks, as report.json's `look`) with its seeds, the margin where it is used, and
    why (what would settle an undecided call)."""
    seeds = sorted(set((state.seeds or {}).values()))
    had = f"{seeds[0]}" if len(seeds) == 1 else f"{seeds[0]}-{seeds[-1]}" if seeds else "–"
    at = f"at look {int(state.look)} ({had} seeds)"
    reason = _LOOK_PREFIX.sub("", str(state.reason or "").strip())
    evaluated = _EVAL_PREFIX.match(reason)
    if evaluated:  # decided at the evaluation look: the finished jobs scored on more items
        at = f"at the evaluation look ({had} seeds, {evaluated[1]} items)"
        reason = reason[evaluated.end():]
    why = f": {reason}" if reason else ""
    best = state.best or "–"
    gain = gain_note(state)
    if state.state == "winner":  # the verdict says it all; its reason stays in report.json
        return f"winner {best} {at}{gain}"
    if state.state == "equivalent":
        return f"equivalent within {margin_text(state.margin)} {at}: {best_gain_text(state)}; {take_text(state)}{gain}"
    if state.state == "undecided":
        return f"undecided {at}{why}{gain}"
    if state.state == "no_gain":  # a record written before issue 52, when no_gain replaced the allocation state
        return f"no gain {at}{why}"
    active = ", ".join(map(str, state.active or ())) or "–"
    nxt = f" to {state.next_seeds} seeds" if state.next_seeds else ""
    if getattr(state, "next_items", None):  # the evaluation look: the same jobs scored on more items
        nxt = f" to the evaluation look ({state.next_items} items, {state.next_seeds} seeds)"
    return f"racing {at}: {active} continue{nxt}{why}"


def gain_note(state) -> str:
    """'; no regime shown to beat its start' beside an allocation call whose gain call is no_gain, else ''."""
    return "; no regime shown to beat its start" if getattr(state, "gain", None) == "no_gain" else ""


def best_gain_text(state) -> str:
    """'best μ=1 gains +0.052 over its start' (the margin is read beside it), or 'best μ=1' without a start."""
    g = getattr(state, "best_gain", None)
    best = state.best or "–"
    return f"best {best} gains {signed(g)} over its start" if g is not None and math.isfinite(number(g)) else \
        f"best {best}"


def take_text(state) -> str:
    """'take μ=2: 41 s per job (μ=1 52 s, μ=4 1m00s)': the equivalent regime with the least measured wall time
    per job, at equal FLOPs; without measured times, says so."""
    from race_cli.cost.walltime import fmt_duration

    secs = getattr(state, "job_seconds", None) or {}
    take = getattr(state, "take", None)
    if not take or take not in secs:
        return "take any: no wall time per job measured to choose by"
    others = ", ".join(f"{g} {fmt_duration(v)}" for g, v in secs.items() if g != take and g not in (state.dropped or {}))
    return f"take {take}: {fmt_duration(secs[take])} per job" + (f" ({others})" if others else "")


def collapsed_note(rows) -> str:
    """'; collapsed seed: G=4 μ=2: job-s3 −0.150 against its siblings' for a condition whose ranking marks a
    seed far below its siblings (report/rank.py `collapsed_seeds`, stats/seeds.py's rule), else ''.
    rows: one condition's ranking rows as {column: values} (or a DataFrame)."""
    if "collapsed_seeds" not in rows:
        return ""
    said = [f"{g}: {m}" for g, m in zip(rows["regime"], rows["collapsed_seeds"]) if isinstance(m, str) and m]
    return f"; collapsed seed ({'; '.join(said)})" if said else ""
