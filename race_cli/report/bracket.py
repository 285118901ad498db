"""Where the pilot's best sits on the G × μ grid, and what to run next: the findings' `edge:` and
`search vs learning:` lines.

Two questions a G × μ grid at one budget answers beside the rankings:

- **Is the best inside the grid?** A condition whose pilot-best regime has the grid's largest (or smallest)
  group size G or update count μ says the optimum may lie beyond the grid on that axis, not that it
  was found. `edge_lines` says so per axis and prints the `race run` that brackets it: the best's
  allocation moved one step past the edge (G or μ doubled, or halved where the schema allows: G ≥ 2,
  μ ≥ 1), for the conditions that need it, with the pilot's grid and typed overrides; `race report
  PILOT BRACKET` reads its sweep beside the pilot's. Only conditions where some regime beats its
  start have a best to bracket. A raced condition's best is its race state's (the condition's line names
  the same one), else the ranking's point estimate (the rankings say how far it is separated); model size is a condition, not a regime, and is left to the `size:` line.
- **More search or more learning at equal FLOPs?** `search_learning` contrasts doubling G with
  doubling μ from the same (G, μ), matched on model, reward and every other knob (the default: G=8 μ=1
  against G=4 μ=2), averaged over the matched pairs of a joint condition, with the joint comparison's
  own variance model and interval (report/joint.py: items paired, seed variance per reward system,
  each variance part at its own df). It is one claim at its own familywise 5%, outside the gatekept
  size/feedback family, so adding it changes none of their levels.

Why the bracket is a new sweep and not a new look of the race: a race fixes its regimes, its looks and
the split of α before the first job (stats/race.py); a regime added because of where the data put the
best is a data-chosen design change whose error rate no benchmark measured. The bracket's comparison
is a follow-up experiment, read with the pilot (`race report PILOT BRACKET`) and tested by `race validate`.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from race_cli.report.rank import _fmt, label

G, MU, M = "group_size", "updates_per_batch", "update_group_size"
KEYS = {G: "grpo.group_size", MU: "grpo.updates_per_batch"}  # knob column -> its override key
LEAST = {G: 2, MU: 1}  # the schema's smallest G (GRPO normalises within a group) and μ
CONDITION_KEYS = {"model": "model", "reward": "reward", "budget_flops": "budget.flops", "task": "task"}
QUESTION = "search_learning_matched"  # the joint sentence's question (findings: "search vs learning:")


# --- the pilot's launch: which grid, which typed overrides ------------------------------------------


@dataclass(frozen=True)
class Launch:
    """What the pilot was started with (its multirun.yaml): the grid's name and the overrides as typed."""

    grid: str | None = None
    overrides: tuple[str, ...] = field(default_factory=tuple)


def read_launch(sweep: str | Path) -> Launch | None:
    """The pilot's Launch from <sweep>/multirun.yaml (bounded, safe YAML: a sweep folder holds data), or
    None when it is missing or not the mapping race writes (the command then names no grid)."""
    from race_cli import folder
    from race_cli.io import inside, load_yaml, read_bounded

    try:
        doc = load_yaml(read_bounded(inside(folder.multirun_yaml(sweep), sweep), 2**20).decode("utf-8"))
    except Exception:  # noqa: BLE001 - missing, a link, too large, torn or not YAML: no launch
        return None
    if not isinstance(doc, dict):
        return None
    grid = doc.get("grid", {}).get("name") if isinstance(doc.get("grid"), dict) else None
    typed = doc.get("overrides") or []
    if not isinstance(typed, list) or not all(isinstance(t, str) for t in typed):
        typed = []
    return Launch(grid=str(grid) if isinstance(grid, str) and grid else None, overrides=tuple(typed))


# --- the edge of the grid ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Edge:
    """One condition's best at the grid's edge on one axis, and the allocation one step past it."""

    condition: dict  # {model, reward, budget_flops, task} of the condition (config option names)
    condition_id: str  # the ranking's condition label
    target: str
    axis: str  # G or MU
    side: str  # "high" or "low"
    best: dict  # {G: ., MU: .} of the pilot-best regime
    next: dict | None  # the allocation that brackets it, or None where the schema has no step past the edge


def _int(v: Any) -> int | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return int(x) if math.isfinite(x) and x.is_integer() else None


def _step(axis: str, value: int, side: str) -> int | None:
    """The value one step past the edge: doubled above, halved below (None below the schema's least)."""
    if side == "high":
        return 2 * value
    return value // 2 if value % 2 == 0 and value // 2 >= LEAST[axis] else None


