"""Gatekept familywise procedures: the graphical approach, and Dunnett's many-to-one critical values
(pure: numpy/scipy, no I/O).

A family of hypotheses H_1..H_m, each with a weight w_i (Σ w ≤ 1) and a transition matrix G (g_ij ≥ 0,
g_ii = 0, Σ_j g_ij ≤ 1): H_i is tested at level w_i·α; when it is rejected its weight moves on to the
others along G, and G is updated, until no hypothesis can be rejected (Bretz, Maurer, Brannath & Posch
2009, "A graphical approach to sequentially rejective multiple test procedures", Statistics in
Medicine 28:586–604, Algorithm 1). Every weighted Bonferroni test of the closure is valid, so the
familywise error is at most α under any configuration of true hypotheses, whatever the correlation of
the tests. Holm, fixed-sequence and gatekeeping designs are special graphs (`holm_graph`,
`fixed_sequence`). `graph_test` takes the test as a function of the level, so a test with no closed
p-value (a critical value combined from variance parts at their own degrees of freedom) can be used as
it is; the rejected set does not depend on the order in which rejections are found (the paper's
Theorem 1), as long as each test is monotone in its level.

`dunnett_quantile`: the one-sided critical value of the largest of k correlated t statistics sharing
one denominator, for a one-factor correlation ρ_ab = λ_a·λ_b (k arms against one common arm: λ_a² the
common arm's share of contrast a's variance). Computed by quadrature (Gauss–Hermite over the common
factor, generalised Gauss–Laguerre over the χ² denominator), checked against scipy's multivariate t
in tests/test_stats_gatekeeping.py; scipy.stats.dunnett takes raw samples of equal-variance groups,
which these contrasts (item-paired, seed and item parts at their own df) are not. By Slepian's
inequality a correlation taken too small only makes the critical value larger (conservative).

References

- Graphical procedures: Bretz, F., Maurer, W., Brannath, W. & Posch, M. (2009), Statistics in Medicine
  28(4):586–604 (above); Holm's step-down: Holm, S. (1979), Scandinavian Journal of Statistics 6(2):65–70.
- Many-to-one critical values (`dunnett_cdf`, `dunnett_quantile`): Dunnett, C. W. (1955), "A multiple
  comparison procedure for comparing several treatments with a control", JASA 50(272):1096–1121.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

import numpy as np


@dataclass(frozen=True)
class Graph:
    """Initial weights [m] and transition matrix [m, m] of a graphical procedure, with node names."""

    names: tuple[str, ...]
    weights: np.ndarray
    transitions: np.ndarray

    def __post_init__(self):
        w, g = np.asarray(self.weights, float), np.asarray(self.transitions, float)
        m = len(self.names)
        if w.shape != (m,) or g.shape != (m, m):
            raise ValueError(f"a graph of {m} nodes needs {m} weights and an {m}×{m} transition matrix")
        if (w < -1e-12).any() or w.sum() > 1 + 1e-9:
            raise ValueError(f"weights must be >= 0 and sum to at most 1 (sum {w.sum():.6g})")
        if (g < -1e-12).any() or (np.abs(np.diag(g)) > 1e-12).any() or (g.sum(axis=1) > 1 + 1e-9).any():
            raise ValueError("transitions must be >= 0, zero on the diagonal, each row summing to at most 1")


@dataclass(frozen=True)
class GraphResult:
    """Which hypotheses were rejected, and the weight each held when it was rejected or when the
    procedure stopped (its last level is weight·α; 0: its gate was never opened)."""

    rejected: np.ndarray  # [m] bool
    weight: np.ndarray  # [m]
    order: tuple[int, ...]  # the indices in the order they were rejected


def graph_test(graph: Graph, test: Callable[[int, float], bool], alpha: float) -> GraphResult:
    """Run the graphical procedure: `test(i, level)` is True when hypothesis i is rejected at `level`
    (monotone: rejected at a level, rejected at any larger one). Familywise error ≤ alpha."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha {alpha} is not in (0, 1)")
    m = len(graph.names)
    w = np.asarray(graph.weights, float).copy()
    g = np.asarray(graph.transitions, float).copy()
    active = np.ones(m, bool)
    held = w.copy()
    order: list[int] = []
    memo: dict[tuple[int, float], bool] = {}

    def rejects(i: int) -> bool:
        key = (i, round(float(w[i]), 12))
        if key not in memo:
            memo[key] = bool(w[i] > 1e-12 and test(i, w[i] * alpha))
        return memo[key]

    while True:
        j = next((i for i in range(m) if active[i] and rejects(i)), None)
        if j is None:
            break
        active[j] = False
        held[j] = w[j]
        order.append(j)
        rest = np.flatnonzero(active)
        w_new, g_new = w.copy(), np.zeros_like(g)
        for a in rest:
            w_new[a] = w[a] + w[j] * g[j, a]
            for b in rest:
                if a == b:
                    continue
                den = 1.0 - g[a, j] * g[j, a]
                g_new[a, b] = (g[a, b] + g[a, j] * g[j, b]) / den if den > 1e-12 else 0.0
        w_new[j] = 0.0
        w, g = w_new, g_new
    held[active] = w[active]
    return GraphResult(rejected=~active, weight=held, order=tuple(order))


