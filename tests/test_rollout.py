"""Rollout backends (race_cli/engine/rollout.py) on a tiny random Qwen2: shapes, EOS, cost, log-probs."""

import pytest
import torch

from race_cli.engine.logprobs import completion_logprobs
from race_cli.engine.rollout import HFRollout, choose_backend, left_pad
from race_cli.errors import RaceError
from race_cli.cost.flops import Arch, Lora, generate_flops

EOS = 256


def tiny_model(attn: str = "sdpa"):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=257, eos_token_id=EOS, pad_token_id=EOS, bos_token_id=EOS,
                      tie_word_embeddings=False, attn_implementation=attn)
    return AutoModelForCausalLM.from_config(cfg).eval()


def backend(model, **kw):
    from race_cli.zoo import byte_tokenizer

    args = dict(arch=Arch.from_config(model.config), lora=None, eos_id=EOS, pad_id=EOS, max_new_tokens=6,
                temperature=1.0, top_p=1.0, device="cpu") | kw
    return HFRollout(model, byte_tokenizer(), **args)


PROMPTS = [list(b"Q: 1+2="), list(b"Q: 10+20-3=")]  # 7 and 11 tokens


def test_auto_picks_lean_without_vllm_or_gpu():
    assert choose_backend("auto", "cpu", vllm_installed=True) == "lean"
    assert choose_backend("auto", "cuda:0", vllm_installed=False) == "lean"
    assert choose_backend("auto", "cuda:0", vllm_installed=True) == "vllm"
    assert choose_backend("auto", "cpu") == "lean"  # this machine: no GPU
    assert choose_backend("hf", "cuda:0", vllm_installed=True) == "hf"
    with pytest.raises(RaceError, match="needs a CUDA device"):
        choose_backend("vllm", "cpu", vllm_installed=True)
    with pytest.raises(RaceError, match="pip install"):
        choose_backend("vllm", "cuda:0", vllm_installed=False)


def test_left_pad():
    ids, mask = left_pad([[5, 6], [7]], pad_id=0)
    assert ids.tolist() == [[5, 6], [0, 7]] and mask.tolist() == [[1, 1], [0, 1]]


def test_hf_rollout_groups_padding_and_eos():
    model = tiny_model()
    ro = backend(model).generate(PROMPTS, group_size=2, greedy=True)
    # groups consecutive, left-padded to the longest prompt (11)
    assert ro.prompt_ids.shape == (4, 11) and ro.prompt_lens == [7, 7, 11, 11]
    assert ro.prompt_mask[0].tolist() == [0] * 4 + [1] * 7
    assert ro.prompt_ids[0, 4:].tolist() == PROMPTS[0]
    # greedy: both rows of a group are identical
    assert torch.equal(ro.completion_ids[0], ro.completion_ids[1])
    # make EOS win where the greedy completion of row 0 picked token X at step 2: w_eos = 2 w_X,
    # so EOS's logit doubles X's (the positive max) there, and EOS ends row 0 by step 2
    x = int(ro.completion_ids[0, 2])
    with torch.no_grad():
        model.lm_head.weight[EOS] = 2 * model.lm_head.weight[x]
    ro = backend(model).generate(PROMPTS, group_size=2, greedy=True)
    n = ro.completion_lens[0]
    assert n <= 3 and int(ro.completion_ids[0, n - 1]) == EOS
    assert ro.completion_mask[0].tolist() == [1.0] * n + [0.0] * (ro.completion_ids.size(1) - n)
    assert ro.completion_ids[0, n:].eq(EOS).all()  # pad after the end
    assert ro.completion_lens == [int(v) for v in ro.completion_mask.sum(1).tolist()]
    assert ro.texts[0] == bytes(ro.completion_ids[0, :n - 1].tolist()).decode("utf-8", errors="replace")  # EOS dropped


@pytest.mark.parametrize("lora", [False, True])
def test_hf_rollout_cost_matches_flop_counter(lora):
    """The executed FLOPs charged for a padded HF generate equal what torch's FlopCounterMode counts."""
    from torch.utils.flop_counter import FlopCounterMode

    model = tiny_model(attn="eager")  # the counter does not know CPU SDPA's fused kernel
    ledger_lora = None
    if lora:
        from peft import LoraConfig

        from race_cli.engine.hf import lora_wrap

        targets = ["q_proj", "v_proj", "down_proj"]
        model = lora_wrap(model, LoraConfig(r=4, lora_alpha=8, target_modules=targets))
        ledger_lora = Lora(r=4, target_modules=tuple(targets))
    b = backend(model.eval(), lora=ledger_lora)
    torch.manual_seed(1)
    with FlopCounterMode(display=False) as counter:
        ro = b.generate(PROMPTS, group_size=2, greedy=False)
    assert ro.flops.executed == counter.get_total_flops()
    # and the model figure is the ledger's, from the real lengths
    assert ro.flops == generate_flops(b.arch, ro.prompt_lens, ro.completion_lens, lora=ledger_lora)


def test_training_logprobs_equal_sampling_distribution():
    """The update's forward (left-padded prompt + completion, logits_to_keep) scores the sampled tokens
    exactly as generate's sampling distribution softmax(logits / T) did."""
    model = tiny_model()
    b = backend(model, temperature=0.7, max_new_tokens=5)
    rows = [p for p in PROMPTS for _ in range(2)]
    ids, mask = left_pad(rows, EOS)
    torch.manual_seed(3)
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, generation_config=b._config(False),
                             output_logits=True, return_dict_in_generate=True)
    comp = out.sequences[:, ids.size(1):]  # [4, 5]
    raw = torch.stack(out.logits, dim=1) / 0.7  # [4, 5, V]
    want = raw.log_softmax(-1).gather(-1, comp.unsqueeze(-1)).squeeze(-1)
    attn = torch.cat([mask, torch.ones_like(comp)], dim=1)
    with torch.no_grad():
        got = completion_logprobs(model, torch.cat([ids, comp], 1), attn, comp, temperature=0.7)
    assert torch.allclose(got, want, atol=1e-5)
