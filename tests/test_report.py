"""`race report` end to end on synthetic sweeps: reading, listing bad jobs, outputs, bad input."""

from __future__ import annotations

import math

import json
import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from race_cli.errors import RaceError
from race_cli.report.build import ReportOptions
from race_cli.report.command import report, run_report
from race_cli.report.table import parse_overrides, read_sweeps
from report_fixtures import DEFAULT_CONDITION, Regime, add_unfinished, build_sweep, peaked, rising

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = build_sweep(tmp_path_factory.mktemp("s") / "sweep", acc=peaked(0.25))
    add_unfinished(root)
    return root


def _quiet(**kw):
    from rich.console import Console

    return run_report(ReportOptions(**kw), console=Console(file=StringIO(), width=200))


# --- reading -----------------------------------------------------------------------------


def test_every_job_is_listed_with_its_state(sweep):
    data = read_sweeps([sweep])
    j = data.jobs.set_index("job_id")
    assert len(j) == 5 * 3 + 3  # 5 regimes × 3 seeds, plus failed, pending, corrupt
    assert j.loc["tiny-s_G2_mu1_rule_failed", "state"] == "failed"
    assert j.loc["tiny-s_G2_mu1_rule_failed", "error"] == "CUDA out of memory"
    assert j.loc["tiny-s_G2_mu1_rule_pending", "state"] == "pending"
    torn = j.loc["tiny-s_G2_mu8_rule_C1e+12_s7"]
    assert not torn["readable"] and "summary.json corrupt" in torn["problem"]
    # no summary: condition and knobs come from .hydra/overrides.yaml
    assert j.loc["tiny-s_G2_mu1_rule_failed", "model"] == "tiny-s"
    assert j.loc["tiny-s_G2_mu1_rule_failed", "group_size"] == 2
    assert data.knob_cols == ["group_size", "updates_per_batch", "prompts_per_iter"]
    assert data.targets == ["arithmetic"]


def test_shares_come_from_the_actual_ledger(tmp_path):
    # Hand-made ledger: actual rollout 6e11, update 3e11, reward 1e11 of total 1e12, budget
    # 1.25e12 -> search 0.6, learning 0.3 (= p), feedback 0.1, budget spent 1e12/1.25e12 = 0.8.
    root = build_sweep(tmp_path / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0,), n_items=20)
    jd = next((root / "jobs").iterdir())
    led = json.loads((jd / "ledger.json").read_text())
    led["budget_flops"] = 1.25e12
    led["actual"]["flops"] = {"rollout": 6e11, "update": 3e11, "reward": 1e11, "total": 1e12}
    led["planned"]["flops"] = {"rollout": 8e11, "update": 4e11, "reward": 0.0, "total": 1.2e12}
    (jd / "ledger.json").write_text(json.dumps(led))
    row = read_sweeps([root]).jobs.iloc[0]
    assert (row["share_search"], row["share_learning"], row["share_feedback"]) == pytest.approx((0.6, 0.3, 0.1))
    assert row["p"] == pytest.approx(0.3) and row["budget_spent"] == pytest.approx(0.8)
    assert row["planned_p"] == pytest.approx(4 / 12) and row["planned_share_feedback"] == 0.0


def test_metrics_torn_last_line_is_fine_but_a_corrupt_line_is_not(tmp_path):
    root = build_sweep(tmp_path / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0, 1), n_items=20)
    a, b = sorted((root / "jobs").iterdir())
    with open(a / "metrics.jsonl", "a") as f:
        f.write('{"iteration": 11, "flops/to')  # crash mid-append
    lines = (b / "metrics.jsonl").read_text().splitlines()
    lines[3] = "{not json"
    (b / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    j = read_sweeps([root]).jobs.set_index("job_id")
    assert j.loc[a.name, "readable"] and j.loc[a.name, "last_iteration"] == 10
    assert not j.loc[b.name, "readable"] and "metrics.jsonl corrupt" in j.loc[b.name, "problem"]


def test_missing_files_mark_the_job_unreadable_and_reading_goes_on(tmp_path):
    root = build_sweep(tmp_path / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0, 1, 2), n_items=20)
    a, b, c = sorted((root / "jobs").iterdir())
    (a / "ledger.json").unlink()
    (b / "metrics.jsonl").unlink()
    j = read_sweeps([root]).jobs.set_index("job_id")
    assert "ledger.json missing" in j.loc[a.name, "problem"]
    assert "metrics.jsonl missing" in j.loc[b.name, "problem"]
    assert j.loc[c.name, "readable"]


def test_planned_job_without_a_folder_is_listed_as_missing(tmp_path):
    root = build_sweep(tmp_path / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0,), n_items=20)
    plan = json.loads((root / "plan.json").read_text()) + [{"job_id": "never-started"}]
    (root / "plan.json").write_text(json.dumps(plan))
    j = read_sweeps([root]).jobs.set_index("job_id")
    assert j.loc["never-started", "state"] == "missing"


