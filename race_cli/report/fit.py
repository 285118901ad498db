"""Local response of the target to the update fraction p, with an honest fallback (no I/O).

Five candidate curves are fitted by least squares to one point per regime (its mean p and
mean target): constant; linear and quadratic in p; linear and quadratic in log p. The one
with the smallest leave-one-out (LOO) squared error wins; ties go to fewer parameters.
A curve needs at least (parameters + 1) points so that every LOO fit is determined.

The fit's optimum is used only when it is trustworthy. Otherwise the report falls back to
the pilot-best point (the regime with the best mean) and says why:
- fewer than 3 distinct p (a curve through 2 points says nothing about curvature);
- the chosen design matrix is ill-conditioned (condition number > 1e4 with p scaled to [-1, 1];
  a well-spread grid gives < 100);
- the chosen curve is constant (the target does not respond to p within the grid);
- its optimum lies on the edge of the grid (within 2% of the p range of min p or max p):
  the real optimum may be outside the pilot grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_COND = 1e4  # condition number (design scaled to [-1, 1]) above which a fit is unstable
EDGE_FRAC = 0.02  # an optimum within this fraction of the p range from an end is "on the edge"
MIN_DISTINCT_P = 3


@dataclass
class FitResult:
    """What the response fit concluded for one condition."""

    model: str  # chosen curve, e.g. "quadratic in log p"; "" when no curve could be fitted
    coef: list[float]  # highest power first, in the chosen variable (p or log p)
    loo_mse: dict[str, float]  # LOO mean squared error of every eligible curve
    fallback: bool  # True: recommend the pilot-best point, not the fit's optimum
    reason: str  # why the fallback was taken (or "fit optimum inside the grid")
    p_star: float  # recommended p: fit optimum, or pilot-best p on fallback
    y_star: float  # fitted target at p_star (pilot-best mean on fallback)
    p_fit_opt: float = float("nan")  # where the chosen curve peaks on the grid range
    curve_p: list[float] = field(default_factory=list)  # for plotting
    curve_y: list[float] = field(default_factory=list)


CANDIDATES = [  # (name, uses log p, degree)
    ("constant", False, 0),
    ("linear in p", False, 1),
    ("quadratic in p", False, 2),
    ("linear in log p", True, 1),
    ("quadratic in log p", True, 2),
]


def _design(x: np.ndarray, degree: int) -> np.ndarray:
    return np.vander(x, degree + 1)  # columns x^degree ... x^0


def loo_mse(x: np.ndarray, y: np.ndarray, degree: int) -> float:
    """Mean squared leave-one-out prediction error of a degree-`degree` polynomial."""
    errs = []
    for i in range(len(x)):
        keep = np.arange(len(x)) != i
        c = np.linalg.lstsq(_design(x[keep], degree), y[keep], rcond=None)[0]
        errs.append((np.polyval(c, x[i]) - y[i]) ** 2)
    return float(np.mean(errs))


def _scaled_cond(x: np.ndarray, degree: int) -> float:
    """Condition number of the design on x mapped to [-1, 1] (so units of p do not matter)."""
    span = x.max() - x.min()
    if span <= 0:
        return np.inf
    z = 2 * (x - x.min()) / span - 1
    return float(np.linalg.cond(_design(z, degree)))


def fit_response(p: np.ndarray, y: np.ndarray, maximize: bool = True) -> FitResult:
    """Fit the target y against update fraction p (one point per regime) and pick p*.

    p, y: arrays of equal length (regime means). Returns a FitResult; never raises for
    too few points — that is a fallback with its reason.
    """
    p, y = np.asarray(p, float), np.asarray(y, float)
    ok = np.isfinite(p) & np.isfinite(y)
    p, y = p[ok], y[ok]
    if len(p) == 0:
        return FitResult("", [], {}, True, "no regime has both p and the target", np.nan, np.nan)
    sign = 1.0 if maximize else -1.0
    ib = int(np.argmax(sign * y))
    pilot = (float(p[ib]), float(y[ib]))

    def fallback(reason: str, **kw) -> FitResult:
        base = dict(model="", coef=[], loo_mse={})
        base.update(kw)
        return FitResult(fallback=True, reason=reason, p_star=pilot[0], y_star=pilot[1], **base)

    n_distinct = len(np.unique(np.round(p, 2)))  # runs of one knob setting differ in p by a few 0.001
    scores: dict[str, float] = {}
    for name, logx, deg in CANDIDATES:
        if logx and (p <= 0).any():
            continue
        if len(p) - 1 < deg + 1 or (deg > 0 and n_distinct < deg + 1):
            continue
        scores[name] = loo_mse(np.log(p) if logx else p, y, deg)
    if not scores:
        return fallback(f"only {len(p)} regime(s): too few points to fit any curve")
    # smallest LOO error; among near-equal errors (within 1e-12 relative), fewer parameters
    order = {name: (deg, i) for i, (name, _, deg) in enumerate(CANDIDATES)}
    best_err = min(scores.values())
    name = min((n for n, e in scores.items() if e <= best_err * (1 + 1e-12) + 1e-18),
               key=lambda n: order[n])
    logx, deg = next((lg, d) for n, lg, d in CANDIDATES if n == name)
    x = np.log(p) if logx else p
    coef = np.linalg.lstsq(_design(x, deg), y, rcond=None)[0]
    grid = np.linspace(p.min(), p.max(), 201)
    yhat = np.polyval(coef, np.log(grid) if logx else grid)
    kw = dict(model=name, coef=[float(c) for c in coef], loo_mse=scores,
              curve_p=grid.tolist(), curve_y=yhat.tolist())
    if n_distinct < MIN_DISTINCT_P:
        return fallback(f"only {n_distinct} distinct p values (need {MIN_DISTINCT_P}): fit unstable", **kw)
    cond = _scaled_cond(x, deg) if deg > 0 else 1.0
    if cond > MAX_COND:
        return fallback(f"fit ill-conditioned (condition number {cond:.2g})", **kw)
    if deg == 0:
        return fallback("constant fit chosen: the target does not respond to p within the grid", **kw)
    j = int(np.argmax(sign * yhat))
    p_opt = float(grid[j])
    span = p.max() - p.min()
    if min(p_opt - p.min(), p.max() - p_opt) <= EDGE_FRAC * span:
        edge = "lowest" if p_opt - p.min() <= EDGE_FRAC * span else "highest"
        return fallback(f"fit optimum on the grid edge ({edge} p = {p_opt:.3g}); the optimum "
                        "may lie outside the grid", p_fit_opt=p_opt, **kw)
    return FitResult(fallback=False, reason="fit optimum inside the grid", p_star=p_opt,
                     y_star=float(yhat[j]), p_fit_opt=p_opt, **kw)
