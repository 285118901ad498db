"""The inference model, pure (numpy/scipy; no pandas in its interfaces, no I/O): what plan/ and report/
both compute their statistics with, as cost/ is for FLOPs.

    quantiles.py   t, studentized range, Dunnett quantiles; the per-part half-width (Banerjee)
    variance.py    per-item paired variance parts; seed variance pooled over the sweep, moderated (limma)
    decisions.py   intervals, ≈ best (REGWQ), > start (Holm on bounds), winners' intervals and curse
    draws.py       resampled regime means (best share, the response fit's p*)
    power.py       the smallest effects a design separates with 80% power, by the decisions above
    gatekeeping.py gatekept familywise procedures (graphical approach) and Dunnett's critical values
    curves.py      compute curves: the saturating sigmoid, its bounded fit, seed covariance, intervals
    validation_power.py  the validation's test of best - control, its power, the seeds it needs, its variance
                   parts and Spearman's rho between the pilot's order and the validation's
    race.py        racing: the schedule, the α split over looks, each look's decision (winner, equivalent, ...)
    race_sim.py    the race simulator: a known truth (seed-effect kinds), the look loop through race.py's
                   decisions; the plan's price and the harnesses draw from it
    race_power.py  what a race resolves at its cap: the smallest equivalence margin and winning gap
    seeds.py       collapsed seeds: a run far below its siblings, by a stated robust rule

Results are small named records (Interval: estimate, low, high, df, method; Parts; SeedPrior) or
arrays. race report's ranking, joint comparison, frontier and validation, and race plan's power, call
these functions; benchmarks/bench_calibration.py measures them on synthetic sweeps with known truth.
"""