def test_parse_overrides():
    assert parse_overrides("- model=tiny-s\n- 'grpo.group_size=4'\n") == ["model=tiny-s", "grpo.group_size=4"]
    assert parse_overrides("[model=tiny-s, seed=1]") == ["model=tiny-s", "seed=1"]


# --- the report ----------------------------------------------------------------------------


def test_report_recovers_the_known_best_and_writes_everything(sweep, tmp_path):
    out = tmp_path / "rep"
    res = _quiet(sweep_dirs=[sweep], out=out, bootstrap=500)
    # truth: acc peaks at p = 0.25, the regime G=8 μ=2 (p 0.25) is the true best
    rec = res.recommendations.iloc[0]
    assert rec["best_regime"] == "G=8 μ=2"
    assert not rec["fit_fallback"] and rec["fit_model"] == "quadratic in log p"
    assert 0.18 < rec["p_star"] < 0.33
    for f in ["runs.csv", "ranking.csv", "recommendations.csv", "report.json", "summary.md",
              "shares.png", "response.png", "curves.png"]:
        assert (out / f).stat().st_size > 0, f
    runs = pd.read_csv(out / "runs.csv")
    assert set(runs["state"]) == {"done", "failed", "pending"} and len(runs) == 18
    assert (~runs["readable"]).sum() == 1
    assert not any(p.name.startswith(".plots.") for p in out.iterdir())  # temp folder gone
    md = (out / "summary.md").read_text()
    assert "a diagnostic, not a promise of held-out gains" in md
    assert "Total training compute" in md and "FLOPs" in md
    ranking = pd.read_csv(out / "ranking.csv")
    assert ranking.loc[ranking["rank"] == 1, "regime"].item() == "G=8 μ=2"


def test_default_out_is_the_sweeps_report_folder_and_stdout_formats(sweep, capsys):
    assert report(ReportOptions([sweep], fmt="json", plots=False, bootstrap=200)) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["caveat"].startswith("A pilot grid is a diagnostic")
    assert {r["job_id"] for r in doc["jobs"]} >= {"tiny-s_G2_mu1_rule_failed"}
    assert (sweep / "report" / "ranking.csv").exists()
    assert report(ReportOptions([sweep], fmt="csv", plots=False, bootstrap=200)) == 0
    csv = pd.read_csv(StringIO(capsys.readouterr().out))
    assert list(csv["rank"])[:1] == [1] and "ci_lo" in csv
    assert report(ReportOptions([sweep], fmt="markdown", plots=False, bootstrap=200)) == 0
    assert capsys.readouterr().out.startswith("# RACE pilot-grid report")


def test_edge_optimum_takes_the_fallback_and_says_so(tmp_path):
    root = build_sweep(tmp_path / "edge", acc=rising(0.35, 0.5))
    res = _quiet(sweep_dirs=[root], plots=False, bootstrap=300)
    rec = res.recommendations.iloc[0]
    assert rec["fit_fallback"] and "edge" in rec["fit_reason"]
    assert rec["p_star"] == pytest.approx(rec["best_p"])  # the pilot-best point
    md = (root / "report" / "summary.md").read_text()
    assert "fell back to the pilot-best point" in md


def test_several_sweeps_and_the_conditional_frontier(tmp_path):
    # Two sweeps: rule reward peaks at p = 0.14, PRM reward at p = 0.25. Neighbouring grid points
    # sit ≥ 0.06 accuracy below each peak (0.2·ln(0.25/0.14)² = 0.067), ~3 sd of a paired gap.
    kw = dict(n_items=500, item_sd=0.1)
    a = build_sweep(tmp_path / "rule", acc=peaked(0.14, top=0.75, width=0.2), rng_seed=1, **kw)
    b = build_sweep(tmp_path / "prm", acc=peaked(0.25, top=0.75, width=0.2), rng_seed=2,
                    conditions=[dict(DEFAULT_CONDITION, reward="prm")], **kw)
    res = _quiet(sweep_dirs=[a, b], plots=False, bootstrap=300, by=["reward"])
    rec = res.recommendations.set_index("reward")
    assert rec.loc["rule", "best_regime"] == "G=8 μ=1" and rec.loc["prm", "best_regime"] == "G=8 μ=2"
    assert rec.loc["rule", "p_star"] < rec.loc["prm", "p_star"]
    assert rec.loc["prm", "best_share_feedback"] == pytest.approx(0.15)  # the fixture's PRM share
    assert (a / "report" / "summary.md").exists() and not (b / "report").exists()
    assert "Along reward" in (a / "report" / "summary.md").read_text()


# --- bad input: one clear message, exit 2, nothing written ---------------------------------


