"""Shared fixtures: one zoo cache per test session, so tiny-s and the tiny PRM are built at most once.

`race_cache` sets RACE_CACHE for the whole session: to $RACE_TEST_CACHE when that is set, else to
the user's zoo cache ($RACE_CACHE or ~/.cache/race), the one `race zoo` and `race run` use: entries
are keyed by a hash of their recipe, so a cached build is exactly what a fresh one would produce,
and a machine without the cache builds it once (minutes) and reuses it afterwards. `tiny_s` and `tiny_prm` build (or reuse)
those entries there and return their folders; any test file may use them.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# plans in tests price CPU jobs at the reference rates, unscaled: the same figures on every machine, and no
# probe child per `race` subprocess (tests/test_cpu_probe.py exercises the probe itself)
os.environ.setdefault("RACE_CPU_PROBE", "off")


@pytest.fixture(scope="session")
def race_cache() -> Path:
    from race_cli.zoo import cache_root

    root = Path(os.environ.get("RACE_TEST_CACHE") or cache_root())
    os.environ["RACE_CACHE"] = str(root)
    return root


@pytest.fixture(scope="session")
def tiny_s(race_cache) -> Path:
    from race_cli import zoo

    return zoo.build("tiny-s")


@pytest.fixture(scope="session")
def tiny_prm(race_cache, tiny_s) -> Path:
    from race_cli import zoo

    return zoo.build("tiny-prm")


# CI must not skip a test for a missing optional package: tests/skip_guard.py fails such a run
from skip_guard import (pytest_collectreport, pytest_runtest_logreport, pytest_sessionfinish,  # noqa: E402,F401
                        pytest_terminal_summary)
