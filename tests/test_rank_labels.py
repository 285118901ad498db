"""Regime labels name the knobs that vary, and only those that say something (report/rank.py)."""

from __future__ import annotations

import pandas as pd

from race_cli.report.rank import label_jobs, regime_columns


def test_m_equal_to_g_everywhere_is_not_a_knob():
    # the README's pilot: G = 4, 8 and no down-sampling, so each job's m (update_group_size) is its G
    jobs = pd.DataFrame({"group_size": [4, 4, 8, 8], "update_group_size": [4, 4, 8, 8], "seed": [0, 1, 0, 1]})
    cols = regime_columns(jobs, ["group_size", "update_group_size"], by=[])
    assert cols == ["group_size"]
    assert list(label_jobs(jobs, [], cols)["regime"]) == ["G=4", "G=4", "G=8", "G=8"]
    # a down-sampling grid keeps m: G = 8 updating on m = 2 or 8 rollouts are two regimes
    down = jobs.assign(group_size=8, update_group_size=[2, 2, 8, 8])
    assert regime_columns(down, ["group_size", "update_group_size"], by=[]) == ["update_group_size"]