@pytest.mark.parametrize("make, args, words", [
    (lambda t: t, {}, "not a sweep"),
    (lambda t: (t / "jobs").mkdir() or t, {}, "has no jobs"),
    (lambda t: build_sweep(t / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0,), n_items=5), {"target": "gsm8k"},
     "no finished job recorded eval/gsm8k"),
    (lambda t: build_sweep(t / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0,), n_items=5), {"by": ["colour"]},
     "--by colour"),
    (lambda t: build_sweep(t / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0,), n_items=5), {"fmt": "xml"},
     "--format 'xml'"),
])
def test_bad_input_is_one_clear_message_and_exit_2(tmp_path, capsys, make, args, words):
    d = make(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    with pytest.raises(RaceError) as e:
        _quiet(sweep_dirs=[d], **args)
    assert words in str(e.value)
    assert report(ReportOptions([d], plots=False, **args)) == 2
    assert words.split()[0] in capsys.readouterr().err
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing written


def test_no_finished_jobs_says_what_states_there_are(tmp_path):
    root = tmp_path / "s"
    (root / "jobs" / "j1").mkdir(parents=True)
    (root / "jobs" / "j1" / "status.json").write_text('{"state": "pending"}')
    with pytest.raises(RaceError, match="pending 1"):
        _quiet(sweep_dirs=[root])


def test_report_imports_no_torch(sweep, tmp_path):
    code = ("import sys; from race_cli.report.command import report; from race_cli.report.build import ReportOptions; "
            "assert 'matplotlib' not in sys.modules and 'scipy' not in sys.modules; "
            f"rc = report(ReportOptions([{str(sweep)!r}], fmt='csv', out={str(tmp_path)!r}, bootstrap=200)); "
            "bad = [m for m in ('torch', 'transformers', 'peft') if m in sys.modules]; "  # scipy: the statistics
            "print('RC', rc, 'BAD', bad)")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert "RC 0 BAD []" in r.stdout, r.stderr


def test_items_are_paired_by_id_not_by_position(tmp_path):
    # Reversing one job's item order (ids and scores together) must not change any estimate;
    # dropping an id from one job pairs the condition on the ids all jobs share.
    root = build_sweep(tmp_path / "s", n_items=50)
    base = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).ranking
    jd = sorted((root / "jobs").iterdir())[0]
    s = json.loads((jd / "summary.json").read_text())
    it = s["eval_items"]["arithmetic"]
    it["ids"], it["scores"] = it["ids"][::-1], it["scores"][::-1]
    (jd / "summary.json").write_text(json.dumps(s))
    rev = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).ranking
    pd.testing.assert_frame_equal(base, rev)
    it["ids"], it["scores"] = it["ids"][1:], it["scores"][1:]
    (jd / "summary.json").write_text(json.dumps(s))
    cut = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).ranking
    assert (cut["method"] == "items (paired, 49 common ids of 50) × seeds").all()
    assert (cut["n_items"] == 49).all()


def test_jobs_without_item_scores_are_bootstrapped_over_seeds(tmp_path):
    root = build_sweep(tmp_path / "s", n_items=50)
    for jd in (root / "jobs").iterdir():
        s = json.loads((jd / "summary.json").read_text())
        del s["eval_items"]
        (jd / "summary.json").write_text(json.dumps(s))
    r = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).ranking
    assert r["method"].str.startswith("seeds only").all() and r["ci_lo"].notna().all()


def test_by_accepts_commas_and_lower_is_better_targets():
    from race_cli.report.command import maximize_target

    assert maximize_target("accuracy") and maximize_target("pass_at_8")
    assert not maximize_target("val_loss") and not maximize_target("error_rate")


def test_by_with_commas_groups_by_those_columns(sweep, tmp_path):
    r = _quiet(sweep_dirs=[sweep], out=tmp_path, plots=False, bootstrap=200, by=["model,reward"]).ranking
    assert list(r.columns[:4]) == ["condition", "target", "model", "reward"]
    assert r["condition"].unique().tolist() == ["model=tiny-s reward=rule target=arithmetic"]


def test_done_jobs_without_ledgers_are_explained_not_crashed(tmp_path, capsys):
    d = build_sweep(tmp_path / "s", regimes=[Regime(4, 1, 0.3), Regime(8, 1, 0.3)], seeds=(0,), n_items=5)
    for ledger in d.glob("jobs/*/ledger.json"):
        ledger.unlink()
    assert report(ReportOptions([str(d)], plots=False)) == 2  # a str path is accepted too
    err = capsys.readouterr().err
    assert "no job can be ranked" in err and "2 job(s) unreadable: ledger.json missing" in err


# --- several evaluation targets ------------------------------------------------------------

TWO = {"arithmetic": peaked(0.14, top=0.75, width=0.2), "arithmetic-hard": peaked(0.40, top=0.55, width=0.15)}


