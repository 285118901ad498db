"""Process reward model scoring on tiny random Qwen2 models with the byte tokenizer (token id == byte).

Because every byte is one token, the token index of a step end is its byte index in the PRM
input, which the comments below count by hand.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from race_cli.errors import RaceError  # noqa: E402
from race_cli.cost.flops import Arch, Flops, reward_model_flops  # noqa: E402
from race_cli.rewards.prm import ProcessRewardModel, aggregate  # noqa: E402
from race_cli.rewards.rule import rule_reward  # noqa: E402
from race_cli.zoo import byte_tokenizer  # noqa: E402

torch.set_num_threads(1)


def _config(**kw):
    # initializer_range 0.5 (not 0.02) so random scores spread over (0, 1) and comparisons bite
    return transformers.Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                    num_key_value_heads=1, intermediate_size=64, vocab_size=257,
                                    initializer_range=0.5, attn_implementation="eager", **kw)


@pytest.fixture(scope="module")
def classifier():
    torch.manual_seed(0)
    return transformers.Qwen2ForTokenClassification(_config(num_labels=2)).eval()


@pytest.fixture(scope="module")
def causal_lm():
    torch.manual_seed(1)
    return transformers.Qwen2ForCausalLM(_config()).eval()


QUESTIONS = ["Q: 45+74-27", "Q: 1+2", "Q: 9-3+1", "Q: 7+7", "Q: 80-1-2", "Q: 5+5"]
COMPLETIONS = [
    "45+74=119\n119-27=92\n#### 92",  # 3 steps, no trailing newline
    "1+2=3\n#### 3\n",  # trailing newline
    "9-3=6\n\n6+1=7\n#### 7",  # a blank line (not a step)
    "7+7=14",  # one step
    "80-1=79\n79-2=77\n#### 77\nQ: extra",  # 4 steps
    "   \n",  # no steps: not scored
]
GOLDS = ["92", "3", "7", "14", "77", "10"]


# --- where each step is read ----------------------------------------------------------

@pytest.mark.parametrize("kwargs, completion, text, positions", [
    # "Q\n" is bytes 0-1; "ab" 2-3, "\n" 4 -> step 1 at 4; "cd" 5-6, "\n" 7 -> step 2 at 7;
    # "\n" 8 ends a blank step (dropped); "ef" 9-10 -> last step at its last byte, 10
    ({}, "ab\ncd\n\nef", "Q\nab\ncd\n\nef", [4, 7, 10]),
    ({}, "ab\n", "Q\nab\n", [4]),  # a trailing separator ends the last step
    # "к" is 2 bytes: "кк" 2-5, "\n" 6 -> 6; "x" 7 -> 7
    ({}, "кк\nx", "Q\nкк\nx", [6, 7]),
    # separator "\n\n": "a" 2, "\n\n" 3-4 -> 4; "b" 5 -> 5
    ({"separator": "\n\n"}, "a\n\nb", "Q\na\n\nb", [4, 5]),
    # Math-Shepherd tag " ки" (5 bytes) after each step, steps rejoined with "\n":
    # "ab" 2-3, " " 4, "к" 5-6, "и" 7-8 -> 8; "\n" 9; "cd" 10-11, " " 12, "ки" 13-16 -> 16
    ({"step_tag": " ки"}, "ab\ncd", "Q\nab ки\ncd ки", [8, 16]),
    # tag "\n" = separator: no extra joiner; blank steps dropped; "ab" 2-3, "\n" 4; "cd" 5-6, "\n" 7
    ({"step_tag": "\n"}, "ab\n\ncd", "Q\nab\ncd\n", [4, 7]),
    # a template with text after the completion: the last step is read at the completion's end
    # "<q>" 0-2, "Q" 3, "</q>" 4-7, "ab" 8-9, "\n" 10 -> 10, "cd" 11-12 -> 12, then "<end>"
    ({"template": "<q>{question}</q>{completion}<end>"}, "ab\ncd", "<q>Q</q>ab\ncd<end>", [10, 12]),
    # literal braces in a template (a chat system prompt asking for \boxed{}) are kept as written:
    # "Put it in \boxed{}.\n" is bytes 0-19, "Q\n" 20-21, "ab" 22-23 -> the one step at 23
    ({"template": "Put it in \\boxed{}.\n{question}\n{completion}"}, "ab", "Put it in \\boxed{}.\nQ\nab", [23]),
    ({}, "", "Q\n", []),
    ({}, " \n \n", "Q\n \n \n", []),
])
def test_step_positions_by_hand(classifier, kwargs, completion, text, positions):
    prm = ProcessRewardModel(classifier, byte_tokenizer(), **kwargs)
    built, _ = prm.build_input("Q", completion)
    assert built == text
    ids, pos = prm.encode("Q", completion)
    assert ids == list(text.encode("utf-8"))  # token id == byte
    assert pos == positions


def test_special_token_tag_qwen_style(classifier):
    """Qwen2.5-Math-PRM layout: steps joined by a special <extra_0> token, read at each one."""
    tok = byte_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": ["<extra_0>"]})
    extra = tok.convert_tokens_to_ids("<extra_0>")
    assert extra == 257
    prm = ProcessRewardModel(classifier, tok, separator="\n\n", step_tag="<extra_0>", step_joiner="")
    text, _ = prm.build_input("Q", "ab\n\ncd")
    assert text == "Q\nab<extra_0>cd<extra_0>"
    ids, pos = prm.encode("Q", "ab\n\ncd")
    # Q \n a b <extra_0> c d <extra_0>: the tags are tokens 4 and 7
    assert ids == [81, 10, 97, 98, extra, 99, 100, extra]
    assert pos == [4, 7]


# --- scores equal a manual single-sequence forward ------------------------------------

def _manual_classifier(model, prm, question, completion):
    ids, pos = prm.encode(question, completion)
    if not pos:
        return []
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]  # [T, 2], no padding, no mask
    return torch.softmax(logits[pos].float(), dim=-1)[:, 1].tolist()


def test_classifier_scores_match_single_forward(classifier):
    prm = ProcessRewardModel(classifier, byte_tokenizer(), batch_size=4)
    got = prm.score(QUESTIONS, COMPLETIONS)
    want = [_manual_classifier(classifier, prm, q, c) for q, c in zip(QUESTIONS, COMPLETIONS)]
    assert [len(s) for s in got] == [3, 2, 3, 1, 4, 0]
    for g, w in zip(got, want):
        assert g == pytest.approx(w, abs=1e-5)
    flat = [x for s in got for x in s]
    assert max(flat) - min(flat) > 0.3  # scores really differ, so the comparison can fail


def test_batching_and_padding_do_not_change_scores(classifier):
    one = ProcessRewardModel(classifier, byte_tokenizer(), batch_size=1).score(QUESTIONS, COMPLETIONS)
    for bs in (2, 3, 16):
        many = ProcessRewardModel(classifier, byte_tokenizer(), batch_size=bs).score(QUESTIONS, COMPLETIONS)
        for a, b in zip(one, many):
            assert a == pytest.approx(b, abs=1e-5)


def test_single_logit_head_is_sigmoid():
    torch.manual_seed(2)
    model = transformers.Qwen2ForTokenClassification(_config(num_labels=1)).eval()
    prm = ProcessRewardModel(model, byte_tokenizer())
    ids, pos = prm.encode(QUESTIONS[0], COMPLETIONS[0])
    with torch.no_grad():
        logit = model(input_ids=torch.tensor([ids])).logits[0, pos, 0]
    assert prm.score(QUESTIONS[:1], COMPLETIONS[:1])[0] == pytest.approx(torch.sigmoid(logit).tolist(), abs=1e-6)


def test_train_mode_model_is_scored_in_eval_mode_and_left_as_found():
    """The classification head has dropout (p=0.1): scores must not depend on the caller's mode."""
    torch.manual_seed(0)
    model = transformers.Qwen2ForTokenClassification(_config(num_labels=2))
    model.train()
    prm = ProcessRewardModel(model, byte_tokenizer())
    first, second = prm.score(QUESTIONS, COMPLETIONS), prm.score(QUESTIONS, COMPLETIONS)
    assert first == second
    assert model.training
    model.eval()
    assert prm.score(QUESTIONS, COMPLETIONS) == first


