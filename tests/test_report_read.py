"""The report's reader at scale: the bounded JSON reader's depth count (io.json_depth) and the
job identity that refuses one run counted as two seeds without parsing every job's config."""

from __future__ import annotations

import json
import random
import time

import pytest

from race_cli import io


def _walk_depth(obj) -> int:
    """Reference: the nesting depth of parsed JSON, walked (the walk io.loads_bounded used to do)."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, d = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, d)
            stack.extend((v, d + 1) for v in (node.values() if isinstance(node, dict) else node))
    return deepest


def _random_doc(rng: random.Random, depth: int):
    """A JSON value nested up to `depth`, with strings full of brackets, quotes and escapes."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice([1, -2.5, None, True, "plain", "a [b] {c", "]]]}}}", 'q"uo\\te[', "\\", "ü[ß]", ""])
    if rng.random() < 0.5:
        return [_random_doc(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["k", "[x", "}y", 'z"', "w\\"]) + str(i): _random_doc(rng, depth - 1)
            for i in range(rng.randint(0, 3))}


def test_the_byte_count_of_depth_is_the_walked_depth_of_the_parsed_document():
    rng = random.Random(7)
    for _ in range(600):
        doc = _random_doc(rng, rng.randint(0, 9))
        for text in (json.dumps(doc), json.dumps(doc, ensure_ascii=False), json.dumps(doc, indent=1)):
            assert io.json_depth(text.encode()) == _walk_depth(doc), text


@pytest.mark.parametrize("text,depth", [('1', 0), ('"[[["', 0), ('[]', 1), ('[[], {}]', 2), ('{"a": [{"b": 1}]}', 3),
                                        ('["\\"[", {"]": "\\\\"}]', 2), ('[{}, [[[]]], {"x": {}}]', 4)])
def test_depth_worked_by_hand(text, depth):
    assert io.json_depth(text.encode()) == depth
    assert _walk_depth(json.loads(text)) == depth


def test_the_bound_holds_at_its_edge_and_past_it():
    ok = "[" * io.MAX_JSON_DEPTH + "]" * io.MAX_JSON_DEPTH
    assert _walk_depth(io.loads_bounded(ok)) == io.MAX_JSON_DEPTH
    deeper = '{"a": ' * (io.MAX_JSON_DEPTH + 1) + "1" + "}" * (io.MAX_JSON_DEPTH + 1)
    with pytest.raises(ValueError, match="nests deeper than 64 levels"):
        io.loads_bounded(deeper.encode(), "summary.json")
    # brackets inside a string do not nest: a long one is no reason to refuse the document
    assert io.loads_bounded(json.dumps({"error": "[" * 1000}))["error"] == "[" * 1000


def test_a_hostile_deep_document_is_refused_quickly():
    t0 = time.perf_counter()
    for bomb in ("[" * 200_000 + "]" * 200_000, "[" * 2_000_000, '{"a":' * 300_000):
        with pytest.raises(ValueError, match="nests"):
            io.loads_bounded(bomb.encode())
    assert time.perf_counter() - t0 < 5  # ~0.1 s measured; a hang or a walk of 10^6 nodes would not be


def test_a_torn_line_still_raises_the_decoders_error():
    """_read_metrics and read_jsonl skip a torn last line by catching JSONDecodeError: it must stay that."""
    with pytest.raises(json.JSONDecodeError):
        io.loads_bounded(b'{"iteration": 3, "overrides": "eval.at=[0, 0.25')
    with pytest.raises(UnicodeDecodeError):
        io.loads_bounded(b'{"a": "\xff"}')


# --- one run counted twice: refused, without parsing every config --------------------------------

def _configs(sweep, extra=None):
    """Give each fixture job a .hydra/config.yaml (its condition, knobs and seed; `extra(job)` adds keys)."""
    import yaml

    for jd in (sweep / "jobs").iterdir():
        s = json.loads((jd / "summary.json").read_text())
        cfg = {"seed": s["seed"], "condition": s["condition"], "knobs": s["knobs"], **(extra(jd) if extra else {})}
        (jd / ".hydra" / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    return sweep


def test_a_copy_whose_config_was_written_in_another_yaml_style_is_still_the_same_job(tmp_path):
    import shutil

    import yaml

    from report_fixtures import build_sweep

    from race_cli.errors import RaceError
    from race_cli.report.table import read_sweeps

    sweep = _configs(build_sweep(tmp_path / "a", seeds=(0, 1), n_items=20))
    shutil.copytree(sweep, tmp_path / "b")
    for cfg in (tmp_path / "b" / "jobs").glob("*/.hydra/config.yaml"):  # flow style, keys sorted the other way
        data = yaml.safe_load(cfg.read_text())
        cfg.write_text(yaml.safe_dump(dict(reversed(list(data.items()))), default_flow_style=True))
    with pytest.raises(RaceError, match="hold the same job"):
        read_sweeps([sweep, tmp_path / "b"])


def test_jobs_alike_in_condition_knobs_and_seed_but_not_in_config_are_two_runs(tmp_path, monkeypatch):
    """An axis the row does not show (here a learning rate): the configs decide, and they differ."""
    import shutil

    from report_fixtures import build_sweep

    from race_cli.report import table

    sweep = _configs(build_sweep(tmp_path / "a", seeds=(0, 1), n_items=20), lambda jd: {"lr": 1e-4})
    shutil.copytree(sweep, tmp_path / "b")
    _configs(tmp_path / "b", lambda jd: {"lr": 3e-4})
    parsed = []
    real = table.job_identity
    monkeypatch.setattr(table, "job_identity", lambda jd: parsed.append(jd) or real(jd))
    data = table.read_sweeps([sweep, tmp_path / "b"])
    n = len(list((sweep / "jobs").iterdir()))
    assert len(data.jobs) == 2 * n and len(parsed) == 2 * n  # every job has its twin in the other sweep


def test_a_sweep_of_distinct_jobs_parses_no_config(tmp_path, monkeypatch):
    from report_fixtures import build_sweep

    from race_cli.report import table

    sweep = _configs(build_sweep(tmp_path / "a", seeds=(0, 1, 2), n_items=20))
    parsed = []
    monkeypatch.setattr(table, "job_identity", lambda jd: parsed.append(jd))
    assert len(table.read_sweeps([sweep]).jobs) == 15 and parsed == []


def test_a_document_of_too_many_values_is_refused_before_it_is_parsed(monkeypatch):
    # 256 MB of "[]," would parse into 85M lists (~6 GB): counted first (commas and brackets), refused
    bomb = b"[" + b"[]," * 9_000_000 + b"[]]"  # 27 MB: 9M + 2 opening brackets and 9M commas = 18,000,002 > 16M
    with pytest.raises(ValueError, match="more than 16,000,000 values"):
        io.loads_bounded(bomb, "metrics.jsonl")
    monkeypatch.setattr(io, "MAX_JSON_VALUES", 10)
    assert io.loads_bounded(b'{"a": [1, 2, 3], "b": 4}') == {"a": [1, 2, 3], "b": 4}  # 5 commas and brackets
    with pytest.raises(ValueError, match="more than 10 values"):
        io.loads_bounded(b"[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]")  # 10 commas + 1 bracket


# --- metrics.jsonl lines: io.jsonl_rows reads each line as loads_bounded would -----------------------

def _rows_line_by_line(text: str, where: str = ""):
    """What _read_metrics and read_jsonl did before jsonl_rows: loads_bounded on every non-blank line,
    a JSONDecodeError on the last line ends the file, one before it raises."""
    lines, out = text.split("\n"), []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append((i, line, io.loads_bounded(line, f"{where}line {i + 1}")))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise
    return out


JSONL_TEXTS = [
    "", "\n", "\n\n  \n\t\n", '{"iteration": 0}\n{"iteration": 1}\n',
    '{"iteration": 0}\n\n  \n{"iteration": 1}',  # blank lines inside, no final newline
    '{"iteration": 0}\n{"iteration": 1, "eval/t/accuracy": 0.5',  # torn last line: skipped
    '{"iteration": 0}\n{"iteration": 1, "eval/t\n{"iteration": 2}\n',  # torn line in the middle: raises
    '{"iteration": 0}\n{"iteration": 1}\n\n',  # the last element is "" after the final newline
    '  {"a": 1}  \n\t[1, 2]\r\n"s"\n3\nnull\n',  # whitespace around a value, a CR, scalars
    '{"a": 1} {"b": 2}\n{"c": 3}\n',  # two values on a line: Extra data
    '{"a": 1}\n{"a": 1} x',  # extra data on the last line: torn
    "\ufeff{\"a\": 1}\n{}\n",  # a BOM
    '{"a": NaN, "b": Infinity}\n',
    "[" * 64 + "]" * 64 + "\n" + "[" * 65 + "]" * 65 + "\n",  # at the depth bound, then past it
    json.dumps({"error": "[" * 200}) + "\n",  # many brackets, in a string only: not deep
    "[" * 100 + "\n",  # a deep torn last line
    "[" * 100 + "\n{}\n",  # a deep broken line in the middle
    "[" * 5000 + "]" * 5000 + "\n",  # past the recursion limit
    '{"é": "ünïcødé \\u00e9 \\ud83c\\udfb2"}\n',
]


@pytest.mark.parametrize("text", JSONL_TEXTS)
def test_jsonl_rows_reads_every_line_as_loads_bounded_does(text):
    for where in ("", "/sweep/jobs/j/metrics.jsonl "):
        try:
            want = _rows_line_by_line(text, where)
        except ValueError as e:
            with pytest.raises(type(e)) as got:
                list(io.jsonl_rows(text, where))
            assert str(got.value) == str(e)  # the message lands in the report's problem column
            continue
        assert list(io.jsonl_rows(text, where)) == want


def test_jsonl_rows_keeps_the_value_bound(monkeypatch):
    monkeypatch.setattr(io, "MAX_JSON_VALUES", 10)
    text = '{"iteration": 0}\n' + json.dumps(list(range(20))) + "\n"
    with pytest.raises(ValueError, match="line 2 holds more than 10 values"):
        list(io.jsonl_rows(text))
    with pytest.raises(ValueError, match="line 2 holds more than 10 values"):
        _rows_line_by_line(text)