@pytest.fixture(scope="module")
def two_targets(tmp_path_factory) -> Path:
    # The best split differs: arithmetic peaks at p = 0.14 (G=8 μ=1), arithmetic-hard at 0.40
    # (G=4 μ=2). On arithmetic, p = 0.40 is 0.2·ln(0.40/0.14)² = 0.22 below the peak: a real
    # difference. The hard target's neighbours sit 0.025 (p = 0.60) and 0.033 (p = 0.25) below
    # its peak, ~2 sd of a paired gap on 500 items × 3 seeds. Both start at 0.3 and learn.
    return build_sweep(tmp_path_factory.mktemp("t") / "sweep", targets=TWO, n_items=500, item_sd=0.1,
                       initial=0.3)


def test_every_target_gets_its_own_section_and_recommendation(two_targets, tmp_path):
    res = _quiet(sweep_dirs=[two_targets], out=tmp_path, plots=False, bootstrap=300)
    assert [(t.name, t.maximize) for t in res.targets] == [("arithmetic", True), ("arithmetic-hard", True)]
    rec = res.recommendations.set_index("target")
    assert rec.loc["arithmetic", "best_regime"] == "G=8 μ=1"
    assert rec.loc["arithmetic-hard", "best_regime"] == "G=4 μ=2"
    assert rec.loc["arithmetic", "condition"].endswith("target=arithmetic")  # a condition includes its target
    md = (tmp_path / "summary.md").read_text()
    assert md.index("### Target: arithmetic\n") < md.index("### Target: arithmetic-hard\n")
    assert "Worth validating for arithmetic:" in md and "Worth validating for arithmetic-hard:" in md
    assert "Target arithmetic-hard: pilot-best regime G=4 μ=2" in md  # each recommendation names its target
    # the frontier takes the target as an axis and says in words where the best regime differs
    # (in the policy split learning / (search + learning): the fixture's rule reward has no
    # feedback FLOPs, so it equals p here: 0.14 for G=8 μ=1)
    assert "Along target" in md and "arithmetic: split=0.14 (G=8 μ=1) → arithmetic-hard: split=0." in md
    diff = res.target_differences
    assert len(diff) == 1 and "the best regime differs between targets" in diff[0]
    assert "a real difference" in diff[0] and diff[0] in md
    ranking = pd.read_csv(tmp_path / "ranking.csv")
    assert set(ranking["target"]) == {"arithmetic", "arithmetic-hard"} and len(ranking) == 10
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["targets"] == ["arithmetic", "arithmetic-hard"] and doc["target"] is None


def test_target_option_ranks_one_target(two_targets, tmp_path):
    res = _quiet(sweep_dirs=[two_targets], out=tmp_path, plots=False, bootstrap=200, target="arithmetic-hard")
    assert set(res.ranking["target"]) == {"arithmetic-hard"} and res.target_differences == []
    md = (tmp_path / "summary.md").read_text()
    assert "### Target: arithmetic-hard" in md and "### Target: arithmetic\n" not in md
    # and through the command line, with plots
    r = subprocess.run([sys.executable, "-m", "race_cli", "report", str(two_targets), "--target", "arithmetic",
                        "--format", "csv", "--out", str(tmp_path / "cli"), "--bootstrap", "200"],
                       cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    csv = pd.read_csv(StringIO(r.stdout))
    assert set(csv["target"]) == {"arithmetic"} and csv.loc[0, "regime"] == "G=8 μ=1"
    assert {"start", "gain", "gain_ci_lo", "gain_ci_hi", "beats_start"} <= set(csv.columns)
    assert (tmp_path / "cli" / "curves.png").stat().st_size > 0


def test_same_best_regime_on_every_target_is_said_plainly(tmp_path):
    same = {"arithmetic": peaked(0.25, top=0.7, width=0.2), "gsm8k": peaked(0.25, top=0.5, width=0.2)}
    root = build_sweep(tmp_path / "s", targets=same, n_items=500, item_sd=0.1, initial=0.3)
    diff = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).target_differences
    assert diff == ["model=tiny-s budget_flops=1e+12 reward=rule task=arithmetic: the best regime is the "
                    "same for every target (G=8 μ=2 on arithmetic, gsm8k)."]


def test_fractional_item_scores_are_read_and_ranked(tmp_path):
    # eval.samples = 4: per-item scores are fractions k/4
    root = build_sweep(tmp_path / "s", samples=4, n_items=100)
    data = read_sweeps([root])
    ids, scores = next(iter(data.items.values()))
    assert set(np.unique(scores)) <= {0, 0.25, 0.5, 0.75, 1.0} and len(np.unique(scores)) > 2
    r = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).ranking
    assert r["method"].str.startswith("items (paired, n=100)").all()


