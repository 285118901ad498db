"""`race validate`'s preview: the regimes to validate and the seeds per condition, at the console's width.

    race validate runs/pilot --replicate      # prints this preview, then writes the sweep

Conditions are named in the tables by a short label, the key=value parts of the condition that differ
across the validation ('rule', 'tiny-prm'; one condition: its model, as the report's findings name it),
and a line above the tables says what each label stands for and what the conditions share. On a console
under 120 columns (an 80-column terminal, a pipe) the tables lose their frame, and the power table the
two columns the rest of the preview or provenance.json already holds (the control: the picks' role
"control"; the pilot's job sd: conditions[].power_plan.seed_pool.job_sd), so that no number or word is
folded (tests/test_console_width.py). Every figure is also in provenance.json. No torch import.
"""

from __future__ import annotations

import math
from typing import Any

from race_cli.plan.validate_design import _finite

WIDE = 120  # a console at least this wide gets every column, framed; narrower (a pipe is 80): frameless


# --- short condition labels ----------------------------------------------------------------


def _value(token: str) -> str:
    """'reward=prm:tiny-prm' -> 'tiny-prm', 'budget_flops=1e+12' -> '1e+12' (a label's part)."""
    v = token.partition("=")[2] or token
    return v.split(":", 1)[1] if v.startswith("prm:") else v


def short_conditions(conds: list[str]) -> tuple[dict[str, str], list[str]]:
    """({condition: short label}, the lines saying what the labels stand for).

    A condition is 'key=value key=value ...' (report/rank.condition_label); its label is the values of
    the parts that differ across `conds`. One condition is labelled by its model; labels that would
    not tell the conditions apart become numbers, each with its own line.
    """
    if not conds:
        return {}, []
    tokens = {c: c.split() for c in conds}
    shared = [t for t in tokens[conds[0]] if all(t in tokens[c] for c in conds)]
    own = {c: [t for t in tokens[c] if t not in shared] for c in conds}
    if len(conds) == 1:
        (c,) = conds
        model = next((_value(t) for t in tokens[c] if t.startswith("model=")), "1")
        return {c: model}, [f"condition {model}: {c}"]
    labels = {c: " ".join(_value(t) for t in own[c]) for c in conds}
    if len(set(labels.values())) < len(conds) or not all(labels.values()):
        labels = {c: str(i) for i, c in enumerate(conds, 1)}
        return labels, [f"condition {labels[c]}: {c}" for c in conds]
    parts = ", ".join(f"{labels[c]} ({' '.join(own[c])})" for c in conds)
    return labels, [f"conditions {parts}; all with {' '.join(shared)}" if shared else f"conditions {parts}"]


# --- tables --------------------------------------------------------------------------------


def _table(console, head: list[str], rows: list[list[str]], left: tuple[str, ...], wraps: tuple[str, ...]):
    """A table of `rows` under `head`: framed from WIDE columns up, else frameless with two spaces between
    columns. Columns in `wraps` break only between words (each at least its longest word wide); the
    others are as wide as their widest cell, and as their header where the console has room (else the
    header wraps between its words): a cell is never folded. Sized to fit 80 columns with the short labels."""
    from rich import box
    from rich.measure import Measurement
    from rich.table import Table

    def build(full_headers: bool):
        t = Table() if console.width >= WIDE else Table(box=box.SIMPLE_HEAD, show_edge=False,
                                                        padding=(0, 1, 0, 0), pad_edge=False)
        for i, h in enumerate(head):
            cells = [r[i] for r in rows]
            longest = max(len(w) for cell in [h, *cells] for w in (cell.split() or [""]))
            justify = "left" if h in left else "right"
            if h in wraps:
                t.add_column(h, justify=justify, min_width=longest, overflow="fold")
            else:
                t.add_column(h, justify=justify, overflow="fold",
                             width=max([len(h) if full_headers else longest, *(len(c) for c in cells)]))
        for r in rows:
            t.add_row(*r)
        return t

    t = build(True)
    natural = Measurement.get(console, console.options.update(max_width=10**5), t).maximum
    return t if natural <= console.width else build(False)


PICK_HEAD = ["condition", "role", "regime", "rank", "pilot mean [95% CI]", "budget", "jobs"]