def graph_test_p(graph: Graph, p: np.ndarray, alpha: float) -> GraphResult:
    """The graphical procedure on p-values (nan: never rejected)."""
    p = np.where(np.isfinite(np.asarray(p, float)), p, np.inf)
    return graph_test(graph, lambda i, level: bool(p[i] <= level), alpha)


def holm_graph(m: int) -> Graph:
    """Holm's step-down as a graph: equal weights, a rejected hypothesis's weight shared by the rest."""
    g = np.full((m, m), 1.0 / max(m - 1, 1))
    np.fill_diagonal(g, 0.0)
    return Graph(tuple(f"H{i + 1}" for i in range(m)), np.full(m, 1.0 / m), g if m > 1 else np.zeros((1, 1)))


def fixed_sequence(m: int) -> Graph:
    """H1 at the full α; each one tested only when the one before it is rejected."""
    g = np.zeros((m, m))
    g[np.arange(m - 1), np.arange(1, m)] = 1.0
    return Graph(tuple(f"H{i + 1}" for i in range(m)), np.eye(m)[0], g)


def gatekeeping_graph(entries: dict[str, float], edges: dict[str, dict[str, float]]) -> Graph:
    """A graph from its entry weights {node: weight} and edges {node: {successor: share}}; every node
    named anywhere is a node (weight 0 unless an entry). Shares of a row are normalised to sum to 1
    when they sum to more."""
    names = list(dict.fromkeys([*entries, *edges, *(s for e in edges.values() for s in e)]))
    idx = {n: i for i, n in enumerate(names)}
    w = np.array([float(entries.get(n, 0.0)) for n in names])
    g = np.zeros((len(names), len(names)))
    for a, succ in edges.items():
        for b, share in succ.items():
            if a != b:
                g[idx[a], idx[b]] += float(share)
        tot = g[idx[a]].sum()
        if tot > 1.0:
            g[idx[a]] /= tot
    return Graph(tuple(names), w, g)


# --- Dunnett's many-to-one critical value, one-factor correlation ------------------------------------

_GH = np.polynomial.hermite_e.hermegauss(64)  # nodes, weights for ∫ f(u) e^{-u²/2} du


@lru_cache(maxsize=256)
def _chi_nodes(df: float, n: int = 48) -> tuple[np.ndarray, np.ndarray]:
    """Nodes s and weights of E[f(S)], S = sqrt(χ²_df / df): generalised Gauss–Laguerre in χ²/2 up to 50 df,
    beyond it Gauss–Hermite on the Wilson–Hilferty cube-root normal approximation of χ²/df."""
    if df > 50:
        z, wz = np.polynomial.hermite_e.hermegauss(24)
        v = 2.0 / (9.0 * df)
        x = np.maximum(1.0 - v + z * math.sqrt(v), 1e-6) ** 3
        return np.sqrt(x), wz / wz.sum()
    from scipy.special import roots_genlaguerre

    x, wt = roots_genlaguerre(n, df / 2.0 - 1.0)  # ∫ f(x) x^{df/2-1} e^{-x} dx, x = χ²/2
    return np.sqrt(2.0 * x / df), wt / wt.sum()