def test_scores_outside_0_1_make_the_job_unreadable(tmp_path):
    root = build_sweep(tmp_path / "s", regimes=[Regime(4, 1, 0.3)], seeds=(0, 1), n_items=5)
    jd = sorted((root / "jobs").iterdir())[0]
    s = json.loads((jd / "summary.json").read_text())
    s["eval_items"]["arithmetic"]["scores"][0] = 3
    (jd / "summary.json").write_text(json.dumps(s))
    j = read_sweeps([root]).jobs.set_index("job_id")
    assert not j.loc[jd.name, "readable"] and "must lie in [0, 1]" in j.loc[jd.name, "problem"]


def test_sweeps_from_before_targets_read_as_a_target_named_accuracy(tmp_path):
    # The older single-target files: eval/accuracy in metrics.jsonl, summaries keyed "accuracy",
    # no `targets` and no per-item start scores.
    root = build_sweep(tmp_path / "s", n_items=50, initial=0.3)
    for jd in (root / "jobs").iterdir():
        s = json.loads((jd / "summary.json").read_text())
        for k in ("eval", "eval_initial", "eval_items"):
            s[k] = {"accuracy": s[k]["arithmetic"]}
        del s["targets"], s["eval_items_initial"]
        (jd / "summary.json").write_text(json.dumps(s))
        m = (jd / "metrics.jsonl").read_text().replace('"eval/arithmetic/accuracy"', '"eval/accuracy"')
        (jd / "metrics.jsonl").write_text(m)
    data = read_sweeps([root])
    assert data.targets == ["accuracy"] and set(data.curves["target"]) == {"accuracy"}
    r = _quiet(sweep_dirs=[root], plots=False, bootstrap=200).ranking
    assert (r["target"] == "accuracy").all()
    assert (r["gain_method"] == "seeds only (no per-item start scores)").all() and r["gain"].notna().all()


# --- notes under their own condition -----------------------------------------------------


def _two_verdicts(root: Path) -> Path:
    """tiny-m: start 0.30, the peak regime gains +0.30 (no note); tiny-s, printed second: every
    regime at or below its start of 0.65 (the no-gain note). Same truth acc(p) for both."""
    conds = [dict(DEFAULT_CONDITION, model="tiny-m"), dict(DEFAULT_CONDITION, model="tiny-s")]
    start = {"tiny-m": 0.30, "tiny-s": 0.65}
    return build_sweep(root, acc=peaked(0.25, top=0.6), conditions=conds, seeds=(0, 1), n_items=120,
                       initial=lambda cond, t: start[cond["model"]])


NOTE = "No regime beats its starting policy"


def _note_owner(lines: list[str], heads: dict[str, str]) -> list[str]:
    """The condition each note line sits under: the last condition heading above it."""
    owners, current = [], None
    for line in lines:
        for model, head in heads.items():
            if head in line:
                current = model
        if NOTE in line:
            owners.append(current)
    return owners


def test_each_note_sits_under_its_own_condition(tmp_path, capsys):
    from rich.console import Console

    from race_cli.report.command import print_report_top

    root = _two_verdicts(tmp_path / "s")  # a note printed above its table's title reads as tiny-m's
    for width in (80,):  # the narrow table; race run's end below takes the console's width (80 in a pipe)
        buf = StringIO()
        res = run_report(ReportOptions([root], plots=False, bootstrap=300, out=tmp_path / f"r{width}"),
                         console=Console(file=buf, width=width))
        rec = res.recommendations.set_index("condition")
        noted = {c.split()[0] for c, v in rec["no_gain"].items() if v}
        assert noted == {"model=tiny-s"}  # the sweep's truth: only tiny-s's start is out of reach
        heads = {m: f"model={m} budget_flops=" for m in ("tiny-m", "tiny-s")}
        text = buf.getvalue().split("joint comparison: every model")[0]  # the findings and the rankings
        assert _note_owner(text.splitlines(), heads) == ["tiny-s"], text
        md = (tmp_path / f"r{width}" / "summary.md").read_text().split("## Joint")[0]
        md_heads = {m: f"#### model={m} " for m in heads}
        assert _note_owner(md.splitlines(), md_heads) == ["tiny-s"]

    capsys.readouterr()
    print_report_top(root, print)  # race run's end: the note comes through `say`, the tables through rich
    out = capsys.readouterr().out
    assert _note_owner(out.splitlines(), {m: f"top of the ranking: model={m} " for m in heads}) == ["tiny-s"], out


# --- one colour and marker per regime ----------------------------------------------------


