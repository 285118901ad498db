"""Plan-time checks (race_cli/tasks/checks.py): what every job will need is checked by `race plan` before
any job runs. A model folder without a tokenizer (transformers would give an empty one: every prompt
encodes to [] and each job crashes), an EOS outside the vocabulary, a task file too short for
task.num_eval: each refused with exit 2 and a message naming the file. The light tokenizer reader
(no torch) is compared with transformers' AutoTokenizer on real saved folders. And evaluation follows
the task: task=<yours> on the default grid evaluates on your task, not the grid's arithmetic targets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.config import compose as compose_mod
from race_cli.errors import RaceError

ROOT = Path(__file__).resolve().parents[1]
ARCH = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
            vocab_size=257)


def save_model(folder: Path, tokenizer: bool = True, **arch) -> Path:
    """A real (random) Qwen2 model by save_pretrained and, with `tokenizer`, race's byte-level Qwen2Tokenizer
    (256 byte tokens, <|endoftext|> = 256, no merges) beside it."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from race_cli.zoo.tokenizer import byte_tokenizer

    cfg = Qwen2Config(**{**ARCH, **arch}, max_position_embeddings=256, tie_word_embeddings=False)
    Qwen2ForCausalLM(cfg).save_pretrained(folder)
    if tokenizer:
        byte_tokenizer().save_pretrained(folder)
    return folder


def qa_rows(n: int, start: int = 0) -> str:
    return "".join(json.dumps({"question": f"What is {i} + {2 * i}?", "answer": str(3 * i)}) + "\n"
                   for i in range(start, start + n))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("models")
    return {"mine": save_model(root / "mine"), "notok": save_model(root / "notok", tokenizer=False)}


@pytest.fixture
def own(tmp_path, models):
    """A --config-dir with model mine / notok and task mytask (30 rows, 10 held out)."""
    d = tmp_path / "my_conf"
    for group in ("model", "task"):
        (d / group).mkdir(parents=True)
    for name, folder in models.items():
        (d / "model" / f"{name}.yaml").write_text(f"# {name}\nname: {name}\npath: {folder}\n"
                                                  "lr: {lora: 1.0e-3, full: 1.0e-4}\nbudget_flops: 1.0e11\n")
    (tmp_path / "my.jsonl").write_text(qa_rows(30))
    (d / "task" / "mytask.yaml").write_text(f"# my task\nname: jsonl\npath: {tmp_path / 'my.jsonl'}\nlabel: mine\n"
                                            "num_eval: 10\nprompt_tokens: 30\nmax_new_tokens: 24\n"
                                            "expected_completion_tokens: 16\n")
    compose_mod.set_config_dirs([d])
    yield d
    compose_mod.set_config_dirs([])