def dunnett_cdf(c: float, lam: np.ndarray, df: float) -> float:
    """P(max_a T_a ≤ c), T_a = (λ_a U + sqrt(1 − λ_a²) E_a) / S, U, E_a standard normal, S² ~ χ²_df/df
    (df = inf: S = 1)."""
    from scipy.special import ndtr

    lam = np.clip(np.asarray(lam, float), 0.0, 0.999999)
    u, wu = _GH
    wu = wu / wu.sum()
    sd = np.sqrt(1.0 - lam ** 2)
    if not math.isfinite(df) or df > 1e5:
        s, ws = np.ones(1), np.ones(1)
    else:
        s, ws = _chi_nodes(float(df), 96 if df < 4 else 48)  # few df: the χ² density's pole needs more nodes
    if len(lam) > 1 and (lam == lam[0]).all():  # k equal arms: one arm's Φ, multiplied k times in prod's order
        one = ndtr((c * s[:, None] - lam[0] * u[None, :]) / sd[0])  # [S, U]
        inner = one
        for _ in range(len(lam) - 1):
            inner = inner * one  # the same products as np.prod over k equal columns, bit for bit, k× fewer Φ
        return float(ws @ inner @ wu)
    z = (c * s[:, None, None] - lam[None, None, :] * u[None, :, None]) / sd[None, None, :]  # [S, U, k]
    inner = np.prod(ndtr(z), axis=2)  # [S, U]
    return float(ws @ inner @ wu)


def dunnett_quantile(level: float, lam: np.ndarray, df: float) -> float:
    """The one-sided critical value c with P(max_a T_a > c) = level (see dunnett_cdf); k = 1 gives
    the t quantile, λ = 0 Šidák's, and it never exceeds Bonferroni's t quantile at level/k."""
    from scipy.optimize import brentq
    from scipy.special import ndtri, stdtrit

    lam = np.atleast_1d(np.asarray(lam, float))
    k = len(lam)
    q = (lambda p: float(ndtri(p))) if (not math.isfinite(df) or df > 1e5) else (lambda p: float(stdtrit(df, p)))
    lo, hi = q(1.0 - level), q(1.0 - level / k)
    if k == 1 or hi - lo < 1e-9:
        return lo
    f = lambda c: (1.0 - dunnett_cdf(c, lam, df)) - level
    flo, fhi = f(lo), f(hi)
    if flo <= 0:  # quadrature at its resolution: the single quantile already reaches the level
        return lo
    if fhi >= 0:
        return hi
    return float(brentq(f, lo, hi, xtol=1e-6))


def many_to_one_quantile(level: float, k: int, lam: float, df) -> np.ndarray | float:
    """`dunnett_quantile` for k arms with one common λ (elementwise over an array of df), cached: λ rounded
    down to 0.02 and df down to 2 significant digits, both conservative (a smaller correlation, fewer df)."""
    lam_r = math.floor(max(0.0, float(lam)) / 0.02) * 0.02
    one = lambda d: _m2o(round(float(level), 12), int(k), round(lam_r, 2), _down(float(d)))
    if np.ndim(df) == 0:
        return one(df)
    d = np.asarray(df, float)
    uniq, inv = np.unique(d, return_inverse=True)
    return np.array([one(u) for u in uniq])[inv].reshape(d.shape)


def _down(df: float) -> float:
    if not math.isfinite(df) or df > 1e5:
        return math.inf
    if df <= 0:
        return df
    e = math.floor(math.log10(df)) - 1
    return math.floor(df / 10 ** e) * 10 ** e


MEMO: dict[tuple[float, int, float, float], float] = {}  # (level, k, λ, df) as rounded above -> quantile


def _m2o(level: float, k: int, lam: float, df: float) -> float:
    """The quantile, once per process (MEMO: a few hundred in a report, each a root search over quadratures)."""
    q = MEMO.get((level, k, lam, df))
    if q is None:
        q = MEMO[level, k, lam, df] = dunnett_quantile(level, np.full(k, lam), df) if df > 0 else math.nan
    return q