def test_a_regime_keeps_its_colour_and_marker_in_every_panel_and_figure(tmp_path, monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_rgba

    from report_fixtures import rising

    # the two conditions rank the regimes in opposite orders (tiny-s peaks at p = 0.08, tiny-m rises
    # with p): a colour taken from the rank would swap between the panels
    low, up = peaked(0.08, top=0.62, width=0.04), rising(0.35, 0.5)
    acc = lambda p, cond: low(p, cond) if cond["model"] == "tiny-s" else up(p, cond)
    root = build_sweep(tmp_path / "s", acc=acc, seeds=(0, 1), n_items=80,
                       conditions=[DEFAULT_CONDITION, dict(DEFAULT_CONDITION, model="tiny-m")])
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda *a, **k: None)  # keep the figures to look at them
    try:
        res = _quiet(sweep_dirs=[root], bootstrap=200, out=tmp_path / "r")
        ranking = res.ranking
        orders = [list(g["regime"]) for _, g in ranking.groupby("condition", sort=False)]
        assert orders[0] != orders[1]  # the premise: ranks differ between the panels
        regimes = set(ranking["regime"])
        seen: dict[str, set] = {r: set() for r in regimes}
        legends = []
        for num in plt.get_fignums():
            for ax in plt.figure(num).axes:
                handles, labels = ax.get_legend_handles_labels()
                named = [(h, lab) for h, lab in zip(handles, labels) if lab in regimes]
                legends.append([lab for _, lab in named])
                for h, lab in named:
                    seen[lab].add((to_rgba(h.get_color()), h.get_marker()))
        assert sum(map(len, legends)) >= 2 * len(regimes)  # two panels of response.png, two of curves.png
        assert all(len(s) == 1 for s in seen.values()), seen  # one style per regime everywhere
        assert len({next(iter(s)) for s in seen.values()}) == len(regimes)  # and distinct regimes differ
        by_name = ["G=4 μ=2", "G=4 μ=4", "G=8 μ=1", "G=8 μ=2", "G=16 μ=1"]  # numbers as numbers
        assert all(leg == [r for r in by_name if r in leg] for leg in legends if leg)  # not by rank
    finally:
        close("all")


# --- the findings, first ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pilot_like(tmp_path_factory) -> Path:
    """The default pilot's shape: tiny-s/tiny-m × rule/prm × μ ∈ {1, 2, 4} × 2 seeds, two targets. On
    arithmetic μ=1 leads μ=2 by 0.10 (0.55 vs 0.45, μ=4 0.40); on arithmetic-hard a peak at μ=2."""
    from report_fixtures import Regime

    regs = [Regime(4, 1, 0.60), Regime(4, 2, 0.70), Regime(4, 4, 0.80)]  # + prm's 15% feedback: shares < 1
    conds = [dict(DEFAULT_CONDITION, model=m, reward=r, budget_flops=8e11) for m in ("tiny-s", "tiny-m")
             for r in ("rule", "prm")]
    targets = {"arithmetic": lambda p, c: 0.55 if p < 0.65 else (0.45 if p < 0.75 else 0.40),
               "arithmetic-hard": peaked(0.70, top=0.45, width=0.3)}
    return build_sweep(tmp_path_factory.mktemp("f") / "tiny-0123abcd", targets=targets, regimes=regs,
                       conditions=conds, seeds=(0, 1), n_items=200, initial=0.3)


def test_the_report_opens_with_findings_on_one_screen(pilot_like, tmp_path):
    from rich.console import Console

    from race_cli.report import findings as FD
    from race_cli.stats import power as P

    buf = StringIO()
    res = run_report(ReportOptions([pilot_like], plots=False, bootstrap=300, out=tmp_path / "r", full=False),
                     console=Console(file=buf, width=80))
    lines = buf.getvalue().splitlines()
    assert lines[2].startswith("Findings: which regime, which size")  # right after the counts (2 lines)
    end = next(i for i, line in enumerate(lines) if line.startswith("Below the findings"))
    assert end - 2 <= 25, "\n".join(lines[2:end])  # one screen at 80 columns
    assert all(len(line) <= 80 for line in lines)
    assert "final ± 95%" not in buf.getvalue()  # the rankings wait for --full
    ranking = res.ranking
    for (target, cond), g in ranking.groupby(["target", "condition"], sort=False):
        label = f"{g['model'].iloc[0]} {g['reward'].iloc[0]}"
        line = next(x for x in res.findings if x.startswith(f"  {label} ") and x in _section(res, target))
        separated = int(g["tied_best"].sum()) == 1 and bool(g["beats_start"].any())
        assert (" wins by " in line) == separated, (line, g[["regime", "tied_best"]])
    for target in ("arithmetic", "arithmetic-hard"):
        sec = _section(res, target)
        assert any(x.startswith("  size: tiny-s − tiny-m") for x in sec)
        assert any(x.startswith("  feedback: rule − prm") for x in sec)
    assert any(x.startswith(f"validate: race validate {pilot_like} --replicate") for x in res.findings)
    # what would settle an open call: the fewest seeds at which the report's test separates the observed
    # gap with 80% power (stats/power.py, the model race plan prints), and its cost in jobs and FLOPs
    open_ = [s for s in res.settles if s.seeds is not None]
    assert open_
    for s in open_:
        g = ranking[ranking["condition"] == s.condition].sort_values("rank")
        d = FD._design(g, FD.infer_samples(None))
        floor3 = lambda x: math.floor(x * 1000) / 1000  # the gap to 0.001, down (findings.settle)
        if g["beats_start"].any():  # the open call: is the best separated from its runner-up?
            gap = floor3(abs(g["gap_to_best"].iloc[1]))
            power = lambda n: P.separation_power(P.with_seeds(d, n), gap, n_sim=FD.POWER_SIMS)
        else:  # the open call: does the best beat its start?
            gain = floor3(g["gain"].iloc[0])
            power = lambda n: P.gain_power(P.with_seeds(d, n), gain, n_sim=FD.POWER_SIMS)
        assert power(s.seeds) >= P.POWER and (s.seeds == d.seeds + 1 or power(s.seeds - 1) < P.POWER)
        assert s.extra_jobs == (s.seeds - d.seeds) * d.regimes and s.flops == pytest.approx(s.extra_jobs * 8e11)
    md = (tmp_path / "r" / "summary.md").read_text()
    assert md.split("\n## ")[1].startswith("Findings: which regime")  # the first section of summary.md
    assert "### Target: arithmetic" in md  # and everything else after it


