"""The GRPO loop learns: a reward any working loop must climb, on the real tiny-s policy and the real job code.

The toy reward is 1 when the completion's last number is even (the policy's base rate is about one
half: the parity of an arithmetic answer is close to a coin flip). Nothing about arithmetic has to be
learnt to raise it, only a preference the policy can express in its last digits, so a loop whose
advantages, loss, optimizer step or sampler is broken leaves it flat (or drives it down), and a sound
loop drives it up within a hundred iterations. The figures quoted in the assertion come from a
measurement on this machine (2 cores): see the comment beside it.
"""

from __future__ import annotations

import re

import pytest

from race_cli.engine.setup import RewardResult
from race_cli.cost.flops import Flops

_NUMBER = re.compile(r"-?\d+")


def parity_reward(items: list, completions: list[str]) -> RewardResult:
    """1.0 when the last integer in a completion is even, else 0.0 (no number: 0.0)."""
    rewards = []
    for text in completions:
        numbers = _NUMBER.findall(text)
        rewards.append(1.0 if numbers and int(numbers[-1]) % 2 == 0 else 0.0)
    return RewardResult(rewards, Flops(), 0.0)


@pytest.mark.slow
def test_the_loop_climbs_a_reward_any_working_grpo_loop_must_climb(tiny_s, tmp_path):
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    overrides = ["grid=none", "model=tiny-s", "threads=1", "seed=0", "budget.flops=1e13",
                 "grpo.prompts_per_iter=8", "grpo.group_size=8", "task.num_eval=8"]
    (tmp_path / "job").mkdir()
    job = Job(compose(overrides), tmp_path / "job", overrides, log=lambda msg: None)
    job.setup()
    job.reward = parity_reward  # the only change: what is rewarded
    job.start_or_resume()
    means = []
    for i in range(1, 101):
        means.append(job.iterate(i)["train/reward_mean"])
        job.iteration = i
    first, last = sum(means[:10]) / 10, sum(means[-10:]) / 10
    # measured (tiny-s, LoRA lr 1e-3, this machine): first ten iterations 0.455, last ten (91-100) 0.961
    # (at iterations 51-60 only 0.655); a broken sign or a zero gradient stays near 0.5 (+-0.06 for 10 x 64)
    assert last >= first + 0.2 and last >= 0.75, (first, last, means)