def test_math_shepherd_token_format(causal_lm):
    """p(good) / (p(good) + p(bad)) of the next token at each ' ки' tag, '+' and '-' as labels."""
    prm = ProcessRewardModel(causal_lm, byte_tokenizer(), format="token", step_tag=" ки",
                             template="{question} {completion}", batch_size=4)
    assert prm.label_ids == (ord("+"), ord("-"))  # byte ids 43, 45
    got = prm.score(QUESTIONS, COMPLETIONS)
    for q, c, g in zip(QUESTIONS, COMPLETIONS, got):
        ids, pos = prm.encode(q, c)
        assert [ids[p] for p in pos] == [0xB8] * len(pos)  # last byte of "и" (d0 b8)
        if not pos:
            assert g == []
            continue
        with torch.no_grad():
            probs = torch.softmax(causal_lm(input_ids=torch.tensor([ids])).logits[0].double(), dim=-1)  # [T, V]
        good, bad = probs[pos, 43], probs[pos, 45]
        assert g == pytest.approx((good / (good + bad)).tolist(), abs=1e-5)


def test_label_tokens_must_be_one_token(causal_lm):
    with pytest.raises(RaceError, match="exactly one token"):
        ProcessRewardModel(causal_lm, byte_tokenizer(), format="token", good_token="ok")
    prm = ProcessRewardModel(causal_lm, byte_tokenizer(), format="token", good_token=49, bad_token=48)
    assert prm.label_ids == (49, 48)