def find_edges(ranking: pd.DataFrame, best: dict[str, str] | None = None) -> list[Edge]:
    """Every (condition, target, axis) whose pilot-best regime sits on the grid's edge of a swept axis
    (G or μ with two or more values in that condition), for conditions where some regime beats its start.
    best: {condition: regime label} where another record names the best (a race's state), so the edge
    line and the condition's line name one best; else the ranking's first."""
    if not len(ranking) or "condition" not in ranking or "rank" not in ranking:
        return []
    axes = [a for a in (G, MU) if a in ranking]
    out = []
    for (_, *target), g in ranking.groupby(["condition", "target"] if "target" in ranking else ["condition"],
                                          sort=False):
        if "beats_start" in g and not bool(g["beats_start"].fillna(False).astype(bool).any()):
            continue
        named = (best or {}).get(str(g["condition"].iloc[0]))
        rows = g[g["regime"].astype(str) == named] if named is not None and "regime" in g else g.iloc[:0]
        best_row = (rows if len(rows) else g.sort_values("rank", kind="stable")).iloc[0]
        vals = {a: [v for v in (_int(x) for x in g[a]) if v is not None] for a in axes}
        at = {a: _int(best_row[a]) for a in axes}
        cond = {c: best_row[c] for c in CONDITION_KEYS if c in g}
        for a in axes:
            if len(set(vals[a])) < 2 or at[a] is None:
                continue
            side = "high" if at[a] == max(vals[a]) else "low" if at[a] == min(vals[a]) else None
            if side is None:
                continue
            step = _step(a, at[a], side)
            nxt = None if step is None else {**at, a: step}
            out.append(Edge(cond, str(best_row["condition"]), str(target[0]) if target else "", a, side, at, nxt))
    return out


def bracket_command(point: dict, conds: list[dict], varying: list[str], launch: Launch | None) -> str:
    """`race run` of the allocation `point` for the conditions `conds`: the condition keys that vary across
    the pilot as comma lists, the pilot's grid and its typed overrides (those of the keys set here left out).
    Every token shell-quoted: the grid name and overrides are read from a sweep folder (data)."""
    own = {CONDITION_KEYS[c] for c in varying} | {KEYS[a] for a in point} | {"grid"}
    args = []
    if launch is not None and launch.grid:
        args.append(f"grid={launch.grid}")
    args += [t for t in (launch.overrides if launch else ()) if t.lstrip("+~").partition("=")[0] not in own]
    for c in varying:
        vals = dict.fromkeys(_fmt(float(x[c])) if c == "budget_flops" else _fmt(x[c]) for x in conds)
        args.append(f"{CONDITION_KEYS[c]}={','.join(vals)}")
    args += [f"{KEYS[a]}={point[a]}" for a in (G, MU) if a in point]
    return " ".join(["race", "run"] + [shlex.quote(a) for a in args])


def _varying(ranking: pd.DataFrame) -> list[str]:
    return [c for c in CONDITION_KEYS if c in ranking and ranking[c].nunique(dropna=False) > 1]


def edge_lines(ranking: pd.DataFrame, launch: Launch | None = None, best: dict[str, str] | None = None) -> list[str]:
    """The findings' lines for the bests at the grid's edge: one line counting them per axis and side
    ("max" / "min" of the values swept; "no lower" where the schema has no smaller value), then per
    allocation past the edge the `race run` that brackets it: the model × reward × ... product of the
    conditions that need it (a condition beside them is bracketed too: one command, not one per condition).
    Its sweep is read with the pilot's: `race report PILOT BRACKET`. best: as find_edges."""
    edges = find_edges(ranking, best)
    if not edges:
        return []
    varying = _varying(ranking)
    n_cond = ranking.groupby(["condition", "target"] if "target" in ranking else ["condition"]).ngroups
    at_edge = {(e.condition_id, e.target) for e in edges}
    sides: dict[tuple, list[Edge]] = {}
    for e in edges:
        sides.setdefault((e.axis, e.side, e.best[e.axis]), []).append(e)
    counts = []
    for (axis, side, value), es in sides.items():
        last = ", no lower" if any(e.next is None for e in es) else ""
        counts.append(f"{'G' if axis == G else 'μ'}={value} ({'max' if side == 'high' else 'min'}{last}) in {len(es)}")
    lines = [f"edge: {len(at_edge)} of {n_cond} bests at the grid's edge: " + ", ".join(counts)]
    points: dict[tuple, list[dict]] = {}
    for e in edges:
        if e.next is not None:
            points.setdefault(tuple((a, e.next[a]) for a in (G, MU) if a in e.next), []).append(e.condition)
    lines += [f"  bracket: {bracket_command(dict(p), conds, varying, launch)}" for p, conds in points.items()]
    return lines


