"""Racing: a pilot that spends its seeds where a call is still open (numpy/scipy, no pandas, no I/O).

A race is fixed before the first job by its `Schedule`: looks at fixed seed counts per still-active
regime (e.g. 2 → 3 → 4, the last one the cap), the familywise error α over all looks, how α is split
across them, and the equivalence margin. Only which regimes and conditions continue depends on data.

At look k every condition still racing is decided at that look's level α_k (`Schedule.level`), with the
report's own variance model (stats/variance.py) and procedures (stats/decisions.py), on its active
regimes' jobs with seed < looks[k]:

Every claim of a look is read off one set of intervals: Tukey–Kramer simultaneous intervals for every
pairwise difference of the active regimes at α_k (the studentized range q(1 − α_k, R, df)/√2 times each
pair's own standard error, each variance part at its own df, so unequal seed counts are covered). They
hold for pairs the data pick, the best among them, so the drops, the winner, the equivalence and the
best − regime intervals the record prints are one claim and cannot contradict each other:

- **worse**: a regime whose best − regime interval lies above 0 stops;
- **winner**: every other active regime is worse;
- **equivalent**: every remaining regime within ±margin of every other, |m_i − m_j| + h_ij < margin for
  every pair (so within ±margin of the true best whichever it is);
- **undecided** (futility, non-binding): neither separation nor equivalence reaches 80% power at the cap
  (`power.open_call_power`, the open call's measured parts extrapolated in seeds). Stopping early can
  only withhold claims, never add one;
- anything else **continues**: its surviving regimes get looks[k + 1] seeds; at the cap it is undecided.

The gain over the start is a separate question with its own field (`gain`): at a stopping look, "gain"
when some active regime is shown to beat its start (Holm on one-sided bounds at α_k/2, as the report
tests it), "no_gain" when none is (its ranking orders regimes that did not learn), None without a
recorded start. It never replaces the allocation state: a winner that did not beat its start is still
the winner of the allocation question, said beside "no gain".

Error control over looks: a false claim at any look needs a false claim at some look k, whose chance
is at most α_k; the Bonferroni split (Σ α_k = α) bounds the total by the union bound whatever the data
do. A "worse" or "winner" claim at look k is true whenever every claim made at looks ≤ k is (worse is
transitive), so the familywise error of the whole race is at most α. (Before issue 52 the drops came from
the REGWQ step-down and the intervals and equivalence from Hsu's MCB bounds: two procedures whose records
could disagree; docs/measurements/race.md compares the two.)

The evaluation look (issue 52: resolution where it is cheapest), when the schedule declares `eval_items`: a
condition still open may, once, have its finished checkpoints (final and start) scored on eval_items items per
target instead of (or after) buying seeds; item i's k-th sample draws the same random numbers in every job
(engine/reeval.py), so the pairing holds. Which way an open call buys precision follows the variance model's own
split (`_route`, power.open_call_power's items_factor): more items shrink the item and residual parts as 1/n,
more seeds the residual and pure seed parts; the evaluation costs no training, so it is taken whenever it alone
reaches the power, or at the cap. Its error accounting is the union bound: the evaluation look has its own
share of α (the bonferroni split over every look a condition may take, the evaluation look included), and a
condition takes each look at most once, whichever ones the data choose.

References

- Tukey–Kramer intervals (`pair_bounds`, every look's claims): Tukey, J. W. (1953), "The problem of multiple
  comparisons", unpublished manuscript, printed in The Collected Works of John W. Tukey, Vol. VIII (Chapman &
  Hall, 1994); for unequal seed counts Kramer, C. Y. (1956), "Extension of multiple range tests to group means
  with unequal numbers of replications", Biometrics 12(3):307–310; shown conservative (familywise error ≤ α
  for any replication) by Hayter, A. J. (1984), "A proof of the conjecture that the Tukey–Kramer multiple
  comparisons procedure is conservative", Annals of Statistics 12(1):61–75.
- Multiple comparisons with the best (MCB, the intervals before issue 52): Hsu, J. C. (1981), "Simultaneous
  confidence intervals for all distances from the 'best'", Annals of Statistics 9(5):1026–1034; and the book
  Hsu, J. C. (1996), Multiple Comparisons: Theory and Methods (Chapman & Hall, London), which also treats
  all-pairwise (Tukey–Kramer) intervals. REGWQ: stats/decisions.py.
- The split of α over looks (`Schedule.spent`): any split summing to α holds by Bonferroni's inequality (the
  union bound); the O'Brien–Fleming-type and Pocock-type increments are Lan, K. K. G. & DeMets, D. L. (1983),
  "Discrete sequential boundaries for clinical trials", Biometrika 70(3):659–663, doi:10.1093/biomet/70.3.659
  (their spending functions α₁*(t) and α₂*(t)), after O'Brien, P. C. & Fleming, T. R. (1979), "A multiple
  testing procedure for clinical trials", Biometrics 35(3):549–556, doi:10.2307/2530245, and Pocock, S. J.
  (1977), "Group sequential methods in the design and analysis of clinical trials", Biometrika 64(2):191–199,
  doi:10.1093/biomet/64.2.191. The race spends each increment by the union bound, not by the joint
  distribution of the looks' statistics as those papers do: simpler and conservative.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from race_cli.errors import RaceError

STATES = ("continue", "winner", "equivalent", "undecided")  # the allocation call (`state`)
GAINS = ("gain", "no_gain")  # the gain-over-start call (`gain`), None without a start or before a stop
OLD_STATES = STATES + ("no_gain",)  # `state` values a record written before issue 52 may hold
# How α is split over the looks; every split sums to α, so each is valid by the union bound whatever the
# data do: "bonferroni" equally; "bonferroni-obf" by the increments of an O'Brien–Fleming-type spending
# function 2 − 2Φ(z(1 − α/2)/√t) (little at the first looks, most at the cap); "bonferroni-pocock" by those
# of α·ln(1 + (e − 1)t) (front-loaded); t = looks[k] / cap, the information fraction in seeds.
# "calibrated": CALIBRATED_FACTOR·α split equally, a sharper boundary whose familywise error is α only as
# benchmarks/bench_race.py measures it (all-equal and two-tied truths), not by the union bound.
SPENDINGS = ("bonferroni", "bonferroni-obf", "bonferroni-pocock", "calibrated")
CALIBRATED_FACTOR = 2.0  # nominal 2α split over the looks (docs/statistics-race.md: measured familywise error)
DEFAULT_LOOKS = (2, 3, 4)  # seeds per active regime at each look; the last is the cap (docs/statistics-race.md)
DEFAULT_ALPHA = 0.05  # familywise error over all looks and claims of one condition
DEFAULT_MARGIN = 0.05  # equivalence margin of a race whose grid declares none (score scale; each shipped grid declares
# its own, the smallest difference that matters for its task: docs/racing.md)
DEFAULT_SPENDING = "bonferroni"  # the split of a schedule built without one (valid whatever the data do)
# How the race line of a plan or report names each split: the rule, and what its error control rests on.
SPENDING_WORDS = {"bonferroni": "equal split, union bound", "bonferroni-obf": "O'Brien–Fleming-type split, union bound",
                  "bonferroni-pocock": "Pocock-type split, union bound",
                  "calibrated": "calibrated split, familywise error measured"}
# Where the calibrated split was measured to keep the familywise error at or below α, all-equal and two-tied
# truths, 1,000-2,000 conditions each (docs/measurements/race.md): (looks, α) -> the most regimes per condition
# measured. A grid that names no split races with the calibrated one there, and with Bonferroni elsewhere.
CALIBRATED_MEASURED = {((2, 3, 4), 0.05): 6, ((2, 3, 4, 6, 8), 0.05): 6}

FUTILITY_POWER = 0.80  # an open call stops as undecided below this power at the cap
FUTILITY_Z = 2.0  # ... at the gap most in its favour within the look's one-sided 90% bounds (power.open_call_power)


def default_spending(looks, alpha: float, regimes: int) -> str:
    """The split a race uses when its grid names none: "calibrated" where CALIBRATED_MEASURED covers these
    looks, this α and this many regimes per condition, else "bonferroni"."""
    most = CALIBRATED_MEASURED.get((tuple(int(x) for x in looks), round(float(alpha), 9)))
    return "calibrated" if most is not None and regimes <= most else DEFAULT_SPENDING


# --- the schedule ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """A race fixed before the first job."""

    looks: tuple[int, ...]  # seeds per active regime at look k, strictly increasing, >= 2; looks[-1] is the cap
    alpha: float = DEFAULT_ALPHA  # familywise error over all looks
    margin: float = DEFAULT_MARGIN  # equivalence margin on the score scale, declared before the first job
    spending: str = DEFAULT_SPENDING  # how alpha is split over the looks
    # the evaluation look (issue 52): items per target the finished checkpoints (final and start) are scored on
    # at most once per condition, without training (engine/reeval.py); None: the race buys seeds only
    eval_items: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "looks", tuple(self.looks))
        problems = []
        lk = self.looks
        if not lk or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) for s in lk):
            problems.append(f"race looks must be a non-empty list of whole seed counts, got {list(lk)!r}")
        elif lk[0] < 2 or any(b <= a for a, b in zip(lk, lk[1:])):
            problems.append(f"race looks must start at 2 seeds or more and increase strictly, got {list(lk)}; "
                            "e.g. [2, 3, 4]")
        if not (isinstance(self.alpha, (int, float)) and 0 < self.alpha < 0.5):
            problems.append(f"race alpha must be a number in (0, 0.5), got {self.alpha!r}; e.g. 0.05")
        if not (isinstance(self.margin, (int, float)) and 0 < self.margin < 1):
            problems.append(f"race margin must be a number in (0, 1) on the score scale, got {self.margin!r}; "
                            f"e.g. {DEFAULT_MARGIN}")
        if self.spending not in SPENDINGS:
            problems.append(f"race spending must be one of {', '.join(SPENDINGS)}, got {self.spending!r}")
        if self.eval_items is not None:
            if isinstance(self.eval_items, bool) or not isinstance(self.eval_items, (int, np.integer)) \
                    or self.eval_items < 2:
                problems.append(f"race eval_items must be a whole number of items per target (>= 2), got "
                                f"{self.eval_items!r}; e.g. 1200")
            elif self.spending != "bonferroni":
                problems.append(f"race eval_items (an evaluation look) needs the bonferroni split, got "
                                f"{self.spending!r}: a condition takes the evaluation look at a look the data "
                                "choose, and only the equal split's union bound holds whichever looks it takes "
                                "(the calibrated split was measured without it).")
        if problems:
            raise RaceError(*problems)

    @property
    def cap(self) -> int:
        return self.looks[-1]

    @property
    def n_looks(self) -> int:
        """Every look a condition may take: the seed looks, and the evaluation look when declared."""
        return len(self.looks) + (1 if self.eval_items else 0)

    @property
    def eval_look(self) -> int | None:
        """The evaluation look's index (after the seed looks' indices), None when none is declared."""
        return len(self.looks) if self.eval_items else None

    def level(self, k: int) -> float:
        """Nominal α spent at look k (the split's increment; Σ over the looks = α, calibrated: factor·α).
        k = eval_look: the evaluation look's own share, whichever seed look a condition takes it at."""
        if not 0 <= k < self.n_looks:
            raise IndexError(f"look {k} outside 0..{self.n_looks - 1}")
        return self.spent(k) - self.spent(k - 1)

    def spent(self, k: int) -> float:
        """Nominal α spent through look k (inclusive); 0 before look 0 (k = -1); α at the cap (the calibrated
        split: CALIBRATED_FACTOR·α)."""
        if k < 0:
            return 0.0
        if self.spending == "calibrated":
            return CALIBRATED_FACTOR * self.alpha * (min(k, len(self.looks) - 1) + 1) / len(self.looks)
        if k >= self.n_looks - 1:
            return self.alpha
        t = self.looks[k] / self.cap
        if self.spending == "bonferroni":
            return self.alpha * (k + 1) / self.n_looks
        if self.spending == "bonferroni-obf":
            from scipy import special

            z = float(special.ndtri(1 - self.alpha / 2))
            return float(2 - 2 * special.ndtr(z / math.sqrt(t)))
        return self.alpha * math.log(1 + (math.e - 1) * t)

    def to_json(self) -> dict:
        out = {"looks": list(self.looks), "alpha": self.alpha, "margin": self.margin, "spending": self.spending}
        return out | ({"eval_items": int(self.eval_items)} if self.eval_items else {})

    @classmethod
    def from_json(cls, d) -> Schedule:
        """The plan.json "race" record, validated (RaceError naming what was wrong)."""
        if not isinstance(d, dict):
            raise RaceError(f"plan.json's race record must be an object like {cls(DEFAULT_LOOKS).to_json()}, "
                            f"got {type(d).__name__}")
        unknown = set(d) - {"looks", "alpha", "margin", "spending", "eval_items"}
        if unknown or "looks" not in d:
            raise RaceError(f"plan.json's race record needs 'looks' and may carry alpha, margin, spending, "
                            f"eval_items; got keys {sorted(d)}")
        looks = d["looks"]
        if not isinstance(looks, list):
            raise RaceError(f"race looks must be a list of seed counts, got {looks!r}; e.g. [2, 3, 4]")
        return cls(tuple(looks), d.get("alpha", DEFAULT_ALPHA), d.get("margin", DEFAULT_MARGIN),
                   d.get("spending", "bonferroni"), d.get("eval_items"))


def make_schedule(max_seeds: int, first: int = 2, alpha: float = DEFAULT_ALPHA, margin: float = DEFAULT_MARGIN,
                  spending: str = "bonferroni") -> Schedule:
    """Looks from `first` seeds growing by about half each time (2, 3, 4, 6, 9, ...) up to the cap max_seeds
    (always the last look). max_seeds == first: one look, a fixed design."""
    if not isinstance(max_seeds, int) or not isinstance(first, int) or first < 2 or max_seeds < first:
        raise RaceError(f"a race needs 2 <= first seeds <= max seeds, got first={first!r}, max_seeds={max_seeds!r}")
    looks = [first]
    while True:
        nxt = max(looks[-1] + 1, int(looks[-1] * 1.5))
        if nxt >= max_seeds:
            break
        looks.append(nxt)
    if looks[-1] != max_seeds:
        looks.append(max_seeds)
    return Schedule(tuple(looks), alpha, margin, spending)


# --- the state record ----------------------------------------------------------------------------


@dataclass(frozen=True)
class RaceState:
    """One condition's race after its latest decided (or awaited) look: the file contract of a raced sweep."""

    condition: str  # the condition label exactly as the ranking names it
    target: str
    look: int  # index into Schedule.looks
    seeds: dict[str, int]  # per active regime (the ranking's label) -> seeds used at this look
    alpha_spent: float  # α spent through this look's decision (looks not yet decided spend nothing)
    state: str  # one of STATES: the allocation call (never "no_gain" since issue 52: that is `gain`)
    active: tuple[str, ...]  # regimes that continue (empty when stopped); a winner is named in `best`
    best: str | None
    next_seeds: int | None  # seeds the active regimes need next; None when stopped
    margin: float
    reason: str  # one sentence (what was shown, or what would settle an undecided call)
    condition_values: dict = field(default_factory=dict)  # the condition's columns except target
    active_values: tuple[dict, ...] = ()  # per active regime, its regime columns
    intervals: dict = field(default_factory=dict)  # regime -> (best − regime, low, high), simultaneous at α_k
    dropped: dict = field(default_factory=dict)  # regime -> (look, the best it was shown worse than), every look
    gain: str | None = None  # the gain-over-start call once stopped: one of GAINS; None: no start, or racing
    best_gain: float | None = None  # the best's mean gain over its start (an improvement), None without a start
    job_seconds: dict = field(default_factory=dict)  # regime compared at this look -> mean wall seconds per job
    take: str | None = None  # equivalent: the regime to take (least wall seconds per job among those kept)
    # "continue" to the evaluation look: the items per target the active regimes' finished jobs are to be scored
    # on (engine/reeval.py) before it is decided; None otherwise (next_seeds then says what to run)
    next_items: int | None = None

    def to_json(self) -> dict:
        return {"condition": self.condition, "target": self.target, "look": self.look, "seeds": dict(self.seeds),
                "alpha_spent": self.alpha_spent, "state": self.state, "active": list(self.active),
                "best": self.best, "next_seeds": self.next_seeds, "margin": self.margin, "reason": self.reason,
                "condition_values": {k: _plain(v) for k, v in self.condition_values.items()},
                "active_values": [{k: _plain(v) for k, v in r.items()} for r in self.active_values],
                "intervals": {r: [float(x) for x in v] for r, v in self.intervals.items()},
                "dropped": {r: [int(v[0]), v[1]] for r, v in self.dropped.items()},
                "gain": self.gain, "best_gain": self.best_gain,
                "job_seconds": {r: float(v) for r, v in self.job_seconds.items()}, "take": self.take,
                "next_items": self.next_items}


def take_regime(kept: list[str], job_seconds: dict) -> str | None:
    """Among regimes shown equivalent (all spend the same FLOPs by construction), the one to take: the least
    measured wall seconds per job; None when no kept regime has a measured time."""
    timed = [(float(job_seconds[g]), i, g) for i, g in enumerate(kept)
             if g in job_seconds and math.isfinite(float(job_seconds[g]))]
    return min(timed)[2] if timed else None


def _plain(v):
    """numpy scalars as JSON numbers."""
    return v.item() if isinstance(v, np.generic) else v


# --- one look's decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LookDecision:
    """What look k decided for one condition (regime indices into its noise's regimes)."""

    state: str  # one of STATES: the allocation call
    best: int  # the pilot-best active regime
    worse: tuple[int, ...]  # shown worse than the best at this look (gap_lo > 0): they stop
    active: tuple[int, ...]  # regimes that continue to the next look (empty when stopped)
    gap: np.ndarray  # [R] best − regime (in the better direction)
    gap_lo: np.ndarray  # [R] simultaneous (Tukey–Kramer) bounds of best − regime at α_k: the ones decided on
    gap_hi: np.ndarray
    power: float  # the open call's power at the cap (nan when not computed)
    reason: str
    gain: str | None = None  # one of GAINS once stopped (None: no recorded start, or still racing)
    best_gain: float = math.nan  # the best's mean gain over its start (an improvement; nan without a start)
    evaluate: bool = False  # "continue" to the evaluation look: these seeds' checkpoints on eval_items items


def pair_bounds(parts, R: int, alpha: float) -> np.ndarray:
    """Tukey–Kramer half-widths on R regimes: q(1 − α, R, df)/√2 · se of every pair, each variance part at
    its own df. parts: the Parts of decisions.pair_contrasts(R) [R·R]. Returns h [R, R]: every i − j lies in
    m_i − m_j ± h[i, j] simultaneously at 1 − α, whichever pairs the data pick."""
    from race_cli.stats.decisions import _half
    from race_cli.stats.quantiles import range_quantile

    h = _half(parts, lambda df: range_quantile(1 - alpha, max(R, 2), df) / math.sqrt(2.0))
    return np.asarray(h, float).reshape(R, R)


def decide_look(noises: list, gains: list, schedule: Schedule, k: int, maximize: bool = True,
                evaluated: list[bool] | None = None) -> list[LookDecision]:
    """The decision of look k for many conditions at once.

    noises: each condition's stats/variance.Noise restricted to its active regimes (pooled with the sweep's
    prior), all with looks[k] seeds or, for regimes that carry more, with theirs; gains: each one's gain
    Noise (final − start, signed as an improvement) or None without a recorded start.
    evaluated[i] True: condition i's noise is its evaluation look's (looks[k] seeds' checkpoints scored on
    schedule.eval_items items), decided at the evaluation look's level, and it stops there."""
    from race_cli.stats import decisions as D

    evaluated = list(evaluated) if evaluated is not None else [False] * len(noises)
    out: list[LookDecision | None] = [None] * len(noises)
    for ev in (False, True):  # the seed look's conditions and the evaluation look's, each at its own level
        idx = [i for i, e in enumerate(evaluated) if bool(e) == ev]
        if not idx:
            continue
        kk = schedule.eval_look if ev else k
        alpha = schedule.level(kk)
        has_gain = [i for i in idx if gains[i] is not None]
        gds = dict(zip(has_gain, D.gain_decisions_many([gains[i] for i in has_gain], alpha=alpha)))
        for i in idx:
            out[i] = _decide_one(noises[i], gds.get(i), schedule, k, alpha, maximize, ev)
    return out


def _decide_one(noise, gd, schedule: Schedule, k: int, alpha: float, maximize: bool, evaluated: bool) -> LookDecision:
    """One condition's decision at look k (see decide_look); the open call's route when still open."""
    from race_cli.stats import decisions as D
    from race_cli.stats import variance as V
    from race_cli.stats.power import open_call_power

    can_eval = bool(schedule.eval_items) and schedule.eval_items > noise.n  # more items to score: an evaluation look
    last = evaluated or (k == len(schedule.looks) - 1 and not can_eval)
    sign = 1.0 if maximize else -1.0
    R = len(noise.n_seeds)
    point = sign * np.asarray(noise.point, float)
    best = int(np.argmax(point))
    gap = point[best] - point
    nan = np.full(R, np.nan)
    if R < 2:
        return _stop(LookDecision("undecided", best, (), (), gap, nan, nan, math.nan,
                                  "one regime: nothing to compare"), gd)
    if not noise.has_seed_noise:  # more items cannot help: the seed part is what is missing
        end = last or k == len(schedule.looks) - 1
        dec = LookDecision("undecided" if end else "continue", best, (), () if end else tuple(range(R)), gap, nan,
                           nan, math.nan, "no seed variance yet: nothing is testable")
        return _stop(dec, gd) if end else dec
    pp = V.contrast_parts(noise, D.pair_contrasts(R))
    h = pair_bounds(pp, R, alpha)
    lo, hi = gap - h[best], gap + h[best]
    lo[best] = hi[best] = 0.0
    worse = lo > 0
    rest = [i for i in range(R) if not worse[i]]
    wl = tuple(i for i in range(R) if worse[i])
    if len(rest) == 1:
        return _stop(LookDecision("winner", best, wl, (), gap, lo, hi, math.nan,
                                  "the best is shown better than every other regime"), gd)
    diff = np.abs(point[:, None] - point[None, :]) + h
    sub = diff[np.ix_(rest, rest)]
    if np.all(sub[~np.eye(len(rest), dtype=bool)] < schedule.margin):
        return _stop(LookDecision("equivalent", best, wl, (), gap, lo, hi, math.nan,
                                  f"every remaining regime is within ±{schedule.margin:g} of the best"), gd)
    if evaluated:
        return _stop(LookDecision("undecided", best, wl, (), gap, lo, hi, math.nan,
                                  f"still open on {noise.n} items"), gd)
    if last:
        return _stop(LookDecision("undecided", best, wl, (), gap, lo, hi, math.nan,
                                  f"open at the cap of {schedule.cap} seeds"), gd)
    runner = max((i for i in rest if i != best), key=lambda i: point[i])
    s_now = int(noise.n_seeds[best])
    parts = _pair_parts(pp, R, best, runner)
    if can_eval:
        return _route(gap, lo, hi, wl, rest, best, runner, parts, s_now, noise.n, schedule, k)
    pw = open_call_power(gap[runner], parts, s_now, schedule.cap, len(rest),
                         schedule.margin, schedule.level(len(schedule.looks) - 1), FUTILITY_Z)
    if pw < FUTILITY_POWER:
        return _stop(LookDecision("undecided", best, wl, (), gap, lo, hi, pw,
                                  f"separation or equivalence reaches {pw:.2f} power at the cap of "
                                  f"{schedule.cap} seeds (< {FUTILITY_POWER:.2f})"), gd)
    return LookDecision("continue", best, wl, tuple(rest), gap, lo, hi, pw, f"open; {pw:.2f} power at the cap")


def _route(gap, lo, hi, wl, rest, best, runner, parts, s_now: int, n_items: int, schedule: Schedule,
           k: int) -> LookDecision:
    """Where an open call buys its precision when the schedule declares an evaluation look: the finished
    checkpoints scored on eval_items items now (no training: its cost is evaluation seconds only), or more
    seeds up to the cap and then the evaluation look (new jobs, whole training runs). The evaluation route is
    the cheaper one whenever it is enough: it is taken now when it alone reaches FUTILITY_POWER at the measured
    gap, or at the cap; seeds are bought only when the evaluation alone falls short and the cap with it reaches
    FUTILITY_POWER at the gap most in its favour (the futility rule's FUTILITY_Z); when neither does, the call
    takes the evaluation look now as its last (no more jobs are bought for it).
    Powers: power.open_call_power with items_factor = eval_items / items now, at the evaluation look's level."""
    from race_cli.stats.power import open_call_power

    f = schedule.eval_items / n_items
    level = schedule.level(schedule.eval_look)
    now = open_call_power(gap[runner], parts, s_now, s_now, len(rest), schedule.margin, level, 0.0,
                          items_factor=f)
    at_cap = k == len(schedule.looks) - 1
    cap = now if at_cap else open_call_power(gap[runner], parts, s_now, schedule.cap, len(rest), schedule.margin,
                                             level, FUTILITY_Z, items_factor=f)
    where = f"{schedule.eval_items} items on these {s_now} seeds"
    if at_cap or now >= FUTILITY_POWER or cap < FUTILITY_POWER:
        why = ("at the cap" if at_cap else "it reaches the power alone" if now >= FUTILITY_POWER else
               f"seeds to the cap would reach only {cap:.2f} with it (< {FUTILITY_POWER:.2f})")
        return LookDecision("continue", best, wl, tuple(rest), gap, lo, hi, now,
                            f"open; evaluation look next ({where}: {now:.2f} power; {why})", evaluate=True)
    return LookDecision("continue", best, wl, tuple(rest), gap, lo, hi, cap,
                        f"open; {cap:.2f} power at the cap of {schedule.cap} seeds and the evaluation look "
                        f"({now:.2f} with the evaluation alone)")


def active_noise(noise, idx: list[int]):
    """A condition's noise restricted to regimes idx (their seed variances as the pool moderated them; the
    residual mean square stays pooled over every regime the condition ran)."""
    from dataclasses import replace

    return replace(noise, m=noise.m[idx], n_seeds=noise.n_seeds[idx], job_var=noise.job_var[idx],
                   job_df=noise.job_df[idx], seed_var=noise.seed_var[idx], seed_df=noise.seed_df[idx],
                   outlier=noise.outlier[idx])


def _pair_parts(pp, R: int, i: int, j: int):
    from race_cli.stats.variance import Parts

    c = i * R + j
    return Parts(pp.item[c], pp.resid[c], pp.seed[c], pp.df_item, pp.df_resid, pp.df_seed[c])


def _stop(d: LookDecision, gd) -> LookDecision:
    """A stopping decision with its gain call beside it: "gain" when some active regime beats its start,
    "no_gain" when none does (gd: the condition's decisions.GainDecision; None, an unknown start: None).
    The allocation state is kept whatever the gain call says."""
    from dataclasses import replace

    if gd is None:
        return d
    beats = bool(np.asarray(gd.beats_start, bool).any())
    return replace(d, gain="gain" if beats else "no_gain", best_gain=float(np.asarray(gd.gain, float)[d.best]))