def _race(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "race_cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


# --- the light reader against transformers --------------------------------------------------------

PROMPTS = ["Answer with '#### <number>'.\nQ: What is 12 + 24?\nA:", "Q: héllo wörld — ∑ 3×4\nA:", "  two  spaces\n\n"]


def _bpe_folder(folder: Path) -> Path:
    """A byte-level BPE Qwen2Tokenizer with real merges and an added <|im_end|> as its EOS."""
    from transformers import Qwen2Tokenizer

    from race_cli.zoo.tokenizer import bytes_to_unicode

    b2u = bytes_to_unicode()
    vocab = {b2u[b]: b for b in range(256)}
    merges = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Q", ":"), ("1", "2")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    tok = Qwen2Tokenizer(vocab=vocab, merges=merges, eos_token="<|endoftext|>")
    tok.add_special_tokens({"eos_token": "<|im_end|>"})
    tok.save_pretrained(folder)
    return folder


@pytest.mark.parametrize("kind", ["byte", "bpe"])
def test_the_light_reader_encodes_and_finds_eos_as_autotokenizer(tmp_path, kind):
    """Reference implementation: transformers' AutoTokenizer on the same saved folder."""
    from transformers import AutoTokenizer

    from race_cli.tasks.checks import eos_token, load_tokenizer
    from race_cli.zoo.tokenizer import byte_tokenizer

    folder = tmp_path / kind
    if kind == "byte":
        byte_tokenizer().save_pretrained(folder)
    else:
        _bpe_folder(folder)
    ref, light = AutoTokenizer.from_pretrained(folder), load_tokenizer(folder)
    for text in PROMPTS:
        assert light.encode(text, add_special_tokens=False).ids == ref(text, add_special_tokens=False)["input_ids"]
    assert eos_token(folder) == ref.eos_token
    assert light.token_to_id(eos_token(folder)) == ref.eos_token_id
    if kind == "bpe":  # the merges were used: fewer ids than bytes
        assert len(light.encode(" the", add_special_tokens=False).ids) == 1


def test_plan_checks_import_no_torch():
    code = ("import sys; from pathlib import Path; from race_cli.tasks.checks import load_tokenizer; "
            f"load_tokenizer(Path({str(ROOT / 'race_cli' / 'zoo' / 'weights' / 'tiny-s-287bea28bad4')!r})); "
            "print([m for m in ('torch', 'transformers') if m in sys.modules])")
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert got.returncode == 0 and got.stdout.strip() == "[]", got.stdout + got.stderr


# --- refusals, exit 2, the file named ----------------------------------------------------------------

def test_a_model_folder_without_a_tokenizer_is_refused_by_race_plan(own, models):
    got = _race("plan", "--config-dir", str(own), "grid=none", "model=notok", "task=mytask")
    assert got.returncode == 2, got.stdout + got.stderr
    assert f"{models['notok']} holds no tokenizer" in got.stderr
    assert f"tokenizer.save_pretrained('{models['notok']}')" in got.stderr and "Traceback" not in got.stderr


def test_the_same_model_with_its_tokenizer_plans(own):
    from race_cli.plan.build import build_plan

    (job,) = build_plan(["grid=none", "model=mine", "task=mytask"]).jobs
    assert job.iterations > 0


def test_an_eos_outside_the_vocabulary_is_refused(own, tmp_path, models):
    import shutil

    from race_cli.plan.build import build_plan

    folder = tmp_path / "badeos"
    shutil.copytree(models["mine"], folder)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, "eos_token": "<|im_end|>"}))
    (own / "model" / "badeos.yaml").write_text(f"# bad eos\nname: badeos\npath: {folder}\n"
                                               "lr: {lora: 1.0e-3, full: 1.0e-4}\nbudget_flops: 1.0e11\n")
    with pytest.raises(RaceError) as err:
        build_plan(["grid=none", "model=badeos", "task=mytask"])
    assert "EOS token '<|im_end|>'" in str(err.value) and str(folder / "tokenizer_config.json") in str(err.value)


def test_token_ids_beyond_the_models_vocabulary_are_refused(own, tmp_path):
    from race_cli.plan.build import build_plan

    folder = save_model(tmp_path / "small-vocab", vocab_size=200)  # the byte tokenizer needs 257 ids
    (own / "model" / "small.yaml").write_text(f"# small vocab\nname: small\npath: {folder}\n"
                                              "lr: {lora: 1.0e-3, full: 1.0e-4}\nbudget_flops: 1.0e11\n")
    with pytest.raises(RaceError) as err:
        build_plan(["grid=none", "model=small", "task=mytask"])
    assert "token id 256" in str(err.value) and "vocab_size 200" in str(err.value)


def test_num_eval_beyond_the_task_file_is_refused_by_race_plan(own, tmp_path):
    got = _race("plan", "--config-dir", str(own), "grid=none", "model=mine", "task=mytask", "task.num_eval=30")
    assert got.returncode == 2, got.stdout + got.stderr
    assert f"{tmp_path / 'my.jsonl'} has 30 rows: holding out task.num_eval=30 leaves none" in got.stderr


def test_an_eval_file_shorter_than_num_eval_is_refused(own, tmp_path):
    from race_cli.plan.build import build_plan

    held = tmp_path / "held.jsonl"
    held.write_text(qa_rows(5, start=100))
    with pytest.raises(RaceError) as err:
        build_plan(["grid=none", "model=mine", "task=mytask", f"task.eval_path={held}", "task.num_eval=8"])
    assert f"{held} holds 5 rows but task.num_eval=8" in str(err.value)
    (job,) = build_plan(["grid=none", "model=mine", "task=mytask", f"task.eval_path={held}", "task.num_eval=5"]).jobs
    assert job.config["task"]["num_eval"] == 5


