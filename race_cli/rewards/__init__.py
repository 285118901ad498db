"""Rewards: the rule-based outcome check (rule.py, pure Python) and process reward models (prm.py, torch).

Importing this package loads neither torch nor transformers: prm.py imports them inside the
functions that need them.
"""

from race_cli.rewards.rule import answers_match, extract_answer, normalize_number, rule_reward, score_batch

__all__ = ["answers_match", "extract_answer", "normalize_number", "rule_reward", "score_batch"]
