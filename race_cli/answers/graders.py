"""Graders: is a completion's final answer the gold answer? One name per answer convention.

    grade("math", "... so $\\boxed{\\dfrac{3}{4}}$.", "0.75")   # True
    grade("number", "45+74=119\\n119-27=92\\n#### 92", "92")   # True

| grader            | reads                                   | compares with |
|-------------------|-----------------------------------------|---------------|
| `number`          | `#### N`, `\\boxed{N}`, "answer is N", last number (number.extract_answer) | numeric value (number.answers_match) |
| `math`            | the last `\\boxed{}`                    | the normaliser; when it finds them different and math-verify is installed, math-verify decides |
| `math-verify`     | as `math`, but refuses to run without math-verify | math-verify |
| `math-normalizer` | the last `\\boxed{}`, else `####` / "answer is" (math.extract_math_answer) | race's normaliser (math.math_equal), whatever is installed |

`math` asks the normaliser first because it is much faster than math-verify (more so on a loaded
machine) and never times out, and has graded none of the test suite's
near-misses or MATH-500 cross-pairs as equal; math-verify then only adds right verdicts for forms
the normaliser does not cover. math-verify runs with 30-second parse/verify timeouts (its default
is 5) so a busy machine does not turn a right answer wrong; a call that still times out counts
as wrong.

`number` is the GSM8K / arithmetic convention (prompts ask for `#### <number>`); the `math`
family is the MATH convention (prompts ask for `\\boxed{}`). The rule reward (rewards/rule.py) and the
evaluation of every target use these same functions, so training and evaluation on MATH-style
data agree. Pure Python; math-verify (the `math` extra) is imported lazily.
"""

from __future__ import annotations

from typing import Callable

from race_cli.answers.math import grade_completion
from race_cli.answers.number import answers_match, extract_answer
from race_cli.errors import RaceError

GRADERS = ("number", "math", "math-verify", "math-normalizer")
TIMEOUT_S = 30  # math-verify's parse and verify timeouts, seconds (its default: 5)
MATH_GRADERS = ("math", "math-verify", "math-normalizer")


def _number(completion: str, gold: str) -> bool:
    return answers_match(extract_answer(completion), gold)


def _normalizer(completion: str, gold: str) -> bool:
    return grade_completion(completion, gold)


_MV: tuple | None | bool = False  # False = not looked up yet, None = not installed


def math_verify() -> tuple | None:
    """(parse, verify) from the optional math-verify package, or None when it is not installed.

    The one place race looks it up (the graders here and the rule reward's use_math_verify)."""
    global _MV
    if _MV is False:
        try:
            from math_verify import parse, verify

            _MV = (parse, verify)
        except ImportError:
            _MV = None
    return _MV


def math_verify_available() -> bool:
    """True when the optional `math-verify` package imports."""
    return math_verify() is not None


def _math_verify(completion: str, gold: str) -> bool:
    """math-verify's verdict: the gold parsed as LaTeX (`$gold$`), the completion with its default
    extraction (last `\\boxed{}` first). Any parser failure means "not equal"."""
    if not math_verify_available():
        raise RaceError("The math-verify grader needs the math-verify package: "
                        "pip install 'race-cli[math]' (or use grader math-normalizer).")
    parse, verify = _MV
    try:
        gold_parsed = parse(f"${gold}$", parsing_timeout=TIMEOUT_S) or parse(gold, parsing_timeout=TIMEOUT_S)
        return bool(gold_parsed) and bool(verify(gold_parsed, parse(completion, parsing_timeout=TIMEOUT_S),
                                                 timeout_seconds=TIMEOUT_S))
    except Exception:  # noqa: BLE001 - math-verify's parser and sympy raise many types
        return False


def _math(completion: str, gold: str) -> bool:
    return _normalizer(completion, gold) or (math_verify_available() and _math_verify(completion, gold))


_FUNCS: dict[str, Callable[[str, str], bool]] = {
    "number": _number, "math": _math, "math-verify": _math_verify, "math-normalizer": _normalizer}


def check_grader(name: str, where: str = "grader") -> None:
    """Refuse an unknown grader name, or math-verify when it is not installed (RaceError)."""
    if name not in _FUNCS:
        raise RaceError(f"{where}={name!r} is unknown: expected one of {', '.join(GRADERS)}.")
    if name == "math-verify" and not math_verify_available():
        raise RaceError(f"{where}=math-verify but math-verify is not installed: pip install 'race-cli[math]', "
                        "or use math (race's normaliser, then math-verify when installed) or math-normalizer.")


def grade(name: str, completion: str | None, gold: str | None) -> bool:
    """True when `completion`'s final answer equals `gold` under grader `name`; never raises on text."""
    if name not in _FUNCS:
        check_grader(name)
    if not isinstance(completion, str) or not isinstance(gold, str) or not completion or not gold:
        return False
    return _FUNCS[name](completion, gold)
