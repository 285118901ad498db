"""`race validate` and the validation report, on synthetic pilot/validation pairs with a known outcome.

The pilot (tests/report_fixtures.py) has five regimes whose true accuracies are 0.1 apart, so
its order is certain: G=8 μ=2 (0.70) > G=4 μ=2 (0.60) > G=8 μ=1 (0.50) > G=4 μ=4 (0.40) >
G=16 μ=1 (0.30). `race validate --top 3 --control lowest` therefore picks the first three plus
G=16 μ=1 as the control; the default control is the runner-up, G=4 μ=2. The validation's outcome is then written into the planned job folders with chosen true
accuracies (0.1 or more apart), which fixes every verdict and rank correlation by hand: with 600
items, 0/1 scores and 2 seeds, the standard error of a best − control gap is about 0.02.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path

import numpy as np
import pytest

from race_cli.errors import RaceError
from race_cli.io import dumps
from race_cli.report import validation as V
from race_cli.report.build import ReportOptions
from race_cli.report.command import run_report
from race_cli.plan.validate import build_validation, validate_main
from report_fixtures import DEFAULT_CONDITION, Regime, build_sweep, simulate_scores, write_job

REPO = Path(__file__).resolve().parents[1]
RULE = DEFAULT_CONDITION  # tiny-s, 1e12 FLOPs, rule reward, arithmetic
PRM = dict(DEFAULT_CONDITION, reward="prm")
REGIMES = {"G=16 μ=1": Regime(16, 1, 0.08), "G=8 μ=1": Regime(8, 1, 0.14), "G=8 μ=2": Regime(8, 2, 0.25),
           "G=4 μ=2": Regime(4, 2, 0.40), "G=4 μ=4": Regime(4, 4, 0.60)}
PILOT_TRUTH = {0.25: 0.70, 0.40: 0.60, 0.14: 0.50, 0.60: 0.40, 0.08: 0.30}  # p -> accuracy
NOISE = dict(n_items=600, item_sd=0.1, seed_sd=0.02)


def _console():
    from rich.console import Console

    return Console(file=StringIO(), width=200)


def make_pilot(root: Path, conditions=(RULE,), seeds1: bool = False) -> Path:
    """A finished pilot with its report written (report/report.json), as `race report` leaves it
    (seeds1: one seed per regime)."""
    pilot = build_sweep(root, acc=lambda p, cond: PILOT_TRUTH[p], conditions=list(conditions),
                        **(dict(seeds=(0,)) if seeds1 else {}), **NOISE)
    run_report(ReportOptions([pilot], plots=False, bootstrap=300), console=_console())
    return pilot


def run_validation(val: Path, truth: dict[str, dict[str, float]], only: set[str] | None = None,
                   rng_seed: int = 5, skip: frozenset[str] = frozenset()) -> None:
    """Stand in for `race run`: write each planned job's results with the given true accuracies.

    truth: pilot condition's reward -> {regime label: accuracy}. Jobs of conditions not in
    `only` (when given), and jobs of the regimes in `skip`, stay pending.
    """
    prov = json.loads((val / V.PROVENANCE).read_text())
    rng = np.random.default_rng(rng_seed)
    for cond in prov["conditions"]:
        reward = cond["values"]["reward"]
        if only is not None and reward not in only:
            continue
        vcond = dict(cond["values"], budget_flops=cond["budget"])
        regs = [v["regime"] for v in cond["validated"]]
        n_seeds = len(cond["validated"][0]["job_ids"])
        which, scores = simulate_scores([truth[reward][r] for r in regs], n_seeds, rng=rng, **NOISE)
        jids = [j for v in cond["validated"] for j in v["job_ids"]]  # regime-major, like `which`
        for jid, r, s in zip(jids, which, scores):
            if regs[r] in skip:
                continue
            tmp = val / "tmp-jobs"
            made = write_job(tmp, vcond, REGIMES[regs[r]], 0, {"arithmetic": s}, rng,  # the fixtures' target
                             start={"arithmetic": np.full_like(s, 0.30)})  # every job starts at 0.30
            for f in (tmp / made).iterdir():
                if f.name != ".hydra":
                    shutil.move(str(f), val / "jobs" / jid / f.name)
            shutil.rmtree(tmp)


@pytest.fixture(scope="module")
def pilot(tmp_path_factory) -> Path:
    return make_pilot(tmp_path_factory.mktemp("p") / "pilot", conditions=(RULE, PRM))


# --- the pure parts -------------------------------------------------------------------------


def test_spearman_by_hand():
    from race_cli.stats import validation_power as VP

    # no ties: ρ = 1 - 6Σd²/(n(n²-1)); one swapped pair of 4: Σd² = 2 -> 1 - 12/60 = 0.8
    assert VP.spearman(np.array([1, 2, 3, 4]), np.array([10, 30, 20, 40])) == pytest.approx(0.8)
    assert VP.spearman(np.array([1, 2, 3]), np.array([3, 2, 1])) == pytest.approx(-1.0)
    # ties share the average rank: obs ranks (1.5, 1.5, 3) against (1, 2, 3):
    # centred (-.5, -.5, 1)·(-1, 0, 1) = 1.5, norms √1.5·√2 -> 1.5/√3 = 0.866
    assert VP.spearman(np.array([1, 2, 3]), np.array([5, 5, 9])) == pytest.approx(1.5 / np.sqrt(3))
    rows = VP.spearman(np.array([1, 2, 3, 4]), np.array([[1, 2, 3, 4], [4, 3, 2, 1], [7, 7, 7, 7]]))
    assert rows[:2] == pytest.approx([1.0, -1.0]) and np.isnan(rows[2])  # constant: no order


def test_verdict_rules():
    # the interval of best − control (positive: the pilot's best is better)
    assert V.verdict(0.01, 0.09) == V.CONFIRMED
    assert V.verdict(-0.01, 0.09) == V.NOT_SEPARATED
    assert V.verdict(-0.09, -0.01) == V.REVERSED
    assert V.verdict(0.01, 0.09, margin=0.02) == V.NOT_SEPARATED  # above zero, not above the margin
    assert V.verdict(0.03, 0.09, margin=0.02) == V.CONFIRMED
    assert V.verdict(float("nan"), float("nan")) == V.PENDING


def test_provenance_round_trip(tmp_path):
    prov = {"target": "accuracy", "pilot": {"sweep": "/x"},
            "conditions": [{"condition": "c", "x": [1.5, None], "recommendation": {"best_regime": "G=8"},
                            "predicted_order": [{"regime": "G=8"}],
                            "validated": [{"regime": "G=8", "role": "pilot best"}]}],
            "jobs": {"G8_s1": {"condition": "c", "regime": "G=8", "role": "pilot best"}}}
    V.write_provenance(tmp_path, prov)
    assert V.read_provenance(tmp_path) == {"kind": V.KIND, "version": V.VERSION, **prov}
    assert not list(tmp_path.glob(".*.tmp"))  # the atomic write left no temp file
    assert V.read_provenance(tmp_path / "nothing-here") is None  # an ordinary sweep
    (tmp_path / V.PROVENANCE).write_text('{"kind": "race-validation", "conditions": [')
    with pytest.raises(RaceError, match="unreadable"):
        V.read_provenance(tmp_path)
    (tmp_path / V.PROVENANCE).write_text('{"kind": "something-else"}')
    with pytest.raises(RaceError, match="not a race validation provenance"):
        V.read_provenance(tmp_path)


# --- race validate ---------------------------------------------------------------------------


def test_validate_writes_the_chosen_regimes_at_the_new_budget_with_provenance(pilot, tmp_path, capsys):
    out = validate_main(pilot, scale=2, seeds=2, top=3, out=tmp_path / "val", control="lowest")
    shown = capsys.readouterr()
    assert "race plan: grid 'validate', 16 jobs" in shown.out  # previewed like race plan
    assert "wrote" in shown.err
    prov = V.read_provenance(out)
    # the same provenance comes back from disk as build_validation made it (NaN -> null)
    _, made, _, _ = build_validation(pilot, scale=2, seeds=2, top=3, control="lowest")
    assert {k: v for k, v in prov.items() if k not in ("created", "kind", "version")} == \
        {k: v for k, v in json.loads(dumps(made)).items() if k != "created"}
    assert prov["pilot"]["sweep"] == str(pilot.resolve()) and prov["target"] == "arithmetic"
    for cond in prov["conditions"]:
        assert [(v["regime"], v["role"]) for v in cond["validated"]] == [
            ("G=8 μ=2", "pilot best"), ("G=4 μ=2", "top K"), ("G=8 μ=1", "top K"), ("G=16 μ=1", "control")]
        assert [r["regime"] for r in cond["predicted_order"]] == ["G=8 μ=2", "G=4 μ=2", "G=8 μ=1", "G=4 μ=4",
                                                                 "G=16 μ=1"]
        rec = cond["recommendation"]
        assert rec["best_regime"] == "G=8 μ=2" and rec["best_ci_lo"] < 0.70 < rec["best_ci_hi"]
        assert cond["budget"] == 2e12
        # the pilot's gain over its start (0.30 in the fixture) per FLOP: 0.40 / (0.90..0.99 × 1e12)
        assert 0.36 / 0.99e12 < cond["predicted_order"][0]["gain_per_flop"] < 0.44 / 0.90e12
    plan = {r["job_id"]: r for r in json.loads((out / "plan.json").read_text())}
    assert len(plan) == 16 and set(prov["jobs"]) == set(plan)  # 2 conditions × 4 regimes × 2 seeds
    for jid, row in plan.items():
        assert row["seed"] in (3, 4)  # fresh seeds: the pilot used 0, 1, 2
        assert row["budget_flops"] == 2e12
        # the free knob T solved as race plan does: the largest T whose planned total fits the budget
        per_it = row["planned_flops_total"] / row["iterations"]
        assert row["planned_flops_total"] <= 2e12 < per_it * (row["iterations"] + 1)
        cfg = (out / "jobs" / jid / ".hydra" / "config.yaml").read_text()
        assert "flops: 2000000000000.0" in cfg
        assert json.loads((out / "jobs" / jid / "status.json").read_text())["state"] == "pending"
    tag = prov["jobs"]
    g4 = [j for j in plan if tag[j]["regime"] == "G=4 μ=2" and "reward=prm task=arithmetic" in tag[j]["condition"]]
    assert {(plan[j]["group_size"], plan[j]["updates_per_batch"], plan[j]["reward"]) for j in g4} == {(4, 2, "prm")}
    # `race run --sweep-dir` reads it like any sweep
    from race_cli.folder import read_plan_rows

    assert set(read_plan_rows(out)) == set(plan)
    # the same command again finds it unchanged and keeps the stored prediction
    before = (out / V.PROVENANCE).read_text()
    validate_main(pilot, scale=2, seeds=2, top=3, out=out, control="lowest")
    assert "unchanged" in capsys.readouterr().err and (out / V.PROVENANCE).read_text() == before


def test_default_selection_is_the_pilot_best_plus_the_control(pilot):
    plan, prov, picks, _ = build_validation(pilot, budget=3e12, seeds=1)
    assert prov["settings"]["selection"] == "pilot best" and prov["settings"]["control"] == "runner-up"
    for cond in prov["conditions"]:  # the control: the pilot's runner-up, its closest rival
        assert [(v["regime"], v["role"]) for v in cond["validated"]] == [("G=8 μ=2", "pilot best"),
                                                                         ("G=4 μ=2", "control")]
    _, low, _, _ = build_validation(pilot, budget=3e12, seeds=1, control="lowest")  # the earlier behaviour
    assert {tuple((v["regime"], v["role"]) for v in c["validated"]) for c in low["conditions"]} == {
        (("G=8 μ=2", "pilot best"), ("G=16 μ=1", "control"))}
    assert {j.config["budget"]["flops"] for j in plan.jobs} == {3e12}
    assert {j.config["seed"] for j in plan.jobs} == {3}
    # evaluation: the validated target only, at the pilot's budget fractions (eval.at; no eval.every)
    assert {tuple(j.config["eval"]["targets"]) for j in plan.jobs} == {("arithmetic",)}
    assert {j.config["eval"]["every"] for j in plan.jobs} == {None}
    assert {tuple(j.config["eval"]["at"]) for j in plan.jobs} == {(0.0, 0.125, 0.25, 0.5, 0.75, 1.0)}


def test_validation_evaluates_the_validated_target_at_the_pilots_fractions_of_the_run():
    from race_cli.plan.validate import validation_eval

    pilot = ["lora.enabled=false", "eval.targets=['arithmetic', 'arithmetic-hard']", "eval.every=100",
             "eval.max_items_by_target={gsm8k: 50}", "model=tiny-s"]
    # the default grid at --scale 3: evaluations every 300 iterations instead of 100, one target
    assert validation_eval(pilot, "arithmetic-hard", 3.0) == ["lora.enabled=false", "model=tiny-s",
                                                               "eval.targets=[arithmetic-hard]", "eval.every=300"]
    # no eval.every in the pilot's overrides: none in the validation (eval.at's fractions need no scaling)
    assert validation_eval(["model=tiny-s", "eval.at=[0,0.5,1]"], "gsm8k", 2.5) == [
        "model=tiny-s", "eval.at=[0,0.5,1]", "eval.targets=[gsm8k]"]
    assert validation_eval(["eval.every=7"], "gsm8k", 0.5)[-1] == "eval.every=4"


def test_tied_adds_every_regime_the_pilot_could_not_tell_from_its_best(tmp_path):
    # a pilot whose two best regimes are 0.01 apart: the report cannot tell them apart
    truth = {**PILOT_TRUTH, 0.40: 0.695}
    p = build_sweep(tmp_path / "p", acc=lambda p, cond: truth[p], conditions=[RULE], **NOISE)
    run_report(ReportOptions([p], plots=False, bootstrap=300), console=_console())
    _, prov, _, _ = build_validation(p, scale=2, seeds=1, tied=True, control="lowest")
    (cond,) = prov["conditions"]
    listed = [v.split(" (")[0].strip() for v in cond["recommendation"]["validate"].split(";")]
    roles = [(v["regime"], v["role"]) for v in cond["validated"]]
    assert len(listed) >= 2 and {"G=8 μ=2", "G=4 μ=2"} <= set(listed)
    assert roles[0][1] == "pilot best" and roles[-1] == ("G=16 μ=1", "control")
    assert [r for r, _ in roles[:-1]] == [listed[0]] + [x for x in listed if x != listed[0]]
    _, prov_r, _, _ = build_validation(p, scale=2, seeds=1, tied=True, control="runner-up")
    # the runner-up is among the ≈ best: it is validated once, as the control
    (c,) = prov_r["conditions"]
    second = c["predicted_order"][1]["regime"]
    assert second in listed and [v["role"] for v in c["validated"] if v["regime"] == second] == ["control"]
    assert [v["role"] for v in c["validated"]].count("control") == 1
    assert {role for _, role in roles[1:-1]} == {"≈ best"}
    assert prov["settings"]["selection"] == "pilot best and its ≈ best"
    _, prov1, _, _ = build_validation(p, scale=2, seeds=1, control="lowest")  # without --tied: the best alone
    assert [v["role"] for v in prov1["conditions"][0]["validated"]] == ["pilot best", "control"]


# --- the validation report: known outcomes --------------------------------------------------


def test_report_of_a_validation_gives_the_known_verdicts_and_correlations(pilot, tmp_path):
    val = validate_main(pilot, scale=2, seeds=2, top=3, out=tmp_path / "val", control="lowest")
    # rule: the pilot's order holds exactly (ranks 1 2 3 4 -> ρ = 1); best − control = 0.65 − 0.35
    # = 0.30, ~15 standard errors: confirmed. prm: the pilot's best is last: observed ranks of
    # (G8μ2, G4μ2, G8μ1, G16μ1) = (4, 1, 3, 2), d = (3, -1, 0, -2), Σd² = 14,
    # ρ = 1 - 6·14/(4·15) = -0.4; best − control = 0.35 − 0.55 = -0.20: reversed.
    truth = {"rule": {"G=8 μ=2": 0.65, "G=4 μ=2": 0.55, "G=8 μ=1": 0.45, "G=16 μ=1": 0.35},
             "prm": {"G=8 μ=2": 0.35, "G=4 μ=2": 0.65, "G=8 μ=1": 0.45, "G=16 μ=1": 0.55}}
    run_validation(val, truth)
    console = _console()
    res = run_report(ReportOptions([val], plots=False, bootstrap=400), console=console).validation
    by = {c["condition"].split("reward=")[1].split()[0]: c for c in res.conditions}
    rule, prm = by["rule"], by["prm"]
    assert rule["verdict"] == V.CONFIRMED and rule["val_best"] == "G=8 μ=2"
    assert rule["diff"] == pytest.approx(0.30, abs=0.05) and rule["diff_lo"] > 0.15 and rule["one_sided_conf"] > 0.999
    assert rule["spearman"] == pytest.approx(1.0) and rule["spearman_lo"] == pytest.approx(1.0)
    assert prm["verdict"] == V.REVERSED and prm["val_best"] == "G=4 μ=2"
    assert prm["diff"] == pytest.approx(-0.20, abs=0.05) and prm["diff_hi"] < 0 and prm["one_sided_conf"] < 0.01
    assert prm["spearman"] == pytest.approx(-0.4)
    assert prm["spearman_lo"] <= -0.4 <= prm["spearman_hi"]
    # a scale-up (2e12 vs the pilot's 1e12): absolute gains at both budgets and the marginal gain
    # per FLOP between them: gain 0.65 − 0.30 = 0.35 here against the pilot's 0.70 − 0.30 = 0.40,
    # over ~1e12 more FLOPs: about −0.05 / 1e12
    assert rule["scaled"] and rule["best_val_gain"] == pytest.approx(0.35, abs=0.03)
    assert rule["best_pilot_gain"] == pytest.approx(0.40, abs=0.03)
    assert -0.1 / 0.8e12 < rule["marginal_gain_per_flop"] < 0
    assert rule["sentence"].startswith("Confirmed at 2e+12 FLOPs: G=8 μ=2")
    assert "at the pilot's 1e+12 FLOPs → +0.3" in rule["sentence"] and "marginal gain per FLOP" in rule["sentence"]
    assert prm["sentence"].startswith("Reversed at 2e+12 FLOPs: G=8 μ=2")
    assert "ρ = +1.00 [1.00, 1.00] over 4 regimes" in rule["sentence"]
    assert res.summary.startswith("The pilot's call was confirmed in 1 of 2 condition(s) (best − control "
                                     "interval above zero); not separated in 0, reversed in 1")
    assert "diagnostic" in res.summary
    text = console.file.getvalue()
    assert "was the pilot's call confirmed?" in text and "Reversed at 2e+12 FLOPs" in text
    out = val / "report"
    md = (out / "validation.md").read_text()
    assert "Confirmed at 2e+12" in md and "The pilot's call was confirmed in 1 of 2" in md
    regs = json.loads((out / "validation.json").read_text())["regimes"]
    assert len(regs) == 8 and {r["role"] for r in regs} == {"pilot best", "top K", "control"}
    assert (out / "validation.csv").read_text().count("\n") == 3  # header + 2 conditions


def test_a_reversed_order_and_a_pending_condition(pilot, tmp_path):
    val = validate_main(pilot, scale=2, seeds=2, top=3, out=tmp_path / "val", control="lowest")
    # rule reversed: the control comes out best, ρ = -1; prm's jobs never ran: pending.
    run_validation(val, {"rule": {"G=8 μ=2": 0.35, "G=4 μ=2": 0.45, "G=8 μ=1": 0.55, "G=16 μ=1": 0.65}},
                   only={"rule"})
    res = run_report(ReportOptions([val], plots=False, bootstrap=300), console=_console()).validation
    by = {c["condition"].split("reward=")[1].split()[0]: c for c in res.conditions}
    rule, prm = by["rule"], by["prm"]
    assert rule["verdict"] == V.REVERSED and rule["val_best"] == "G=16 μ=1"
    assert rule["spearman"] == pytest.approx(-1.0)
    assert prm["verdict"] == V.PENDING and prm["n_done"] == 0 and prm["n_jobs"] == 8
    assert res.summary.startswith("The pilot's call was confirmed in 0 of 1 condition(s)")
    assert "1 condition(s) pending" in res.summary


def test_an_equal_best_and_control_are_not_separated_and_do_not_count(tmp_path):
    pilot = make_pilot(tmp_path / "pilot")
    from race_cli.plan.validate import default_out

    assert default_out(pilot, None, None, replicate=True).name == "pilot-validate-rep"
    val = validate_main(pilot, replicate=True, seeds=2, out=tmp_path / "val", control="lowest")
    # best and control truly equal: the interval of their gap (se ≈ 0.02) straddles zero
    run_validation(val, {"rule": {"G=8 μ=2": 0.45, "G=16 μ=1": 0.45}})
    res = run_report(ReportOptions([val], plots=False, bootstrap=300), console=_console()).validation
    (c,) = res.conditions
    assert c["verdict"] == V.NOT_SEPARATED and c["diff_lo"] < 0 < c["diff_hi"]
    assert 0.05 < c["one_sided_conf"] < 0.95
    assert not c["scaled"] and c["budget"] == 1e12  # the pilot's own budget
    assert "gain over the start +0.385 in the pilot, +0.1" in c["sentence"]  # 0.70 vs 0.45 − 0.30
    assert np.isnan(c["spearman"]) and "ρ" not in c["sentence"]  # two regimes: no rank correlation
    assert res.summary.startswith("The pilot's call was confirmed in 0 of 1 condition(s)")
    assert "not separated in 1" in res.summary


def test_a_margin_fixed_in_advance_must_be_cleared(tmp_path):
    # best − control = 0.10 truly (se ≈ 0.02): confirmed above zero, not above a margin of 0.2
    pilot = make_pilot(tmp_path / "pilot")
    res = {}
    for margin in (0.0, 0.2):
        val = validate_main(pilot, replicate=True, seeds=2, margin=margin, out=tmp_path / f"val{margin}",
                            control="lowest")
        run_validation(val, {"rule": {"G=8 μ=2": 0.55, "G=16 μ=1": 0.45}})
        res[margin] = run_report(ReportOptions([val], plots=False, bootstrap=300), console=_console()).validation
    assert res[0.0].conditions[0]["verdict"] == V.CONFIRMED
    assert res[0.2].conditions[0]["verdict"] == V.NOT_SEPARATED
    assert "above the margin 0.2" in res[0.2].summary


def test_conditions_where_nothing_beat_its_start_are_skipped_unless_asked(tmp_path):
    # the prm condition starts at 0.80, above every regime: nothing beats its start there
    pilot = build_sweep(tmp_path / "pilot", acc=lambda p, cond: PILOT_TRUTH[p], conditions=[RULE, PRM],
                        initial=lambda cond, t: 0.8 if cond["reward"] == "prm" else 0.3, **NOISE)
    run_report(ReportOptions([pilot], plots=False, bootstrap=300), console=_console())
    said = []
    validate_main(pilot, replicate=True, seeds=1, out=tmp_path / "val", say=said.append)
    prov = json.loads((tmp_path / "val" / V.PROVENANCE).read_text())
    assert [c["values"]["reward"] for c in prov["conditions"]] == ["rule"]
    assert len(prov["skipped"]) == 1 and "reward=prm" in prov["skipped"][0]
    assert any("no regime beat its start" in s and "--unlearned" in s for s in said)
    validate_main(pilot, replicate=True, seeds=1, unlearned=True, out=tmp_path / "val2", say=said.append)
    prov = json.loads((tmp_path / "val2" / V.PROVENANCE).read_text())
    assert sorted(c["values"]["reward"] for c in prov["conditions"]) == ["prm", "rule"]


def test_one_finished_regime_is_not_yet_a_verdict(tmp_path):
    pilot = make_pilot(tmp_path / "pilot")
    val = validate_main(pilot, scale=2, seeds=2, out=tmp_path / "val", control="lowest")
    run_validation(val, {"rule": {"G=8 μ=2": 0.60, "G=16 μ=1": 0.30}}, skip=frozenset({"G=16 μ=1"}))
    res = run_report(ReportOptions([val], plots=False, bootstrap=200), console=_console()).validation
    (c,) = res.conditions
    assert c["verdict"] == V.PENDING and c["n_done"] == 2 and c["n_jobs"] == 4
    assert c["sentence"].startswith("Pending: only G=8 μ=2 has finished validation jobs (2 of 4 jobs done)")
    assert res.summary.startswith("No condition can be judged yet (1 pending)")


def test_gain_pairs_each_item_with_its_start_when_jobs_keep_both(tmp_path):
    pilot = make_pilot(tmp_path / "pilot")
    val = validate_main(pilot, scale=2, seeds=2, out=tmp_path / "val", control="lowest")
    run_validation(val, {"rule": {"G=8 μ=2": 0.60, "G=16 μ=1": 0.30}})
    # every item wrong at the start: the per-item gain is the final score, so gain = final accuracy
    for summary in val.glob("jobs/*/summary.json"):
        s = json.loads(summary.read_text())
        ids = s["eval_items"]["arithmetic"]["ids"]
        s["eval_initial"] = {"arithmetic": 0.0}
        s["eval_items_initial"] = {"arithmetic": {"ids": ids, "scores": [0] * len(ids)}}
        summary.write_text(json.dumps(s))
    res = run_report(ReportOptions([val], plots=False, bootstrap=300), console=_console()).validation
    (c,) = res.conditions
    assert c["best_val_gain"] == pytest.approx(c["best_val_mean"])
    regs = res.regimes.set_index("regime")
    assert regs.loc["G=8 μ=2", "val_gain_ci_lo"] == pytest.approx(regs.loc["G=8 μ=2", "val_ci_lo"], abs=0.02)


def test_an_ordinary_sweep_has_no_validation_section(pilot):
    assert run_report(ReportOptions([pilot], plots=False, bootstrap=200), console=_console()).validation is None


# --- refusals: one clear message, exit 2, nothing written -------------------------------------


def _no_report(t: Path) -> Path:
    return build_sweep(t / "p", regimes=[Regime(4, 1, 0.3)], seeds=(0,), n_items=10)


def _no_recommendation(t: Path) -> Path:
    p = make_pilot(t / "p")
    doc = json.loads((p / "report" / "report.json").read_text())
    doc["recommendations"] = []
    (p / "report" / "report.json").write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize("make, kw, words", [
    (_no_report, {}, "has no report"),
    (_no_recommendation, {}, "has no recommendation"),
    (lambda t: t, {}, "not a sweep folder"),
    (make_pilot, {"budget": 1e12, "scale": 2.0}, "--budget and --scale both given"),
    (make_pilot, {"replicate": True, "scale": 2.0}, "--replicate with --budget or --scale"),
    (make_pilot, {"margin": -0.1}, "--margin -0.1"),
    (make_pilot, {"seeds": 0}, "--seeds 0"),
    (make_pilot, {"top": 2, "tied": True}, "--top and --tied both given"),
    (make_pilot, {"target": "math500"}, "no recommendation for target 'math500'"),
    (make_pilot, {"control": "best"}, "--control best"),
    (make_pilot, {"power": 1.2}, "--power 1.2"),
    (make_pilot, {"gap": -0.01}, "--gap -0.01"),
    (make_pilot, {"max_seeds": 1}, "--max-seeds 1"),
    # one seed per regime: nothing is "> start" either, so --unlearned is needed to get this far
    (lambda t: make_pilot(t / "p1", seeds1=True), {"unlearned": True}, "cannot size the validation by power"),
    (lambda t: make_pilot(t / "p", conditions=(RULE, dict(RULE, budget_flops=2e12))), {"budget": 4e12},
     "ran at several budgets"),
])
def test_refusals(tmp_path, make, kw, words):
    pilot = make(tmp_path / "in")
    out = tmp_path / "val"
    with pytest.raises(RaceError) as e:
        validate_main(pilot, out=out, **kw)
    assert words in str(e.value)
    assert not out.exists() and not list(tmp_path.glob(".val.*"))


def test_a_folder_holding_another_plan_is_refused_and_kept(pilot, tmp_path, capsys):
    out = validate_main(pilot, scale=2, seeds=1, out=tmp_path / "val")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))
    with pytest.raises(RaceError, match="already holds a different plan"):
        validate_main(pilot, scale=2, seeds=2, out=out)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_cli_refuses_with_exit_2_and_validates_without_torch(tmp_path):
    bare = _no_report(tmp_path)
    r = subprocess.run([sys.executable, "-m", "race_cli", "validate", str(bare)], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "has no report" in r.stderr and f"race report {bare}" in r.stderr
    pilot = make_pilot(tmp_path / "pilot")
    code = ("import sys; from race_cli.cli import app; from typer.testing import CliRunner; "
            f"r = CliRunner().invoke(app, ['validate', {str(pilot)!r}, '--scale', '2', '--seeds', '1', "
            f"'--out', {str(tmp_path / 'v')!r}]); "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'matplotlib') if m in sys.modules]; "
            "print('EXIT', r.exit_code, 'HEAVY', heavy); print(r.output[-2000:])")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert "EXIT 0 HEAVY []" in r.stdout, r.stdout + r.stderr
    assert (tmp_path / "v" / V.PROVENANCE).is_file()
    r = subprocess.run([sys.executable, "-m", "race_cli", "validate", str(pilot), "--dry-run"], cwd=REPO,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "dry run: nothing written" in r.stderr
    assert not any(p.name.startswith("pilot-validate") for p in tmp_path.iterdir())


def test_top_k_that_includes_the_lowest_ranked_regime_keeps_it_as_the_control():
    """--top 3 of 3 regimes validates all three; the lowest-ranked is still the control (the earlier
    code called it 'top K', so the validation had no control and every verdict stayed pending)."""
    from race_cli.plan.validate import choose_regimes

    ranking = [{"regime": "μ=1", "rank": 1, "mean": 0.52, "p_best": 0.8},
               {"regime": "μ=2", "rank": 2, "mean": 0.48, "p_best": 0.2},
               {"regime": "μ=4", "rank": 3, "mean": 0.39, "p_best": 0.0}]
    rec = {"best_regime": "μ=1"}
    low = dict(control="lowest")
    assert choose_regimes(ranking, rec, top=3, **low) == [("μ=1", "pilot best"), ("μ=2", "top K"), ("μ=4", "control")]
    assert choose_regimes(ranking, rec, top=2, **low) == [("μ=1", "pilot best"), ("μ=2", "top K"), ("μ=4", "control")]
    assert choose_regimes(ranking, rec, top=None, **low) == [("μ=1", "pilot best"), ("μ=4", "control")]
    # the default control: the runner-up, the control even when --top K takes it as well
    assert choose_regimes(ranking, rec, top=None) == [("μ=1", "pilot best"), ("μ=2", "control")]
    assert choose_regimes(ranking, rec, top=3) == [("μ=1", "pilot best"), ("μ=2", "control"), ("μ=4", "top K")]
    assert choose_regimes(ranking[:1], rec, top=None) == [("μ=1", "pilot best")]  # no rival: no control


def test_a_fresh_eval_seed_draws_other_items_under_other_ids():
    """A validation evaluates on fresh items (another task.eval_seed): none of its questions is one of the
    pilot's, and its ids differ, so a report over both sweeps cannot pair item i of one set with item i of
    the other (ids are positions in the set). The default eval seed keeps the ids earlier sweeps wrote."""
    from race_cli.tasks.arithmetic import DEFAULT_EVAL_SEED, ArithmeticTask

    pilot, fresh = ArithmeticTask(), ArithmeticTask(eval_seed=DEFAULT_EVAL_SEED + 1)
    assert pilot.eval_items()[0].id == "arith-eval-0" and fresh.eval_items()[0].id == "arith-eval-e1235-0"
    assert not {i.question for i in pilot.eval_items()} & {i.question for i in fresh.eval_items()}
    assert not {i.id for i in pilot.eval_items()} & {i.id for i in fresh.eval_items()}
    hard, fresh_hard = pilot.harder().eval_items(), fresh.harder().eval_items()
    assert hard[0].id == "arith-hard-0" and fresh_hard[0].id == "arith-hard-e1235-0"
    assert not {i.question for i in hard} & {i.question for i in fresh_hard}
    # the training stream of a job never holds one of its own evaluation questions, fresh or not
    assert not {i.question for i in ArithmeticTask(eval_seed=1235, num_train=2000).train_items()} & \
        {i.question for i in fresh.eval_items()}


# --- sizing the validation by power, against the runner-up, on fresh items ------------------------


def test_the_tests_power_by_hand_and_the_fewest_seeds_that_reach_it():
    from scipy.stats import nct, t

    from race_cli.stats import validation_power as VP
    from race_cli.stats.variance import Parts

    # the seed part alone (no items): the report's interval is a t interval at the seed df, so the chance
    # that its lower end clears zero at a true gap Δ is the noncentral t's: P(T_{6, Δ/se} > t_{0.975, 6})
    p = Parts(np.zeros(1), np.zeros(1), np.array([0.01 ** 2]), np.inf, np.inf, np.array([6.0]))
    lo, hi = VP.confirm_interval(0.03, p)
    assert lo[0] == pytest.approx(0.03 - t.ppf(0.975, 6) * 0.01) and hi[0] == pytest.approx(0.03 + t.ppf(0.975, 6) * 0.01)
    assert VP.confirm_power(0.03, p, n_sim=100_000) == pytest.approx(nct.sf(t.ppf(0.975, 6), 6, 3.0), abs=0.005)  # 0.707
    assert VP.confidence_level(0.03, p) == pytest.approx(t.cdf(3.0, 6), abs=1e-3)  # 1 − p, not P(best better)
    assert VP.confidence_level(-0.01, p) == pytest.approx(t.cdf(-1.0, 6), abs=1e-3)
    # planned parts, worked by hand: 400 items, residual 0.2, interaction 0.01, job-mean variances 4e-4:
    # n = 4 seeds -> item (0.01 + 2·0.2/4)/400 = 2.75e-4, resid 2·0.2/(4·400) = 2.5e-4, seed 8e-4/4 = 2e-4
    pp = VP.PairParts(item_var=0.01, seed_var=(4e-4, 4e-4), resid_var=0.2, n_items=400)
    q = VP.planned_parts(pp, 4)
    assert (q.item[0], q.resid[0], q.seed[0]) == pytest.approx((2.75e-4, 2.5e-4, 2e-4))
    # seed df: the pool's 2·3 = 6 combined with the heterogeneity prior, as stats/variance.moderate gives the
    # test when the spreads agree (d0 = inf): 1/(1/6 + 1/HETERO_DF) (5.1 at 34 df, 4 at 12)
    from race_cli.stats.variance import HETERO_DF

    assert q.df_seed[0] == pytest.approx(1 / (1 / 6 + 1 / HETERO_DF)) and q.df_item == 399 and q.df_resid == 2 * 3 * 399
    plan = VP.seeds_for_power(lambda n: VP.planned_parts(pp, n), 0.04)
    powers = [VP.confirm_power(0.04, VP.planned_parts(pp, n)) for n in range(2, 9)]
    first = next(n for n, pw in zip(range(2, 9), powers) if pw >= 0.8)
    assert plan.seeds == first and not plan.capped and plan.power_at_gap >= 0.8 > powers[first - 3]
    assert plan.detectable <= 0.04  # the seeds confirm the gap they were sized for
    capped = VP.seeds_for_power(lambda n: VP.planned_parts(pp, n), 0.005, max_seeds=5)
    assert capped.seeds == 5 and capped.capped and capped.detectable > 0.005


def test_the_gap_to_detect_is_shrunk_for_the_winners_curse_by_hand():
    from race_cli.stats.validation_power import shrunk_gap

    # two draws of two regimes whose point estimates are 0.1 and 0: in draw 1 regime 0 wins by 0.15
    # (its point gap 0.10: bias +0.05); in draw 2 regime 1 wins by 0.10 (its point gap −0.10: bias +0.20).
    # Mean bias 0.125 > the observed 0.10: nothing of the gap is left to size for.
    obs, bias, shrunk = shrunk_gap(np.array([0.1, 0.0]), np.array([[0.15, 0.0], [-0.1, 0.0]]))
    assert (obs, bias, shrunk) == pytest.approx((0.10, 0.125, 0.0))
    # a gap far above the noise keeps nearly all of itself
    rng = np.random.default_rng(0)
    obs, bias, shrunk = shrunk_gap(np.array([0.5, 0.2, 0.1]), np.array([0.5, 0.2, 0.1]) + 0.01 * rng.standard_normal((4000, 3)))
    assert obs == pytest.approx(0.3) and abs(bias) < 0.001 and shrunk == pytest.approx(0.3, abs=0.001)


def test_validate_sizes_seeds_by_power_against_the_runner_up_on_fresh_items(pilot, tmp_path, capsys):
    out = validate_main(pilot, replicate=True, out=tmp_path / "val")
    shown = capsys.readouterr()
    prov = V.read_provenance(out)
    st = prov["settings"]
    assert st["control"] == "runner-up" and st["seeds_by"] == "power" and st["power"] == 0.8
    assert st["eval_items"]["pilot_eval_seed"] == 1234 and st["eval_items"]["eval_seed"] == 1235
    assert st["eval_items"]["fresh"] is True and st["eval_items"]["shared"] == 0
    plan = {r["job_id"]: r for r in json.loads((out / "plan.json").read_text())}
    for jid in plan:
        cfg = (out / "jobs" / jid / ".hydra" / "config.yaml").read_text()
        assert "eval_seed: 1235" in cfg
    assert "seeds per condition (by power 0.8, at most 8 per regime)" in shown.out
    for cond in prov["conditions"]:
        pp = cond["power_plan"]
        assert cond["control"] == "G=4 μ=2"
        # the pilot's best − runner-up gap is ~0.1 (0.70 vs 0.60): well above its selection bias
        assert 0.05 < pp["observed_gap"] < 0.15 and pp["gap"] == pytest.approx(pp["observed_gap"] - pp["selection_bias"])
        # the fewest seeds with power >= 0.8 at that gap: one fewer would not do (or the minimum, 2)
        from race_cli.stats import validation_power as VP

        inf = lambda k: float("inf") if pp["parts"][k] is None else pp["parts"][k]
        parts = VP.PairParts(item_var=pp["parts"]["item_var"], seed_var=tuple(pp["parts"]["seed_var"]),
                             resid_var=pp["parts"]["resid_var"], n_items=pp["parts"]["n_items"],
                             prior_d0=inf("prior_d0"), seed_df=inf("seed_df"), item_df=inf("item_df"),
                             item_resid=pp["parts"]["item_resid"])
        # (provenance.json stores an infinite df, spreads that agree with one variance, as null)
        assert pp["power_at_gap"] >= 0.8 and not pp["capped"]
        if pp["seeds"] > 2:
            assert VP.confirm_power(pp["gap"], VP.planned_parts(parts, pp["seeds"] - 1, 2, pp["pool_df"])) < 0.8
        assert pp["detectable_gap"] <= pp["gap"] + 1e-3
        assert cond["seeds"] == list(range(3, 3 + pp["seeds"]))
        assert pp["jobs"] == 2 * pp["seeds"] and pp["flops"] > 0
        ids = [j for v in cond["validated"] for j in v["job_ids"]]
        assert sorted({plan[j]["seed"] for j in ids}) == cond["seeds"]
    # --seeds N still fixes the count, and says what N buys
    _, fixed, _, _ = build_validation(pilot, replicate=True, seeds=2)
    assert {c["power_plan"]["seeds"] for c in fixed["conditions"]} == {2}
    assert all(np.isfinite(c["power_plan"]["detectable_gap"]) for c in fixed["conditions"])


def test_one_seed_per_regime_gives_no_verdict_unless_a_seed_sd_is_assumed(tmp_path):
    pilot = make_pilot(tmp_path / "pilot")
    said = []
    val = validate_main(pilot, replicate=True, seeds=1, out=tmp_path / "val", say=said.append, control="lowest")
    assert any("not testable with one seed" in s for s in said)
    run_validation(val, {"rule": {"G=8 μ=2": 0.60, "G=16 μ=1": 0.30}})
    from race_cli.report.table import read_sweeps

    res = V.compare(val, V.read_provenance(val), read_sweeps([val]), n_boot=200)
    (c,) = res.conditions
    # a gap of 0.30 with 600 items is far outside evaluation noise, yet one run per regime cannot
    # tell a better regime from a lucky seed: no verdict, and the summary counts none
    assert c["verdict"] == V.NOT_TESTABLE and c["sentence"].startswith("Not testable with one seed")
    assert res.summary.startswith("No condition can be judged yet (0 pending; 1 condition(s) not testable")
    res = V.compare(val, V.read_provenance(val), read_sweeps([val]), n_boot=200, assume_seed_sd=0.03)
    (c,) = res.conditions
    assert c["verdict"] == V.CONFIRMED and "assumed" in c["noise"] and "assumed seed sd" in c["sentence"]
    # the assumed seed sd enters as a job-mean variance of 0.03² per regime: se >= √(2·0.03²)
    assert c["diff_se"] >= 0.03 * np.sqrt(2) - 1e-9
    # race report --assume-seed-sd passes it on to the validation's test
    got = run_report(ReportOptions([val], plots=False, bootstrap=200, assume_seed_sd=0.03),
                     console=_console()).validation
    assert got.conditions[0]["verdict"] == V.CONFIRMED
