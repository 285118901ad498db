"""The numeric answer check (answers/number.py) and the rule reward: answer extraction by
hand-written cases, and every real GSM8K solution end to end."""

from __future__ import annotations

import json
import random

import pytest

from race_cli.errors import RaceError
from race_cli.answers import graders
from race_cli.answers.number import answers_match, extract_answer, normalize_number
from race_cli.rewards.rule import rule_reward, score_batch
from race_cli.tasks.gsm8k import PACKAGED_DIR, open_text

GSM8K = PACKAGED_DIR  # shipped in race_cli/data/gsm8k (train as .jsonl.gz)


# --- each extraction form -----------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    # `#### N`, GSM8K's form; the first one wins (a model running on into a new problem)
    ("16-3-4=<<16-3-4=9>>9 eggs\n#### 18", "18"),
    ("#### 1,080", "1080"),
    ("#### $70,000.", "70000"),
    ("####-3", "-3"),
    ("#### **42**", "42"),
    ("so 18\n#### 18\nQ: 2+2\nA: 4\n#### 4", "18"),
    # `####` as a markdown heading is not an answer: falls through
    ("#### Step 1: add\n3+4=7\n#### 7", "7"),
    ("#### 1. Compute the total\nThe answer is 9.", "9"),
    ("#### 9*2=18", "18"),  # an expression after ####: last number
    # \boxed{}: the last complete box, nested braces
    ("so $\\boxed{\\dfrac{3}{4}}$", "3/4"),
    ("\\boxed{\\frac{1}{2}} no wait \\boxed{18 \\text{ dollars}}", "18"),
    ("\\boxed{-\\tfrac{3}{4}}", "-3/4"),
    ("\\boxed{x = 1{,}234}", "1234"),
    ("\\fbox{\\$12.50}", "12.5"),
    ("\\boxed{\\sqrt{2}} is about 1.41", None),  # a complete non-numeric box is the answer
    ("the sum is \\boxed{18", "18"),  # truncated box: last number
    # "answer is N" / "answer: N": the last one
    ("The answer is $18.", "18"),
    ("Final Answer: −5", "-5"),
    ("the answer is 7. Actually the answer is 8", "8"),
    ("So the answer is: 3.50 dollars", "3.5"),
    ("The answer is 45+74=119", "119"),  # expression: falls through to the last number
    # "A: N"
    ("Q: 2+2\nA: 4", "4"),
    ("A: 45+74=119\n119-27=92", "92"),
    # last number fallback
    ("she pays 42 dollars.", "42"),
    ("45-27", "27"),  # a difference, not a negative number
    ("x = -27", "-27"),
    ("(−3)", "-3"),
    ("a 50% rise", "50"),
    ("costs €12 or £7.", "7"),
    ("-$5", "-5"),
    ("$-5", "-5"),
    (".5 of it", "0.5"),
])
def test_extract_forms(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("１２ apples", "12"),  # full-width digits (Nd) -> ASCII
    ("#### ١٢٣", "123"),  # Arabic-Indic digits
    ("٣٫٥", "3.5"),  # Arabic decimal separator
    ("x² = 4", "4"),  # superscript two is not a decimal digit: never read as a number
    ("5²", "5"),
    ("ⅻ", None),  # a roman numeral character is a number sign, not a digit
])
def test_extract_unicode(text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("1,234", "1234"), ("$1,234.50", "1234.5"), ("003.500", "3.5"), ("2.0", "2"), ("-0", "0"),
    ("\\frac{6}{8}", "6/8"), ("25%", "25"), ("18.", "18"), ("inf", None), ("nan", None), ("1 2", None),
    ("", None), ("3/0", None),
])
def test_normalize_number(text, expected):
    assert normalize_number(text) == expected


# --- comparison ---------------------------------------------------------------------

@pytest.mark.parametrize("pred, gold, same", [
    ("3/4", "0.75", True), ("\\frac{6}{8}", "0.75", True), ("3.50", "3.5", True), ("1,234", "1234", True),
    ("$5", "5", True), ("-0", "0", True), ("5%", "5", True), ("−2", "-2", True),
    ("0.3333333", "1/3", True),  # |diff| = 3.3e-8 <= 1e-6 * 1/3
    ("0.333", "1/3", False),  # |diff| = 3.3e-4
    ("18", "19", False), ("-18", "18", False),
    (str(10**400), str(10**400), True),
    (str(2 * 10**400), str(10**400), False),  # float() would overflow here; Fraction does not
    ("1" * 5000, "1" * 5000, True),  # beyond int()'s 4300-digit limit: compared as strings
    ("1" * 5000, "1" * 4999 + "2", False),
    ("inf", "inf", False), ("nan", "nan", False), ("Infinity", "1", False),
    (None, "1", False), ("", "", False), ("3/0", "3/0", False), ("five", "5", False),
])
def test_answers_match(pred, gold, same):
    assert answers_match(pred, gold) is same


