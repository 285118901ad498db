"""The Qwen2.5-Math-PRM-7B layout at tiny size: loaded by weight name, no remote code, steps as the policy writes them.

The checkpoint folder is written by hand with the published config keys (architectures
Qwen2ForProcessRewardModel, auto_map to repository code, model_type qwen2) and weight names
(`model.*` body, `score.0.*` and `score.2.*` head, an unused `lm_head.weight`). Its repository
"code" writes a marker file when imported, so a test can prove it never runs. The reference
scores are computed here from transformers' Qwen2Model and the head written out by hand.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
yaml = pytest.importorskip("yaml")

from race_cli.errors import RaceError  # noqa: E402
from race_cli.cost.flops import Arch, Flops, reward_model_flops  # noqa: E402
from race_cli.rewards.prm import ProcessRewardModel  # noqa: E402
from race_cli.rewards.rule import rule_reward  # noqa: E402
from race_cli.tasks.prompting import CHAT_INSTRUCTION, split_steps  # noqa: E402
from race_cli.zoo import byte_tokenizer  # noqa: E402

torch.set_num_threads(1)
CONF = yaml.safe_load((Path(__file__).resolve().parents[1] / "conf" / "reward" / "prm-7b.yaml").read_text())
TAG = "<extra_0>"
D = 32

REMOTE_CODE = '''
import pathlib
pathlib.Path(__file__).with_name("REMOTE_CODE_RAN").write_text("imported")
raise RuntimeError("remote code was executed")
'''


def _tokenizer():
    tok = byte_tokenizer()  # ids 0..255 bytes, 256 <|endoftext|>
    tok.add_special_tokens({"additional_special_tokens": [TAG]})  # -> id 257, one token as in Qwen's vocab
    return tok


def _body_config(**kw):
    return transformers.Qwen2Config(**(dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=4,
                                            num_key_value_heads=2, intermediate_size=64, vocab_size=258,
                                            max_position_embeddings=512, initializer_range=0.5,
                                            attn_implementation="eager") | kw))


def build_checkpoint(folder: Path, *, drop: str | None = None, config=None) -> dict:
    """Write the tiny PRM-7B-layout checkpoint; returns its tensors (by name) for the reference."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(3)
    config = config or _body_config()
    d = config.hidden_size
    body = transformers.Qwen2Model(config)
    tensors = {f"model.{k}": v.detach().clone().contiguous() for k, v in body.state_dict().items()
               if "rotary_emb" not in k}
    g = torch.Generator().manual_seed(4)
    tensors["score.0.weight"] = torch.randn(d, d, generator=g) * 0.5
    tensors["score.0.bias"] = torch.randn(d, generator=g) * 0.5
    tensors["score.2.weight"] = torch.randn(2, d, generator=g) * 0.5
    tensors["score.2.bias"] = torch.randn(2, generator=g) * 0.5
    tensors["lm_head.weight"] = torch.randn(258, d, generator=g)  # shipped, unused by the PRM
    if drop:
        tensors.pop(drop)
    save_file(tensors, str(folder / "model.safetensors"))
    cfg = config.to_dict()
    published = {  # the keys Qwen2.5-Math-PRM-7B's config.json carries that matter here
        "architectures": ["Qwen2ForProcessRewardModel"], "model_type": "qwen2",
        "auto_map": {"AutoConfig": "configuration_qwen2_rm.Qwen2RMConfig",
                     "AutoModel": "modeling_qwen2_rm.Qwen2ForProcessRewardModel"},
        "torch_dtype": "float32",
    }
    keep = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
            "vocab_size", "max_position_embeddings", "rms_norm_eps", "rope_theta", "hidden_act", "tie_word_embeddings",
            "initializer_range", "sliding_window", "use_sliding_window", "max_window_layers", "attention_dropout")
    (folder / "config.json").write_text(json.dumps(published | {k: cfg[k] for k in keep if k in cfg}, indent=1))
    for name in ("modeling_qwen2_rm.py", "configuration_qwen2_rm.py"):
        (folder / name).write_text(REMOTE_CODE)
    _tokenizer().save_pretrained(folder)
    return tensors


