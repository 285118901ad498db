"""Rewards: the rule-based outcome check (rule.py, pure Python) and process reward models (prm.py, torch).

The answer checkers both use (extracting and comparing final answers) are race_cli/answers/.
Importing this package loads neither torch nor transformers: prm.py imports them inside the
functions that need them.
"""

from race_cli.rewards.rule import rule_reward, score_batch

__all__ = ["rule_reward", "score_batch"]
