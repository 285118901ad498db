"""The statistics' quantiles kept in the race cache (race_cli/quantile_cache.py): a value read back is the
float the code computes, a broken or foreign file is never trusted, and two processes' entries merge."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from race_cli import quantile_cache as QC
from race_cli.stats import gatekeeping, quantiles


@pytest.fixture
def fresh(tmp_path, monkeypatch):
    """An empty race cache and empty MEMO dicts (a new process)."""
    monkeypatch.setenv("RACE_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(QC.CACHE_ENV, raising=False)

    def new_process():
        monkeypatch.setattr(quantiles, "MEMO", {})
        monkeypatch.setattr(gatekeeping, "MEMO", {})

    new_process()
    return new_process


def _compute() -> tuple[float, float, float, np.ndarray]:
    """Quantiles of both tables: a studentized range (scalar df and an array of df), Dunnett's, and a df of 0."""
    return (quantiles.range_quantile(0.95, 4, 7.3), gatekeeping.many_to_one_quantile(0.0125, 4, 0.5, 6.0),
            quantiles.range_quantile(0.9, 3, 0.0), quantiles.range_quantile(0.99, 5, np.array([3.0, 40.0, np.inf])))


def _refuse(monkeypatch):
    """From here on, computing a quantile fails the test: every value must come from the cache."""
    def boom(*a, **k):
        raise AssertionError("computed, not read from the cache")

    monkeypatch.setattr(quantiles, "_range_q_of", boom)
    monkeypatch.setattr(gatekeeping, "dunnett_quantile", boom)


def test_a_later_process_reads_the_same_floats_without_computing(fresh, monkeypatch):
    with QC.kept():
        first = _compute()
    path = QC.cache_path()
    assert path.is_file() and path.parent.name == "quantiles"
    fresh()
    _refuse(monkeypatch)
    with QC.kept():
        again = _compute()
    assert again[:2] == first[:2] and math.isnan(again[2]) and math.isnan(first[2])  # bit for bit, NaN kept
    assert again[3].tolist() == first[3].tolist()  # df = inf (a JSON Infinity key) included


def test_off_neither_reads_nor_writes(fresh, monkeypatch):
    monkeypatch.setenv(QC.CACHE_ENV, "off")
    with QC.kept():
        _compute()
    assert QC.cache_path() is None
    monkeypatch.delenv(QC.CACHE_ENV)
    assert not QC.cache_path().parent.exists()


def test_a_broken_or_foreign_file_is_not_trusted(fresh, monkeypatch):
    with QC.kept():
        first = _compute()
    path = QC.cache_path()
    for text in ("{not json", "[1, 2]", json.dumps({"range": "x", "dunnett": {"a": 1}})):
        path.write_text(text)
        fresh()
        with QC.kept():
            assert _compute()[:2] == first[:2]  # computed again, the same values
    # rows of the wrong shape or type are dropped one by one; a good row next to them is read
    key = next(iter(quantiles.MEMO))
    rows = [[*key, 1.25], [0.95, True, 7.3, 9.0], [0.95, 4.0, 7.3, 9.0], [0.95, 4, "7.3", 9.0], [0.95, 4, 7.3]]
    path.write_text(json.dumps({"range": rows, "dunnett": [[1, 2]]}))
    fresh()
    assert QC.load(path) == 1 and quantiles.MEMO == {key: 1.25} and gatekeeping.MEMO == {}


def test_entries_of_two_processes_merge(fresh):
    with QC.kept():
        a = quantiles.range_quantile(0.95, 4, 7.3)
    fresh()
    known = QC.load(None)  # a process that started before the first one wrote
    b = quantiles.range_quantile(0.95, 6, 12.0)
    QC.save(QC.cache_path(), known)
    fresh()
    assert QC.load(QC.cache_path()) == 2
    assert quantiles.MEMO == {(0.95, 4, 7.3): a, (0.95, 6, 12.0): b}


def test_the_file_follows_the_code_and_the_libraries(fresh, monkeypatch):
    import scipy

    here = QC.cache_path()
    monkeypatch.setattr(scipy, "__version__", scipy.__version__ + ".other")
    assert QC.cache_path() != here and QC.cache_path().parent == here.parent


def test_a_full_table_keeps_the_newest(fresh, monkeypatch):
    monkeypatch.setattr(QC, "MAX_ENTRIES", 3)
    path = QC.cache_path()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"range": [[0.9, 3, float(d), 1.0] for d in (1, 2, 3)], "dunnett": []}))
    known = QC.load(path)
    quantiles.MEMO[0.9, 3, 4.0] = 2.0  # two quantiles this process computed
    quantiles.MEMO[0.9, 3, 5.0] = 3.0
    QC.save(path, known)
    fresh()
    assert QC.load(path) == 3 and sorted(quantiles.MEMO) == [(0.9, 3, 3.0), (0.9, 3, 4.0), (0.9, 3, 5.0)]
