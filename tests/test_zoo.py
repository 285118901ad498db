"""The embedded zoo: byte tokenizer, recipe hashing, the cache, and real builds of tiny-s and the PRM.

The builds run once per session (tests/conftest.py); on this 2-core machine tiny-s takes about a
minute and the PRM about half a minute, so this file is marked slow.
"""

from __future__ import annotations

import copy
import json
import random

import pytest

from race_cli.errors import RaceError


def test_byte_tokenizer_round_trip_through_save_and_reload(tmp_path):
    from transformers import AutoTokenizer

    from race_cli.zoo import EOS_ID, byte_tokenizer

    tok = byte_tokenizer()
    text = "End with '#### <number>'.\nQ: 45+74-27\nA: 45+74=119\n\t  é 漢字 🙂\r\n"
    assert tok.encode(text) == list(text.encode("utf-8"))  # id == byte value
    tok.save_pretrained(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    again = AutoTokenizer.from_pretrained(tmp_path)
    ids = again.encode(text)
    assert ids == list(text.encode("utf-8")) and again.decode(ids) == text
    assert again.eos_token_id == again.pad_token_id == EOS_ID == 256 and len(again) == 257
    assert again("7<|endoftext|>").input_ids == [55, 256]
    assert not again.chat_template


def test_recipe_hash_changes_with_the_recipe_and_the_prm_base():
    from race_cli.zoo.recipes import RECIPES, recipe_hash

    changed = copy.deepcopy(RECIPES)
    changed["tiny-s"]["fit"]["lr"] *= 2
    assert recipe_hash("tiny-s", changed) != recipe_hash("tiny-s")
    assert recipe_hash("tiny-m", changed) == recipe_hash("tiny-m")
    assert recipe_hash("tiny-prm", changed) != recipe_hash("tiny-prm")  # its base changed
    assert len(recipe_hash("tiny-s")) == 12 and recipe_hash("tiny-s") == recipe_hash("tiny-s")


def test_param_counts_match_the_built_models():
    from race_cli.zoo.policy import new_model
    from race_cli.zoo.recipes import RECIPES, count_params

    for name in ("tiny-s", "tiny-m", "tiny-l"):
        arch = RECIPES[name]["arch"]
        assert count_params(arch) == sum(p.numel() for p in new_model(arch, 0).parameters())
    cls = new_model(RECIPES["tiny-s"]["arch"], 0, "Qwen2ForTokenClassification", num_labels=2)
    assert count_params(RECIPES["tiny-s"]["arch"], 2) == sum(p.numel() for p in cls.parameters())


def test_resolve_passes_other_paths_and_refuses_unknown_names(race_cache):
    from race_cli import zoo

    assert zoo.resolve("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"
    assert zoo.resolve("/some/local/folder") == "/some/local/folder"
    with pytest.raises(RaceError, match="tiny-s"):
        zoo.resolve("zoo:tiny-xl")
    assert str(zoo.entry_dir("tiny-s")).startswith(str(race_cache))


def test_corruptions_are_consistent_and_labelled():
    from race_cli.tasks.arithmetic import parse_solution, solve
    from race_cli.zoo.prm_fit import corrupt, make_examples

    rng = random.Random(0)
    steps = solve("45+74-27")  # right: 45+74=119, 119-27=92, #### 92
    for _ in range(200):
        lines, k = corrupt(steps, rng)
        written = parse_solution("\n".join(lines))
        final = int(lines[-1].removeprefix("#### "))
        if k < len(steps):
            assert written[:k] == steps[:k] and written[k][3] != steps[k][3]
            for a, op, b, r in written[k + 1:]:  # later steps are right arithmetic from the wrong value
                assert r == (a + b if op == "+" else a - b)
            assert final == written[-1][3]
        else:
            assert written == steps and final != 92
    for q, c, y in make_examples(["45+74-27", "3-50-9"] * 20, rng, 0.5):
        assert c.startswith(" ") and len(y) == c.count("\n") + 1 and y == sorted(y, reverse=True)


def test_auc_by_hand():
    from race_cli.zoo.prm_fit import auc

    # positives {0.9, 0.4}, negatives {0.5, 0.1}: pairs won 0.9>0.5, 0.9>0.1, 0.4>0.1, lost 0.4<0.5 -> 3/4
    assert auc([0.9, 0.4, 0.5, 0.1], [1, 1, 0, 0]) == 0.75
    assert auc([0.5, 0.5], [1, 0]) == 0.5  # a tie counts half


@pytest.mark.slow
def test_tiny_s_is_built_once_loads_and_lies_in_the_band(tiny_s):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from race_cli import zoo
    from race_cli.rewards.rule import rule_reward
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.tasks.prompting import format_prompt
    from race_cli.zoo.warmstart import accuracy

    info = json.loads((tiny_s / "recipe.json").read_text())
    lo, hi = info["recipe"]["fit"]["band"]
    assert lo <= info["greedy"] <= hi and info["in_band"]
    assert 0 < info["sampled"] < info["greedy"] + 0.1

    mtime, builds = (tiny_s / "recipe.json").stat().st_mtime_ns, zoo.build.__globals__["BUILDS"]["count"]
    assert zoo.resolve("zoo:tiny-s") == tiny_s == zoo.build("tiny-s")
    assert (tiny_s / "recipe.json").stat().st_mtime_ns == mtime
    assert zoo.build.__globals__["BUILDS"]["count"] == builds  # reused, not rebuilt
    assert [r["built"] for r in zoo.list_entries() if r["name"] == "tiny-s"] == [True]

    torch.set_num_threads(1)
    model = AutoModelForCausalLM.from_pretrained(tiny_s)
    tok = AutoTokenizer.from_pretrained(tiny_s)
    items = ArithmeticTask(**info["recipe"]["task"]).eval_items()
    greedy = accuracy(model, tok, [format_prompt(it, tok) for it in items], [it.answer for it in items],
                      rule_reward, 48)
    assert greedy == pytest.approx(info["greedy"], abs=0.011)  # the saved model is the one measured


@pytest.mark.slow
def test_tiny_prm_loads_through_the_scoring_code_and_reproduces_its_auc(tiny_prm):
    from race_cli.rewards.prm import ProcessRewardModel
    from race_cli.zoo.prm_fit import heldout_auc, heldout_examples

    info = json.loads((tiny_prm / "recipe.json").read_text())
    prm = ProcessRewardModel.from_pretrained(str(tiny_prm), format="logprob", template=info["input_format"]["template"])
    assert prm.separator == "\n" and info["input_format"]["format"] == "logprob"
    auc = heldout_auc(prm, heldout_examples(info["recipe"]))  # the saved model is the one measured
    assert auc == pytest.approx(info["auc"], abs=1e-4)
    assert info["meets_target"] == (auc >= info["recipe"]["fit"]["target_auc"])


@pytest.mark.slow
def test_tiny_prm_separates_correct_from_corrupted_steps(tiny_prm):
    from race_cli.config.compose import compose
    from race_cli.rewards.prm import ProcessRewardModel
    from race_cli.tasks.arithmetic import ArithmeticTask
    from race_cli.zoo.prm_fit import heldout_auc, make_examples

    r = compose(["reward=prm"]).reward  # exactly what a job with reward=prm loads
    prm = ProcessRewardModel.from_pretrained(str(tiny_prm), format=r.model.format, template=r.model.template,
                                             separator=r.step_separator)
    fresh = make_examples([it.question for it in ArithmeticTask().eval_items()], random.Random(7), 0.5)
    assert heldout_auc(prm, fresh) >= 0.85  # new corruptions, through the scoring code's own loader


# --- shipped weights: the default grid's entries come with the package -------------------------


@pytest.mark.parametrize("name", ["tiny-s", "tiny-m", "tiny-prm"])
def test_the_default_grids_entries_ship_for_their_current_recipe(name):
    from race_cli.io import read_json
    from race_cli.zoo.build import is_built, shipped_dir
    from race_cli.zoo.recipes import RECIPES, recipe_hash

    folder = shipped_dir(name)  # named by the current recipe's hash: a changed recipe needs scripts/ship_zoo.py
    assert is_built(folder), f"{folder.name} missing: run `python scripts/ship_zoo.py` after changing a recipe"
    info = read_json(folder / "recipe.json")
    assert info["hash"] == recipe_hash(name) and info["recipe"] == json.loads(json.dumps(RECIPES[name]))
    assert info.get("in_band", True) and info.get("meets_target", True)
    if name == "tiny-prm":  # what the rebuild tests compare with: where it was built and how it started
        assert set(info["fingerprint"]) >= {"torch", "transformers", "cpu_capability", "cpu"}
        assert len(info["first_losses"]) == 10


def test_a_shipped_entry_is_copied_into_the_cache_not_trained(tmp_path, monkeypatch):
    import importlib

    from race_cli import zoo

    build_mod = importlib.import_module("race_cli.zoo.build")  # the module (race_cli.zoo.build is also a function)
    monkeypatch.setenv("RACE_CACHE", str(tmp_path))

    def no_training(*args, **kwargs):
        raise AssertionError("a shipped entry must not be trained again")

    monkeypatch.setattr(build_mod, "_build_into", no_training)
    for name in ("tiny-s", "tiny-prm"):
        folder = zoo.build(name)
        assert folder.parent == tmp_path / "zoo"
        shipped = build_mod.shipped_dir(name)
        assert sorted(f.name for f in folder.iterdir()) == sorted(f.name for f in shipped.iterdir())
        assert all((folder / f.name).read_bytes() == f.read_bytes() for f in shipped.iterdir())


def test_an_older_shipment_in_the_cache_is_replaced_by_the_shipped_copy(tmp_path, monkeypatch):
    """The cache folder is named by the recipe hash, not by the weights: a model reshipped under the same
    recipe (built on another machine) must still replace the copy a cache took from the earlier release
    (this happened: a cache from before the tiny-prm reship kept the old weights); a build made on this
    stack (`race zoo --build --force`, this machine's fingerprint in its recipe.json) is kept."""
    import importlib
    import json

    from race_cli import zoo

    build_mod = importlib.import_module("race_cli.zoo.build")
    monkeypatch.setenv("RACE_CACHE", str(tmp_path))
    monkeypatch.setattr(build_mod, "_build_into", lambda *a, **k: (_ for _ in ()).throw(AssertionError("no training")))
    folder = zoo.build("tiny-s")
    shipped = build_mod.shipped_dir("tiny-s")
    weights = next(f.name for f in shipped.iterdir() if f.suffix == ".safetensors")
    # an older shipment: other weights, a recipe.json without the fingerprint the current one records
    (folder / weights).write_bytes(b"old weights")
    old = json.loads((folder / "recipe.json").read_text())
    old.pop("fingerprint", None)
    (folder / "recipe.json").write_text(json.dumps(old))
    assert build_mod.stale_copy("tiny-s", folder)
    again = zoo.build("tiny-s")
    assert again == folder and (folder / weights).read_bytes() == (shipped / weights).read_bytes()
    assert not build_mod.stale_copy("tiny-s", folder)
    # a build made here on purpose: this stack's fingerprint, other figures — kept as it is
    mine = json.loads((folder / "recipe.json").read_text()) | {"fingerprint": build_mod.build_fingerprint(),
                                                               "first_losses": [1.0] * 10}
    (folder / "recipe.json").write_text(json.dumps(mine))
    (folder / weights).write_bytes(b"my own build")
    assert not build_mod.stale_copy("tiny-s", folder)
    assert zoo.build("tiny-s") == folder and (folder / weights).read_bytes() == b"my own build"


def test_model_shapes_live_in_conf_and_the_recipes_read_them():
    import yaml

    from race_cli.config.compose import conf_dir
    from race_cli.zoo.recipes import RECIPES

    for name in ("tiny-s", "tiny-m", "tiny-l"):
        arch = yaml.safe_load((conf_dir() / "model" / f"{name}.yaml").read_text())["arch"]
        assert {k: RECIPES[name]["arch"][k] for k in arch} == arch
    task = yaml.safe_load((conf_dir() / "task" / "arithmetic.yaml").read_text())
    for key in ("min_ops", "max_ops", "max_operand", "eval_seed", "num_eval"):
        assert RECIPES["tiny-s"]["task"][key] == task[key]


@pytest.fixture(scope="module")
def prm_rebuild(tmp_path_factory):
    """One rebuild of zoo:tiny-prm from its recipe (verify), with the shipped copy's recipe.json."""
    from race_cli.io import read_json
    from race_cli.zoo.build import shipped_dir, verify

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RACE_CACHE", str(tmp_path_factory.mktemp("cache")))  # its base (tiny-s) comes from the shipped copy
        result = verify("tiny-prm")
    return result, read_json(shipped_dir("tiny-prm") / "recipe.json")


@pytest.mark.slow
def test_a_rebuild_from_the_recipe_trains_like_the_shipped_prm_and_on_its_stack_equals_it_bit_for_bit(prm_rebuild):
    """What holds on every stack: the same data, model and loss give the same first losses (a code
    or data change moves step 1 by far more than the 1e-4 allowed; kernel rounding by ~1e-7), and
    the diverged trajectory still ends at a verifier as good as the shipped one. Bit for bit is a
    property of one stack (torch, transformers, CPU kernels: build_fingerprint): where the shipped
    copy was built on this one, the rebuild must reproduce its bytes. (One test, not a skip on other
    stacks: tests/skip_guard.py allows skips only for missing hardware.)"""
    result, shipped = prm_rebuild
    rebuilt = result["figures"]
    assert len(shipped["first_losses"]) == len(rebuilt["first_losses"]) == 10
    assert rebuilt["first_losses"] == pytest.approx(shipped["first_losses"], rel=1e-4, abs=0), (result["fingerprint"],
                                                                                               shipped["fingerprint"])
    assert rebuilt["steps"] == shipped["steps"] and rebuilt["meets_target"]
    # measured here under ATen default/avx2/avx512: AUC 0.983-0.987; final loss EMA 0.051-0.058 (also MKL_CBWR=COMPATIBLE)
    assert abs(rebuilt["auc"] - shipped["auc"]) < 0.02 and abs(rebuilt["loss"] - shipped["loss"]) < 0.02
    if result["same_stack"]:
        assert result["files"] and result["match"], result
