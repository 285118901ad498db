"""`race report` on a raced sweep: the race record in report.json, and the states in words in the findings
and summary.md (the decisions themselves are stats/race.py's and report/race.py's, tested there)."""

from __future__ import annotations

import json
from io import StringIO
from pathlib import Path

import pytest
from rich.console import Console

from race_cli.errors import RaceError
from race_cli.report.build import ReportOptions, build_report
from race_cli.report.command import run_report
from race_cli.report.race import race_states
from race_cli.report.table import read_sweeps
from race_cli.report.words import race_state
from race_cli.stats.race import Schedule
from report_fixtures import DEFAULT_CONDITION, Regime, build_sweep

RACE = {"looks": [2, 3], "alpha": 0.05, "margin": 0.05, "spending": "bonferroni"}
REGIMES = [Regime(4, 1, 0.2), Regime(4, 2, 0.35), Regime(8, 1, 0.12)]
CONTRACT = ("look", "seeds", "alpha_spent", "state", "active", "next_seeds", "margin")


def _raced(root: Path, race: dict | None = RACE) -> Path:
    """Two conditions at look 0 (2 seeds): tiny-s, where G=4 μ=1 is 0.30 above the others (a winner at any
    level), and tiny-m, three regimes of one truth; plan.json as race plan writes a raced sweep's."""
    acc = {"tiny-s": {0.2: 0.75, 0.35: 0.45, 0.12: 0.45}, "tiny-m": {0.2: 0.5, 0.35: 0.5, 0.12: 0.5}}
    conds = [dict(DEFAULT_CONDITION, model=m) for m in acc]
    build_sweep(root, acc=lambda p, c: acc[c["model"]][p], conditions=conds, regimes=REGIMES, seeds=(0, 1),
                n_items=200, item_sd=0.1, seed_sd=0.01, initial=0.2)
    rows = json.loads((root / "plan.json").read_text())
    (root / "plan.json").write_text(json.dumps({"jobs": rows} | ({"race": race} if race is not None else {})))
    return root


@pytest.fixture(scope="module")
def raced(tmp_path_factory):
    root = _raced(tmp_path_factory.mktemp("race") / "sweep")
    buf = StringIO()
    rep = run_report(ReportOptions((root,), plots=False, bootstrap=200), console=Console(file=buf, width=200))
    return root, rep, buf.getvalue()


def test_report_json_carries_the_race_record_per_condition(raced):
    root, rep, _ = raced
    doc = json.loads((root / "report" / "report.json").read_text())
    want = race_states(read_sweeps([root]), Schedule.from_json(RACE), targets=["arithmetic"])  # the reference
    assert doc["race"] == [json.loads(json.dumps(st.to_json())) for st in want]
    assert doc["race_schedule"] == RACE
    by = {r["condition"]: r for r in doc["race"]}
    assert set(by) == set(rep.ranking["condition"])  # named as the ranking names them
    for r in doc["race"]:
        assert set(CONTRACT) <= set(r) and r["look"] == 0 and r["margin"] == 0.05
        assert r["alpha_spent"] == pytest.approx(0.025)  # Bonferroni: 0.05 over two looks, one spent
    s = next(r for c, r in by.items() if "tiny-s" in c)
    assert s["state"] == "winner" and s["best"] == "G=4 μ=1" and s["active"] == [] and s["next_seeds"] is None
    assert s["seeds"] == {"G=4 μ=1": 2, "G=4 μ=2": 2, "G=8 μ=1": 2}
    # issue 52: the gain call beside the allocation call; each job's wall seconds (the fixture's summary.json
    # seconds.total, 11.1 s); `take` only for an equivalence
    assert s["gain"] == "gain" and s["best_gain"] == pytest.approx(0.55, abs=0.05)  # 0.75 against a 0.20 start
    assert s["job_seconds"] == pytest.approx({"G=4 μ=1": 11.1, "G=4 μ=2": 11.1, "G=8 μ=1": 11.1})
    assert s["take"] is None


def test_the_findings_and_summary_say_each_race_state_and_the_schedule(raced):
    root, rep, console = raced
    md = (root / "report" / "summary.md").read_text()
    flat = " ".join(console.split())
    for st in rep.race:
        words = race_state(st)
        assert words in md and " ".join(words.split()) in flat
        line = next(x for x in rep.findings if x.endswith(words) or words + ";" in x)
        assert line.startswith("  ")
    winner = next(st for st in rep.race if st.state == "winner")
    assert race_state(winner).startswith("winner G=4 μ=1 at look 0 (2 seeds)")
    schedule = next(x for x in rep.findings if x.startswith("race: "))
    assert "looks at 2 → 3 seeds" in schedule and "α 0.05" in schedule and "margin ±0.050" in schedule
    assert "## Race" in md and schedule in md


def test_words_for_every_state_name_the_look_and_the_margin():
    from race_cli.stats.race import RaceState

    base = dict(condition="c", target="t", look=1, seeds={"a": 3, "b": 3}, alpha_spent=0.05, active=(),
                best="a", next_seeds=None, margin=0.03, reason="look 1 (3 seeds, α 0.025): why")
    said = {s: race_state(RaceState(state=s, **base)) for s in ("winner", "equivalent", "undecided", "no_gain")}
    # a winner's and an equivalence's reason only restates the verdict: report.json keeps it, the words do not;
    # "no_gain" as a state is a record written before issue 52, still worded
    assert said == {"winner": "winner a at look 1 (3 seeds)",
                    "equivalent": "equivalent within ±0.030 at look 1 (3 seeds): best a; take any: no wall time "
                                  "per job measured to choose by",
                    "undecided": "undecided at look 1 (3 seeds): why",
                    "no_gain": "no gain at look 1 (3 seeds): why"}
    # since issue 52: the best's gain beside the margin, the regime to take with its time per job (b: 41 s
    # against a's 52 s), and the gain call beside the allocation call, never instead of it
    eq = RaceState(state="equivalent", **(base | {"best_gain": 0.052, "job_seconds": {"a": 52.0, "b": 41.0},
                                                  "take": "b", "gain": "gain"}))
    assert race_state(eq) == ("equivalent within ±0.030 at look 1 (3 seeds): best a gains +0.052 over its start; "
                              "take b: 41s per job (a 52s)")
    flat = RaceState(state="winner", **(base | {"gain": "no_gain", "best_gain": 0.004}))
    assert race_state(flat) == "winner a at look 1 (3 seeds); no regime shown to beat its start"
    going = RaceState(state="continue", **(base | {"look": 0, "seeds": {"a": 2, "b": 2}, "active": ("a", "b"),
                                                   "next_seeds": 3, "reason": "open"}))
    assert race_state(going) == "racing at look 0 (2 seeds): a, b continue to 3 seeds: open"


def test_a_fixed_design_reports_as_before(tmp_path):
    """No race record, or a one-look race (--no-race): no race key, no race words."""
    for name, race in (("none", None), ("one", {"looks": [2]})):
        root = _raced(tmp_path / name, race)
        rep = build_report(ReportOptions((root,), plots=False, bootstrap=200))
        assert rep.race is None and not any(x.startswith("race: ") for x in rep.findings)


def test_a_damaged_race_record_is_refused_with_the_file_named(tmp_path):
    root = _raced(tmp_path / "s", {"looks": "2,3"})
    with pytest.raises(RaceError, match="plan.json"):
        build_report(ReportOptions((root,), plots=False, bootstrap=200))
