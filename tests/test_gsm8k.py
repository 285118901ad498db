"""GSM8K task loading (the packaged real files, a single file, the hub path, bad input) and prompt formatting."""

from __future__ import annotations

import gzip
import json
import sys
import types

import pytest

from race_cli.errors import RaceError
from race_cli.rewards.rule import rule_reward
from race_cli.tasks.base import Item
from race_cli.tasks.gsm8k import PACKAGED_DIR, GSM8KTask, local_gsm8k_dir, strip_calculator
from race_cli.tasks.prompting import BOXED, CHAT_INSTRUCTION, PLAIN_INSTRUCTION, format_prompt, split_steps

GSM8K = PACKAGED_DIR  # shipped in race_cli/data/gsm8k with its LICENSE


def _raw(split: str) -> list[dict]:
    if split == "train":
        with gzip.open(GSM8K / "train.jsonl.gz", "rt", encoding="utf-8") as f:
            return [json.loads(line) for line in f]
    with open(GSM8K / f"{split}.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


# --- the real files -----------------------------------------------------------------

def test_packaged_copy_is_the_default_and_has_its_license(monkeypatch):
    monkeypatch.delenv("RACE_GSM8K_DIR", raising=False)
    assert local_gsm8k_dir() == PACKAGED_DIR
    assert "MIT License" in (PACKAGED_DIR / "LICENSE").read_text()
    assert GSM8KTask().eval_items() == GSM8KTask(path=str(PACKAGED_DIR)).eval_items()
    assert len(_raw("train")) == 7473 and len(_raw("test")) == 1319  # GSM8K's published split sizes


def test_real_splits_load_whole():
    task = GSM8KTask(path=str(GSM8K))
    train, test = task.train_items(), task.eval_items()
    assert (len(train), len(test)) == (7473, 1319)  # GSM8K's published split sizes
    raw = _raw("test")
    for i, item in enumerate(test):
        assert item.id == f"gsm8k-test-{i}"
        assert item.question == raw[i]["question"].strip()
        assert "<<" not in item.solution and ">>" not in item.solution
        assert item.solution.endswith(f"\n#### {item.answer}")
        assert "," not in item.answer
        assert rule_reward(item.solution, item.answer) == 1.0
    assert {it.id for it in train} == {f"gsm8k-train-{i}" for i in range(7473)}


def test_real_comma_answers_normalised_and_annotations_stripped():
    task = GSM8KTask(path=str(GSM8K))
    raw = _raw("test")
    commas = [i for i, r in enumerate(raw) if "," in r["answer"].rpartition("####")[2]]
    assert len(commas) == 14  # counted in test.jsonl: '2,125', '114,200', ...
    for i in commas:
        assert task.eval_items()[i].answer == raw[i]["answer"].rpartition("####")[2].strip().replace(",", "")
    # test item 1, by hand: "It takes 2/2=<<2/2=1>>1 bolt of white fiber\n..."
    assert task.eval_items()[1].solution.splitlines()[0] == "It takes 2/2=1 bolt of white fiber"


def test_eval_prefix_and_seeded_train_order():
    full = GSM8KTask(path=str(GSM8K))
    some = GSM8KTask(path=str(GSM8K), num_eval=5, num_train=10, seed=3)
    assert some.eval_items() == full.eval_items()[:5]  # first num_eval, whatever the seed
    a, b = GSM8KTask(path=str(GSM8K), seed=1).train_items(), GSM8KTask(path=str(GSM8K), seed=2).train_items()
    assert [it.id for it in a] != [it.id for it in b]
    assert sorted(it.id for it in a) == sorted(it.id for it in b)
    assert some.train_items() == GSM8KTask(path=str(GSM8K), seed=3).train_items()[:10]


def test_env_dir_used_when_no_path(monkeypatch, tmp_path):
    _write(tmp_path / "test.jsonl", ROWS[2:])
    monkeypatch.setenv("RACE_GSM8K_DIR", str(tmp_path))
    assert [it.answer for it in GSM8KTask().eval_items()] == ["-3"]


# --- small files written here -------------------------------------------------------

ROWS = [
    {"question": "Tom has 3 apples and buys 4. How many?", "answer": "3+4=<<3+4=7>>7\n#### 7"},
    {"question": "A car costs $1,500 and a bike $250. Total?", "answer": "1500+250=<<1500+250=1750>>1,750\n#### 1,750"},
    {"question": "She owes 5 and pays 8. Balance?", "answer": "5-8=-3\n#### -3"},
]


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_single_file_serves_both_splits(tmp_path):
    task = GSM8KTask(path=str(_write(tmp_path / "mini.jsonl", ROWS)))
    ev = task.eval_items()
    assert [it.id for it in ev] == ["gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"]
    assert [it.answer for it in ev] == ["7", "1750", "-3"]
    assert ev[1].solution == "1500+250=1,750\n#### 1750"
    assert sorted(it.question for it in task.train_items()) == sorted(r["question"] for r in ROWS)


def test_folder_with_custom_split_names(tmp_path):
    _write(tmp_path / "dev.jsonl", ROWS[:2])
    _write(tmp_path / "train.jsonl", ROWS)
    task = GSM8KTask(path=str(tmp_path), split_eval="dev")
    assert [it.id for it in task.eval_items()] == ["gsm8k-dev-0", "gsm8k-dev-1"]


@pytest.mark.parametrize("content, message", [
    ('{"question": "q", "answer": "no final line"}\n', r"bad\.jsonl:1: not a GSM8K row"),
    ('{"question": "q", "answer": "x\\n#### 7"}\n{oops\n', r"bad\.jsonl:2: not valid JSON"),
    ('{"question": "q", "answer": "x\\n#### seven"}\n', r"not a number"),
    ('["a list"]\n', r"not a GSM8K row"),
    ("\n\n", r"holds no rows"),
])
def test_bad_files_say_where(tmp_path, content, message):
    (tmp_path / "bad.jsonl").write_text(content, encoding="utf-8")
    with pytest.raises(RaceError, match=message):
        GSM8KTask(path=str(tmp_path / "bad.jsonl")).eval_items()


def test_bad_arguments(tmp_path):
    with pytest.raises(RaceError, match="does not exist"):
        GSM8KTask(path=str(tmp_path / "nowhere"))
    with pytest.raises(RaceError, match="task.num_eval=0") as e:
        GSM8KTask(path=str(tmp_path), num_eval=0, num_train=-1)
    assert len(e.value.problems) == 2  # both reported at once
    _write(tmp_path / "train.jsonl", ROWS)
    with pytest.raises(RaceError, match=r"test\.jsonl not found: task\.path holds train\.jsonl"):
        GSM8KTask(path=str(tmp_path)).eval_items()


# --- the hub path (datasets replaced by stand-ins: no network here) -------------------

def _fake_datasets(monkeypatch, load_dataset):
    monkeypatch.delenv("RACE_GSM8K_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))


def test_hub_rows_become_items(monkeypatch):
    calls = []

    def load_dataset(name, config, split):
        calls.append((name, config, split))
        return ROWS

    _fake_datasets(monkeypatch, load_dataset)
    items = GSM8KTask(path="hub", num_eval=2).eval_items()
    assert calls == [("openai/gsm8k", "main", "test")]
    assert [(it.id, it.answer) for it in items] == [("gsm8k-test-0", "7"), ("gsm8k-test-1", "1750")]


def test_hub_unreachable_says_pass_a_path(monkeypatch):
    def load_dataset(name, config, split):
        raise ConnectionError("Couldn't reach 'openai/gsm8k' on the Hub (LocalEntryNotFoundError)")

    _fake_datasets(monkeypatch, load_dataset)
    with pytest.raises(RaceError, match=r"leave task\.path unset") as e:
        GSM8KTask(path="hub").eval_items()
    assert "ConnectionError" in str(e.value)


def test_datasets_missing_says_install(monkeypatch):
    monkeypatch.delenv("RACE_GSM8K_DIR", raising=False)
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(RaceError, match=r"pip install 'race-cli\[data\]'"):
        GSM8KTask(path="hub").train_items()


def test_strip_calculator():
    assert strip_calculator("48/2=<<48/2=24>>24 clips, 48+24=<<48+24=72>>72") == "48/2=24 clips, 48+24=72"


# --- prompts ------------------------------------------------------------------------

ITEM = Item(id="arith-eval-0", question="45+74-27", answer="92")


def test_plain_prompt_is_short():
    assert format_prompt(ITEM) == "End with '#### <number>'.\nQ: 45+74-27\nA:"
    assert format_prompt(ITEM, instruction="") == "Q: 45+74-27\nA:"
    assert format_prompt("2+2", instruction="Answer as #### N.") == "Answer as #### N.\nQ: 2+2\nA:"
    assert len(PLAIN_INSTRUCTION) <= 30  # every character is a token for byte-level models


def _chat_tokenizer():
    from race_cli.zoo import byte_tokenizer

    tok = byte_tokenizer()
    tok.chat_template = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                         "{% if add_generation_prompt %}<|assistant|>{% endif %}")
    return tok


def test_chat_prompt_through_template():
    tok = _chat_tokenizer()
    assert format_prompt(ITEM, tok) == f"<|user|>45+74-27\n{CHAT_INSTRUCTION}\n<|assistant|>"
    assert format_prompt(ITEM, tok, instruction="Go.") == "<|user|>45+74-27\nGo.\n<|assistant|>"
    assert format_prompt(ITEM, tok, style="plain") == format_prompt(ITEM)


def test_auto_without_template_is_plain_and_chat_needs_one():
    from race_cli.zoo import byte_tokenizer

    tok = byte_tokenizer()
    assert format_prompt(ITEM, tok) == format_prompt(ITEM)
    with pytest.raises(RaceError, match="needs a tokenizer with a chat template"):
        format_prompt(ITEM, tok, style="chat")
    with pytest.raises(RaceError, match="unknown"):
        format_prompt(ITEM, tok, style="fancy")


def test_boxed_convention_prompts():
    assert format_prompt(ITEM, convention=BOXED) == "Put the final answer in \\boxed{}.\nQ: 45+74-27\nA:"
    tok = _chat_tokenizer()
    assert format_prompt(ITEM, tok, convention=BOXED) == f"<|user|>45+74-27\n{BOXED.chat}\n<|assistant|>"


def test_split_steps():
    assert split_steps("45+74=119\n\n119-27=92\n#### 92\n") == ["45+74=119", "119-27=92", "#### 92"]
    assert split_steps("a\n\nb\nc", separator="\n\n") == ["a", "b\nc"]
    assert split_steps("  \n") == []
    with pytest.raises(RaceError, match="separator is empty"):
        split_steps("a", separator="")
