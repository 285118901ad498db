"""A pytest plugin that fails the run when a test skips for a reason CI could have avoided.

CI installs the `dev` extra, which holds every optional package a test needs; so the only skips
a CPU machine cannot avoid are a missing CUDA device and a SLURM cluster that did not start.
The real-engine tests (tests/test_vllm_real.py) run in vLLM's own venv, which `.ci/run` builds
(`.ci/vllm_venv.sh`) and names in RACE_VLLM_PYTHON: outside CI they may skip with
"vLLM venv unavailable: ..."; under CI (CI set and not "false"/"0") that skip fails the run too.
Any other skip (say "math-verify not installed") means an optional path silently fell out of
CI: this plugin lists such skips at the end of the run and turns its exit status into a failure.
`tests/conftest.py` loads it; `tests/test_skip_guard.py` runs it on a throwaway test file.

    RACE_ALLOW_SKIPS=1 python -m pytest ...   # a local run on a machine without every extra
"""

from __future__ import annotations

import os

import pytest

# reasons a skip may give: the test needs hardware or a service CI on a CPU machine cannot have
ALLOWED_PREFIXES = ("needs a CUDA GPU", "SLURM cluster unavailable:")
# allowed only outside CI: .ci/run always builds vLLM's venv, so there a missing one is a broken CI
LOCAL_ONLY_PREFIXES = ("vLLM venv unavailable:",)


def in_ci() -> bool:
    """Whether this run is CI's (CI set, as CI services and .ci/run set it, and not "false" or "0")."""
    return os.environ.get("CI", "").strip().lower() not in ("", "false", "0")


def allowed(reason: str) -> bool:
    """Whether a skip with `reason` is one this machine could not avoid."""
    return reason.startswith(ALLOWED_PREFIXES) or (reason.startswith(LOCAL_ONLY_PREFIXES) and not in_ci())

_unexpected: list[tuple[str, str]] = []


def _reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (file, line, "Skipped: <reason>")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def _note(report) -> None:
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = _reason(report)
        if not allowed(reason):
            _unexpected.append((report.nodeid, reason))


def pytest_runtest_logreport(report) -> None:
    _note(report)


def pytest_collectreport(report) -> None:  # a whole module skipped at import (pytest.importorskip)
    _note(report)


def pytest_sessionfinish(session, exitstatus) -> None:
    if _unexpected and not os.environ.get("RACE_ALLOW_SKIPS") and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter) -> None:
    if not _unexpected:
        return
    verdict = "allowed by RACE_ALLOW_SKIPS" if os.environ.get("RACE_ALLOW_SKIPS") else "this fails the run"
    terminalreporter.section(f"skips CI should not have ({verdict})", red=True)
    for nodeid, reason in _unexpected:
        terminalreporter.line(f"{nodeid}: {reason}")
    terminalreporter.line("Install what the test needs (pip install -e '.[dev]' holds every optional package), "
                          f"or, if it needs hardware CI cannot have, give a skip reason starting with one of "
                          f"{ALLOWED_PREFIXES}" + ("" if in_ci() else f" (outside CI also {LOCAL_ONLY_PREFIXES})")
                          + ".")