def test_rule_reward_values():
    assert rule_reward("9*2=18\n#### 18", "18") == 1.0
    assert rule_reward("9*2=18\n#### 18", "19") == 0.0
    assert isinstance(rule_reward("", "1"), float)


# --- malformed input never raises ----------------------------------------------------

MALFORMED = ["", " ", "####", "#### ", "####\n", "\\boxed{", "\\boxed{}", "}}}{{{", "#" * 10_000,
             "1" * 100_000, "1," * 50_000, str(10**400), "٫", "−", "$", "%", "１２³", "\\frac{}{}",
             "\\frac{1}{0}", "3/0", "A:", "answer is", "\x00\x01", "#### 1e999999999", "9" * 4301 + "/" + "0"]


@pytest.mark.parametrize("text", MALFORMED, ids=range(len(MALFORMED)))
def test_malformed_never_raises(text):
    assert extract_answer(text) is None or isinstance(extract_answer(text), str)
    for gold in ("0", "1", text):
        assert rule_reward(text, gold) in (0.0, 1.0)
        assert answers_match(text, gold) in (True, False)


def test_random_unicode_never_raises():
    """2,000 random strings over digits of several scripts, signs, LaTeX and markup characters."""
    rng = random.Random(0)
    pool = list("0123456789,./-+$%#{}\\ \n=*x") + ["١", "۳", "５", "−", "²", "٫", "\\boxed{", "\\frac{", "####", "A:"]
    for _ in range(2000):
        text = "".join(rng.choice(pool) for _ in range(rng.randint(0, 40)))
        assert rule_reward(text, "12") in (0.0, 1.0)


def test_non_strings_never_raise():
    for bad in (None, 12, b"#### 3"):
        assert extract_answer(bad) is None
        assert rule_reward(bad, "3") == 0.0


# --- batch helper and math-verify ---------------------------------------------------

def test_score_batch():
    rewards, seconds = score_batch(["#### 1", "#### 2", "no"], ["1", "3", "0"])
    assert rewards == [1.0, 0.0, 0.0]
    assert seconds >= 0.0
    with pytest.raises(RaceError, match="one gold answer per completion"):
        score_batch(["#### 1"], ["1", "2"])


def test_math_verify_missing_falls_back(monkeypatch):
    monkeypatch.setattr(graders, "_MV", None)  # as if the package were not installed
    assert rule_reward("\\boxed{\\sqrt{2}}", "\\sqrt{2}", use_math_verify=True) == 0.0
    assert rule_reward("#### 7", "7", use_math_verify=True) == 1.0


def test_math_verify_when_installed():
    pytest.importorskip("math_verify", reason="math-verify not installed (optional: pip install 'race-cli[math]')")
    monkey = graders._MV
    try:
        graders._MV = False  # look it up again
        # sqrt(2)/2 == 1/sqrt(2): not a plain number, so only math-verify can say so
        assert rule_reward("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", use_math_verify=True) == 1.0
        assert rule_reward("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}") == 0.0
        assert rule_reward("\\boxed{\\sqrt{3}}", "\\sqrt{2}", use_math_verify=True) == 0.0
    finally:
        graders._MV = monkey


# --- every real GSM8K solution ------------------------------------------------------

def _gold_rows(split: str) -> list[tuple[str, str]]:
    file = GSM8K / f"{split}.jsonl"
    with open_text(file if file.is_file() else file.with_suffix(".jsonl.gz")) as f:
        rows = [json.loads(line) for line in f]
    return [(r["answer"], r["answer"].rpartition("####")[2].strip()) for r in rows]


@pytest.mark.parametrize("split", ["train", "test"])
def test_every_gsm8k_solution_scores_its_own_answer(split):
    """Each raw solution (calculator annotations included) is 1 against its gold and 0 against
    the next item whose gold is a different number."""
    rows = _gold_rows(split)
    assert len(rows) == {"train": 7473, "test": 1319}[split]
    for i, (solution, gold) in enumerate(rows):
        assert rule_reward(solution, gold) == 1.0, (split, i, gold)
        j = (i + 1) % len(rows)
        while answers_match(rows[j][1], gold):
            j = (j + 1) % len(rows)
        assert rule_reward(solution, rows[j][1]) == 0.0, (split, i, gold, rows[j][1])