# --- the joint comparison's design --------------------------------------------------------------------
#
# A claim is keyed (question, a, b, scope). Size claims of one pair (a larger, b smaller):
#   size_matched ─½→ size_final ─1→ size_gain
#                └½→ size_gain_matched ─1→ size_gain
# feedback claims of one reward pair: feedback_all_matched (across sizes) ─½→ feedback_matched per size
# (split equally) ─1→ feedback per size; ─½→ feedback_all. The allocation-by-allocation claim opens each
# pair's gate at the pair's whole weight; a pair's last claims pass their weight on to every other pair's
# entry (or, without another pair, back into their own pair's open branch). Size and feedback share α
# equally, each family equally over its pairs.

SIZE_NEXT = {"size_matched": {"size_final": 0.5, "size_gain_matched": 0.5}, "size_final": {"size_gain": 1.0},
             "size_gain_matched": {"size_gain": 1.0}, "size_gain": {}}
SIZE_ENTRY = ("size_matched", "size_final", "size_gain_matched", "size_gain")  # first present opens the pair


def joint_design(claims: list[tuple]) -> Graph:
    """The gatekept graph of one joint condition's claims [(question, a, b, scope)], nodes in the same
    order (named 'question|a|b|scope'); a claim absent from the list passes its edges on to its successors."""
    name = lambda c: "|".join(str(x) for x in c)
    have = {name(c) for c in claims}
    pairs: dict[tuple, list[tuple]] = {}
    for c in claims:
        pairs.setdefault(("size" if c[0].startswith("size") else "feedback", c[1], c[2]), []).append(c)
    fams = list(dict.fromkeys(k[0] for k in pairs))
    entries: dict[str, float] = {}
    edges: dict[str, dict[str, float]] = {}
    opens: dict[tuple, list[str]] = {}

    def present(succ: dict[str, float]) -> dict[str, float]:
        out: dict[str, float] = {}
        for s, w in succ.items():
            for s2, w2 in ({s: 1.0} if s in have else present(_next_of(s))).items():
                out[s2] = out.get(s2, 0.0) + w * w2
        return out

    for key, cs in pairs.items():
        fam, a, b = key
        share = 1.0 / len(fams) / sum(1 for k in pairs if k[0] == fam)
        if fam == "size":
            first = next(q for q in SIZE_ENTRY if name((q, a, b, None)) in have)
            start = {name((first, a, b, None)): 1.0}
            for c in cs:
                edges[name(c)] = present({name((q, a, b, None)): w for q, w in SIZE_NEXT[c[0]].items()})
        else:
            per = [name(c) for c in cs if c[0] == "feedback_matched"]
            across, best_all = (name((q, a, b, "across sizes")) for q in ("feedback_all_matched", "feedback_all"))
            if across in have:
                start = {across: 1.0}
                nxt = {n_: 0.5 / len(per) for n_ in per} | {best_all: 0.5}
                edges[across] = {k: v for k, v in nxt.items() if k in have}
            else:
                start = {n_: 1.0 / len(per) for n_ in per} if per else {name(c): 1.0 / len(cs) for c in cs}
            for c in cs:
                if c[0] == "feedback_matched":
                    edges[name(c)] = present({name(("feedback", a, b, c[3])): 1.0})
        opens[key] = list(start)
        for n_, w in start.items():
            entries[n_] = entries.get(n_, 0.0) + share * w
    # a pair's last claims: on to every other pair's entry, else back into the pair's other branches
    for key, cs in pairs.items():
        others = [e for k, st in opens.items() if k != key for e in st]
        for c in cs:
            n_ = name(c)
            if edges.get(n_):
                continue
            back = others or [name(o) for o in cs if name(o) != n_ and name(o) not in opens[key]]
            edges[n_] = {o: 1.0 / len(back) for o in back}
    g = gatekeeping_graph(entries, edges)
    idx = [g.names.index(name(c)) for c in claims]
    return Graph(tuple(name(c) for c in claims), g.weights[idx], g.transitions[np.ix_(idx, idx)])


def _next_of(node: str) -> dict[str, float]:
    """An absent node's designed successors (by name), for `joint_design`."""
    q, a, b, scope = node.split("|")
    if q in SIZE_NEXT:
        return {f"{s}|{a}|{b}|None": w for s, w in SIZE_NEXT[q].items()}
    if q == "feedback_matched":
        return {f"feedback|{a}|{b}|{scope}": 1.0}
    return {}
