"""The vLLM backend's lifecycle (race_cli/engine/rollout_vllm.py) against tests/fake_vllm, a strict stand-in.

The first tests run the adapter as a job would; the `fake catches` tests prove that each misuse
the issue names (a reused adapter id, a rank vLLM refuses, an update while the engine is awake,
a sync folder that outlives the job) makes the fake fail, so the passing tests mean something.
"""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from race_cli.errors import RaceError  # noqa: E402
from race_cli.cost.flops import Arch, Lora, generate_flops  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FAKE = ROOT / "tests" / "fake_vllm"
EOS = 256
PROMPTS = [list(b"Q: 1+2="), list(b"Q: 10+20-3=")]  # last tokens '=' (61)


@pytest.fixture
def vllm(monkeypatch):
    """The fake `vllm` package, imported fresh, and removed from sys.modules afterwards."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(FAKE))
    import vllm as fake

    assert Path(fake.__file__).is_relative_to(FAKE)  # never a real vLLM
    fake.reset()
    yield fake
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        del sys.modules[name]


@pytest.fixture(scope="module")
def policy():
    """A real tiny Qwen2 with a real PEFT LoRA adapter (r=8): save_pretrained writes adapter_config.json."""
    from peft import LoraConfig

    from race_cli.engine.hf import lora_wrap
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    base = Qwen2ForCausalLM(Qwen2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=4,
                                        num_key_value_heads=2, intermediate_size=64, vocab_size=257))
    return lora_wrap(base, LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"]))


ARCH = Arch(32, 1, 4, 2, 64, 257)
LORA = Lora(r=8, target_modules=("q_proj", "v_proj"))


def make(sync_dir: Path, **kw):
    from race_cli.engine.rollout_vllm import VLLMRollout
    from race_cli.zoo import byte_tokenizer

    args = dict(arch=ARCH, lora=LORA, eos_id=EOS, pad_id=EOS, max_new_tokens=4, temperature=0.7, top_p=0.9,
                dtype="bfloat16", seed=0, gpu_memory_utilization=0.25, max_model_len=64, sync_dir=sync_dir,
                revision="a" * 40)
    return VLLMRollout("/models/base", byte_tokenizer(), **(args | kw))


# --- the lifecycle, as a job runs it ------------------------------------------------------------

def test_engine_arguments_come_from_the_task_and_plan(vllm, tmp_path, policy):
    b = make(tmp_path / "job" / ".vllm-adapter")
    args = vllm.ENGINES[-1].args
    assert args["max_model_len"] == 64 and args["gpu_memory_utilization"] == 0.25
    assert args["max_lora_rank"] == 8 and args["enable_lora"] and args["enable_prefix_caching"]
    assert args["enable_sleep_mode"] is True  # the installed (fake) vLLM has sleep/wake_up
    assert args["generation_config"] == "vllm"  # not the model's generation_config.json
    assert args["revision"] == "a" * 40 and args["trust_remote_code"] is False
    b.close()


def test_sleep_around_updates_new_id_per_update_one_folder(vllm, tmp_path, policy):
    sync = tmp_path / "job" / ".vllm-adapter"
    b = make(sync)
    engine = vllm.ENGINES[-1]
    b.sync(policy)  # setup: the first adapter
    ro = b.generate(PROMPTS, group_size=2)
    b.sync(policy)  # after an update
    assert sorted(p.name for p in sync.iterdir()) == ["adapter-2"]  # one adapter at a time, in one folder
    b.generate(PROMPTS, group_size=2, greedy=True)
    assert engine.adapters == {1: str(sync / "adapter-1"), 2: str(sync / "adapter-2")}
    kinds = [k for k, _ in engine.calls]
    assert kinds == ["sleep", "wake_up", "generate", "sleep", "wake_up", "generate", "sleep"]
    # fake tokens: completion k is [61 + 1 + k] * (k + 1) then the stop token
    assert ro.completion_lens == [2, 3, 2, 3] and ro.texts[0] == ">"
    assert ro.flops == generate_flops(ARCH, ro.prompt_lens, ro.completion_lens, lora=LORA, share_prefix=2,
                                      padded=False)
    b.close()
    assert not sync.exists()
    vllm.check_no_leftovers()


def test_one_sampling_distribution_and_the_hf_stop_token(vllm, tmp_path, policy):
    b = make(tmp_path / "s")
    b.sync(policy)
    b.generate(PROMPTS, group_size=3)
    b.generate(PROMPTS, group_size=1, greedy=True)
    sampled, greedy = [d for k, d in vllm.ENGINES[-1].calls if k == "generate"]
    # softmax(logits / T) with top-p only: top-k, min-p and every penalty off
    assert (sampled.n, sampled.temperature, sampled.top_p, sampled.top_k, sampled.min_p) == (3, 0.7, 0.9, -1, 0.0)
    assert (sampled.repetition_penalty, sampled.presence_penalty, sampled.frequency_penalty) == (1.0, 0.0, 0.0)
    # the tokenizer's EOS is the one stop token, as in HF generate (not the model's extra EOS ids)
    assert sampled.stop_token_ids == [EOS] and sampled.ignore_eos is True and sampled.max_tokens == 4
    assert (greedy.temperature, greedy.top_p, greedy.stop_token_ids) == (0.0, 1.0, [EOS])
    b.close()


def test_without_sleep_support_the_engine_stays_awake(vllm, tmp_path, policy, monkeypatch):
    monkeypatch.delattr(vllm.LLM, "sleep")
    b = make(tmp_path / "s")
    assert "enable_sleep_mode" not in vllm.ENGINES[-1].args and not b.can_sleep
    b.sync(policy)
    b.generate(PROMPTS, group_size=2)
    b.sync(policy)
    b.generate(PROMPTS, group_size=2)
    assert [k for k, _ in vllm.ENGINES[-1].calls] == ["generate", "generate"]
    b.close()
    vllm.check_no_leftovers()


def test_sync_folder_is_removed_on_every_exit_path(vllm, tmp_path, policy):
    # a crash inside generate (prompt longer than max_model_len), then the job's close()
    b = make(tmp_path / "a", max_model_len=8)
    b.sync(policy)
    with pytest.raises(ValueError, match="max_model_len"):
        b.generate(PROMPTS, group_size=2)
    assert vllm.ENGINES[-1].asleep  # put back to sleep even though sampling failed
    b.close()
    # no close() at all: the finaliser when the object goes
    c = make(tmp_path / "b")
    c.sync(policy)
    c.generate(PROMPTS, group_size=1)
    del c
    gc.collect()
    assert not (tmp_path / "b").exists()
    vllm.check_no_leftovers()
    # what a SIGKILLed attempt left is cleared when the next attempt starts
    left = tmp_path / "c" / "adapter-7"
    left.mkdir(parents=True)
    d = make(tmp_path / "c")
    assert list((tmp_path / "c").iterdir()) == []
    d.close()


def test_sigterm_removes_the_sync_folder(tmp_path):
    script = f"""