def test_a_bad_row_is_refused_at_plan_time_with_its_line(own, tmp_path):
    from race_cli.plan.build import build_plan

    (tmp_path / "my.jsonl").write_text(qa_rows(20) + json.dumps({"q": "no question field"}) + "\n")
    with pytest.raises(RaceError) as err:
        build_plan(["grid=none", "task=mytask"])
    assert f"{tmp_path / 'my.jsonl'}:21: no question in field 'question'" in str(err.value)


def test_gsm8k_num_eval_beyond_its_test_split_is_refused():
    from race_cli.plan.build import build_plan

    with pytest.raises(RaceError) as err:
        build_plan(["grid=none", "task=gsm8k", "task.num_eval=5000"])
    assert "test split holds 1319 items but task.num_eval=5000" in str(err.value)


def test_an_unknown_evaluation_target_exits_2():
    got = _race("plan", "grid=none", "eval.targets=[gsm8k,nosuch]")
    assert got.returncode == 2 and "eval.targets has 'nosuch'" in got.stderr


# --- evaluation follows the task ---------------------------------------------------------------------

def test_your_task_on_the_default_grid_evaluates_on_your_task(own):
    from race_cli.plan.build import build_plan
    from race_cli.plan.render import settings_lines
    from race_cli.tasks.targets import target_names

    plan = build_plan(["model=mine", "task=mytask", "seed=0"])
    for job in plan.jobs:
        assert target_names(job.config) == ["mine"] and job.config["task"]["num_eval"] == 10
        assert job.config["rollout"]["max_new_tokens"] == 24  # the task's, not a grid's
    assert "eval.targets" in plan.task_note and "task.num_eval" in plan.task_note
    assert not any("evaluated on" in line for line in settings_lines(plan))


def test_the_grids_own_task_keeps_its_targets_and_says_so_on_the_settings_line():
    from race_cli.plan.build import build_plan
    from race_cli.plan.render import settings_lines
    from race_cli.tasks.targets import target_names

    for typed in ([], ["task=arithmetic"]):
        plan = build_plan(typed)
        assert plan.task_note is None
        assert {tuple(target_names(j.config)) for j in plan.jobs} == {("arithmetic", "arithmetic-hard")}
        assert any("evaluated on arithmetic, arithmetic-hard (set)" in line for line in settings_lines(plan))


def test_targets_named_on_the_command_line_win(own):
    from race_cli.plan.build import build_plan
    from race_cli.tasks.targets import target_names

    plan = build_plan(["model=mine", "task=mytask", "eval.targets=[mine,gsm8k]", "seed=0"])
    assert {tuple(target_names(j.config)) for j in plan.jobs} == {("mine", "gsm8k")}


def test_race_train_refuses_the_same_folder_before_writing_its_job(own, models, tmp_path):
    out = tmp_path / "one-job"
    got = _race("train", "--config-dir", str(own), "model=notok", "task=mytask", "--out", str(out))
    assert got.returncode == 2 and f"{models['notok']} holds no tokenizer" in got.stderr, got.stderr
    assert not out.exists()


def test_a_sentencepiece_only_folder_is_left_to_the_job(tmp_path):
    """tokenizer.model (SentencePiece) is read by transformers, not by the tokenizers library: not refused here."""
    from race_cli.tasks.checks import _tokenizer_problems

    folder = save_model(tmp_path / "spm", tokenizer=False)
    assert _tokenizer_problems(str(folder), None, "Q: 1+1\nA:", True, "model.path", "jsonl")
    (folder / "tokenizer.model").write_bytes(b"\x0a\x00")
    _tokenizer_problems.cache_clear()
    assert _tokenizer_problems(str(folder), None, "Q: 1+1\nA:", True, "model.path", "jsonl") == ()