# --- aggregation and outcome mixing ---------------------------------------------------

def test_aggregate_by_hand():
    s = [0.9, 0.5, 0.8]
    assert aggregate(s, "min") == 0.5
    assert aggregate(s, "prod") == pytest.approx(0.36)  # 0.9 * 0.5 * 0.8
    assert aggregate(s, "last") == 0.8
    assert aggregate(s, "mean") == pytest.approx(2.2 / 3)
    for how in ("min", "prod", "last", "mean"):
        assert aggregate([], how) == 0.0
    with pytest.raises(RaceError, match="unknown"):
        aggregate(s, "max")


def test_outcome_mixing_by_hand(classifier):
    prm = ProcessRewardModel(classifier, byte_tokenizer(), aggregation="min", batch_size=4)
    steps = prm.score(QUESTIONS, COMPLETIONS)
    rules = [rule_reward(c, g) for c, g in zip(COMPLETIONS, GOLDS)]
    assert rules == [1.0, 1.0, 1.0, 1.0, 1.0, 0.0]  # the last has no answer at all
    rewards, info = prm.reward(QUESTIONS, COMPLETIONS, GOLDS, outcome_weight=0.25, how="mean")
    for r, s, o in zip(rewards, steps, rules):
        mean = sum(s) / len(s) if s else 0.0
        assert r == pytest.approx(0.75 * mean + 0.25 * o, abs=1e-6)
    assert info["outcome"] == rules
    only_prm, _ = prm.reward(QUESTIONS, COMPLETIONS, GOLDS)  # default: weight 0, min
    assert only_prm == pytest.approx([min(s) if s else 0.0 for s in steps], abs=1e-6)
    only_rule, _ = prm.reward(QUESTIONS, COMPLETIONS, GOLDS, outcome_weight=1.0)
    assert only_rule == rules


# --- the token counts and FLOPs the engine charges ------------------------------------

def test_info_token_counts_and_flops(classifier):
    from torch.utils.flop_counter import FlopCounterMode

    prm = ProcessRewardModel(classifier, byte_tokenizer(), batch_size=2)
    with FlopCounterMode(display=False) as counter:
        _, info = prm.reward(QUESTIONS, COMPLETIONS, GOLDS)
    texts = [prm.build_input(q, c)[0] for q, c in zip(QUESTIONS, COMPLETIONS)]
    lens = [len(t.encode("utf-8")) for t in texts]
    lens[5] = 0  # no steps: never forwarded
    assert info["seq_lens"] == lens
    # 5 scored sequences sorted by length, 2 per forward
    order = sorted(lens[:5])
    assert info["batch_seq_lens"] == [order[0:2], order[2:4], order[4:5]]
    assert info["padded_lens"] == [order[1], order[3], order[4]]
    arch = Arch.from_config(classifier.config)
    want = sum((reward_model_flops(arch, b, padded_len=p, head="scalar", num_labels=2)  # one Linear head
                for b, p in zip(info["batch_seq_lens"], info["padded_lens"])), Flops())
    assert info["flops"] == want
    # executed convention == what torch counted on these forwards (eager attention on CPU)
    assert info["flops"].executed == counter.get_total_flops()
    assert info["seconds"] > 0


