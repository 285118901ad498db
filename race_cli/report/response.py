"""Local response of the target to the update fraction p, with an honest fallback (no I/O).

The response is a function of p, so regimes at (nearly) the same p are replicates: sorted by
p, neighbours whose p differ by less than REPLICATE_LOG_TOL in log p (3%) are chained into one
point and averaged (their bootstrap draws too). With B fixed, G scales rollout and update alike
and moves p by a percent or two, while each step of μ moves it by several percent
(docs/measurements/code.md), so G's points merge and μ's stay. Five candidate
curves are fitted by least squares to those points: constant; linear and quadratic in p;
linear and quadratic in log p. The one with the smallest leave-one-out (LOO) squared error
wins — leaving out one p value, i.e. predicting an allocation the grid did not try; ties go
to fewer parameters. A curve needs at least (parameters + 1) points so that every LOO fit is
determined. With exactly three distinct p (the default grid: three values of μ) LOO cannot
judge a curve with curvature; the quadratic in log p is then chosen only when the bootstrap
says its curvature is real (in at least 95% of the draws the curve through the three
points bends the right way: a one-sided 95% test), else LOO chooses between the constant
and the lines.

The optimum p* of the chosen curve is searched over the sampled range of p extended by half
its span in log p on each side (within (0, 1]; the same range for every curve), so the report
can say whether p* lies inside the sampled range. Its bootstrap interval repeats the whole
procedure on every bootstrap draw of the regime means (the ranking's draws: items paired,
seeds resampled): the curve is chosen again by LOO error among the candidates with a slope
(closed-form LOO for least squares, so all draws cost a few matrix products), refitted, and
its optimum taken, *without* clipping it to the search range (a draw whose curve is
monotone, or bends the wrong way, peaks at the better end's infinity); the interval is the
percentile interval of those optima, and an end that leaves the sampled range is reported as
"beyond the sampled range", never as the range's edge. Re-choosing the
curve per draw matters: a quadratic in p fitted to a peak that is quadratic in log p puts the
optimum too high, and an interval that ignores that choice misses the true p*.

The fit's optimum is used only when it is trustworthy. Otherwise the report falls back to
the pilot-best point (the regime with the best mean) and says why:
- fewer than 3 distinct p (a curve through 2 points says nothing about curvature);
- the chosen design matrix is ill-conditioned (condition number > 1e4 with p scaled to [-1, 1];
  a well-spread grid gives < 100);
- the chosen curve is constant (the target does not respond to p within the grid);
- its optimum lies on the edge of the sampled range (within 2% of the p range of min p or
  max p) or outside it: the real optimum may be outside the pilot grid;
- its 95% interval reaches beyond the sampled range (or there is no interval): the data do
  not pin the optimum inside the grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_COND = 1e4  # condition number (design scaled to [-1, 1]) above which a fit is unstable
EDGE_FRAC = 0.02  # an optimum within this fraction of the p range from an end is "on the edge"
MIN_DISTINCT_P = 3
EXTEND = 0.5  # the optimum is searched this fraction of the sampled span beyond each end
N_GRID = 401  # points of that search
LEVEL = 0.95  # p* interval
CURVATURE_SHARE = 0.95  # three distinct p: share of draws that must bend the right way (one-sided 95%)
REPLICATE_LOG_TOL = 0.03  # neighbouring p closer than this in log p (3%) are one point (replicates)


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
    p_fit_opt: float = float("nan")  # where the chosen curve peaks (sampled range ± EXTEND)
    p_star_lo: float = float("nan")  # bootstrap interval of the curve's optimum
    p_star_hi: float = float("nan")
    p_min: float = float("nan")  # the sampled range of p
    p_max: float = float("nan")
    inside: bool | None = None  # p_fit_opt within the sampled range (None: no curve optimum)
    interval_inside: bool | None = None  # the whole p* interval within the sampled range
    chosen_by: str = "leave-one-out error"  # or the bootstrap curvature check (three regimes)
    curve_p: list[float] = field(default_factory=list)  # for plotting (sampled range)
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
    """Mean squared leave-one-out prediction error of a degree-`degree` polynomial. A constant or a line in
    closed form (the LOO residual of point i is its residual over 1 − h_ii: for a constant h = 1/n, for a
    line h = 1/n + (x_i − x̄)²/Σ(x − x̄)²; the refits' values to rounding), higher degrees by refitting."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    n = len(x)
    if degree == 0 and n > 1:
        return float(np.mean(((y - y.mean()) * (n / (n - 1))) ** 2))
    if degree == 1 and n > 2:
        dx = x - x.mean()
        sxx = float(dx @ dx)
        h = 1.0 / n + dx ** 2 / sxx if sxx > 0 else np.ones(n)
        if (h < 1 - 1e-9).all():
            b = float(dx @ (y - y.mean())) / sxx
            return float(np.mean(((y - y.mean() - b * dx) / (1 - h)) ** 2))
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


def search_grid(p: np.ndarray, logx: bool) -> np.ndarray:
    """Where the optimum is looked for: the sampled p range ± EXTEND of its span in log p,
    within (0, 1]; the same points for every curve (in p only when some p is not positive)."""
    if (p > 0).all():
        lo, hi = np.log(p.min()), np.log(p.max())
        pad = EXTEND * (hi - lo)
        return np.exp(np.linspace(lo - pad, min(hi + pad, 0.0), N_GRID))
    lo, hi = p.min(), p.max()
    pad = EXTEND * (hi - lo)
    return np.linspace(max(lo - pad, 1e-4), min(hi + pad, 1.0), N_GRID)


def optimum_draws(p: np.ndarray, draws: np.ndarray, logx: bool, degree: int, sign: float,
                  grid: np.ndarray) -> np.ndarray:
    """The chosen curve refitted to every bootstrap draw: where each one peaks. [B]

    p [R] regime p; draws [B, R] bootstrap draws of the regime means. The design is fixed,
    so every draw's least-squares coefficients are one matrix product with its pseudo-inverse;
    the optimum of a line or a parabola is found in closed form and not clipped: a parabola's
    vertex wherever it lies, and for a curve without a peak (a line, or a parabola bending the
    wrong way) the better end of the search range [grid[0], grid[-1]] pushed to infinity
    (0 or inf in p for a curve in log p, -inf or inf for one in p), so that an interval end
    beyond the sampled range reads as beyond it, never as the range's edge.
    """
    x = np.log(p) if logx else p
    coef = draws @ np.linalg.pinv(_design(x, degree)).T  # [B, degree+1], highest power first
    lo, hi = (np.log(grid[0]), np.log(grid[-1])) if logx else (grid[0], grid[-1])
    val = lambda z: sum(coef[:, k] * z ** (degree - k) for k in range(degree + 1))  # [B]
    best = np.where(sign * val(hi) >= sign * val(lo), np.inf, -np.inf)  # [B] towards the better end
    if degree == 2:
        a, b = coef[:, 0], coef[:, 1]
        with np.errstate(divide="ignore", invalid="ignore"):
            vertex = -b / (2 * a)
        peaks = sign * a < 0  # concave for a maximum (convex for a minimum): the vertex is best
        best = np.where(peaks, vertex, best)
    with np.errstate(over="ignore"):
        return np.exp(best) if logx else best


def loo_mse_many(x: np.ndarray, Y: np.ndarray, degree: int) -> np.ndarray:
    """loo_mse for every row of Y [B, n] at once: [B]. Exact for least squares: the LOO
    residual of point i is its residual over (1 - h_ii), h the hat matrix's diagonal."""
    X = _design(x, degree)
    H = X @ np.linalg.pinv(X)  # [n, n]
    h = np.diag(H)
    if (h > 1 - 1e-9).any():
        return np.full(len(Y), np.inf)
    e = (Y - Y @ H.T) / (1 - h)  # [B, n]
    return (e ** 2).mean(axis=1)


def _curvature_supported(x: np.ndarray, draws: np.ndarray, sign: float) -> bool:
    """Three points, three distinct x: does the curve through them bend the right way in
    at least CURVATURE_SHARE of the draws (concave for a maximum)?"""
    coef = draws @ np.linalg.pinv(_design(x, 2)).T  # [B, 3], leading coefficient first
    return bool(np.mean(sign * coef[:, 0] < 0) >= CURVATURE_SHARE)


def fit_response(p: np.ndarray, y: np.ndarray, maximize: bool = True,
                 draws: np.ndarray | None = None) -> FitResult:
    """Fit the target y against update fraction p (one point per regime) and pick p*.

    p, y: arrays of equal length (regime means); draws [B, R]: bootstrap draws of the same
    regime means (optional; without them there is no p* interval). Returns a FitResult;
    never raises for too few points — that is a fallback with its reason.
    """
    p, y = np.asarray(p, float), np.asarray(y, float)
    ok = np.isfinite(p) & np.isfinite(y)
    p, y = p[ok], y[ok]
    if draws is not None:
        draws = np.asarray(draws, float)[:, ok]
        if not np.isfinite(draws).all():
            draws = None
    if len(p) == 0:
        return FitResult("", [], {}, True, "no regime has both p and the target", np.nan, np.nan)
    sign = 1.0 if maximize else -1.0
    ib = int(np.argmax(sign * y))
    pilot = (float(p[ib]), float(y[ib]))
    rng_kw = dict(p_min=float(p.min()), p_max=float(p.max()))

    def fallback(reason: str, **kw) -> FitResult:
        base = dict(model="", coef=[], loo_mse={})
        base.update(rng_kw)
        base.update(kw)
        return FitResult(fallback=True, reason=reason, p_star=pilot[0], y_star=pilot[1], **base)

    # --- one point per distinct p (regimes at the same p are replicates)
    inv = replicate_groups(p)
    n_distinct = int(inv.max()) + 1
    cnt = np.bincount(inv).astype(float)
    p, y = np.bincount(inv, p) / cnt, np.bincount(inv, y) / cnt
    if draws is not None:
        onehot = np.zeros((len(inv), n_distinct))
        onehot[np.arange(len(inv)), inv] = 1.0 / cnt[inv]
        draws = draws @ onehot  # [B, U] mean draw per distinct p
    scores: dict[str, float] = {}
    for name, logx, deg in CANDIDATES:
        if logx and (p <= 0).any():
            continue
        if len(p) - 1 < deg + 1 or (deg > 0 and n_distinct < deg + 1):
            continue
        scores[name] = loo_mse(np.log(p) if logx else p, y, deg)
    if not scores:
        return fallback(f"only {n_distinct} distinct p value(s): too few points to fit any curve")
    # smallest LOO error; among near-equal errors (within 1e-12 relative), fewer parameters
    order = {name: (deg, i) for i, (name, _, deg) in enumerate(CANDIDATES)}
    best_err = min(scores.values())
    name = min((n for n, e in scores.items() if e <= best_err * (1 + 1e-12) + 1e-18),
               key=lambda n: order[n])
    chosen_by = "leave-one-out error"
    if n_distinct == 3 and (p > 0).all():  # LOO cannot judge curvature here
        if draws is not None and _curvature_supported(np.log(p), draws, sign):
            name, chosen_by = "quadratic in log p", "a bootstrap check of its curvature"
    logx, deg = next((lg, d) for n, lg, d in CANDIDATES if n == name)
    x = np.log(p) if logx else p
    coef = np.linalg.lstsq(_design(x, deg), y, rcond=None)[0]
    grid = np.linspace(p.min(), p.max(), 201)
    yhat = np.polyval(coef, np.log(grid) if logx else grid)
    kw = dict(model=name, coef=[float(c) for c in coef], loo_mse=scores, chosen_by=chosen_by,
              curve_p=grid.tolist(), curve_y=yhat.tolist())
    if n_distinct < MIN_DISTINCT_P:
        return fallback(f"only {n_distinct} distinct p values (need {MIN_DISTINCT_P}): fit unstable", **kw)
    cond = _scaled_cond(x, deg) if deg > 0 else 1.0
    if cond > MAX_COND:
        return fallback(f"fit ill-conditioned (condition number {cond:.2g})", **kw)
    if deg == 0:
        why = "constant fit chosen: the target does not respond to p within the grid"
        if n_distinct == 3:
            why += (" (three distinct p: a curve is chosen only when its curvature is clear in the "
                    "bootstrap" + ("" if draws is not None else "; no bootstrap draws were given") + ")")
        return fallback(why, **kw)
    # --- the optimum, and its bootstrap interval
    wide = search_grid(p, logx)
    yw = np.polyval(coef, np.log(wide) if logx else wide)
    j = int(np.argmax(sign * yw))
    p_opt, y_opt = float(wide[j]), float(yw[j])
    per_draw = [(lg, d) for n, lg, d in CANDIDATES if n in scores and d > 0]
    if n_distinct == 3 or not per_draw:  # LOO cannot choose among curves: keep the chosen one
        per_draw = [(logx, deg)]
    kw |= _interval(p, draws, per_draw, sign)
    span = p.max() - p.min()
    lo_edge, hi_edge = p.min() + EDGE_FRAC * span, p.max() - EDGE_FRAC * span
    kw |= dict(p_fit_opt=p_opt, inside=bool(p.min() <= p_opt <= p.max()))
    if not (p_opt <= lo_edge or p_opt >= hi_edge) and kw.get("interval_inside") is not True:
        why = ("its 95% interval reaches beyond the sampled range" if "interval_inside" in kw
               else "no bootstrap interval for it")
        return fallback(f"the fit's optimum p = {p_opt:.3g} lies inside the grid, but {why}: the data do "
                        "not pin it inside the grid", **kw)
    if p_opt <= lo_edge or p_opt >= hi_edge:
        low = p_opt <= lo_edge
        end = f"lowest p = {p.min():.3g}" if low else f"highest p = {p.max():.3g}"
        where = (f"on the grid edge ({end})" if p.min() <= p_opt <= p.max() else
                 f"beyond the grid edge ({'below the' if low else 'above the'} {end}: the curve "
                 f"peaks at p = {p_opt:.3g}{' or further' if j in (0, len(wide) - 1) else ''})")
        return fallback(f"fit optimum {where}; the optimum may lie outside the grid", **kw)
    return FitResult(fallback=False, reason="fit optimum inside the grid", p_star=p_opt,
                     y_star=y_opt, **rng_kw, **kw)


def replicate_groups(p: np.ndarray) -> np.ndarray:
    """Group index (0.., in increasing p) of each p: sorted neighbours closer than
    REPLICATE_LOG_TOL in log p (or in p when some p is not positive) chain into one group."""
    p = np.asarray(p, float)
    x = np.log(p) if (p > 0).all() else p
    order = np.argsort(x, kind="stable")
    new = np.r_[True, np.diff(x[order]) >= REPLICATE_LOG_TOL]
    inv = np.empty(len(p), dtype=int)
    inv[order] = np.cumsum(new) - 1
    return inv


def _interval(p: np.ndarray, draws: np.ndarray | None, candidates: list[tuple[bool, int]],
              sign: float) -> dict:
    """p* interval: per draw, the candidate with the smallest LOO error, refitted; its optimum.

    candidates: (uses log p, degree) of the curves each draw may choose among (in CANDIDATES
    order, so exact ties go to the first). Also says whether the interval lies inside the
    sampled range.
    """
    if draws is None or len(draws) < 20:
        return {}
    opts, errs = [], []
    for logx, deg in candidates:
        x = np.log(p) if logx else p
        opts.append(optimum_draws(p, draws, logx, deg, sign, search_grid(p, logx)))
        errs.append(loo_mse_many(x, draws, deg) if len(candidates) > 1 else np.zeros(len(draws)))
    pick = np.argmin(np.vstack(errs), axis=0)  # [B] the curve each draw chooses
    opt = np.vstack(opts)[pick, np.arange(len(draws))]
    a = (1 - LEVEL) / 2
    opt = np.where(np.isnan(opt), np.inf, opt)  # a degenerate draw (a = 0) says nothing: beyond
    lo, hi = (float(v) for v in np.quantile(opt, [a, 1 - a], method="inverted_cdf"))
    return dict(p_star_lo=lo, p_star_hi=hi, interval_inside=bool(p.min() <= lo and hi <= p.max()))


def interval_text(fit: FitResult) -> str:
    """'0.812–0.905', or with an end beyond the sampled range said in words."""
    lo, hi = fit.p_star_lo, fit.p_star_hi
    below = not (lo >= fit.p_min)
    above = not (hi <= fit.p_max)
    left = f"beyond the sampled range (below p = {fit.p_min:.3f})" if below else f"{lo:.3f}"
    right = f"beyond the sampled range (above p = {fit.p_max:.3f})" if above else f"{hi:.3f}"
    if below and above:
        return f"reaching beyond the sampled range {fit.p_min:.3f}–{fit.p_max:.3f} on both sides"
    return f"{left} to {right}" if (below or above) else f"{lo:.3f}–{hi:.3f}"


def describe_fit(fit: FitResult) -> str:
    """The fit in one or two sentences: the curve, p* with its interval, inside or not."""
    if not fit.model:
        return f"Response fit: none ({fit.reason}); the pilot-best point stands (p = {fit.p_star:.3f})."
    interval = (f" (95% interval {interval_text(fit)})"
                if not np.isnan(fit.p_star_lo) else " (no interval: no bootstrap draws)")
    rng = f"the sampled range {fit.p_min:.3f}–{fit.p_max:.3f}"
    if not fit.fallback:
        where = (f"p* and its interval lie inside {rng}" if fit.interval_inside else
                 f"p* lies inside {rng}" + (", but its interval reaches beyond it" if
                                            fit.interval_inside is False else ""))
        return (f"Response fit ({fit.model}, chosen by {fit.chosen_by}): optimum at "
                f"p* = {fit.p_star:.3f}{interval}; {where}.")
    s = f"Response fit ({fit.model}): fell back to the pilot-best point p = {fit.p_star:.3f} ({fit.reason})."
    if "quadratic" in fit.model and np.isfinite(fit.p_fit_opt) and not np.isnan(fit.p_star_lo):
        s += (f" The curve's own optimum: p = {fit.p_fit_opt:.3f}{interval}, "
              f"{'inside' if fit.inside else 'outside'} {rng}.")
    return s