# --- search against learning at equal FLOPs ---------------------------------------------------------


def _pairs(cols: dict, knobs: list[str]) -> list[tuple[int, int, int, int]]:
    """(search regime, learning regime, G, μ): G doubled and μ doubled from the same (G, μ), equal on model,
    reward and every other knob. The update group size m is G itself where no regime down-samples (every
    job records it: summary.json knobs), so it is left out then, as the rankings leave it out."""
    same_m = M in cols and all(str(m) == str(g) for m, g in zip(cols[M], cols[G]))
    other = ["model", "reward"] + [k for k in knobs if k not in (G, MU) and not (k == M and same_m)]
    key = lambda r: tuple(str(cols[c][r]) for c in other)
    at = {}
    for r in range(len(cols["model"])):
        g, u = _int(cols[G][r]), _int(cols[MU][r])
        if g is not None and u is not None:
            at[(key(r), g, u)] = r
    out = []
    for (k, g, u) in at:
        s, lrn = at.get((k, 2 * g, u)), at.get((k, g, 2 * u))
        if s is not None and lrn is not None:
            out.append((s, lrn, g, u))
    return out


def search_learning(ctx: dict, knobs: list[str], alpha: float = 0.05) -> list[dict]:
    """One joint condition's search-versus-learning sentence (a dict as joint.py's sentences), or none when
    the grid has no (G, μ) whose doubled G and doubled μ both ran. ctx: joint._condition's context."""
    from race_cli.report import joint as J  # bracket -> joint only: joint_compare takes this as an `extra` claim

    cols, noise, sign = ctx["cols"], ctx["noise"], ctx["sign"]
    if G not in knobs or MU not in knobs:
        return []
    pairs = _pairs(cols, knobs)
    if not pairs:
        return []
    R = len(noise.n_seeds)
    bases = sorted({(g, u) for _, _, g, u in pairs})
    if len(bases) == 1:
        g, u = bases[0]
        a, b = label({G: 2 * g, MU: u}), label({G: g, MU: 2 * u})
    else:
        a, b = "G×2", "μ×2"
    c = np.zeros((1, R))
    for s, lrn, _, _ in pairs:
        c[0, s] += 1.0 / len(pairs)
        c[0, lrn] -= 1.0 / len(pairs)
    point = noise.m.mean(axis=1)
    diff = float(sign * (c @ point)[0])
    parts = J._parts(noise, c)
    se = float(parts.se[0])
    ok = bool(np.isfinite(se) and se > 0)
    half = float(J._half(parts, J._t(1 - alpha / 2))[0]) if ok else math.nan
    testable = bool(noise.has_seed_noise)
    lo, hi = diff - half, diff + half
    winner = ("a" if lo > 0 else "b" if hi < 0 else None) if ok and testable else None
    ahead = int(sum(sign * (point[s] - point[lrn]) > 0 for s, lrn, _, _ in pairs))
    v = {"pairs": pairs, "diff": diff, "lo": lo, "hi": hi, "se": se if ok else math.nan,
         "df": float(J._df95(parts, np.array([se]))[0]) if ok else math.nan, "k": 1, "level": 1 - alpha,
         "winner": winner, "a_ahead": ahead, "testable": testable, "gate": "own family"}
    base = (f"{a} against {b}" if len(bases) == 1 else
            "G doubled against μ doubled from " + ", ".join(label({G: g, MU: u}) for g, u in bases))
    verdict = J._verdict(v, f"{a} is ahead: at equal FLOPs more rollouts per prompt bought more than more updates",
                         f"{b} is ahead: at equal FLOPs more updates per batch bought more than more rollouts",
                         "neither more search nor more learning is ahead")
    text = (f"Search or learning at equal FLOPs, allocation by allocation: {base}, matched on model and reward "
            f"({len(pairs)} pairs), averages {diff:+.3f} {J._ci(lo, hi)}, {J._pairing(ctx)}, "
            f"{J._ahead_count(v, a, b)} — {verdict} (its own familywise {alpha:g}, outside the size and "
            "feedback claims).")
    return [{"question": QUESTION, "scope": "across sizes", "a": a, "b": b, "n_pairs": len(pairs), **J._num(v),
             "winner": J._win(v, a, b), "text": text}]