def test_settle_prices_sampled_evaluation_with_common_random_numbers_as_race_plan_does():
    """findings.settle's design for k >= 2 sampled completions is the CRN one race plan prints (a third
    of the sampling noise common to two jobs: a gap's item part below independent sampling's); k = 1
    (greedy, or unknown) keeps independent sampling."""
    from dataclasses import replace

    from race_cli.report import findings as FD
    from race_cli.stats import power as P

    g = {"n_items": np.array([400] * 3), "n_seeds": np.array([2] * 3), "seed_sd": np.array([0.02] * 3),
         "regime": np.array(["μ=1", "μ=2", "μ=4"])}
    sampled, greedy = FD._design(g, 2), FD._design(g, 1)
    assert sampled.crn and not greedy.crn
    indep = P.gap_parts(replace(sampled, crn=False)).item[0]
    e = 0.25 / 2  # by hand: (2σ_g² + 2e/s)/n with e = (1 − c)·0.125 + c·min(0.125, 0.5·spread·√(2/π)/k)
    spread = math.sqrt(2 * (P.ITEM_REGIME_SD ** 2 + 0.02 ** 2))
    e_crn = (1 - P.CRN_SHARE) * e + P.CRN_SHARE * min(e, 0.5 * spread * math.sqrt(2 / math.pi) / 2)
    assert P.gap_parts(sampled).item[0] == pytest.approx((2 * P.ITEM_REGIME_SD ** 2 + 2 * e_crn / 2) / 400)
    assert indep == pytest.approx((2 * P.ITEM_REGIME_SD ** 2 + 2 * e / 2) / 400)


def test_settle_searches_in_lockstep_answer_as_one_at_a_time():
    """findings runs every condition's settle search at once, each round's powers in one batch: the answers
    are those of one search at a time (power caches emptied in between, so both compute)."""
    from race_cli.report import findings as FD

    def cond(i, gap, beats=True, gain=0.05, sd=0.02, seeds=2):
        return {"condition": np.array([f"c{i}"] * 3), "n_items": np.array([200] * 3),
                "n_seeds": np.array([seeds] * 3), "seed_sd": np.array([sd] * 3), "regime": np.array(["a", "b", "c"]),
                "beats_start": np.array([beats, False, False]), "tied_best": np.array([True, True, False]),
                "gap_to_best": np.array([0.0, gap, 0.2]), "gain": np.array([gain, 0.0, 0.0]),
                "budget_flops": np.array([8e11] * 3)}

    conds = [(cond(0, 0.06), "c0", 30.0), (cond(1, 0.02), "c1", None), (cond(2, 0.11, sd=0.03), "c2", 30.0),
             (cond(3, 0.06, beats=False, gain=0.09), "c3", None), (cond(4, 0.0), "c4", None),
             (cond(5, 0.06, seeds=3), "c5", None), (cond(6, 0.012, sd=0.005, seeds=32), "c6", None)]
    FD._POWERS.clear()
    together = FD._settle_all(conds, 4, 2)
    alone = []
    for g, label, wall in conds:
        FD._POWERS.clear()
        alone.append(FD.settle(g, label, 4, wall, 2))
    assert together == alone
    # seeds found (separation, and the gain search of c3), out of reach (c1), nothing to detect (c4: a gap of
    # 0), and an items search (c6: 32 seeds already, the most the search asks for)
    assert [s.seeds is not None for s in together] == [True, False, True, True, False, True, False]
    assert together[1].items is None and math.isnan(together[1].flops)
    assert together[4].extra_jobs == 0 and together[4].flops == 0.0
    assert together[6].items is not None and 200 < together[6].items <= FD.MAX_ITEMS


