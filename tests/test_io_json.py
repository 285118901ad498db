"""io.dumps writes byte for byte what `json.dumps(_jsonable(x), indent=2) + "\n"` writes.

dumps hands containers of plain scalars to json's C encoder and walks the rest itself, so every
kind of value the report can hold is compared here against the plain definition: nested and
empty containers, unicode, quotes and newlines in strings and keys, NaN and inf (null), numpy
scalars and arrays, tuples, non-str keys, subclasses of dict, list and float, deep nesting.
"""

from __future__ import annotations

import json
import random
from collections import OrderedDict, namedtuple

import numpy as np
import pytest

from race_cli.io import _jsonable, dumps


def reference(x) -> str:
    return json.dumps(_jsonable(x), indent=2) + "\n"


class FloatSub(float):
    pass


class StrSub(str):
    def __str__(self) -> str:
        return "changed"  # _jsonable's str(k) on a key would write this


Point = namedtuple("Point", "x y")

NAN, INF = float("nan"), float("inf")

CASES = [
    0, -1, 2**70, 1.5, -0.0, 1e300, 5e-324, True, False, None, "", "plain", NAN, INF, -INF,
    {}, [], (), [[]], [{}], {"a": {}}, {"a": []}, [[], {}, ()],
    {"a": 1, "b": 2.5, "c": "x", "d": None, "e": True},
    [1, 2.5, "x", None, False],
    {"quote\"key": "line\nbreak", "tab\t": "back\\slash", "ctl\x01": "\x7f\x00"},
    {"unicode é ß 中文 🎲": "ünïcødé \u2028 \ud83c\udfb2 ✓"},
    {"nan": NAN, "inf": INF, "-inf": -INF, "ok": 1.0},
    [1.0, NAN, 2.0],
    {"f32": np.float32(0.1), "f64": np.float64(0.1), "i64": np.int64(7), "b": np.bool_(True),
     "u8": np.uint8(255), "f64nan": np.float64("nan"), "f32inf": np.float32("inf")},
    [np.float32(1.5), np.int64(-3), np.bool_(False)],
    {"arr": np.arange(3)},  # no item() for a whole array: _jsonable leaves it, json refuses it
    (1, (2, 3), [4, (5,)]),
    {1: "int key", 2.5: "float key", None: "none key"},
    {True: "bool key", 0: "int key"},
    {1: "a", "1": "b"},  # str(k) makes one key of two
    {"a": {1: [1, 2]}, "b": [{"c": {None: NAN}}]},
    {StrSub("k"): 1},
    {"sub": StrSub("value"), "fs": FloatSub(2.5), "fsnan": FloatSub(NAN)},
    OrderedDict([("b", 1), ("a", [1, 2])]),
    {"od": OrderedDict([("x", {"y": 1})])},
    Point(1, 2), {"pt": Point(1.5, [3])}, [Point(NAN, "s")],
    [[[[[[[[[[1, {"deep": [[["x"]]]}]]]]]]]]]],
    {"jobs": [{"job_id": f"j{i}", "eval/t": i / 7, "readable": i % 2 == 0, "problem": "", "n": None}
              for i in range(30)],
     "ranking": [], "totals": {"total": 1e15, "eval": 0.0}, "frontier": ["a sentence, with: commas"]},
]


def deep(n: int):
    x = [1, {"k": "v"}]
    for i in range(n):
        x = {"level": i, "child": x, "list": [i, (i,)]} if i % 2 else [x, "s", {}]
    return x


SCALARS = [0, 1, -5, 2**64, 0.5, -1e-10, 1e22, NAN, INF, -INF, True, False, None, "", "s",
           'q"uo\\te', "new\nline", "é", "🎲", np.float32(0.25), np.float64(3.0), np.int64(9),
           np.int32(-2), np.bool_(True), np.float64("nan"), FloatSub(1.25), StrSub("sub")]
KEYS = ["a", "b c", "", 'k"q', "é", "new\nline", 0, 1.5, None, False, StrSub("sk")]


def random_value(rng: random.Random, depth: int):
    roll = rng.random()
    if depth > 5 or roll < 0.45:
        return rng.choice(SCALARS)
    size = rng.choice([0, 1, 2, 3, 8])
    if roll < 0.65:
        return [random_value(rng, depth + 1) for _ in range(size)]
    if roll < 0.72:
        return tuple(random_value(rng, depth + 1) for _ in range(size))
    keys = KEYS if rng.random() < 0.2 else [k for k in KEYS if type(k) is str]
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(size)}


@pytest.mark.parametrize("x", CASES + [deep(12), deep(40)], ids=lambda x: type(x).__name__)
def test_dumps_is_json_dumps_indent_2_byte_for_byte(x):
    try:
        want = reference(x)
    except (TypeError, ValueError) as e:  # what the reference refuses, dumps refuses alike
        with pytest.raises(type(e)):
            dumps(x)
        return
    assert dumps(x) == want


def test_dumps_matches_on_random_documents():
    rng = random.Random(834)
    for _ in range(3000):
        x = random_value(rng, 0)
        assert dumps(x) == reference(x), repr(x)


def test_dumps_takes_the_fast_path_for_records():
    # the C path must be taken for a record, else this test file would pass with the old code alone
    import race_cli.io as io

    calls = []
    slow = io._dumps_slow
    io._dumps_slow = lambda x, level: calls.append(x) or slow(x, level)
    try:
        text = dumps({"jobs": [{"a": 1, "b": "x"}, {"a": 2.5, "b": None}], "n": 3})
    finally:
        io._dumps_slow = slow
    assert text == reference({"jobs": [{"a": 1, "b": "x"}, {"a": 2.5, "b": None}], "n": 3})
    assert calls == []  # no record went the slow way
