"""benchmarks/bench_default_truth.py: the README's default run read as a known truth (the archive
tests/data/readme-run.tar.xz, real job files), and the noise it simulates matching the run's measured spread."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_default_truth as B  # noqa: E402

ARCHIVE = ROOT / "tests" / "data" / "readme-run.tar.xz"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return B.unpacked(ARCHIVE, tmp_path_factory.mktemp("readme-run"))


def test_the_truth_is_each_regimes_seed_mean_and_each_conditions_pooled_job_spread(sweep):
    truth, targets, items, samples = B.read_truth(sweep)
    assert targets == ["arithmetic", "arithmetic-hard"] and (items, samples) == (1200, 2)  # conf/grid/tiny.yaml
    assert sorted(truth) == [("tiny-m", "prm"), ("tiny-m", "rule"), ("tiny-s", "prm"), ("tiny-s", "rule")]
    # one regime recomputed by hand from its own summary.json files
    finals = [json.loads(f.read_text())["eval"] for f in sorted((sweep / "jobs").glob("tiny-m_G4_mu1_rule_s*/summary.json"))]
    t = truth[("tiny-m", "rule")]
    assert t["regimes"] == ["G=4 μ=1", "G=4 μ=2", "G=8 μ=1", "G=8 μ=2"]
    assert t["acc"]["arithmetic"][0] == pytest.approx(np.mean([e["arithmetic"] for e in finals]))
    assert 0 < t["job_var"] < 0.03 ** 2  # job means of one regime differ by a few points at most


@pytest.mark.parametrize("job_var", [1e-5, 5e-5, 2e-4])
def test_the_simulated_spread_between_two_runs_is_the_measured_one(job_var):
    acc, items, samples = [0.4, 0.5], 1200, 2
    sd, alike = B.noise_of(job_var, acc, items, samples)
    floor = 0.45 * 0.55 / (items * samples)  # p(1 - p)/(items x samples) at the mean accuracy 0.45
    # seed variance plus the item sampling the runs do not share: the measured job variance, either way
    assert sd ** 2 + (1 - alike) * floor == pytest.approx(job_var)
    assert alike >= B.ALIKE and (sd == 0 or alike == B.ALIKE)


def test_a_simulated_sweep_races_every_condition_and_target_of_the_run(sweep):
    from race_cli.stats.race import Schedule

    truth, targets, items, samples = B.read_truth(sweep)
    states, jobs = B.simulate(truth, targets, items, samples, Schedule((2, 3, 4), 0.05, 0.05, "calibrated"),
                              np.random.default_rng(0), "normal", 1.0)
    assert len(states) == 8 and set(states.values()) <= {"winner", "equivalent", "undecided"}
    assert 32 <= jobs <= 64 and not math.isnan(jobs)  # 16 regimes x 2 to 4 seeds
