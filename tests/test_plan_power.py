"""Power before spending (race_cli/plan/power.py, by race_cli/stats/power.py): the effects `race plan` calls
detectable are detected >= 80% of the time by the report's own ranking code (rank.rank_condition) on pilots
simulated item by item under the plan's assumptions, and half of them far less often (not padded)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from race_cli.plan.power import detectable
from race_cli.stats.power import CRN_SHARE, GAIN_ITEM_SD, ITEM_REGIME_SD


def simulate(rng, means: list[float], n: int, k: int, seeds: int, seed_sd: float, start: float = 0.45,
             item_half: float = 0.15, crn: bool = False):
    """jobs table, final items, start items of one condition under the plan's model: regime r's expected
    score means[r]; P(item i, regime r, seed s) = mean + d_i + h_i + g_ri + b_s with item difficulty
    d_i ~ U(±item_half), an item's gain shared by the regimes h_i ~ N(0, GAIN_ITEM_SD² − ITEM_REGIME_SD²),
    the item × regime interaction g_ri ~ N(0, ITEM_REGIME_SD²), b_s ~ N(0, seed_sd²); the start P = start
    + d_i, one evaluation shared by the condition's jobs (as `race run` evaluates it); sample j of item i
    correct when its uniform < P: with crn, one uniform U_ij for every job on a CRN_SHARE of the (i, j)
    (completions that stay alike), each job's own elsewhere; without, each job's own everywhere."""
    d = rng.uniform(-item_half, item_half, n)
    h = rng.normal(0, np.sqrt(GAIN_ITEM_SD ** 2 - ITEM_REGIME_SD ** 2), n)
    h -= h.mean()
    U = rng.random((n, k))
    alike = rng.random((n, k)) < (CRN_SHARE if crn else 0.0)
    score = lambda P: (np.where(alike, U, rng.random((n, k))) < P[:, None]).mean(axis=1)
    ini = score(np.clip(start + d, 0, 1))
    ids = [f"a-{i}" for i in range(n)]
    rows, items, initial = [], {}, {}
    for r, m in enumerate(means):
        g = rng.normal(0, ITEM_REGIME_SD, n)
        g -= g.mean()
        for s in range(seeds):
            b = rng.normal(0, seed_sd)
            fin = score(np.clip(m + d + h + g + b, 0, 1))
            jid = f"r{r}_s{s}"
            rows.append({"sweep": "s", "job_id": jid, "updates_per_batch": r + 1, "eval/t": fin.mean()})
            items[("s", jid, "t")] = (ids, fin)
            initial[("s", jid, "t")] = (ids, ini)
    return pd.DataFrame(rows), items, initial


def decide(jobs, items, initial, seed):
    from race_cli.report.rank import rank_condition

    return rank_condition(jobs, ["updates_per_batch"], "t", items, 20, np.random.default_rng(seed), True, 0.95,
                          initial).set_index("regime")


# the default grid's condition: 200 items x 4 samples x 2 seeds, 3 regimes, seed spread 0.02; one condition
# (its seed pool: its own 3 regimes, 3 df)
N, K, SEEDS, R, SD = 200, 4, 2, 3, 0.02


@pytest.mark.parametrize("scale, lo, hi", [(1.0, 0.75, 0.92), (0.5, 0.0, 0.4)])
def test_the_detectable_gain_over_the_start_is_detected_80_percent_of_the_time(scale, lo, hi):
    gain, _, _ = detectable(N, K, SEEDS, R, SD)
    assert 0.13 < gain < 0.18  # 0.161 for this grid (the start one shared evaluation): what `race plan` prints
    rng = np.random.default_rng(1)
    hits = []
    for rep in range(200):  # one regime gains, the other two do not (Holm's hardest case for it)
        jobs, items, initial = simulate(rng, [0.45 + scale * gain, 0.45, 0.45], N, K, SEEDS, SD)
        hits.append(bool(decide(jobs, items, initial, rep).loc["μ=1", "beats_start"]))
    assert lo <= np.mean(hits) <= hi, np.mean(hits)


@pytest.mark.parametrize("scale, lo, hi, crn", [(1.0, 0.75, 0.92, False), (0.5, 0.0, 0.4, False),
                                                (1.0, 0.75, 0.92, True)])
def test_the_detectable_gap_separates_the_better_regime_80_percent_of_the_time(scale, lo, hi, crn):
    _, gap, _ = detectable(N, K, SEEDS, R, SD, crn=crn)
    assert (0.14 < gap < 0.19) if not crn else (0.13 < gap < 0.18)  # 0.167 / 0.156 for this grid
    rng = np.random.default_rng(2)
    hits = []
    for rep in range(200):  # one regime `gap` above two level ones: is it the only ≈ best?
        jobs, items, initial = simulate(rng, [0.45 + scale * gap, 0.45, 0.45], N, K, SEEDS, SD, crn=crn)
        r = decide(jobs, items, initial, rep)
        hits.append(int(r["tied_best"].sum()) == 1 and bool(r.loc["μ=1", "tied_best"]))
    assert lo <= np.mean(hits) <= hi, np.mean(hits)


def test_more_items_seeds_samples_or_pooled_regimes_detect_smaller_effects():
    base = detectable(200, 4, 2, 3, 0.02)
    assert detectable(800, 4, 2, 3, 0.02)[0] < base[0]
    assert detectable(200, 4, 4, 3, 0.02)[1] < base[1]
    assert detectable(200, 8, 2, 3, 0.02)[0] < base[0]
    assert detectable(200, 4, 2, 3, 0.02, pool_df=12)[1] < base[1]  # the sweep's pool: 12 regimes' df
    # one seed per regime: nothing testable (the report says "not testable with one seed")
    assert all(np.isnan(v) for v in detectable(200, 4, 1, 3, 0.02)[:2])


def test_joint_detectable_by_hand_for_the_default_grid():
    """The allocation-by-allocation size claim on the default grid (2 sizes × 2 rewards × 3 allocations,
    200 items × 4 samples × 2 seeds, seed SD 0.02, item × model SD 0.03): P = 6 pairs, Σc²/n_r = 2/12,
    σ_e² = 0.0625, so the item part is 2·0.0625/(6·2·200) + 2·0.03²/200, the seed part (1/6)(0.02² +
    0.0625/200), minus the residual (1/6)(0.0625/200). The gatekept graph enters the size claim at α/2
    (one size pair, one reward pair: the two families split α), tested two-sided: t_{1−0.0125, df}; seed
    noise pooled over one reward system's 6 regimes × 1 df, combined with the heterogeneity prior's 12 df
    (1/(1/6 + 1/12) = 4). The figure is δ·SE with δ the noncentrality at which t(df) clears that 80% of the
    time. benchmarks/bench_joint.py (1,000 conditions, the gatekept procedure) found the matched size gap
    detected with 80% power at 0.045."""
    import math

    from scipy.optimize import brentq
    from scipy.stats import nct, t

    from race_cli.plan.power import joint_claims, joint_detectable

    assert joint_claims(2, 2) == 10 and joint_claims(3, 2) == 20 and joint_claims(1, 2) == 2
    n, s2e = 200, 0.25 / 4
    a = 2 * s2e / (6 * 2 * n) + 2 * 0.03 ** 2 / n
    b = (2 / 12) * (0.02 ** 2 + s2e / n)
    e = (2 / 12) * s2e / n
    v = a - e + b
    df_seed = 1 / (1 / 6 + 1 / 12)  # stats/variance.HETERO_DF = 12
    df = min(df_seed, v * v / (a * a / (n - 1) + b * b / df_seed + e * e / (6 * (n - 1))))
    crit = t.ppf(1 - 0.025 / 2, df)
    delta = brentq(lambda d: nct.sf(crit, df, d) - 0.8, 0, 60)
    d = joint_detectable(n, 4, 2, 2, 2, 3, 0.02)
    assert d["claims"] == 10 and d["seed_df"] == pytest.approx(df_seed)
    assert d["size"] == pytest.approx(delta * math.sqrt(v), rel=1e-6)
    assert 0.040 < d["size"] < 0.054  # the simulation's 0.045, within ±20%
    # feedback across sizes: the same model on both sides, no item × model part
    a_fb = 2 * s2e / (6 * 2 * n)
    assert d["feedback"] < d["size"] and a_fb < a
    # one size: no size claim; more seeds: a smaller figure
    assert math.isnan(joint_detectable(n, 4, 2, 1, 2, 3, 0.02)["size"])
    assert joint_detectable(n, 4, 4, 2, 2, 3, 0.02)["size"] < d["size"]


def test_race_plan_prints_the_joint_power_line_with_the_power_table():
    import subprocess
    import sys

    # at seed sd 0.02, the spread the hand calculation above uses (grid=tiny declares its own run's 0.0077)
    p = subprocess.run([sys.executable, "-m", "race_cli", "plan", "--power-table", "--seed-sd", "0.02"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    flat = " ".join((p.stdout + p.stderr).split())
    # the default grid's 2 x 2 allocations (G in {4, 8} x mu in {1, 2}) per size and reward system
    assert "joint comparison at 8e+11 FLOPs on arithmetic (2 sizes × 2 reward systems × 4 allocations" in flat
    # 0.041 on 400 items x 2 samples; 0.034 since the default evaluates 1200 items (conf/grid/tiny.yaml)
    assert "smallest model-size difference detected with 80% power allocation by allocation 0.034" in flat


def test_separation_powers_at_once_are_the_one_by_one_values():
    # the report's settle line computes its first powers in one batch: the same pilots, the same decisions
    from race_cli.stats.power import Design, separation_power, separation_powers

    qs = [(Design(n=200, k=4, seeds=2, regimes=3, seed_sd=0.02, crn=True), 0.06),
          (Design(n=200, k=4, seeds=2, regimes=3, seed_sd=0.03, crn=True), 0.11),
          (Design(n=400, k=1, seeds=32, regimes=3, seed_sd=0.02, pool_df=186.0), 0.02),
          (Design(n=200, k=4, seeds=3, regimes=4, seed_sd=0.01), 0.04),
          (Design(n=200, k=4, seeds=1, regimes=3, seed_sd=0.02), 0.1)]  # one seed: nothing testable, 0
    one = [separation_power(d, x, n_sim=300) for d, x in qs]
    assert separation_powers(qs, n_sim=300, chunk=2) == one
    assert 0 < min(one[:4]) and max(one) < 1 and one[4] == 0.0


def test_the_plans_brentq_and_noncentral_t_are_scipys_to_the_last_bit():
    """race plan finds the joint line's noncentrality with its own port of scipy's brentq and the ufunc
    behind scipy.stats.nct.sf, so that it imports neither scipy.optimize nor scipy.stats (~0.9 s): the
    same roots, bit for bit, on 300 random (critical value, df, power) and on four plain functions."""
    import math
    import random

    from scipy.optimize import brentq as scipy_brentq
    from scipy.stats import nct

    from race_cli.plan.power import _nct_sf, brentq

    sf = _nct_sf()
    rng = random.Random(1)
    for _ in range(300):
        crit, power = rng.uniform(1.0, 6.0), rng.choice([0.8, 0.5, 0.9, rng.uniform(0.5, 0.99)])
        df = rng.choice([rng.uniform(1.5, 50), rng.uniform(50, 1e4), 1e6])
        assert sf(crit, df, 1.3) == nct.sf(crit, df, 1.3)
        assert brentq(lambda d: sf(crit, df, d) - power, 0.0, crit + 50) == scipy_brentq(
            lambda d: nct.sf(crit, df, d) - power, 0.0, crit + 50)
    for f, lo, hi in ((lambda x: x ** 3 - 2, 0, 3), (math.cos, 0, 3), (lambda x: math.exp(x) - 5, -1, 4)):
        assert brentq(f, lo, hi) == scipy_brentq(f, lo, hi)
    with pytest.raises(ValueError):
        brentq(lambda x: x + 1, 0, 1)


def test_race_plan_imports_neither_scipy_stats_nor_scipy_optimize():
    import subprocess
    import sys

    code = ("import sys; sys.argv = ['race', 'plan']; from race_cli.cli import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('scipy.stats', 'scipy.optimize', 'torch', 'hydra') if m in sys.modules))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "'scipy.stats'" not in p.stdout.splitlines()[-1] and "'scipy.optimize'" not in p.stdout.splitlines()[-1]


def test_the_seed_spread_is_the_flags_else_the_grids_declared_else_assumed():
    """race plan prices at --seed-sd when given, else at the spread the grid declares (`seed_sd:`, its own run's:
    grid=tiny 0.0077), else at SEED_SD_DEFAULT, said to be assumed."""
    from race_cli.plan.build import load_grid
    from race_cli.plan.power import SEED_SD_DEFAULT, seed_sd_from

    tiny, pilot = load_grid("tiny"), load_grid("pilot")
    assert tiny["seed_sd"] == 0.0077 and pilot["seed_sd"] is None
    sd, where = seed_sd_from(None, tiny)
    assert sd == 0.0077 and where.startswith("declared by grid 'tiny'")
    assert seed_sd_from(None, pilot) == (SEED_SD_DEFAULT, f"assumed {SEED_SD_DEFAULT} (--seed-sd to set it)")
    assert seed_sd_from("0.03", tiny) == (0.03, "--seed-sd")  # the flag wins over the grid


@pytest.mark.parametrize("value", ["lots", "1.5", "-0.01"])
def test_a_grid_whose_seed_sd_is_not_a_spread_is_refused_in_one_line(tmp_path, value):
    import subprocess
    import sys
    from pathlib import Path

    tiny = (Path(__file__).resolve().parents[1] / "conf" / "grid" / "tiny.yaml").read_text()
    (tmp_path / "grid").mkdir()
    (tmp_path / "grid" / "mine.yaml").write_text(tiny.replace("name: tiny", "name: mine").replace(
        "seed_sd: 0.0077", f"seed_sd: {value}"))
    p = subprocess.run([sys.executable, "-m", "race_cli", "plan", "--config-dir", str(tmp_path), "grid=mine"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "Traceback" not in p.stderr
    assert f"grid 'mine': seed_sd {value}" in p.stderr.replace("'lots'", "lots")
    assert "expected a number in [0, 1)" in p.stderr and len(p.stderr.strip().splitlines()) == 1