def test_logprob_format_runs_the_lm_head_only_where_a_completion_token_is_predicted(causal_lm):
    from torch.utils.flop_counter import FlopCounterMode

    prm = ProcessRewardModel(causal_lm, byte_tokenizer(), format="logprob", template="{question}|{completion}",
                             batch_size=2)
    with FlopCounterMode(display=False) as counter:
        _, info = prm.reward(QUESTIONS, COMPLETIONS, GOLDS)
    encoded = prm._encode(QUESTIONS, COMPLETIONS)
    # the head runs at positions start-1 .. len-2 of each scored row: one per completion byte (the
    # byte tokenizer: a token per character; `start` is the token after "question|")
    heads = [len(ids) - start for ids, pos, start in encoded if pos]
    assert heads == [len(c.encode("utf-8")) for c in COMPLETIONS[:5]]
    arch = Arch.from_config(causal_lm.config)
    model = sum((reward_model_flops(arch, b, padded_len=p, head="token")
                 for b, p in zip(info["batch_seq_lens"], info["padded_lens"])), Flops()).model
    assert info["flops"].model == model  # the planning convention keeps the head at every position
    # executed: padded body as before, LM head (d*V MACs) only at the predicting positions
    body = sum((reward_model_flops(arch, b, padded_len=p, head="token", executed_head_positions=0)
                for b, p in zip(info["batch_seq_lens"], info["padded_lens"])), Flops()).executed
    assert info["flops"].executed == body + 2 * arch.hidden_size * arch.vocab_size * sum(heads)
    assert info["flops"].executed == counter.get_total_flops()


def test_nothing_to_score_costs_nothing(classifier):
    prm = ProcessRewardModel(classifier, byte_tokenizer())
    rewards, info = prm.reward(["Q"], [""], ["1"])
    assert rewards == [0.0] and info["flops"] == Flops() and info["padded_lens"] == []


# --- loading and bad input ------------------------------------------------------------

def test_from_pretrained_round_trip(tmp_path, classifier, causal_lm):
    classifier.save_pretrained(tmp_path / "cls")
    byte_tokenizer().save_pretrained(tmp_path / "cls")
    causal_lm.save_pretrained(tmp_path / "lm")
    byte_tokenizer().save_pretrained(tmp_path / "lm")
    loaded = ProcessRewardModel.from_pretrained(str(tmp_path / "cls"), dtype="float32", batch_size=3)
    want = ProcessRewardModel(classifier, byte_tokenizer()).score(QUESTIONS, COMPLETIONS)
    for a, b in zip(loaded.score(QUESTIONS, COMPLETIONS), want):
        assert a == pytest.approx(b, abs=1e-5)
    as_dtype = ProcessRewardModel.from_pretrained(str(tmp_path / "cls"), dtype=torch.bfloat16)
    assert as_dtype.model.dtype == torch.bfloat16  # the engine passes torch dtypes
    assert ProcessRewardModel.from_pretrained(str(tmp_path / "cls"), dtype="auto").model.dtype == torch.float32
    with pytest.raises(RaceError, match="dtype 'float8' is unknown"):
        ProcessRewardModel.from_pretrained(str(tmp_path / "cls"), dtype="float8")
    lm = ProcessRewardModel.from_pretrained(str(tmp_path / "lm"), format="token", step_tag="\n")
    lm_want = ProcessRewardModel(causal_lm, byte_tokenizer(), format="token", step_tag="\n")
    for a, b in zip(lm.score(QUESTIONS, COMPLETIONS), lm_want.score(QUESTIONS, COMPLETIONS)):
        assert a == pytest.approx(b, abs=1e-5)
    assert not any(math.isnan(x) for s in lm.score(QUESTIONS, COMPLETIONS) for x in s)


