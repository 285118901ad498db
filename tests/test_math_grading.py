"""MATH grading: the MATH-500 references, hand-written near-misses and equivalent forms, under
math-verify and under race's own normaliser (race_cli/answers/math.py), and the graders'
plumbing (race_cli/answers/graders.py, the rule reward's `grader=`)."""

from __future__ import annotations

import json

import pytest

from race_cli.errors import RaceError
from race_cli.answers import graders
from race_cli.answers.graders import grade, math_verify_available
from race_cli.answers.math import extract_math_answer, last_boxed, math_equal, normalize
from race_cli.rewards.rule import rule_reward, score_batch
from race_cli.tasks.math500 import PACKAGED_FILE, Math500

ROWS = [json.loads(line) for line in PACKAGED_FILE.read_text(encoding="utf-8").splitlines() if line.strip()]
needs_math_verify = pytest.mark.skipif(not math_verify_available(),
                                       reason="math-verify not installed: pip install 'race-cli[math]'")

NEAR_MISSES = [  # (model answer, gold answer): each differs from the gold in value
    ("-3", "3"),                                                    # wrong sign
    ("\\frac{4}{3}", "\\frac{3}{4}"),                               # reciprocal
    ("x^5 - x^4 + x^3 - x^2 + x + 1", "x^5 - x^4 + x^3 - x^2 + x - 1"),  # one sign in a polynomial
    ("3\\sqrt{12}", "3\\sqrt{13}"),                                 # radicand off by one
    ("\\left( 3, \\frac{\\pi}{3} \\right)", "\\left( 3, \\frac{\\pi}{2} \\right)"),  # angle
    ("(-\\infty, 0)", "(-\\infty, 0]"),                             # open vs closed end
    ("x^4", "x^3"),                                                 # wrong power
    ("2^{9}", "1024"),                                              # wrong power of a number
    ("6+5i", "6-5i"),                                               # conjugate
    ("-2,2", "-2,1"),                                               # one root of two
    ("\\frac{2}{6}", "\\frac{1}{2}"),                               # unsimplified, other value
    ("91^\\circ", "90^\\circ"),                                     # degrees off by one
    ("\\sqrt{50}", "\\sqrt{51}"),
    ("12\\sqrt2", "11\\sqrt2"),
    ("0.16", "0.15"),
    ("(6,31,1)", "(6,31,-1)"),                                      # one coordinate's sign
    ("\\frac{35}{65}", "\\frac{35}{64}"),
    ("x^3+3x+6", "x^3+3x-6"),
    ("\\frac{3\\sqrt{3}}{2}", "\\frac{3\\sqrt{3}}{4}"),
    ("(1,-2)", "(-2,1)"),                                           # a point's coordinates swapped
    ("2k+1", "2k+2"),
    ("\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ -5/3 \\end{pmatrix}", "\\begin{pmatrix} -1/3 \\\\ 2/3 \\\\ 5/3 \\end{pmatrix}"),
    ("(3,4)", "(3,4]"),
    ("(a+5)(b-2)", "(a+5)(b+2)"),
    ("1-274i", "1+274i"),
    ("\\frac{3840}{298}", "\\frac{3840}{289}"),                     # digits swapped
    ("-\\frac{\\pi}{3}", "-\\frac{\\pi}{6}"),
    ("\\frac{\\sqrt{3}}{2}", "\\frac{\\sqrt{3}}{3}"),
    ("10,800", "10,\\!080"),
    ("5x - 7y + 11z - 4 = 0", "5x - 7y + 11z + 4 = 0"),             # plane shifted
    ("y = 2x - 3", "y = 2x + 3"),
    ("\\text{west}", "\\text{east}"),
    ("(0,9) \\cup (9,35)", "(0,9) \\cup (9,36)"),
    ("8\\pi", "7\\pi"),
    ("1 \\pm \\sqrt{17}", "1 \\pm \\sqrt{19}"),
    ("\\text{(D)}", "\\text{(C)}"),
    ("-\\sqrt{3}", "\\sqrt{3}"),
    ("2^{10}", "2048"),                                             # wrong power
    ("\\frac{1}{3}", "3"),
    ("3.22", "3.21"),
]
EQUIVALENT = [  # (model answer, gold answer): the same answer written another way
    ("0.75", "\\frac34"),
    ("3/4", "\\dfrac{3}{4}"),
    ("\\frac{2}{4}", "\\frac{1}{2}"),
    ("90", "90^\\circ"),
    ("10080", "10,\\!080"),
    ("1,-2", "-2,1"),
    ("(3,\\frac{\\pi}{2})", "\\left( 3, \\frac{\\pi}{2} \\right)"),
    ("\\frac{1}{\\sqrt{3}}", "\\frac{\\sqrt{3}}{3}"),
    ("5", "x=5"),
    ("\\text{Evelyn}", "\\text{Evelyn}"),
    ("32348", "\\$32,\\!348"),
    ("x^2+2x+1", "(x+1)^2"),
    ("\\frac{9}{5}", "1\\frac{4}{5}"),
    ("3-13x", "-13x+3"),
    ("\\frac{\\pi}{2}", "\\dfrac{\\pi}{2}"),
    ("11\\sqrt{2}", "11\\sqrt2"),
    ("2\\sqrt{13}\\cdot\\frac{3}{2}", "3\\sqrt{13}"),
    ("0.0000672", ".0000672"),
    ("5.4", "5.4 \\text{ cents}"),
    ("18.9", "\\$18.90"),
    ("1+\\sqrt{19}, 1-\\sqrt{19}", "1 \\pm \\sqrt{19}"),
]


# --- MATH-500: every reference solution's final \boxed{} grades correct -----------------------