def reference_scores(tensors: dict, ids: list[int], positions: list[int]) -> list[float]:
    """P(label 1) at `positions`: transformers' Qwen2Model body, then relu(h W0^T + b0) W2^T + b2, softmax."""
    body = transformers.Qwen2Model(_body_config())
    body.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
    with torch.no_grad():
        h = body(input_ids=torch.tensor([ids])).last_hidden_state[0]  # [T, d]
        hidden = torch.relu(h @ tensors["score.0.weight"].T + tensors["score.0.bias"])  # [T, d]
        logits = hidden @ tensors["score.2.weight"].T + tensors["score.2.bias"]  # [T, 2]
        return torch.softmax(logits[positions], dim=-1)[:, 1].tolist()


def _prm(folder: Path, **kw) -> ProcessRewardModel:
    m = CONF["model"]
    return ProcessRewardModel.from_pretrained(str(folder), format=m["format"], separator=CONF["step_separator"],
                                              step_tag=m["step_tag"], step_joiner=m["step_joiner"],
                                              template=m["template"], **kw)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prm7b-tiny")
    return folder, build_checkpoint(folder)


# a GSM8K-style completion written as the policy is told (CHAT_INSTRUCTION: one step per line, '#### N')
QUESTION = "Tom has 3 boxes of 4 pens and gives away 5. How many pens are left?"
COMPLETION = "3 boxes of 4 pens is 3*4=12 pens.\nHe gives away 5, so 12-5=7.\n#### 7"


def test_loads_by_weight_name_without_running_repository_code(checkpoint):
    folder, tensors = checkpoint
    prm = _prm(folder, trust_remote_code=False)
    assert not (folder / "REMOTE_CODE_RAN").exists()
    assert type(prm.model).__name__ == "Qwen2ProcessRewardModel"
    assert prm.num_labels == 2  # the published config does not say num_labels; the head has 2 outputs
    # every weight is the checkpoint's, by name (lm_head is not part of the PRM)
    state = prm.model.state_dict()
    for name, value in tensors.items():
        if not name.startswith("lm_head."):
            assert torch.equal(state[name], value), name
    assert not any(k.startswith("lm_head") for k in state)


def test_scores_match_the_layout_computed_by_hand(checkpoint):
    folder, tensors = checkpoint
    prm = _prm(folder)
    ids, positions = prm.encode(QUESTION, COMPLETION)
    assert [ids[p] for p in positions] == [257, 257, 257]  # each step is read at its <extra_0> token
    got = prm.score([QUESTION], [COMPLETION])[0]
    assert got == pytest.approx(reference_scores(tensors, ids, positions), abs=1e-5)
    assert len(set(round(x, 6) for x in got)) == 3  # distinct per step: the scores are read where they differ


def test_multi_step_completion_reaches_the_prm_as_several_steps(checkpoint):
    folder, _ = checkpoint
    prm = _prm(folder)
    # the policy's instruction and the PRM's separator agree: one step per line
    assert "one step per line" in CHAT_INSTRUCTION and CONF["step_separator"] == "\n"
    steps = split_steps(COMPLETION, CONF["step_separator"])
    assert len(steps) == 3
    text, _ = prm.build_input(QUESTION, COMPLETION)
    # Qwen's card: steps joined by <extra_0>, one after the last, inside its chat template
    assert "<|im_start|>assistant\n" + "<extra_0>".join(steps) + "<extra_0><|im_end|>" in text
    assert text.count(TAG) == 3
    rewards, info = prm.reward([QUESTION], [COMPLETION], ["7"], outcome_weight=0.0)
    assert len(info["step_scores"][0]) == 3 and rewards[0] == pytest.approx(min(info["step_scores"][0]))
    assert rule_reward(COMPLETION, "7") == 1.0  # the grader reads the same completion's '#### 7'