def test_bad_input_is_reported(tmp_path, classifier):
    with pytest.raises(RaceError, match="could not load|Could not load"):
        ProcessRewardModel.from_pretrained(str(tmp_path / "missing"))
    with pytest.raises(RaceError) as e:
        ProcessRewardModel(classifier, byte_tokenizer(), format="scalar", template="{question}",
                           aggregation="max", batch_size=0)
    assert len(e.value.problems) == 4  # every problem at once
    prm = ProcessRewardModel(classifier, byte_tokenizer())
    with pytest.raises(RaceError, match="questions but"):
        prm.score(["a"], ["b", "c"])
    with pytest.raises(RaceError, match="outcome_weight"):
        prm.reward(["a"], ["b"], ["1"], outcome_weight=1.5)


def test_logprob_features_and_calibration_by_hand(causal_lm):
    """logprob format: step k's feature is the lowest log p(token) of the completion up to its end."""
    import torch

    from race_cli.zoo.prm_fit import fit_calibration

    tok, model = byte_tokenizer(), causal_lm
    prm = ProcessRewardModel(model, tok, format="logprob", template="{question}|{completion}")
    q, c = "Q", "ab\ncd"  # ids: Q | a b \n c d -> completion starts at token 2; steps end at tokens 4 and 6
    (ids, pos, start), = prm._encode([q], [c])
    assert (pos, start) == ([4, 6], 2)
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0]
    lp = [torch.log_softmax(logits[t - 1], -1)[ids[t]].item() for t in range(len(ids))]
    want = [min(lp[2:5]), min(lp[2:7])]  # running minimum over a, b, \\n then also c, d
    assert prm.features([q], [c])[0] == pytest.approx(want, abs=1e-5)
    model.config.prm_calibration = {"scale": 2.0, "bias": 1.0}
    try:
        assert prm.score([q], [c])[0] == pytest.approx([1 / (1 + math.exp(-(2 * w + 1))) for w in want], abs=1e-6)
    finally:
        del model.config.prm_calibration  # the fixture is shared
    # Newton's logistic fit recovers a separable-ish 1-D problem's direction and midpoint
    feats = [-5.0, -4.0, -3.0, -2.5, -1.0, -0.5, 0.0, 0.5]
    labels = [0, 0, 0, 1, 0, 1, 1, 1]
    cal = fit_calibration(feats, labels)
    assert cal["scale"] > 0 and -3.0 < -cal["bias"] / cal["scale"] < -0.5


# --- no KV cache in a scoring forward (issue 35) ---------------------------------------------------


def test_neither_scoring_forward_builds_a_kv_cache(classifier, causal_lm, monkeypatch):
    """transformers 5 takes use_cache from the config (Qwen2Config.use_cache is True) when a forward does not
    pass it, and builds a DynamicCache nobody reads: the classifier/token forward and the logprob forward,
    and the Qwen2.5-Math-PRM layout's own module, must pass use_cache=False."""
    from transformers.models.qwen2 import modeling_qwen2

    from race_cli.rewards.prm import qwen2_prm_class

    assert classifier.config.use_cache is True  # the default the forwards must override
    made = []

    class Counting(modeling_qwen2.DynamicCache):
        def __init__(self, *a, **k):
            made.append(1)
            super().__init__(*a, **k)

    monkeypatch.setattr(modeling_qwen2, "DynamicCache", Counting)
    torch.manual_seed(2)
    layout = qwen2_prm_class()(_config(num_labels=2)).eval()
    for model, fmt, extra in ((classifier, "classifier", {}), (layout, "classifier", {}),
                              (causal_lm, "token", dict(good_token="+", bad_token="-", step_tag="\n")),
                              (causal_lm, "logprob", {})):
        prm = ProcessRewardModel(model, byte_tokenizer(), format=fmt, **extra)
        scores = prm.score(QUESTIONS[:2], COMPLETIONS[:2])
        assert all(len(s) > 0 for s in scores)
    assert made == []  # no cache was built
    layout(input_ids=torch.tensor([[1, 2, 3]]), use_cache=True)  # the counter itself works
    assert made == [1]
