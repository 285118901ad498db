"""The joint, budget-matched comparison (race_cli/report/joint.py) on hand-built sweeps with a known answer.

The main sweep: two model sizes (tiny-m larger) × rule/PRM × μ ∈ {1, 2} × 2 seeds at one budget, 40 items
scored 0/1. Item i is correct when i < c (c per regime below); both seeds of a regime score the same
items, so the seed mean square is 0 and every interval is the item part alone: a t interval with n − 1 =
39 degrees of freedom around the mean per-item difference, se = sd_i(d)/√40 (stats.contrast_se).

    tiny-m (start c=24: 0.600)          tiny-s (start c=0: 0.000)
      rule μ=1 c=36  0.900  best          rule μ=1 c=12  0.300
      rule μ=2 c=30  0.750                rule μ=2 c=8   0.200
      prm  μ=1 c=35  0.875                prm  μ=1 c=24  0.600  best
      prm  μ=2 c=28  0.700                prm  μ=2 c=20  0.500

The joint condition makes 10 claims that could name a winner (model size: best against best and
allocation by allocation, each on final scores and on gains; feedback: both kinds at tiny-m, at tiny-s and
across sizes). They share a familywise 5% by a gatekept graph (stats/gatekeeping.joint_design): size and
feedback start with α/2 each, on the allocation-by-allocation claim (size; feedback across sizes); a
rejected claim passes its share on. By hand, in the order the graph rejects:

    size_matched ½ (rejected) → size_final ¼, size_gain_matched ¼
    feedback_all_matched ½ (rejected) → feedback_matched tiny-m ⅛, tiny-s ⅛, feedback_all ¼
    size_final ¼ (rejected) → size_gain ¼
    feedback_matched tiny-s ⅛ (rejected) → feedback tiny-s ⅛
    feedback tiny-s ⅛ (rejected) → the size pair's entry, already rejected, so on through it:
        size_gain_matched + ⅛·½, size_gain + ⅛·½ (through size_final): 5/16 each
    nothing else is rejected; feedback tiny-m (behind feedback_matched tiny-m) is never reached.

A claim at weight w is a two-sided test at level w·α. Allocation by allocation is one contrast: the t
quantile at 1 − wα/2 (df 39). Best against best is the intersection–union test with Dunnett's
many-to-one critical value over the k regimes of a side (4 per size, 2 per size and reward) at one-sided
wα/2; with every seed part zero the contrasts share nothing but items, λ = 0 (q_best integrates it). A claim never reached shows its interval at α/10 for reference.
≈ best in the joint ranking is the ranking's own REGWQ over the 8 regimes (stats/decisions.py).
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from io import StringIO
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.stats import t as t_dist

from race_cli.report.build import ReportOptions
from race_cli.report.command import run_report
from report_fixtures import Regime, write_job

N = 40
ARCH = {"tiny-s": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 128, "vocab_size": 257},
        "tiny-m": {"hidden_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 256, "vocab_size": 257},
        "tiny-x": {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "intermediate_size": 64, "vocab_size": 257}}  # only the three-size test uses it
GRID = {("tiny-m", "rule", 1): 36, ("tiny-m", "rule", 2): 30, ("tiny-m", "prm", 1): 35, ("tiny-m", "prm", 2): 28,
        ("tiny-s", "rule", 1): 12, ("tiny-s", "rule", 2): 8, ("tiny-s", "prm", 1): 24, ("tiny-s", "prm", 2): 20}
START = {"tiny-m": 24, "tiny-s": 0}
N_CLAIMS = 10
WEIGHTS = {("size_matched", None): 1 / 2, ("feedback_all_matched", "across sizes"): 1 / 2, ("size_final", None): 1 / 4,
           ("size_gain_matched", None): 5 / 16, ("size_gain", None): 5 / 16, ("feedback_matched", "tiny-m"): 1 / 8,
           ("feedback_matched", "tiny-s"): 1 / 8, ("feedback", "tiny-s"): 1 / 8, ("feedback_all", "across sizes"): 1 / 4,
           ("feedback", "tiny-m"): 0.0}


def q_matched(w: float) -> float:
    """One contrast at two-sided level w·α: the t quantile at 1 − wα/2."""
    return float(t_dist.ppf(1 - w * 0.05 / 2, N - 1))


def q_best(w: float, k: int) -> float:
    """Dunnett's many-to-one value at one-sided wα/2 over k arms with λ = 0: k independent normals over one
    shared χ² denominator (a multivariate t), P(max ≤ c) = E_S[Φ(c·S)^k], S² ~ χ²_39/39 — integrated here
    with scipy.integrate.quad (Šidák's t.ppf((1 − wα/2)^(1/k)) treats the denominators as independent and
    is 0.05% wider)."""
    from scipy import integrate, optimize, stats

    df = N - 1
    cdf = lambda c: integrate.quad(lambda s: stats.norm.cdf(c * s) ** k * stats.chi.pdf(s * np.sqrt(df), df)
                                   * np.sqrt(df), 0, np.inf)[0]
    return float(optimize.brentq(lambda c: cdf(c) - (1 - w * 0.05 / 2), 1.0, 10.0, xtol=1e-10))


def first(c: int, n: int = N) -> np.ndarray:
    return (np.arange(n) < c).astype(float)


def write_grid(root: Path, grid: dict, start: dict, budget: float = 8e11, ids_of=None, half=None) -> Path:
    jobs = root / "jobs"
    jobs.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for (model, reward, mu), c in grid.items():
        cond = {"model": model, "budget_flops": budget, "reward": reward, "task": "arithmetic"}
        for s in (0, 1):
            fb = 0.1 if reward == "prm" else 0.0  # p on the policy's side scaled by 1 - feedback: the shares sum to 1
            jid = write_job(jobs, cond, Regime(4, mu, {1: 0.83, 2: 0.91}[mu] * (1 - fb)), s, {"arithmetic": first(c)}, rng,
                            feedback=fb, start={"arithmetic": first(start[model])})
            cfg_path = jobs / jid / ".hydra" / "config.yaml"
            # what the report reads of it: the model's shapes (its size); and what tells one run from another
            # (the report refuses two folders holding the same config and seed as a counterfeit second seed)
            cfg_path.write_text(yaml.safe_dump({"model": {"name": model, "arch": ARCH[model]}, "seed": s,
                                                "run": jid}))
            if half is not None:  # an equal-FLOP checkpoint at C/2 (eval.at): the start, C/2 and the end
                p = jobs / jid / "summary.json"
                doc = json.loads(p.read_text())
                ids = [f"arithmetic-eval-{i}" for i in range(N)]
                point = lambda at, it, sc: {"at": [at], "iteration": it, "flops": at * budget * 1.01,
                                            "accuracy": {"arithmetic": float(sc.mean())},
                                            "items": {"arithmetic": {"ids": ids, "scores": sc.tolist()}}}
                doc["eval_points"] = [point(0.0, 0, first(start[model])),
                                      point(0.5, 5 * {"tiny-m": 1, "tiny-s": 4}[model], first(half[(model, reward, mu)])),
                                      point(1.0, 10 * {"tiny-m": 1, "tiny-s": 4}[model], first(c))]
                p.write_text(json.dumps(doc))
            if ids_of is not None:  # rewrite the item ids (different items per model)
                p = jobs / jid / "summary.json"
                doc = json.loads(p.read_text())
                for block in ("eval_items", "eval_items_initial"):
                    doc[block]["arithmetic"]["ids"] = ids_of(model)
                p.write_text(json.dumps(doc))
    return root


def hand_interval(d: np.ndarray, q: float) -> tuple[float, float, float]:
    """mean, lower and upper end of mean(d) ± q·sd(d, ddof=1)/√n: the item-only t interval."""
    m, se = d.mean(), d.std(ddof=1) / math.sqrt(len(d))
    return m, m - q * se, m + q * se


def quiet():
    from rich.console import Console

    return Console(file=StringIO(), width=80)


@pytest.fixture(scope="module")
def joint(tmp_path_factory):
    root = write_grid(tmp_path_factory.mktemp("joint") / "sweep", GRID, START)
    con = quiet()
    res = run_report(ReportOptions([root], bootstrap=200), console=con)
    return res, con.file.getvalue(), root


def sentence(res, question: str, scope: str | None = None) -> dict:
    s = res.joint.sentences
    s = s[s["question"] == question]
    if scope is not None:
        s = s[s["scope"] == scope]
    assert len(s) == 1, s
    return s.iloc[0].to_dict()


def test_joint_ranking_orders_every_regime_at_the_budget(joint):
    res = joint[0]
    rk = res.joint.ranking
    assert len(rk) == 8 and rk["joint"].nunique() == 1
    assert list(rk["mean"]) == pytest.approx([0.9, 0.875, 0.75, 0.7, 0.6, 0.5, 0.3, 0.2])
    assert rk.iloc[0]["regime"] == "tiny-m · rule · μ=1" and bool(rk.iloc[0]["is_best"])
    # gains over each regime's own model's start (0.6 for tiny-m, 0 for tiny-s)
    assert list(rk["gain"]) == pytest.approx([0.3, 0.275, 0.15, 0.1, 0.6, 0.5, 0.3, 0.2])
    # ≈ best: REGWQ over the 8 regimes. Best − tiny-m prm μ=2 (positions 0..3 of the order, p = 4) = 0.2 with
    # d = 1 on items 28..35, tested at α_4 = 1 − 0.95^(4/8) on the range of 4: its bound clears zero;
    # best − tiny-m rule μ=2 (p = 3, α_3 = 1 − 0.95^(3/8)) = 0.15 with d = 1 on items 30..35 does not
    from scipy.stats import studentized_range

    q4 = studentized_range.ppf(0.95 ** 0.5, 4, N - 1) / math.sqrt(2)
    m, lo, _ = hand_interval(first(36) - first(28), q4)
    assert m == pytest.approx(0.2) and lo > 0
    q3 = studentized_range.ppf(0.95 ** (3 / 8), 3, N - 1) / math.sqrt(2)
    m, lo, _ = hand_interval(first(36) - first(30), q3)
    assert m == pytest.approx(0.15) and lo < 0
    tied = set(rk.loc[rk["tied_best"].astype(bool), "regime"])
    assert tied == {"tiny-m · rule · μ=1", "tiny-m · prm · μ=1", "tiny-m · rule · μ=2"}


# Intervals agree with the hand t intervals to 1e-9: with the seeds agreeing, stats.contrast_se gives the
# item part's own n − 1 degrees of freedom (it once interpolated them, a ~3e-7 residue).
def test_bigger_policy_is_ahead_on_final_scores(joint):
    res = joint[0]
    s = sentence(res, "size_final")
    m, lo, hi = hand_interval(first(36) - first(24), q_best(1 / 4, 4))  # tiny-m rule μ=1 − tiny-s prm μ=1
    assert (s["a"], s["b"], s["winner"]) == ("tiny-m", "tiny-s", "tiny-m")
    assert s["weight"] == pytest.approx(1 / 4) and s["level"] == pytest.approx(1 - 0.05 / 4)
    assert (s["diff"], s["ci_lo"], s["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-5)  # λ 0, df 39: no rounding
    assert (m, lo, hi) == pytest.approx((0.3, 0.06898, 0.53102), abs=2e-5)  # Bonferroni over 10 claims: lo 0.04464
    assert f"= +0.300 [{lo:+.3f}, {hi:+.3f}]" in s["text"]
    assert "the larger policy tiny-m is ahead at 8e+11 FLOPs" in s["text"]


def test_equal_gains_over_own_starts_are_a_tie(joint):
    """tiny-s gains twice as much (+0.6 vs +0.3) but the gain difference is not separated: no winner."""
    s = sentence(joint[0], "size_gain")
    d = (first(36) - first(24)) - (first(24) - first(0))  # per item: −1 on 0..23, +1 on 24..35
    m, lo, hi = hand_interval(d, q_best(5 / 16, 4))
    assert (m, lo, hi) == pytest.approx((-0.3, -0.74177, 0.14177), abs=2e-5)
    assert (s["diff"], s["ci_lo"], s["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-5)
    assert s["winner"] is None or (isinstance(s["winner"], float) and math.isnan(s["winner"]))
    assert "tiny-m gains +0.300 from 0.600, tiny-s +0.600 from 0.000" in s["text"]
    assert "not separated: neither size gains more" in s["text"]


def test_feedback_tie_at_one_size_and_a_winner_at_the_other(joint):
    res = joint[0]
    m_tie = sentence(res, "feedback", "tiny-m")
    # behind feedback_matched tiny-m, which is not separated: never tested; its interval at α/10 for reference
    m, lo, hi = hand_interval(first(36) - first(35), q_best(1 / N_CLAIMS, 2))  # rule μ=1 − prm μ=1
    assert (m_tie["diff"], m_tie["ci_lo"], m_tie["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-5)
    assert lo < 0 < hi and "not tested" in m_tie["text"] and m_tie["gate"] == "not tested"
    s_win = sentence(res, "feedback", "tiny-s")
    m, lo, hi = hand_interval(first(12) - first(24), q_best(1 / 8, 2))
    assert (s_win["diff"], s_win["ci_lo"], s_win["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-5)
    assert hi < 0 and s_win["winner"] == "prm"
    assert "prm is ahead: its stronger feedback is worth its share of the budget" in s_win["text"]
    across = sentence(res, "feedback_all")
    m, lo, hi = hand_interval(first(36) - first(35), q_best(1 / 4, 4))  # bests picked from 4 regimes each
    assert (across["diff"], across["ci_lo"], across["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-5)
    assert "not separated" in across["text"]
    split = sentence(res, "split")
    assert split["text"].startswith("Search or learning (the within-condition rankings): ")


def test_joint_section_is_in_every_output_and_fits_80_columns(joint):
    res, out, root = joint
    rep = root / "report"
    md = (rep / "summary.md").read_text()
    doc = json.loads((rep / "report.json").read_text())
    assert "## Joint comparison" in md and (rep / "joint.csv").is_file() and (rep / "joint.png").is_file()
    assert len(doc["joint"]["ranking"]) == 8
    texts = [s["text"] for s in doc["joint"]["sentences"]]
    assert all(t in md for t in texts)
    flat = " ".join(out.split())  # the terminal wraps lines at spaces
    for t in texts:
        assert " ".join(t.split()) in flat, t
    nums = set(re.findall(r"[+-]?\d+\.\d+", out))  # no number is cut by the 80-column table
    from race_cli.report.views.joint import rows

    for row in rows(res.joint.ranking, narrow=True):
        for cell in row[2:4]:
            for x in re.findall(r"[+-]?\d+\.\d+", cell):
                assert x in nums, (cell, x)
    assert max(len(line) for line in out.splitlines()) <= 80


def test_the_cli_through_a_pipe_prints_the_sentences_whole(joint):
    _, _, root = joint
    p = subprocess.run([sys.executable, "-m", "race_cli", "report", str(root), "--no-plots", "--full"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    flat = " ".join(p.stdout.split())
    assert "the larger policy tiny-m is ahead at 8e+11 FLOPs." in flat
    assert "…" not in p.stdout


def test_across_budgets_the_larger_policy_overtakes(tmp_path):
    """At 1e11 the smaller policy is ahead (its best 0.6 against tiny-m's 0.3), at 8e11 the larger:
    the larger overtakes between the two budgets; the point differences −0.3 and +0.3 cross zero at
    their geometric mean √(1e11 · 8e11) = 2.83e11 (linear in log budget)."""
    low = {("tiny-m", "rule", 1): 12, ("tiny-m", "rule", 2): 8, ("tiny-m", "prm", 1): 10, ("tiny-m", "prm", 2): 6,
           ("tiny-s", "rule", 1): 24, ("tiny-s", "rule", 2): 20, ("tiny-s", "prm", 1): 22, ("tiny-s", "prm", 2): 18}
    root = write_grid(tmp_path / "sweep", GRID, START, budget=8e11)
    write_grid(root, low, {"tiny-m": 6, "tiny-s": 0}, budget=1e11)
    res = run_report(ReportOptions([root], plots=False, bootstrap=200), console=quiet())
    size = res.joint.sentences
    size = size[size["question"] == "size_final"].sort_values("budget")
    assert list(size["winner"]) == ["tiny-s", "tiny-m"]
    assert list(size["diff"]) == pytest.approx([0.3 - 0.6, 0.3])
    over = [a for a in res.joint.across if a["question"] == "overtake"]
    assert len(over) == 1
    o = over[0]
    assert (o["overtake_lo"], o["overtake_hi"]) == (1e11, 8e11)
    assert o["overtake_flops"] == pytest.approx(math.sqrt(1e11 * 8e11))
    assert "overtakes tiny-s on arithmetic between 1e+11 and 8e+11 FLOPs (interpolated crossing 2.83e+11)" in o["text"]
    best = [a for a in res.joint.across if a["question"] == "best_per_budget"][0]["text"]
    assert "1e+11: tiny-s" in best and "8e+11: tiny-m" in best


def test_models_scored_on_different_items_are_compared_unpaired(tmp_path):
    ids = lambda model: [f"{model}-item-{i}" for i in range(N)]  # no id in common across models
    root = write_grid(tmp_path / "sweep", GRID, START, ids_of=ids)
    res = run_report(ReportOptions([root], plots=False, bootstrap=200), console=quiet())
    rk = res.joint.ranking
    assert rk["method"].iloc[0].startswith("seeds only, unpaired (the jobs share no item ids")
    # job-level values, both seeds equal: nothing to build an interval from, so no winner is named
    s = sentence(res, "size_final")
    assert s["diff"] == pytest.approx(0.3)
    assert "(no interval)" in s["text"] and "no winner is named" in s["text"]
    assert "items paired" not in s["text"] and "seeds only, unpaired" in s["text"]  # the label says how it was formed
    assert s["winner"] is None or (isinstance(s["winner"], float) and math.isnan(s["winner"]))


def matched_items(pairs, shift: np.ndarray | None = None) -> np.ndarray:
    """Per item: the mean over matched allocations of first(c_a) − first(c_b) (minus `shift`)."""
    d = np.mean([first(a) - first(b) for a, b in pairs], axis=0)
    return d if shift is None else d - shift


def test_allocation_by_allocation_size_comparison(joint):
    """tiny-m minus tiny-s at the same reward and μ: (36−12, 30−8, 35−24, 28−20)/40 averaged = 0.40625,
    the item-level t interval of the per-item average at two-sided α/2 (the size family's entry); every
    allocation favours tiny-m."""
    res = joint[0]
    s = sentence(res, "size_matched")
    pairs = [(GRID[("tiny-m", r, mu)], GRID[("tiny-s", r, mu)]) for r in ("prm", "rule") for mu in (1, 2)]
    m, lo, hi = hand_interval(matched_items(pairs), q_matched(1 / 2))
    assert m == pytest.approx(65 / 160)
    assert (s["diff"], s["ci_lo"], s["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-9)
    assert lo > 0 and s["winner"] == "tiny-m" and s["n_pairs"] == 4 and s["n_claims"] == N_CLAIMS
    assert s["level"] == pytest.approx(1 - 0.05 / 2)
    assert "tiny-m minus tiny-s at the same reward, μ (4 allocations" in s["text"]
    assert f"averages +0.406 [{lo:+.3f}, {hi:+.3f}], items paired, tiny-m ahead in 4 of 4" in s["text"]
    assert "the larger policy tiny-m is ahead at 8e+11 FLOPs, averaged over these allocations" in s["text"]
    # gains: each side minus its own start (0.6 and 0), per item
    g = sentence(res, "size_gain_matched")
    m, lo, hi = hand_interval(matched_items(pairs, first(START["tiny-m"]) - first(START["tiny-s"])), q_matched(5 / 16))
    assert m == pytest.approx(65 / 160 - 0.6)
    assert (g["diff"], g["ci_lo"], g["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-9)
    assert lo < 0 < hi and "not separated: neither size gains more on average" in g["text"]  # a tie
    assert g["winner"] is None or (isinstance(g["winner"], float) and math.isnan(g["winner"]))


def test_allocation_by_allocation_feedback_comparison(joint):
    res = joint[0]
    for scope, models, verdict in (("tiny-s", ["tiny-s"], "prm is ahead on average"),
                                   ("tiny-m", ["tiny-m"], "not separated"),
                                   ("across sizes", ["tiny-m", "tiny-s"], "prm is ahead on average")):
        q = "feedback_matched" if scope != "across sizes" else "feedback_all_matched"
        s = sentence(res, q, scope)
        pairs = [(GRID[(m_, "rule", mu)], GRID[(m_, "prm", mu)]) for m_ in models for mu in (1, 2)]
        m, lo, hi = hand_interval(matched_items(pairs), q_matched(WEIGHTS[(q, scope)]))
        assert (s["diff"], s["ci_lo"], s["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-9), scope
        assert verdict in s["text"], s["text"]
        assert (s["winner"] == "prm") == verdict.startswith("prm"), scope


def test_the_gates_weights_by_hand(joint):
    """Every claim's weight where the graph stopped (the module docstring's walk-through)."""
    s = joint[0].joint.sentences
    s = s[s["question"] != "split"]
    got = {(q, None if q.startswith("size") else sc): w for q, sc, w in zip(s["question"], s["scope"], s["weight"])}
    assert got == pytest.approx(WEIGHTS)
    assert set(s.loc[s["winner"].notna(), "question"] + "/" + s.loc[s["winner"].notna(), "scope"].fillna("")) == {
        "size_final/", "size_matched/", "feedback/tiny-s", "feedback_matched/tiny-s", "feedback_all_matched/across sizes"}


def test_more_claims_mean_wider_intervals(tmp_path):
    """A third, smaller size adds two size pairs (four claims each) and one feedback scope (two): 20
    claims; the size family's α/2 is shared by three pairs, so each pair's allocation-by-allocation claim
    opens at α/6 — the family's share thins with the comparisons made."""
    grid = GRID | {("tiny-x", r, mu): c - 4 for (m_, r, mu), c in GRID.items() if m_ == "tiny-s"}
    root = write_grid(tmp_path / "sweep", grid, START | {"tiny-x": 0})
    res = run_report(ReportOptions([root], plots=False, bootstrap=200), console=quiet())
    s = res.joint.sentences
    sm = s[s["question"] == "size_matched"]
    assert set(zip(sm["a"], sm["b"])) == {("tiny-m", "tiny-s"), ("tiny-m", "tiny-x"), ("tiny-s", "tiny-x")}
    assert set(s["n_claims"].dropna()) == {20}
    one = sm[(sm["a"] == "tiny-m") & (sm["b"] == "tiny-s")].iloc[0]
    pairs = [(GRID[("tiny-m", r, mu)], GRID[("tiny-s", r, mu)]) for r in ("prm", "rule") for mu in (1, 2)]
    m, lo, hi = hand_interval(matched_items(pairs), q_matched(1 / 6))
    assert (one["diff"], one["ci_lo"], one["ci_hi"]) == pytest.approx((m, lo, hi), abs=1e-9)
    # tiny-s − tiny-x: four items apart in every allocation, the same items (c−4 .. c−1) for each
    sx = sm[(sm["a"] == "tiny-s") & (sm["b"] == "tiny-x")].iloc[0]
    assert sx["diff"] == pytest.approx(0.1) and "tiny-s ahead in 4 of 4" in sx["text"]


# At C/2 the smaller policy leads at every allocation by 10 items of 40; at C the grid above.
HALF = {(model, r, mu): GRID[("tiny-m", r, mu)] - 20 + (10 if model == "tiny-s" else 0) for (model, r, mu) in GRID}


def test_checkpoint_budgets_are_compared_jointly_and_the_crossing_is_found(tmp_path):
    """Jobs evaluated at C/2 and C: the joint comparison runs at 4e11 on the checkpoints (the checkpoint's
    items and iterations) and at 8e11 on the finals; allocation by allocation tiny-s leads at 4e11
    (−10 items of 40 everywhere: −0.25) and tiny-m at 8e11 (+0.406), so the larger policy overtakes
    between the two budgets; race run's end summary prints the final budget's answers."""
    root = write_grid(tmp_path / "sweep", GRID, START, half=HALF)
    res = run_report(ReportOptions([root], plots=False, bootstrap=200), console=quiet())
    s = res.joint.sentences
    sm = s[s["question"] == "size_matched"].sort_values("budget")
    assert list(sm["budget"]) == [4e11, 8e11] and list(sm["checkpoint"]) == [0.5, 1.0]
    assert list(sm["diff"]) == pytest.approx([-0.25, 65 / 160])
    assert list(sm["winner"]) == ["tiny-s", "tiny-m"]
    pairs = [(HALF[("tiny-m", r, mu)], HALF[("tiny-s", r, mu)]) for r in ("prm", "rule") for mu in (1, 2)]
    m, lo, hi = hand_interval(matched_items(pairs), q_matched(1 / 2))
    row = sm.iloc[0]
    assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((lo, hi), abs=1e-9)
    assert "budget=4e+11 (jobs at 0.5 of 8e+11)" in row["joint"]
    assert "tiny-s runs 4.0× the iterations" in row["text"]  # the checkpoint's iterations (20 vs 5)
    over = [a for a in res.joint.across if a["question"] == "overtake_matched"]
    assert len(over) == 1 and (over[0]["overtake_lo"], over[0]["overtake_hi"]) == (4e11, 8e11)
    lines = [p["text"] for p in res.joint.per_budget]
    assert len(lines) == 2 and "tiny-s ahead" in lines[0] and "tiny-m ahead" in lines[1]

    from race_cli.report.command import print_report_top

    said: list[str] = []
    print_report_top(root, said.append)
    joint_lines = [" ".join(x.split()) for x in said if x.startswith("joint comparison, ")]  # folded at the width
    assert len(joint_lines) == 1 and "budget=8e+11" in joint_lines[0]
    assert "size, allocation by allocation tiny-m − tiny-s +0.406" in joint_lines[0]


def test_a_budget_run_in_full_is_not_mixed_with_checkpoints_at_it(tmp_path):
    """Jobs at 8e11 with a C/2 checkpoint and jobs whose whole budget is 4e11: at 4e11 only the latter."""
    root = write_grid(tmp_path / "sweep", GRID, START, half=HALF)
    write_grid(root, HALF, START, budget=4e11)
    res = run_report(ReportOptions([root], plots=False, bootstrap=200), console=quiet())
    rk = res.joint.ranking
    at4 = rk[rk["budget"] == 4e11]
    assert len(at4) == 8 and set(at4["checkpoint"]) == {1.0} and set(at4["n_seeds"]) == {2}


def test_a_config_section_is_what_the_whole_parse_says(tmp_path):
    """model_sizes reads the model block of one config per model alone (folder.job_config_section): for a
    config as race plan writes it, and for every text where the block alone could read otherwise, the
    answer is the whole parse's."""
    import yaml
    from omegaconf import OmegaConf

    from race_cli import folder
    from race_cli.config.compose import compose

    planned = yaml.dump(OmegaConf.to_container(compose([]), resolve=True), Dumper=yaml.SafeDumper, sort_keys=False)
    texts = {
        "planned": planned,
        "twice": planned + "model:\n  arch: {hidden_size: 8}\n",  # the last one wins
        "alias": "base: &a\n  hidden_size: 8\nmodel:\n  arch: *a\n",  # the block alone has no anchor
        "flow": "{model: {arch: {hidden_size: 8}}, seed: 0}\n",
        "inline": "model: {arch: {hidden_size: 8}}\nseed: 0\n",
        "last": "seed: 0\nmodel:\n  arch:\n    hidden_size: 8\n\n  # a comment\n  name: m\n",
        "list": "model:\n- a\n- b\nseed: 1\n",
        "two documents": "model:\n  name: a\n---\nmodel:\n  name: b\n",
        "none": "seed: 0\n",
        "not yaml": "model:\n  arch: [unclosed\n",
    }
    for name, text in texts.items():
        cfg = tmp_path / name / ".hydra" / "config.yaml"
        cfg.parent.mkdir(parents=True)
        cfg.write_text(text, encoding="utf-8")
        assert folder.job_config_section(tmp_path / name, "model") == folder.job_config_data(tmp_path / name).get("model"), name
    assert folder.job_config_section(tmp_path / "planned", "model")["arch"]["hidden_size"] > 0
    assert folder.job_config_section(tmp_path / "twice", "model") == {"arch": {"hidden_size": 8}}
    assert folder.job_config_section(tmp_path / "missing", "model") is None
