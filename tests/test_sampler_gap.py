"""engine/sampler_gap.py: the sampled-vs-trained gap, by hand, and the summary's flag."""

import math

import pytest

torch = pytest.importorskip("torch")

from race_cli.engine.sampler_gap import GAP_BOUND, GapSums, gap_summary, gap_warning  # noqa: E402


def test_gap_sums_by_hand():
    # two rows; row 0 has 3 tokens, row 1 has 1 (then padding, whose values must not count)
    q = torch.tensor([[-1.0, -2.0, -0.5, 9.0], [-3.0, 7.0, 7.0, 7.0]])
    p = torch.tensor([[-1.1, -2.0, -0.3, 0.0], [-2.5, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0]])
    sums = GapSums()
    sums.add(q, p, mask)
    m = sums.metrics()
    # |q - p| on real tokens: 0.1, 0, 0.2 | 0.5 -> mean 0.8 / 4 = 0.2, max 0.5
    assert m["rollout/logp_gap_mean"] == pytest.approx(0.2, abs=1e-7)
    assert m["rollout/logp_gap_max"] == pytest.approx(0.5, abs=1e-7)
    # per sequence sum of (q - p): row 0 = 0.1 + 0 - 0.2 = -0.1, row 1 = -0.5; mean over 2 sequences = -0.3
    assert m["rollout/kl_sampler_trainer"] == pytest.approx(-0.3, abs=1e-7)
    assert (sums.tokens, sums.sequences) == (4, 2)
    again = GapSums.from_json(sums.to_json()).merge(sums)  # a job's totals survive the checkpoint's JSON
    assert again.metrics()["rollout/logp_gap_mean"] == pytest.approx(0.2) and again.tokens == 8


def test_no_compared_token_gives_no_metric_and_no_summary():
    assert GapSums().metrics() == {} and gap_summary(GapSums(), 0, "float32") is None


def test_the_summary_flags_a_gap_over_the_bound_and_says_so():
    ok = GapSums(tokens=100, sequences=10, abs_sum=100 * 2e-7, max_abs=1e-6, seq_logratio_sum=0.0)
    s = gap_summary(ok, 0, torch.float32)
    assert s["bound"] == GAP_BOUND["float32"] == 1e-4 and s["exceeded"] is False and gap_warning(s) is None
    stale = GapSums(tokens=100, sequences=10, abs_sum=100 * 0.116, max_abs=0.34, seq_logratio_sum=1.7)
    s = gap_summary(stale, 3, torch.float32)
    assert s["exceeded"] is True and math.isclose(s["kl_sampler_trainer"], 0.17)
    line = gap_warning(s)
    assert line.startswith("warning: the policy vLLM sampled from is not the policy trained") and "3 iterations" in line
    assert gap_summary(stale, 3, torch.bfloat16)["exceeded"] is True  # 0.116 > 0.05 in bf16 too