def test_two_layer_head_is_charged_in_the_ledger(checkpoint):
    from torch.utils.flop_counter import FlopCounterMode

    folder, _ = checkpoint
    prm = _prm(folder)
    prm.model.model.set_attn_implementation("eager")  # the executed convention counts eager attention's matmuls
    with FlopCounterMode(display=False) as counter:
        _, info = prm.reward([QUESTION, "Q"], [COMPLETION, "a\nb"], ["7", "1"])
    want = sum((reward_model_flops(Arch.from_config(prm.model.config), b, padded_len=p, head="classifier",
                                   num_labels=2) for b, p in zip(info["batch_seq_lens"], info["padded_lens"])), Flops())
    assert info["flops"] == want
    assert info["flops"].executed == counter.get_total_flops()  # the d*d layer is really run and counted


def test_a_checkpoint_missing_a_head_weight_is_refused(tmp_path):
    build_checkpoint(tmp_path / "bad", drop="score.2.bias")
    with pytest.raises(RaceError, match="missing \\['score.2.bias'\\]"):
        _prm(tmp_path / "bad")
    assert not (tmp_path / "bad" / "REMOTE_CODE_RAN").exists()


def test_dtype_is_applied(checkpoint):
    folder, _ = checkpoint
    assert _prm(folder, dtype="bfloat16").model.score[0].weight.dtype == torch.bfloat16


def test_rotary_frequencies_stay_float32_under_bf16_loading(tmp_path):
    """bf16 loading keeps inv_freq float32 (as from_pretrained does): the scores of a long solution, read at
    positions >= 512, equal those of a bf16 body whose RoPE runs on float32 frequencies. Cast to bf16, the
    frequencies of head dim 128 (base 10000) are off by up to 1.1 rad at position 900 in 16 of 64 pairs
    (computed below); at this layout's head dim 32 the tiny PRM's step scores moved by up to 0.7."""
    f = 1.0 / (10000 ** (torch.arange(0, 128, 2, dtype=torch.float32) / 128))  # Qwen2.5-Math-PRM-7B: d_h 128
    err = (900 * (f - f.to(torch.bfloat16).float())).abs()
    assert err.max().item() == pytest.approx(1.10, abs=0.01) and int((err > 0.1).sum()) == 16

    config = _body_config(hidden_size=64, num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048)
    tensors = build_checkpoint(tmp_path / "long", config=config)
    prm = _prm(tmp_path / "long", dtype="bfloat16")
    rotary = prm.model.model.rotary_emb
    assert prm.model.score[0].weight.dtype == torch.bfloat16 and rotary.inv_freq.dtype == torch.float32
    assert torch.equal(rotary.inv_freq, type(rotary)(config).inv_freq)
    completion = "\n".join(f"step {i}: {i}*3={i * 3} and then some more words to pad." for i in range(22)) + "\n#### 7"
    ids, positions = prm.encode(QUESTION, completion)
    late = [k for k, p in enumerate(positions) if p >= 512]
    assert len(late) >= 15 and max(positions) >= 1200
    got = prm.score([QUESTION], [completion])[0]
    # the reference: transformers' body in bf16, its RoPE rebuilt in float32, the same attention kernel
    ref_config = copy.deepcopy(config)
    ref_config._attn_implementation = prm.model.config._attn_implementation
    body = transformers.Qwen2Model(ref_config)
    body.load_state_dict({k[len("model."):]: v for k, v in tensors.items() if k.startswith("model.")}, strict=False)
    body = body.to(torch.bfloat16)
    body.rotary_emb = type(body.rotary_emb)(config)
    with torch.no_grad():
        logits = prm.model.score(body(input_ids=torch.tensor([ids])).last_hidden_state[0]).float()  # [T, 2]
    want = torch.softmax(logits[positions], -1)[:, 1].tolist()
    assert [got[k] for k in late] == pytest.approx([want[k] for k in late], abs=1e-6)