def test_math500_ships_500_problems_with_license():
    items = Math500().eval_items()
    assert len(items) == 500 and items[0].id == "math500-0" and items[-1].id == "math500-499"
    assert items[0].answer == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert "MIT License" in (PACKAGED_FILE.parent / "LICENSE").read_text()
    with pytest.raises(RaceError, match="not a training task"):
        Math500().train_items()


def test_math500_references_grade_correct_with_the_normaliser():
    wrong = [r["unique_id"] for r in ROWS if not grade("math-normalizer", r["solution"], r["answer"])]
    assert wrong == []  # 500 / 500


@needs_math_verify
def test_math500_references_grade_correct_with_math_verify():
    wrong = [r["unique_id"] for r in ROWS if not grade("math-verify", r["solution"], r["answer"])]
    assert wrong == []  # 500 / 500


def test_math500_answer_against_the_next_problems_answer_is_wrong():
    """499 pairs of different references: none may grade equal (no two consecutive answers share a value)."""
    pairs = [(a["answer"], b["answer"]) for a, b in zip(ROWS, ROWS[1:]) if normalize(a["answer"]) != normalize(b["answer"])]
    assert len(pairs) > 450
    assert [p for p in pairs if math_equal(*p)] == []


# --- near-misses: wrong under both graders ------------------------------------------------------

@pytest.mark.parametrize("pred, gold", NEAR_MISSES)
def test_near_miss_is_wrong_under_the_normaliser(pred, gold):
    assert not math_equal(pred, gold)
    assert not grade("math-normalizer", f"So the answer is $\\boxed{{{pred}}}$.", gold)


@needs_math_verify
@pytest.mark.parametrize("pred, gold", NEAR_MISSES)
def test_near_miss_is_wrong_under_math_verify(pred, gold):
    assert not grade("math-verify", f"So the answer is $\\boxed{{{pred}}}$.", gold)
    assert not grade("math", f"So the answer is $\\boxed{{{pred}}}$.", gold)  # the two together


def test_enough_near_misses():
    assert len(NEAR_MISSES) >= 30 and len(set(NEAR_MISSES)) == len(NEAR_MISSES)


@pytest.mark.parametrize("pred, gold", EQUIVALENT)
def test_equivalent_forms_are_right_under_the_normaliser(pred, gold):
    assert math_equal(pred, gold)
    assert grade("math-normalizer", f"$\\boxed{{{pred}}}$", gold)


# --- extraction and normalisation, by hand -------------------------------------------------------

def test_last_boxed_and_extraction():
    assert last_boxed("a $\\boxed{1}$ then $\\boxed{\\frac{a}{b^{2}}}$") == "\\frac{a}{b^{2}}"
    assert last_boxed("\\boxed 5$") == "5"
    assert last_boxed("\\boxed{\\frac{1}{2}") is None  # truncated: no complete box
    assert extract_math_answer("so 3+4=7\n#### 7") == "7"
    assert extract_math_answer("The final answer is $\\frac{3}{4}$.") == "\\frac{3}{4}"
    assert extract_math_answer("no answer here") is None and extract_math_answer(None) is None


def test_normalize_by_hand():
    assert normalize("\\left( 3, \\dfrac{\\pi}{2} \\right)") == "(3,\\frac{\\pi}{2})"
    assert normalize("10,\\!080") == "10080"
    assert normalize("\\text{(C)}") == "(C)"
    assert normalize("864 \\mbox{ inches}^2") == "864"
    assert normalize("x = 5") == "5"
    assert normalize("4210_{5}") == "4210_5"
    assert normalize("\\frac 59") == "\\frac{5}{9}"
    assert normalize("x \\in [-2,7]") == "[-2,7]"


def test_never_raises_on_junk():
    for junk in ["", "}", "\\frac{", "((", "1/0", "\\sqrt{-1}", "2^{99999}", "x^{x^{x^{x}}}", "\\begin{pmatrix}"]:
        assert math_equal(junk, "1") in (True, False)
        assert grade("math", junk, "1") in (True, False)
    assert math_equal(None, "1") is False and grade("math", None, "1") is False


# --- graders and the rule reward --------------------------------------------------------------

def test_rule_reward_uses_the_math_grader():
    text = "We get $x = \\dfrac{14}{3}$, so the answer is $\\boxed{\\frac{14}{3}}$."
    assert rule_reward(text, "\\frac{14}{3}", grader="math") == 1.0
    assert rule_reward(text, "\\frac{14}{3}", grader="math-normalizer") == 1.0
    assert rule_reward(text, "\\frac{14}{5}", grader="math") == 0.0
    assert rule_reward(text, "\\frac{14}{3}") == 1.0  # number grader: 14/3 as a number
    rewards, _ = score_batch([text, "\\boxed{\\text{(C)}}"], ["14/3", "\\text{(C)}"], grader="math-normalizer")
    assert rewards == [1.0, 1.0]


def test_math_grader_falls_back_to_the_normaliser(monkeypatch):
    monkeypatch.setattr(graders, "_MV", None)  # as if math-verify were not installed
    assert not math_verify_available()
    assert grade("math", "$\\boxed{\\dfrac{3}{4}}$", "0.75")
    assert not grade("math", "$\\boxed{\\dfrac{4}{3}}$", "0.75")
    with pytest.raises(RaceError, match="math-verify is not installed"):
        graders.check_grader("math-verify")
    with pytest.raises(RaceError, match="pip install 'race-cli\\[math\\]'"):
        grade("math-verify", "\\boxed{1}", "1")


def test_unknown_grader():
    with pytest.raises(RaceError, match="expected one of number, math"):
        grade("exact", "1", "1")
