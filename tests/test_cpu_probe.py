"""race plan's CPU rates scaled by a cached probe of the machine (race_cli/plan/cpu_probe.py).

The cache logic runs with a stand-in probe (a function returning seconds), so it is exact and fast; one
test runs the real probe in a child interpreter and checks `race plan`'s own process never imports torch.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.cost import walltime as W
from race_cli.errors import RaceError
from race_cli.plan import cpu_probe as P

ROOT = Path(__file__).resolve().parents[1]


class Probe:
    """A stand-in for run_probe: returns the given seconds and counts its calls."""

    def __init__(self, *seconds: float):
        self.seconds, self.calls = list(seconds), 0

    def __call__(self) -> float:
        self.calls += 1
        return self.seconds.pop(0)


def test_scaled_rates_by_hand():
    r = W.Rates({"rollout": 1e9, "update": 4e9, "reward": 2e9}, eval_s=3.0, overhead_s=5.0, source="ref",
                eval_completions=1600)
    s = W.scaled(r, 2.0, "here")
    assert s.flops_per_s == {"rollout": 2e9, "update": 8e9, "reward": 4e9}
    assert (s.eval_s, s.overhead_s, s.source, s.eval_completions) == (1.5, 2.5, "here", 1600)
    # a job of 4e9 rollout + 8e9 update FLOPs, 2 evaluations: (4 + 2 + 2 * 3 + 5) s at 1x, half at 2x
    flops = {"rollout": 4e9, "update": 8e9, "reward": 0.0}
    one = W.job_seconds(flops, r, iterations=10, eval_every=10).total
    two = W.job_seconds(flops, s, iterations=10, eval_every=10).total
    assert one == pytest.approx(4 + 2 + 2 * 3 + 5) and two == pytest.approx(one / 2)
    with pytest.raises(ValueError):
        W.scaled(r, 0.0, "x")


def test_probe_once_then_cached_per_machine(tmp_path):
    path = tmp_path / "cpu-probe.json"
    probe = Probe(P.REFERENCE_SECONDS / 2, P.REFERENCE_SECONDS / 4)
    first = P.machine_speed("cached", path=path, probe=probe)
    assert (first.factor, first.cached, probe.calls) == (pytest.approx(2.0), False, 1)
    assert "x 2.00" in first.source and "--reprobe" in first.source
    again = P.machine_speed("cached", path=path, probe=probe)
    assert (again.factor, again.cached, probe.calls) == (pytest.approx(2.0), True, 1)  # no second probe
    assert "cached probe" in again.source
    entry = json.loads(path.read_text())["machines"][P._key(P.fingerprint())]
    assert entry["fingerprint"] == P.fingerprint() and entry["seconds"] == pytest.approx(P.REFERENCE_SECONDS / 2)
    fresh = P.machine_speed("refresh", path=path, probe=probe)  # race plan --reprobe
    assert (fresh.factor, probe.calls) == (pytest.approx(4.0), 2)
    assert P.machine_speed("cached", path=path, probe=probe).factor == pytest.approx(4.0)


def test_another_machines_entry_is_kept_and_not_used(tmp_path):
    path = tmp_path / "cpu-probe.json"
    other = {"version": 1, "machines": {"cpu=elsewhere": {"seconds": 1.0, "fingerprint": {"cpu": "elsewhere"}}}}
    path.write_text(json.dumps(other))
    probe = Probe(P.REFERENCE_SECONDS)
    assert P.machine_speed("cached", path=path, probe=probe).factor == pytest.approx(1.0) and probe.calls == 1
    assert set(json.loads(path.read_text())["machines"]) == {"cpu=elsewhere", P._key(P.fingerprint())}


def test_an_entry_of_another_probe_version_is_probed_again(tmp_path):
    """A cached figure from another probe (its work or statistic) is not comparable with REFERENCE_SECONDS."""
    path = tmp_path / "cpu-probe.json"
    old = {"seconds": P.REFERENCE_SECONDS / 5, "fingerprint": P.fingerprint()}  # version 1 wrote no "probe"
    for entry in (old, {**old, "probe": P.VERSION - 1}):
        path.write_text(json.dumps({"version": 1, "machines": {P._key(P.fingerprint()): entry}}))
        probe = Probe(P.REFERENCE_SECONDS / 2)
        speed = P.machine_speed("cached", path=path, probe=probe)
        assert (speed.factor, speed.cached, probe.calls) == (pytest.approx(2.0), False, 1)
        assert json.loads(path.read_text())["machines"][P._key(P.fingerprint())]["probe"] == P.VERSION


@pytest.mark.parametrize("seconds", [float("inf"), float("nan"), 0.0, -1.0, "0.02", True])
def test_a_cached_figure_that_is_not_a_finite_positive_number_is_probed_again(tmp_path, seconds):
    path = tmp_path / "cpu-probe.json"
    entry = {"seconds": seconds, "probe": P.VERSION, "fingerprint": P.fingerprint()}
    path.write_text(json.dumps({"version": 1, "machines": {P._key(P.fingerprint()): entry}}))  # Infinity, NaN
    probe = Probe(P.REFERENCE_SECONDS / 2)
    assert P.machine_speed("cached", path=path, probe=probe).factor == pytest.approx(2.0) and probe.calls == 1


@pytest.mark.parametrize("text", ["not json", "[]", '{"machines": 3}', '{"machines": {"k": 5}}'])
def test_a_damaged_cache_is_probed_again(tmp_path, text):
    path = tmp_path / "cpu-probe.json"
    path.write_text(text)
    probe = Probe(P.REFERENCE_SECONDS / 3)
    assert P.machine_speed("cached", path=path, probe=probe).factor == pytest.approx(3.0) and probe.calls == 1


def test_off_and_a_failed_probe_use_the_reference_rates_and_say_so(tmp_path):
    probe = Probe()
    off = P.machine_speed("off", path=tmp_path / "c.json", probe=probe)
    assert (off.factor, off.seconds, probe.calls) == (1.0, None, 0) and "RACE_CPU_PROBE=off" in off.source

    def broken() -> float:
        raise RuntimeError("the CPU probe failed: no torch")

    failed = P.machine_speed("refresh", path=tmp_path / "c.json", probe=broken)
    assert failed.factor == 1.0 and "unscaled (the CPU probe failed: no torch)" in failed.source
    assert not (tmp_path / "c.json").exists()
    with pytest.raises(RaceError, match="RACE_CPU_PROBE='fast'"):
        P.machine_speed("fast", path=tmp_path / "c.json", probe=probe)


def test_the_plan_scales_its_cpu_rates_and_names_them(tmp_path, monkeypatch):
    from race_cli.plan.build import build_plan

    monkeypatch.setenv("RACE_CPU_PROBE", "off")
    ref = build_plan(["grid=none", "model=tiny-s", "grpo.group_size=4,8"])
    assert "unscaled" in ref.wall_source
    monkeypatch.setenv("RACE_CACHE", str(tmp_path))
    monkeypatch.setenv("RACE_CPU_PROBE", "cached")
    (tmp_path / P.CACHE_NAME).write_text(json.dumps({"version": 1, "machines": {
        P._key(P.fingerprint()): {"seconds": P.REFERENCE_SECONDS / 2.5, "probe": P.VERSION,
                                  "fingerprint": P.fingerprint()}}}))
    here = build_plan(["grid=none", "model=tiny-s", "grpo.group_size=4,8"])
    assert "x 2.50 (cached probe of this machine" in here.wall_source
    for a, b in zip(ref.jobs, here.jobs):
        assert b.wall.total == pytest.approx(a.wall.total / 2.5)
    calibrated = {"tiny-s": W.Rates({"rollout": 1e9, "update": 1e9, "reward": 1e9}, 1.0, 1.0, source="measured: x")}
    assert build_plan(["grid=none", "model=tiny-s"], rates=calibrated).wall_source == "measured: x"  # wins


def test_the_probe_keeps_every_core_busy_up_to_a_cap():
    assert [P.probe_children(n) for n in (1, 2, 3, 8, 64)] == [1, 2, 3, 8, P.MAX_CHILDREN] and P.MAX_CHILDREN == 8


def test_the_median_is_pooled_over_the_children_and_a_bad_child_fails_the_probe(monkeypatch):
    # each child prints its repeats; with three children of 0.01 0.02 0.06 the pooled nine sort to
    # 0.01 0.01 0.01 0.02 0.02 0.02 0.06 0.06 0.06, and the median (the fifth) is 0.02
    monkeypatch.setattr(P, "PROBE_CODE", "print('0.06 0.01 0.02')")
    assert P.run_probe(children=3) == 0.02
    for code, said in (("import sys; sys.exit('no torch here')", "no torch here"), ("print('fast')", "no output"),
                       ("print('0.01 nan')", "no output"), ("print('')", "no output")):
        monkeypatch.setattr(P, "PROBE_CODE", code)
        with pytest.raises(RuntimeError, match=f"the CPU probe failed: {said}"):
            P.run_probe(children=2)
    monkeypatch.setattr(P, "PROBE_CODE", "import time; time.sleep(30)")
    with pytest.raises(RuntimeError, match="did not finish in 1 s"):
        P.run_probe(timeout=1, children=2)


def test_the_real_probe_runs_in_a_child_and_race_plan_stays_torch_free(tmp_path):
    code = ("import sys; from pathlib import Path; from race_cli.plan.cpu_probe import machine_speed; "
            f"s = machine_speed('refresh', path=Path({str(tmp_path / 'c.json')!r})); "
            "assert 'torch' not in sys.modules; print(s.seconds, s.factor)")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    seconds, factor = map(float, done.stdout.split())
    assert 0 < seconds < 10 and factor == pytest.approx(P.REFERENCE_SECONDS / seconds)
    assert (tmp_path / "c.json").exists()


def test_race_plan_does_not_wait_for_a_first_probe_and_the_next_plan_uses_it(tmp_path):
    """A machine with no cached probe: `race plan` plans on the reference rates and says the probe runs in the
    background; the detached child it leaves behind (started as the plan exits) caches a real reading, and
    the next plan is scaled by it. The test waits for the child (its marker file goes when it ends)."""
    import time

    env = {**os.environ, "PYTHONPATH": str(ROOT), "RACE_CACHE": str(tmp_path), "RACE_CPU_PROBE": "cached",
           "COLUMNS": "200", "CUDA_VISIBLE_DEVICES": ""}
    first = subprocess.run([sys.executable, "-m", "race_cli", "plan", "grid=none"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert first.returncode == 0, first.stderr[-2000:]
    assert "unscaled: this machine's first CPU probe runs in the background" in first.stdout
    deadline = time.monotonic() + 240
    while (tmp_path / P.RUNNING_NAME).exists() and time.monotonic() < deadline:
        time.sleep(1)
    assert not (tmp_path / P.RUNNING_NAME).exists(), "the background probe did not end"
    entry = json.loads((tmp_path / P.CACHE_NAME).read_text())["machines"][P._key(P.fingerprint())]
    assert 0 < entry["seconds"] < 10 and entry["probe"] == P.VERSION
    again = subprocess.run([sys.executable, "-m", "race_cli", "plan", "grid=none"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert f"x {P.REFERENCE_SECONDS / entry['seconds']:.2f} (cached probe of this machine" in again.stdout


def test_a_background_probe_is_started_once_while_it_runs(tmp_path, monkeypatch):
    started = []
    monkeypatch.setattr(P, "_spawn", lambda path: started.append(path))
    monkeypatch.setattr("atexit.register", lambda fn, *a: fn(*a))  # spawn now, not at exit
    monkeypatch.setattr(P, "_background", {"on": True})
    path = tmp_path / P.CACHE_NAME
    one = P.machine_speed("cached", path=path)
    two = P.machine_speed("cached", path=path)
    assert started == [path] and (tmp_path / P.RUNNING_NAME).exists()
    assert "runs in the background" in one.source and "is running in the background" in two.source
    assert one.factor == two.factor == 1.0 and not path.exists()
    assert P.machine_speed("cached", path=path, probe=Probe(P.REFERENCE_SECONDS / 2)).factor == pytest.approx(2.0)