import os, signal, sys
sys.path.insert(0, {str(FAKE)!r})
from race_cli.engine.rollout_vllm import VLLMRollout
from race_cli.cost.flops import Arch, Lora
from race_cli.zoo import byte_tokenizer

class Saver:
    def save_pretrained(self, path):
        os.makedirs(path)
        open(os.path.join(path, "adapter_config.json"), "w").write('{{"r": 8}}')

b = VLLMRollout("/m", byte_tokenizer(), arch=Arch(32, 1, 4, 2, 64, 257), lora=Lora(r=8), eos_id=256, pad_id=256,
                max_new_tokens=2, temperature=1.0, top_p=1.0, dtype="bfloat16", seed=0, gpu_memory_utilization=0.2,
                max_model_len=32, sync_dir={str(tmp_path / "s")!r})
b.sync(Saver())
assert os.path.isdir({str(tmp_path / "s" / "adapter-1")!r})
os.kill(os.getpid(), signal.SIGTERM)
"""
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    assert not (tmp_path / "s").exists()


# --- the fake catches each misuse ----------------------------------------------------------------

def test_fake_catches_a_reused_adapter_id(vllm, tmp_path, policy):
    b = make(tmp_path / "s")
    b.sync(policy)
    b.generate(PROMPTS, group_size=1)
    b._lora_id = 0  # a broken adapter: the next update gets id 1 again
    b.sync(policy)
    with pytest.raises(ValueError, match="LoRA id 1 reused by a new LoRARequest"):
        b.generate(PROMPTS, group_size=1)
    b.close()


def test_fake_catches_a_rank_vllm_refuses(vllm, tmp_path):
    with pytest.raises(ValueError, match=r"max_lora_rank \(12\) must be one of"):
        vllm.LLM(model="/m", enable_lora=True, max_lora_rank=12)
    with pytest.raises(RaceError, match="lora.r=12 is not a rank vLLM accepts"):  # the adapter refuses first
        make(tmp_path / "s", lora=Lora(r=12))
    assert not (tmp_path / "s").exists()


def test_fake_catches_an_update_while_awake(vllm, tmp_path, policy):
    b = make(tmp_path / "s")
    b._sleep = lambda: None  # a broken adapter: never sleeps, so the update would run beside vLLM's memory
    b.sync(policy)
    b.generate(PROMPTS, group_size=1)  # the first adapter: nothing was updated yet
    b.sync(policy)
    with pytest.raises(RuntimeError, match="stayed awake"):
        b.generate(PROMPTS, group_size=1)
    b.close()


def test_fake_catches_a_sync_folder_that_outlives_the_job(vllm, tmp_path, policy):
    b = make(tmp_path / "s")
    b.sync(policy)
    b.generate(PROMPTS, group_size=1)
    b._finalizer.detach()  # a broken adapter: nothing removes its folder
    with pytest.raises(AssertionError, match="left behind"):
        vllm.check_no_leftovers()
    b.close()  # detached: does nothing
    with pytest.raises(AssertionError, match="left behind"):
        vllm.check_no_leftovers()


def test_fake_enforces_signatures(vllm):
    with pytest.raises(TypeError, match="unexpected keyword"):
        vllm.LLM(model="/m", gpu_mem_util=0.3)
    with pytest.raises(TypeError, match="unexpected keyword"):
        vllm.SamplingParams(temprature=1.0)
    with pytest.raises(ValueError, match="id must be > 0"):
        vllm.LoRARequest("a", 0, "/x")
    llm = vllm.LLM(model="/m")
    with pytest.raises(ValueError, match="Sleep mode is not enabled"):
        llm.sleep(level=1)


# --- sizing and packaging ------------------------------------------------------------------------

def test_memory_fraction_by_hand():
    from race_cli.engine.rollout_vllm import GIB, memory_fraction, model_len

    arch = Arch(64, 2, 4, 2, 128, 257)  # d=64, L=2, h=4, h_kv=2, f=128, V=257, d_h=16
    # body matrices per layer: q 64*64 + k 64*32 + v 64*32 + o 64*64 + gate/up 2*64*128 + down 128*64 = 36864
    # weights: (2*36864 + 2*64*257) params * 2 bytes = (73728 + 32896) * 2 = 213248 bytes
    # LoRA r=8 on q, v: 8*(64+64) + 8*(64+32) = 1792 per layer, * 2 layers * 2 bytes = 7168 bytes
    # KV: 32 seqs * 100 tokens * 2 (K, V) * 2 layers * 2 kv heads * 16 * 2 bytes = 819200 bytes
    need = (213248 + 7168 + 819200) * 1.1 + 2 * GIB
    got = memory_fraction(arch, dtype_bytes=2, lora=Lora(8, ("q_proj", "v_proj")), sequences=32, max_model_len=100,
                          gpu_bytes=4 * GIB)
    assert got == round(need / (4 * GIB), 3)
    assert model_len(212, 512) == 724
    with pytest.raises(RaceError, match="at most 90%"):
        memory_fraction(arch, dtype_bytes=2, lora=None, sequences=32, max_model_len=100, gpu_bytes=2 * GIB)


def test_the_vllm_extra_pins_a_tested_range():
    import tomllib

    from packaging.specifiers import SpecifierSet

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["vllm"]
    spec = SpecifierSet(extra[0].removeprefix("vllm"))
    assert {s.operator for s in spec} == {">=", "<"}  # a floor and a ceiling
    assert "0.6.3" not in spec and "0.8.5" in spec  # early versions count a colocated policy as their own memory
    sys.path.insert(0, str(FAKE))
    try:
        import vllm as fake

        assert fake.__version__ in spec  # the fake stands for a version inside the range
    finally:
        sys.path.remove(str(FAKE))
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


def test_plan_refuses_a_rank_vllm_cannot_load(tmp_path):
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "race_cli", "plan", "grid=none", "rollout.backend=vllm", "lora.r=12"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2
    assert "lora.r=12 is not a rank vLLM accepts" in proc.stdout + proc.stderr