def _section(res, target: str) -> list[str]:
    lines = res.findings
    i = next(k for k, x in enumerate(lines) if x.startswith(f"{target} ("))
    j = next((k for k in range(i + 1, len(lines)) if not lines[k].startswith("  ")), len(lines))
    return lines[i + 1:j]


# --- the recommendation's words agree with ≈ best ------------------------------------------


def _rec(**kw) -> pd.Series:
    base = dict(target="arithmetic", best_regime="G=8 μ=2", best_p=0.25, best_p_policy=0.25, best_mean=0.682,
                best_ci_lo=0.655, best_ci_hi=0.708, best_sel_lo=0.650, best_sel_hi=0.714, n_regimes=5,
                best_gain=0.1, best_gain_ci_lo=0.05, best_gain_ci_hi=0.15, learned=True, n_beat_start=5,
                seed_noise=True, testable=True, expected_drop=0.01, n_tied=1, best_p_best=1.0,
                validate="G=8 μ=2")
    return pd.Series({**base, **kw})


def test_the_recommendation_says_the_best_set_not_the_best_share():
    """A best share of 1.00 beside a regime the familywise test cannot separate from the best reads as a
    certainty (docs/report.md): the paragraph says the ≈ best set instead; the share stays in the files."""
    from race_cli.report.views.render import recommendation_text

    alone = recommendation_text(_rec(), True)
    assert "of draws" not in alone and "100%" not in alone
    assert "every other regime is shown worse (familywise 5%): it alone is ≈ best." in alone
    shared = recommendation_text(_rec(n_tied=3, validate="G=8 μ=2; G=4 μ=2; G=8 μ=1"), True)
    assert "of draws" not in shared and "100%" not in shared
    assert "≈ best together with 2 other regime(s) not shown worse than it (familywise 5%)." in shared
    assert shared.count("not shown worse") == 1  # said once
    one_seed = recommendation_text(_rec(seed_noise=False, testable=False, n_tied=5), True)
    assert "≈ best and > start not testable with one seed" in one_seed and "together with" not in one_seed


# --- a folder where a report file goes; numpy's warnings -------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_folder_where_a_report_file_goes_is_refused_before_anything_is_written(tmp_path):
    """report/ranking.csv made a folder: exit 2, one message naming that path (not a temp file), and the old
    report is left whole (runs.csv, written first, is not rewritten)."""
    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    run = lambda: subprocess.run([sys.executable, "-m", "race_cli", "report", str(sweep), "--no-plots",
                                  "--bootstrap", "200"], cwd=REPO, capture_output=True, text=True, timeout=300,
                                 env=os.environ | {"COLUMNS": "400"})  # the path on one line
    assert run().returncode == 0
    report = sweep / "report"
    (report / "ranking.csv").unlink()
    (report / "ranking.csv").mkdir()
    (report / "runs.csv").write_text("an earlier report's runs.csv\n")
    before = _tree(report)
    r = run()
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{report / 'ranking.csv'}: a folder where race report writes a file" in " ".join(r.stderr.split())
    assert ".tmp" not in r.stderr and "Traceback" not in r.stderr
    assert _tree(report) == before and sorted(p.name for p in report.iterdir()) == sorted(
        ["ranking.csv"] + list(before))  # nothing written, no temp file left


def _nan_scores(root: Path, items: str) -> None:
    """Every job's summary.json with NaN scores: items 'all' (and its eval NaN) or 'half' (every other item)."""
    for f in sorted(root.glob("jobs/*/summary.json")):
        s = json.loads(f.read_text())
        if items == "all":
            s["eval"] = {k: math.nan for k in s["eval"]}
        s["eval_items"] = {t: {"ids": v["ids"], "scores": [math.nan if items == "all" or i % 2 == 0 else x
                                                          for i, x in enumerate(v["scores"])]}
                           for t, v in s["eval_items"].items()}
        f.write_text(json.dumps(s))


@pytest.mark.parametrize("items, code", [("all", 2), ("half", 2)])  # a NaN item score is malformed
def test_no_numpy_warning_reaches_the_console(tmp_path, items, code):
    """Summaries with NaN scores (every one, or every other item): the report's own message or report, and no
    RuntimeWarning from numpy ("All-NaN slice encountered", "invalid value encountered in divide")."""
    sweep = build_sweep(tmp_path / "s", seeds=(0, 1), n_items=40)
    _nan_scores(sweep, items)
    r = subprocess.run([sys.executable, "-W", "default", "-m", "race_cli", "report", str(sweep), "--no-plots",
                        "--bootstrap", "200"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stdout + r.stderr
    assert "Warning" not in r.stdout + r.stderr and "encountered" not in r.stdout + r.stderr, r.stderr