def print_picks(picks: list[Any], prov: dict, console) -> None:
    """What the pilot predicted for each regime to be validated, and where it goes. The best share stays
    in provenance.json: beside ≈ best it reads as a certainty it is not (docs/report.md)."""
    order = {(c["condition"], r["regime"]): r for c in prov["conditions"] for r in c["predicted_order"]}
    st = prov["settings"]
    ev = st.get("eval_items") or {}
    labels, legend = short_conditions([c["condition"] for c in prov["conditions"]])
    say = lambda s: console.print(s, highlight=False)  # wrapped at the console's width
    say(f"[bold]race validate: {len(picks)} regime(s) from pilot {prov['pilot']['sweep']}[/] (target "
        f"{prov['target']}; {st['selection']} + control: the pilot's {st.get('control', 'lowest')})")
    for line in legend:
        say(line)
    rows = []
    for pk in picks:
        r = order.get((pk.condition, pk.regime), {})
        ci = f"{_finite(r.get('mean')):.3f} [{_finite(r.get('ci_lo')):.3f}, {_finite(r.get('ci_hi')):.3f}]"
        rows.append([labels.get(pk.condition, pk.condition), pk.role, pk.regime, str(r.get("rank", "?")),
                     ci.replace("nan", "–"), f"{pk.pilot_budget:.3g}→{pk.budget:.3g}", str(len(pk.job_ids))])
    console.print(_table(console, PICK_HEAD, rows, left=("condition", "role", "regime"),
                         wraps=("condition", "role", "regime", "pilot mean [95% CI]")))
    say(f"fresh seeds from {st['seeds'][0]}; evaluation on task.eval_seed {ev.get('eval_seed')} (the pilot's "
        f"{ev.get('pilot_eval_seed')}): {ev.get('note', '')}; the pilot's interval is its 95% interval "
        "(evaluation items and seeds).")


POWER_HEAD = ["condition", "control", "seeds", "FLOPs", "job time", "pilot gap", "bias", "gap sized for",
              "power there", "gap confirmed at power", "job sd best/ctl"]
POWER_WIDE_ONLY = ("control", "job sd best/ctl")  # under WIDE columns: in the picks (role) and provenance.json
POWER_CAPTION = ("the test: best − control, items paired, 95% interval above {margin:g} (report/validation.py); "
                 "its power from the same variance model with the pilot's components (seed variance pooled over "
                 "the pilot's conditions of the same reward); pilot gap: the pilot's best − control; bias: its "
                 "selection bias (winner's curse); gap sized for: --gap, or the pilot gap less its bias; job "
                 "time: the condition's planned job seconds, summed.")
POWER_NARROW_NOTE = ("Narrow console: each condition's control is the regime of role control above; the pilot's "
                     "job sd (best/control) is in provenance.json (conditions[].power_plan.seed_pool.job_sd), or "
                     f"widen the terminal to {WIDE} columns.")


def power_rows(prov: dict, labels: dict[str, str] | None = None) -> list[list[str]]:
    """POWER_HEAD cells of the per-condition seed plan: seeds, FLOPs, planned job time, the pilot's gap and
    its selection bias, the gap sized for, the power there and the gap the seeds confirm with the target
    power, the pilot's job sd of best and control."""
    from race_cli.cost.walltime import fmt_duration

    out = []
    for c in prov["conditions"]:
        pp = c.get("power_plan") or {}
        f = lambda k, nd=3: "–" if not math.isfinite(_finite(pp.get(k))) else f"{_finite(pp.get(k)) + 0.0:.{nd}f}".replace(
            f"-{0:.{nd}f}", f"{0:.{nd}f}")  # a bias of -0.0004 reads 0.000, not -0.000
        sd = "/".join(f"{v ** 0.5:.3f}" for v in pp["parts"]["seed_var"]) if "parts" in pp else "–"
        out.append([(labels or {}).get(c["condition"], c["condition"]), c.get("control") or "–",
                    str(pp.get("seeds", "?")) + (" (max)" if pp.get("capped") else ""),
                    "–" if not math.isfinite(_finite(pp.get("flops"))) else f"{pp['flops']:.3g}",
                    fmt_duration(pp.get("planned_seconds")), f("observed_gap"), f("selection_bias"),
                    f("gap") + (" (--gap)" if pp.get("gap_source") == "--gap" else ""), f("power_at_gap", 2),
                    f("detectable_gap"), sd])
    return out


def print_power_plan(prov: dict, console) -> None:
    """The seeds per condition and what they buy (validate_design.plan_all_seeds), one row a condition."""
    st = prov["settings"]
    how = ("fixed by --seeds" if st.get("seeds_by") == "fixed"
           else f"by power {st.get('power'):g}, at most {st.get('max_seeds')} per regime")
    labels, _ = short_conditions([c["condition"] for c in prov["conditions"]])
    keep = [i for i, h in enumerate(POWER_HEAD) if console.width >= WIDE or h not in POWER_WIDE_ONLY]
    rows = [[r[i] for i in keep] for r in power_rows(prov, labels)]
    console.print(f"[bold]seeds per condition ({how})[/]", highlight=False)
    console.print(_table(console, [POWER_HEAD[i] for i in keep], rows, left=("condition", "control"),
                         wraps=("condition", "control", "gap sized for")))
    console.print(POWER_CAPTION.format(margin=st.get("margin") or 0), highlight=False)
    if console.width < WIDE:
        console.print(POWER_NARROW_NOTE, highlight=False)
