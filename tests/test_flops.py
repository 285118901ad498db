"""The FLOP formulas (cost/flops.py): the model convention, checked against hand calculations (no torch here).

Hand-calculation arch (tiny-s): d=64, L=2, h=4, h_kv=2, d_h=16, f=128, V=257.
  per layer: q 64*64=4096, k 64*32=2048, v 2048, o 4096, gate/up/down 64*128=8192 each
             -> 36864; N_body = 2*36864 = 73728; N_head = 64*257 = 16448
  forward per token (body): 2*N_body = 147456; per logit position: 2*N_head = 32896
  attention per (query, key) pair, forward: 4*L*h*d_h = 4*2*4*16 = 512
  LoRA r=8, all seven matrices, per layer: 2*8*[(64+64)+(64+32)*2+(64+64)+(64+128)*3] = 16*1024
             = 16384; both layers: 32768 per token
The executed convention is checked against FlopCounterMode in test_flops_audit.py.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from race_cli.errors import RaceError
from race_cli.cost.flops import (Arch, Flops, Lora, forward_flops, generate_flops, iteration_flops,
                             reward_model_flops, train_step_flops)

TINY_S = Arch(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, vocab_size=257)
BODY, HEAD, PAIR, ADAPTER = 147456, 32896, 512, 32768  # per token / logit / pair / token (above)


def test_parameter_counts_by_hand():
    assert TINY_S.d_head == 16
    assert TINY_S.n_body == 73728
    assert TINY_S.n_head == 16448
    assert Lora(8).forward_per_token(TINY_S) == ADAPTER


def test_forward_counts_causal_pairs_and_real_tokens():
    # one sequence of 10: 10 tokens, 10*11/2 = 55 pairs, logits at 10 positions
    f = forward_flops(TINY_S, [10])
    assert f.model == BODY * 10 + PAIR * 55 + HEAD * 10 == 1831680
    # executed: the full 10x10 matrix
    assert f.executed == BODY * 10 + PAIR * 100 + HEAD * 10 == 1854720


def test_forward_padding_is_executed_only():
    # [10, 6]: model counts 16 real tokens and 55+21 pairs; executed runs 2 rows of 10
    f = forward_flops(TINY_S, [10, 6])
    assert f.model == BODY * 16 + PAIR * (55 + 21) + HEAD * 16
    assert f.executed == 2 * (BODY * 10 + PAIR * 100 + HEAD * 10)
    # logits only where the loss needs them (e.g. 4 completion positions per row)
    g = forward_flops(TINY_S, [10, 6], logit_positions=8, executed_logit_positions=8)
    assert f.model - g.model == HEAD * (16 - 8)
    assert f.executed - g.executed == HEAD * (20 - 8)


def test_full_finetuning_is_three_forwards():
    # backward = activation grads (1x) + weight grads (1x) for body and head, attention 2x
    for lens in ([10], [10, 6, 3]):
        assert train_step_flops(TINY_S, lens, lora=None).model == 3 * forward_flops(TINY_S, lens).model


def test_lora_step_by_hand_and_ratio_to_full():
    # s=10, LoRA r=8: forward (BODY+ADAPTER)*10 + PAIR*55 + HEAD*10 = 2159360
    # backward: base activation grads BODY*10, adapters 2x their forward 2*ADAPTER*10, head
    # activation grads HEAD*10, attention 2x its forward 2*PAIR*55 -> 2515200; total 4674560
    lora = train_step_flops(TINY_S, [10], lora=Lora(8)).model
    assert lora == 4674560
    full = train_step_flops(TINY_S, [10], lora=None).model
    assert full == 3 * 1831680 == 5495040
    assert lora / full == pytest.approx(0.8507, abs=1e-4)


def test_grad_checkpointing_is_executed_only():
    # full FT, rows [10, 6] padded to 10: the recompute re-runs each layer up to its last saved
    # tensor, i.e. all but the down projection (2*f*d = 16384 per token and layer):
    # (BODY - 2*16384)*20 tokens + PAIR*2*100 pairs = 2293760 + 102400 = 2396160
    plain = train_step_flops(TINY_S, [10, 6], lora=None)
    ckpt = train_step_flops(TINY_S, [10, 6], lora=None, grad_checkpointing=True)
    assert ckpt.model == plain.model
    assert ckpt.executed - plain.executed == 2396160
    lora = Lora(8)
    assert (train_step_flops(TINY_S, [10, 6], lora=lora, grad_checkpointing=True).model
            == train_step_flops(TINY_S, [10, 6], lora=lora).model)


def test_generate_model_convention_by_hand():
    # prompt 5, completion 4 tokens: prefill 5 tokens, 15 pairs, 1 logit
    #   = 737280 + 7680 + 32896 = 777856
    # 3 decode steps feeding positions 6, 7, 8 (the 4th token is never fed back):
    #   (BODY + HEAD)*3 + PAIR*(6+7+8) = 541056 + 10752 = 551808
    g = generate_flops(TINY_S, [5], [4])
    assert g.model == 777856 + 551808 == 1329664
    # the same as one forward over the 8 fed tokens with logits at the 4 sampling positions
    assert g.model == forward_flops(TINY_S, [8], logit_positions=4).model


def test_generate_executed_hf_padding_by_hand():
    # prompts [5, 3], completions [4, 2]: both rows left-padded to P=5, 4 steps for both rows.
    # prefill per row: BODY*5 + PAIR*25 + HEAD = 782976; decode steps k=1..3 attend 5+k keys:
    # per row (BODY+HEAD)*3 + PAIR*(6+7+8) = 551808
    g = generate_flops(TINY_S, [5, 3], [4, 2])
    assert g.executed == 2 * (782976 + 551808) == 2669568
    # a cap that every row ran to adds steps for every row: step 4 attends 9 keys
    capped = generate_flops(TINY_S, [5, 3], [4, 2], max_new_tokens=5)
    assert capped.executed - g.executed == 2 * (BODY + HEAD + PAIR * 9)
    assert capped.model == g.model
    assert generate_flops(TINY_S, [5, 3], [4, 2], padded=False).executed == g.model


def test_prefix_sharing_pays_one_prefill_per_group():
    # G=4 completions of one prompt: shared prefix prefills once instead of 4 times
    shared = generate_flops(TINY_S, [5] * 4, [4] * 4, share_prefix=4, padded=False)
    alone = generate_flops(TINY_S, [5] * 4, [4] * 4)
    assert alone.model - shared.model == 3 * 777856
    assert shared.model == 777856 + 4 * 551808
    # the lean backend: shared AND padded; with equal lengths its executed prefill is one padded
    # prefill (full 5x5 matrix: 25 pairs instead of 15) and its decode is HF's padded decode
    lean = generate_flops(TINY_S, [5] * 4, [4] * 4, share_prefix=4, padded=True)
    assert lean.model == shared.model
    # padded prefill of 5 tokens = model prefill 777856 + 10 more pairs x 512 (PAIR) = 782976; 3 fewer rows
    assert alone.executed - lean.executed == 3 * 782976


def test_iteration_update_scales_with_mu_and_beta():
    # one prompt, G=1, p=5, c=4 -> s=9 tokens, logits at the 4 completion positions:
    # forward = BODY*9 + PAIR*45 + HEAD*4 = 1327104 + 23040 + 131584 = 1481728; full step = 3x
    kw = dict(prompts=1, group_size=1, prompt_len=5, completion_len=4, lora=None)
    fwd, step = 1481728, 3 * 1481728
    assert iteration_flops(TINY_S, updates_per_batch=1, **kw)["update"].model == step
    # mu=2, 3: two, three steps; the old policy's log-probs are the first pass's own (no extra forward)
    assert iteration_flops(TINY_S, updates_per_batch=2, **kw)["update"].model == 2 * step
    assert iteration_flops(TINY_S, updates_per_batch=3, **kw)["update"].model == 3 * step
    # beta > 0 adds the reference forward
    with_ref = iteration_flops(TINY_S, updates_per_batch=1, beta=0.04, **kw)["update"].model
    assert with_ref == step + fwd


def test_iteration_phases_scale_with_batch_and_group():
    kw = dict(prompt_len=5, completion_len=4, updates_per_batch=1, lora=Lora(8))
    one = iteration_flops(TINY_S, prompts=1, group_size=4, **kw)
    eight = iteration_flops(TINY_S, prompts=8, group_size=4, **kw)
    assert eight["rollout"].model == pytest.approx(8 * one["rollout"].model)
    assert eight["update"].model == pytest.approx(8 * one["update"].model)
    assert one["reward"] == Flops()  # rule reward: no FLOPs
    # G sequences of a shared prompt: the rollout is one prefill + G decodes (see above, with
    # the adapters' 2*r*(d_in+d_out) per token on top)
    shared = iteration_flops(TINY_S, prompts=1, group_size=4, share_prefix=True, **kw)["rollout"]
    assert shared.model == generate_flops(TINY_S, [5] * 4, [4] * 4, lora=Lora(8), share_prefix=4).model


def test_reward_model_heads_by_hand():
    # s=9 scored by a tiny-s reward model: BODY*9 + PAIR*45 = 1350144, plus the head on 9 positions
    # the Qwen2.5-Math-PRM head: Linear(64, 64) + Linear(64, 1) per position = 64*64 + 64 MACs
    assert reward_model_flops(TINY_S, [9], head="classifier").model == 1350144 + 2 * (64 * 64 + 64) * 9
    assert reward_model_flops(TINY_S, [9], head="scalar").model == 1350144 + 2 * 64 * 9  # one Linear(64, 1)
    assert reward_model_flops(TINY_S, [9], head="token").model == 1350144 + HEAD * 9
    it = iteration_flops(TINY_S, prompts=1, group_size=2, prompt_len=5, completion_len=4,
                         updates_per_batch=1, lora=None, reward=TINY_S)
    assert it["reward"].model == 2 * (1350144 + 2 * (64 * 64 + 64) * 9)


def test_flops_arithmetic():
    a, b = Flops(1.0, 2.0), Flops(10.0, 20.0)
    assert a + b == Flops(11.0, 22.0)
    assert sum([a, b, a]) == Flops(12.0, 24.0)
    assert 3 * a == a * 3 == Flops(3.0, 6.0)
    assert b.to_dict() == {"model": 10.0, "executed": 20.0}


def test_arch_from_configs():
    d = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             intermediate_size=128, vocab_size=257, rope_theta=1e6)
    assert Arch.from_config(d) == TINY_S
    assert Arch.from_config(SimpleNamespace(**d, head_dim=16)).d_head == 16
    omegaconf = pytest.importorskip("omegaconf")
    assert Arch.from_config(omegaconf.OmegaConf.create(d)) == TINY_S
    with pytest.raises(RaceError, match="lacks vocab_size"):
        Arch.from_config({k: v for k, v in d.items() if k != "vocab_size"})


@pytest.mark.parametrize("call, message", [
    (lambda: forward_flops(TINY_S, [10], padded_len=8), "shorter than the longest"),
    (lambda: forward_flops(TINY_S, []), "empty"),
    (lambda: forward_flops(TINY_S, [3, -1]), "non-negative"),
    (lambda: generate_flops(TINY_S, [5, 6], [4, 4], share_prefix=2), "different prompt lengths"),
    (lambda: generate_flops(TINY_S, [5, 5, 5], [4, 4, 4], share_prefix=2), "dividing"),
    (lambda: generate_flops(TINY_S, [5], [4, 4]), "one prompt length per sampled sequence"),
    (lambda: generate_flops(TINY_S, [5], [9], max_new_tokens=8), "below the longest"),
    (lambda: Lora(8, ("q_proj", "lm_head")), "unknown names"),
    (lambda: Arch(64, 2, 4, 3, 128, 257), "multiple of"),
    (lambda: train_step_flops(TINY_S, [4], lora=None, attn_kernel="flex"), "attn_kernel"),
    (lambda: iteration_flops(TINY_S, prompts=0, group_size=4, prompt_len=5, completion_len=4,
                             updates_per_batch=1, lora=None), "prompts must be"),
])
def test_bad_input_says_what_to_do(call, message):
    with pytest.raises(RaceError, match=message):
        call()


def test_ledger_imports_no_torch():
    code = "import sys, race_cli.cost.flops; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
