"""The skip guard (tests/skip_guard.py) fails a run that skips for an avoidable reason, and only then."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def run_pytest(tmp_path: Path, body: str, *args: str, **env) -> subprocess.CompletedProcess:
    (tmp_path / "test_sample.py").write_text("import pytest\n\n" + body, encoding="utf-8")
    full_env = {k: v for k, v in os.environ.items() if k != "RACE_ALLOW_SKIPS"}
    full_env.update(PYTHONPATH=os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]), **env)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "skip_guard", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), *args, str(tmp_path)],
                          capture_output=True, text=True, cwd=tmp_path, env=full_env, timeout=120)


# the suite runs under pytest-xdist (pyproject.toml): the workers' reports must reach the guard in the controller
WORKERS = pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])


@WORKERS
def test_an_avoidable_skip_fails_the_run_and_names_the_test(tmp_path, workers):
    out = run_pytest(tmp_path, "def test_a():\n    pytest.skip('math-verify not installed')\n\n"
                               "def test_b():\n    assert True\n", *workers)
    assert out.returncode == 1, out.stdout
    assert "test_sample.py::test_a: math-verify not installed" in out.stdout
    assert "1 passed, 1 skipped" in out.stdout


@WORKERS
def test_a_module_skipped_at_import_counts_too(tmp_path, workers):
    out = run_pytest(tmp_path, "pytest.importorskip('no_such_module_race')\n\ndef test_a():\n    pass\n", *workers)
    assert out.returncode == 1, out.stdout
    assert "no_such_module_race" in out.stdout


def test_hardware_skips_are_allowed(tmp_path):
    out = run_pytest(tmp_path, "@pytest.mark.skipif(True, reason='needs a CUDA GPU')\ndef test_a():\n    pass\n\n"
                               "def test_b():\n    pytest.skip('SLURM cluster unavailable: sinfo not on PATH')\n")
    assert out.returncode == 0, out.stdout
    assert "skips CI should not have" not in out.stdout


def test_a_local_run_can_allow_skips_but_still_sees_them(tmp_path):
    out = run_pytest(tmp_path, "def test_a():\n    pytest.skip('tensorboard not installed')\n",
                     RACE_ALLOW_SKIPS="1")
    assert out.returncode == 0, out.stdout
    assert "allowed by RACE_ALLOW_SKIPS" in out.stdout


def test_a_failing_run_keeps_its_own_status(tmp_path):
    out = run_pytest(tmp_path, "def test_a():\n    pytest.skip('x not installed')\n\ndef test_b():\n    assert False\n")
    assert out.returncode == 1 and "1 failed" in out.stdout


VENV_SKIP = "def test_a():\n    pytest.skip('vLLM venv unavailable: RACE_VLLM_PYTHON is not set')\n"


@pytest.mark.parametrize("ci", ["", "false", "0"])
def test_a_missing_vllm_venv_may_skip_outside_ci(tmp_path, ci):
    out = run_pytest(tmp_path, VENV_SKIP, CI=ci)
    assert out.returncode == 0, out.stdout
    assert "skips CI should not have" not in out.stdout


@pytest.mark.parametrize("ci", ["true", "1"])
def test_a_missing_vllm_venv_fails_ci(tmp_path, ci):
    """.ci/run builds vLLM's venv and exports RACE_VLLM_PYTHON: under CI a real-engine test that skips is a failure."""
    out = run_pytest(tmp_path, VENV_SKIP, CI=ci)
    assert out.returncode == 1, out.stdout
    assert "test_sample.py::test_a: vLLM venv unavailable" in out.stdout
