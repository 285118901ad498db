"""race validate's preview (race_cli/plan/validate_preview.py): short condition labels, and the seed plan's
table at 80 and 120 columns, on a hand-written provenance (no pilot, no sweep)."""

from __future__ import annotations

from io import StringIO

import pytest

from race_cli.plan.validate_preview import POWER_HEAD, POWER_WIDE_ONLY, print_power_plan, short_conditions

RULE = "model=tiny-s budget_flops=1e+12 reward=rule task=arithmetic target=arithmetic"
PRM = "model=tiny-s budget_flops=1e+12 reward=prm:tiny-prm task=arithmetic target=arithmetic"
BIG = "model=tiny-m budget_flops=1e+12 reward=prm:tiny-prm task=arithmetic target=arithmetic"


def test_a_condition_is_labelled_by_what_sets_it_apart():
    labels, lines = short_conditions([RULE, PRM, BIG])
    assert labels == {RULE: "tiny-s rule", PRM: "tiny-s tiny-prm", BIG: "tiny-m tiny-prm"}
    # one line says what each label stands for and what all of them share
    assert lines == ["conditions tiny-s rule (model=tiny-s reward=rule), tiny-s tiny-prm (model=tiny-s "
                     "reward=prm:tiny-prm), tiny-m tiny-prm (model=tiny-m reward=prm:tiny-prm); all with "
                     "budget_flops=1e+12 task=arithmetic target=arithmetic"]


def test_one_condition_is_labelled_by_its_model_and_labels_that_tie_become_numbers():
    assert short_conditions([RULE]) == ({RULE: "tiny-s"}, [f"condition tiny-s: {RULE}"])
    a, b = "x=1 y=2", "y=2 x=1"  # the same parts in another order: nothing sets them apart
    assert short_conditions([a, b]) == ({a: "1", b: "2"}, [f"condition 1: {a}", f"condition 2: {b}"])
    assert short_conditions([]) == ({}, [])


def _prov(gap_given: bool = False) -> dict:
    plan = {"seeds": 5, "flops": 1.2e13, "planned_seconds": 631.0, "observed_gap": 0.0693, "selection_bias": 0.0004,
            "gap": 0.05 if gap_given else 0.0689, "gap_source": "--gap" if gap_given else "the pilot's ...",
            "power_at_gap": 0.861, "detectable_gap": 0.0631, "capped": False,
            "parts": {"seed_var": [0.027 ** 2, 0.021 ** 2]}}
    return {"settings": {"seeds_by": "power", "power": 0.8, "max_seeds": 8, "margin": 0.0},
            "conditions": [{"condition": RULE, "control": "G=4 μ=2", "power_plan": plan},
                           {"condition": PRM, "control": "G=8 μ=1", "power_plan": dict(plan, seeds=8, capped=True)}]}


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("gap_given", [False, True])
def test_the_seed_plan_fits_its_console_and_folds_no_number(width, gap_given):
    from rich.console import Console

    console = Console(file=StringIO(), width=width, color_system=None)
    print_power_plan(_prov(gap_given), console)
    lines = console.file.getvalue().splitlines()
    assert all(len(line) <= width for line in lines), [line for line in lines if len(line) > width]
    # every figure whole on one line: seeds (8 capped), FLOPs, job time, pilot gap, bias, the gap sized
    # for, power there, gap confirmed, and from 120 columns the control and the pilot's job sd
    wanted = ["rule", "tiny-prm", "(max)", "1.2e+13", "10m31s", "0.069", "0.000", "0.86", "0.063"]
    wanted += ["0.050", "(--gap)"] if gap_given else []
    wanted += ["G=4", "μ=2", "0.027/0.021"] if width >= 120 else ["provenance.json"]
    assert all(any(w in line for line in lines) for w in wanted), "\n".join(lines)
    headers = [h for h in POWER_HEAD if width >= 120 or h not in POWER_WIDE_ONLY]
    for word in {w for h in headers for w in h.split()}:
        assert any(word in line for line in lines), word
    if width < 120:
        assert not any("0.027/0.021" in line for line in lines) and "┃" not in console.file.getvalue()
