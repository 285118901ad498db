"""Rule-based outcome reward: 1.0 when a completion's final answer is the gold, else 0.0.

Pure Python (no torch): `rule_reward(completion, gold)` reads the answer and compares it with the
numeric check of race_cli/answers/number.py (`extract_answer`, `answers_match`: `#### N`,
`\\boxed{N}`, "answer is N", the last number). Its cost is CPU seconds only (0 FLOPs in the ledger).

`grader=` picks the answer convention (race_cli/answers/graders.py): `number` (the default,
the numeric check) or `math` / `math-verify` / `math-normalizer` for MATH-style data, where the
reward is the same verdict the evaluation of a MATH target gives.

`use_math_verify=True` (with grader `number`) additionally asks the `math-verify` package (optional, imported lazily)
when the numeric check fails, for MATH-style answers (`\\sqrt{2}`, intervals, expressions); when
it is not installed the numeric check alone decides.
"""

from __future__ import annotations

import time
from typing import Sequence

from race_cli.answers.graders import grade, math_verify
from race_cli.answers.number import answers_match, extract_answer
from race_cli.errors import RaceError


def _math_verify_match(completion: str, gold: str) -> bool:
    mv = math_verify()
    if mv is None:
        return False
    parse, verify = mv
    try:
        gold_parsed = parse(gold) or parse(f"${gold}$")
        return bool(gold_parsed) and bool(verify(gold_parsed, parse(completion)))
    except Exception:  # noqa: BLE001 - math-verify's parser and sympy raise many types; a failure means "no match"
        return False


def rule_reward(completion: str, gold: str, *, use_math_verify: bool = False, grader: str = "number") -> float:
    """1.0 when the completion's final answer (`extract_answer`) equals `gold`, else 0.0.

    use_math_verify: when the numeric check fails, ask math-verify (if installed) whether the
        completion's answer is mathematically equal to `gold` (MATH-style answers).
    grader: "number" (the numeric check above) or a MATH grader of race_cli.answers.graders.
    """
    if grader != "number":
        return 1.0 if grade(grader, completion, gold) else 0.0
    if answers_match(extract_answer(completion), gold):
        return 1.0
    if use_math_verify and isinstance(completion, str) and isinstance(gold, str):
        return 1.0 if _math_verify_match(completion, gold) else 0.0
    return 0.0


def score_batch(completions: Sequence[str], golds: Sequence[str], *,
                use_math_verify: bool = False, grader: str = "number") -> tuple[list[float], float]:
    """Rule rewards of paired completions and gold answers, and the wall seconds it took."""
    if len(completions) != len(golds):
        raise RaceError(f"score_batch got {len(completions)} completions but {len(golds)} gold answers; "
                        "pass one gold answer per completion (repeat a prompt's gold for each of its G rollouts).")
    start = time.perf_counter()
    rewards = [rule_reward(c, g, use_math_verify=use_math_verify, grader=grader) for c, g in zip(completions, golds)]
    return rewards, time.perf_counter() - start
