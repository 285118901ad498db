"""The vLLM backend's lifecycle (race_cli/engine/rollout_vllm.py) against tests/fake_vllm, a strict stand-in.

The first tests run the adapter as a job would; the `fake catches` tests prove that each misuse
the issue names (a reused adapter id, a rank vLLM refuses, an update while the engine is awake,
a sync folder that outlives the job) makes the fake fail, so the passing tests mean something.
"""

from __future__ import annotations

import gc
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


def _supported_versions() -> list[str]:
    sys.path.insert(0, str(FAKE / "vllm"))
    try:
        import _api  # tests/fake_vllm/vllm/_api.py: the API of each release the extra allows

        return sorted(_api.VERSIONS)
    finally:
        sys.path.remove(str(FAKE / "vllm"))
        sys.modules.pop("_api", None)


VERSIONS = _supported_versions()


def _import_fake(monkeypatch, version: str):
    _forget_fake()  # a fake imported earlier in this test (fake_at twice): gone for good, not restored at teardown
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)  # anything else: put back when the test ends
    monkeypatch.setenv("FAKE_VLLM_VERSION", version)
    monkeypatch.syspath_prepend(str(FAKE))
    import vllm as fake

    assert Path(fake.__file__).is_relative_to(FAKE)  # never a real vLLM
    assert fake.__version__ == version
    fake.reset()
    return fake


def _forget_fake() -> None:
    """Drop the fake from sys.modules: a later test in this process must not find a `vllm` (machine.vllm_installed)."""
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        if Path(getattr(sys.modules[name], "__file__", None) or "/").is_relative_to(FAKE):
            del sys.modules[name]


@pytest.fixture(params=VERSIONS)
def vllm(monkeypatch, request):
    """The fake `vllm` package standing for each supported release, imported fresh, removed afterwards."""
    yield _import_fake(monkeypatch, request.param)
    _forget_fake()


@pytest.fixture
def fake_at(monkeypatch):
    """fake_at(version): the fake standing for one given release."""
    yield lambda version: _import_fake(monkeypatch, version)
    _forget_fake()


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
    b.yield_gpu()  # the job: reward and update follow
    b.sync(policy)  # after an update
    assert sorted(p.name for p in sync.iterdir()) == ["adapter-2"]  # one adapter at a time, in one folder
    b.generate(PROMPTS, group_size=2, greedy=True)
    assert engine.adapters == {1: str(sync / "adapter-1"), 2: str(sync / "adapter-2")}
    kinds = [k for k, _ in engine.calls]
    assert kinds == ["sleep", "wake_up", "generate", "sleep", "wake_up", "generate"]
    # fake tokens: completion k is [61 + 1 + k] * (k + 1) then the stop token
    assert ro.completion_lens == [2, 3, 2, 3] and ro.texts[0] == ">"
    assert ro.flops == generate_flops(ARCH, ro.prompt_lens, ro.completion_lens, lora=LORA, share_prefix=2,
                                      padded=False)
    b.close()
    assert not sync.exists() and not sync.with_name(sync.name + ".owner").exists()  # the owner record goes too
    vllm.check_no_leftovers()


def test_evaluation_batches_do_not_sleep_between_them(vllm, tmp_path, policy):
    """Sleep only when an update follows: three evaluation batches are one wake-up and no sleep
    (each sleep/wake cycle moves the policy's weights to the host and back)."""
    b = make(tmp_path / "s")
    b.sync(policy)  # start: asleep with the first adapter
    for _ in range(3):
        b.generate(PROMPTS, group_size=1, greedy=True)
    assert [k for k, _ in vllm.ENGINES[-1].calls] == ["sleep", "wake_up", "generate", "generate", "generate"]
    b.yield_gpu()  # a training rollout, then its update
    assert vllm.ENGINES[-1].asleep
    b.close()


class TrainerAllocator:
    """PyTorch's caching allocator as the fake vLLM sees it: freed blocks stay reserved until empty_cache()."""

    def __init__(self, resident: int):
        self.allocated = self.reserved = resident

    def run(self, peak: int) -> None:  # a phase that allocates up to `peak`, then frees back to resident
        self.reserved = max(self.reserved, peak)

    def empty_cache(self) -> None:
        self.reserved = self.allocated


def test_wake_up_finds_the_trainers_cache_released(vllm, tmp_path, policy, monkeypatch):
    """80 GiB device, trainer resident 20 GiB, update peak 60 GiB, vLLM 30 GiB (0.375 x 80). The
    update leaves 60 GiB reserved in PyTorch's cache; 60 + 30 > 80 is the cumem OOM at the second
    iteration's wake_up unless the adapter empties the cache first (20 + 30 <= 80)."""
    alloc = TrainerAllocator(20 * 2**30)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a, **k: alloc.reserved)
    monkeypatch.setattr(torch.cuda, "empty_cache", alloc.empty_cache)
    monkeypatch.setattr(vllm, "DEVICE_BYTES", 80 * 2**30)
    b = make(tmp_path / "s", gpu_memory_utilization=0.375)
    b.sync(policy)
    for _ in range(3):  # iterations as Job.iterate runs them: rollout, then reward and update with vLLM asleep
        b.generate(PROMPTS, group_size=2)
        if hasattr(b, "yield_gpu"):
            b.yield_gpu()
        alloc.run(60 * 2**30)  # the update's high-water mark, cached afterwards
        b.sync(policy)
    b.generate(PROMPTS, group_size=2)
    assert vllm.ENGINES[-1].reserved == int(0.375 * 80 * 2**30)
    b.close()


def test_fake_raises_the_cumem_oom_and_vllms_startup_check(vllm, monkeypatch):
    """The fake's memory model on its own: what the real engine does when the trainer keeps memory reserved."""
    reserved = [50 * 2**30]
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a, **k: reserved[0])
    monkeypatch.setattr(vllm, "DEVICE_BYTES", 80 * 2**30)
    with pytest.raises(ValueError, match="on startup is less than desired GPU memory utilization"):
        vllm.LLM(model="/m", gpu_memory_utilization=0.5, enable_sleep_mode=True)  # 30 GiB free < 40 GiB
    llm = vllm.LLM(model="/m", gpu_memory_utilization=0.25, enable_sleep_mode=True)  # 30 GiB free >= 20 GiB
    llm.sleep(level=1)
    assert llm.reserved == vllm.ASLEEP_BYTES
    reserved[0] = 61 * 2**30  # an update grew the trainer's cache: 61 + 20 > 80
    with pytest.raises(RuntimeError, match="CUDA Error: out of memory"):
        llm.wake_up()
    assert llm.asleep
    reserved[0] = 60 * 2**30  # 60 + 20 = 80: fits exactly
    llm.wake_up()
    assert not llm.asleep and llm.reserved == 20 * 2**30


@pytest.mark.parametrize("version,call,fails", [
    ("0.33.0", lambda v: v.LLM(model="/m", swap_space=4), True),  # removed after 0.10
    ("0.10.1.1", lambda v: v.LLM(model="/m", swap_space=4), False),
    ("0.10.1.1", lambda v: v.LLM(model="/m", kv_cache_memory_bytes=2**30), True),  # added after 0.10
    ("0.33.0", lambda v: v.LLM(model="/m", kv_cache_memory_bytes=2**30), False),
    ("0.33.0", lambda v: v.SamplingParams(best_of=2), True),
    ("0.10.1.1", lambda v: v.SamplingParams(best_of=2), False),
    ("0.33.0", lambda v: v.LLM(model="/m").generate([], None, False), True),  # use_tqdm is keyword-only now
    ("0.10.1.1", lambda v: v.LLM(model="/m").generate([], None, None, False), False),
    ("0.33.0", lambda v: v.LLM(model="/m").generate([], prompt_token_ids=[1]), True),
    ("0.10.1.1", lambda v: v.LLM(model="/m").generate([], tokenization_kwargs={}), True),
    ("0.10.1.1", lambda v: v.LLM(model="/m", enable_sleep_mode=True).sleep(level=1, mode="abort"), True),
    ("0.33.0", lambda v: v.LLM(model="/m", enable_sleep_mode=True).sleep(level=1, mode="abort"), False),
    ("0.10.1.1", lambda v: v.LoRARequest("a", 1, "/x", load_inplace=True), True),
    ("0.33.0", lambda v: v.LoRARequest("a", 1, "/x", load_inplace=True), False),
    ("0.10.1.1", lambda v: v.LLM(model="/m", enable_lora=True, max_lora_rank=1), True),  # rank 1 is new in 0.33
    ("0.33.0", lambda v: v.LLM(model="/m", enable_lora=True, max_lora_rank=1), False),
])
def test_fake_enforces_each_releases_signatures(fake_at, version, call, fails):
    vllm = fake_at(version)
    if fails:
        with pytest.raises((TypeError, ValueError)):
            call(vllm)
    else:
        call(vllm)


def test_an_argument_one_supported_release_lacks_fails_there(vllm, tmp_path, policy, monkeypatch):
    """race passing SamplingParams(best_of=...) (0.10 has it, 0.33 does not): the 0.33 run fails."""
    from race_cli.engine import rollout_vllm

    real = rollout_vllm.sampling_kwargs
    monkeypatch.setattr(rollout_vllm, "sampling_kwargs", lambda **kw: real(**kw) | {"best_of": kw["group_size"]})
    b = make(tmp_path / "s")
    b.sync(policy)
    if vllm.__version__ == "0.33.0":
        with pytest.raises(TypeError, match="best_of"):
            b.generate(PROMPTS, group_size=2)
    else:
        b.generate(PROMPTS, group_size=2)
    b.close()


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
    assert not vllm.ENGINES[-1].asleep  # awake: only yield_gpu() (an update follows) puts it to sleep
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
    # + q/k/v biases 64+32+32 and two norms 2*64 = 256 per layer; embedding and head 2*64*257; final norm 64
    # weights: (2*(36864 + 256) + 2*64*257 + 64) params * 2 bytes = (74240 + 32896 + 64) * 2 = 214400 bytes
    # LoRA r=8 on q, v: 8*(64+64) + 8*(64+32) = 1792 per layer, * 2 layers * 2 bytes = 7168 bytes
    # KV: 32 seqs * 100 tokens * 2 (K, V) * 2 layers * 2 kv heads * 16 * 2 bytes = 819200 bytes
    need = (214400 + 7168 + 819200) * 1.1 + 2 * GIB
    got = memory_fraction(arch, dtype_bytes=2, lora=Lora(8, ("q_proj", "v_proj")), sequences=32, max_model_len=100,
                          gpu_bytes=4 * GIB)
    assert got == round(need / (4 * GIB), 3)
    assert model_len(212, 512) == 724
    with pytest.raises(RaceError, match="at most 90%"):
        memory_fraction(arch, dtype_bytes=2, lora=None, sequences=32, max_model_len=100, gpu_bytes=2 * GIB)


def test_the_vllm_extra_covers_every_release_the_fake_stands_for_and_the_current_torch():
    """The extra's range holds exactly the releases whose API the fake enforces (oldest .. newest read),
    and torch's bound admits what the package index serves now (2.15.0) and what each vLLM pins."""
    import tomllib

    from packaging.specifiers import SpecifierSet

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = project["optional-dependencies"]["vllm"]
    spec = SpecifierSet(extra[0].removeprefix("vllm"))
    assert {s.operator for s in spec} == {">=", "<"}  # a floor and a ceiling
    assert "0.6.3" not in spec  # early versions count a colocated policy as their own memory
    sys.path.insert(0, str(FAKE / "vllm"))
    try:
        import _api

        releases = sorted(_api.VERSIONS, key=lambda v: tuple(map(int, v.split("."))))
        assert all(v in spec for v in releases) and "0.33.0" in releases  # the current release (index, 2026-11)
        assert next(s for s in spec if s.operator == ">=").version == releases[0]  # the floor is the oldest read
        pinned = [_api.VERSIONS[v]["torch"] for v in releases]
    finally:
        sys.path.remove(str(FAKE / "vllm"))
        sys.modules.pop("_api", None)
    torch_spec = SpecifierSet(next(d for d in project["dependencies"] if d.startswith("torch")).removeprefix("torch"))
    for version in ["2.15.0", *pinned]:  # what a GPU box set up today has, and what each vLLM installs
        assert version in torch_spec, version


def test_plan_refuses_a_rank_vllm_cannot_load(tmp_path):
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "race_cli", "plan", "grid=none", "rollout.backend=vllm", "lora.r=12"],
                          env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 2
    assert "lora.r=12 is not a rank vLLM accepts" in proc.stdout + proc.stderr


# --- issue 35: what the real engine does that the fake did not ----------------------------------


class _Prompts:
    """A PromptCache stand-in: items and their token ids."""

    def __init__(self, rows):
        self.items, self.rows = list(range(len(rows))), rows

    def ids(self, i):
        return self.rows[i]


class _Target:
    def __init__(self, min_new_tokens=0):
        self.min_new_tokens = min_new_tokens


def _vllm_config(*overrides):
    from race_cli.config.compose import compose

    return compose(["grid=none", "rollout.backend=vllm", "lora.r=8", "rollout.max_new_tokens=4",
                    "rollout.expected_completion_tokens=null", *overrides])


def _policy(model):
    from race_cli.engine.setup import Policy
    from race_cli.zoo import byte_tokenizer

    return Policy(model, byte_tokenizer(), "/models/base", ARCH, LORA, EOS, EOS)


def test_fake_caps_a_long_request_silently_and_refuses_only_a_full_prompt(vllm):
    """vLLM V1: a prompt of max_model_len tokens or more is refused (input_processor._validate_prompt_len);
    a completion that reaches max_model_len is length-capped without an error (core/sched/utils.check_stop)."""
    llm = vllm.LLM(model="/m", max_model_len=10)
    p = vllm.SamplingParams(n=6, max_tokens=16, stop_token_ids=[EOS])
    (out,) = llm.generate([{"prompt_token_ids": list(range(1, 8))}], p)  # 7 prompt tokens: room for 3
    assert [len(o.token_ids) for o in out.outputs] == [2, 3, 3, 3, 3, 3]  # k+2 tokens each, capped at 3
    with pytest.raises(ValueError, match="maximum model length of 10"):
        llm.generate([{"prompt_token_ids": list(range(1, 11))}], p)


@pytest.mark.parametrize("eval_cap, min_tokens, want", [(16, 0, 16), (None, 20, 20), (None, 0, 4)])
def test_max_model_len_holds_the_largest_completion_cap(vllm, tmp_path, policy, eval_cap, min_tokens, want):
    """Evaluation asks for eval.max_new_tokens (or a target's min_new_tokens) > rollout.max_new_tokens=4:
    max_model_len = longest prompt (11) + the largest cap, so an evaluation completion is not cut."""
    from race_cli.engine.job import eval_sampling
    from race_cli.engine.setup import build_vllm

    cfg = _vllm_config(*([f"eval.max_new_tokens={eval_cap}"] if eval_cap else []))
    b = build_vllm(cfg, _policy(policy), "cuda:0", torch.bfloat16, prompts=(_Prompts(PROMPTS),),
                   targets=(_Target(min_tokens),), sync_dir=tmp_path / "job" / ".vllm-adapter", gpu_bytes=80 * 2**30,
                   sleep_mode="weights")
    assert vllm.ENGINES[-1].args["max_model_len"] == 11 + want
    with eval_sampling(b, max_new_tokens=want):
        ro = b.generate(PROMPTS[1:], group_size=6, greedy=False)
    assert ro.completion_lens == [min(k + 2, want) for k in range(6)]  # completion k: k+1 tokens then EOS
    b.close()
    vllm.check_no_leftovers()


def test_a_rollout_sized_max_model_len_truncates_evaluation_silently(vllm, tmp_path, policy):
    """What the old sizing (longest prompt + rollout.max_new_tokens) did: the fake now cuts the same way vLLM does."""
    b = make(tmp_path / "s", max_new_tokens=16, max_model_len=11 + 4)
    b.sync(policy)
    ro = b.generate(PROMPTS[1:], group_size=6)
    assert ro.completion_lens == [2, 3, 4, 4, 4, 4]  # 7 tokens asked, 4 given, no error
    b.close()


def test_temperature_above_two_is_refused_by_vllm_0_33_only(fake_at):
    assert fake_at("0.10.1.1").SamplingParams(temperature=2.5).temperature == 2.5
    with pytest.raises(ValueError, match=r"temperature must be in \[0, 2\]"):
        fake_at("0.33.0").SamplingParams(temperature=2.5)


def test_schema_refuses_temperature_above_two_for_vllm_and_names_the_limit():
    from race_cli.config.compose import compose

    with pytest.raises(RaceError) as exc:
        _vllm_config("rollout.temperature=2.5", "eval.temperature=3.0")
    assert [p.split("=")[0] for p in exc.value.problems] == ["rollout.temperature", "eval.temperature"]
    assert all("above 2" in p and "rollout.backend=lean" in p for p in exc.value.problems)
    assert compose(["grid=none", "rollout.backend=lean", "rollout.temperature=2.5"]).rollout.temperature == 2.5
    assert _vllm_config("rollout.temperature=2.0").rollout.temperature == 2.0


def test_sampling_asks_vllm_for_token_ids_only(vllm, tmp_path, policy):
    b = make(tmp_path / "s")
    b.sync(policy)
    b.generate(PROMPTS, group_size=2)
    (params,) = [d for k, d in vllm.ENGINES[-1].calls if k == "generate"]
    assert params.detokenize is False  # race decodes the ids itself (rollout._finish)
    b.close()


def test_kv_cache_sleep_keeps_the_weights_where_the_release_has_it(fake_at, tmp_path, policy, monkeypatch):
    """sleep_mode=kv_cache: sleep(level=0), release_kv_cache_memory(), then wake_up() before the next generate;
    vLLM 0.10 has no release_kv_cache_memory and the backend sleeps at level 1 there."""
    for version, want in (("0.33.0", ["sleep", "release_kv_cache_memory", "wake_up", "generate", "sleep",
                                      "release_kv_cache_memory", "wake_up", "generate"]),
                          ("0.10.1.1", ["sleep", "wake_up", "generate", "sleep", "wake_up", "generate"])):
        vllm = fake_at(version)
        monkeypatch.setattr(vllm, "DEVICE_BYTES", 80 * 2**30)
        monkeypatch.setattr(vllm, "WEIGHT_BYTES", 3 * 2**30)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a, **k: 0)
        b = make(tmp_path / version, sleep_mode="kv_cache", gpu_memory_utilization=0.5)
        b.sync(policy)
        b.generate(PROMPTS, group_size=2)
        b.yield_gpu()
        engine = vllm.ENGINES[-1]
        kept = engine.reserved
        b.sync(policy)
        b.generate(PROMPTS, group_size=2)
        assert [k for k, _ in engine.calls] == want
        levels = [d for k, d in engine.calls if k == "sleep"]
        assert levels == ([0, 0] if version == "0.33.0" else [1, 1])
        assert kept == (vllm.ASLEEP_BYTES + 3 * 2**30 if version == "0.33.0" else vllm.ASLEEP_BYTES)
        assert len(b.sleep_seconds) == 2 and len(b.wake_seconds) == 2
        b.close()


def test_fake_refuses_a_generate_on_a_paused_engine_and_a_release_without_pause(fake_at):
    vllm = fake_at("0.33.0")
    llm = vllm.LLM(model="/m", enable_sleep_mode=True)
    with pytest.raises(RuntimeError, match="completed pause"):
        llm.release_kv_cache_memory()
    llm.sleep(level=0)
    with pytest.raises(RuntimeError, match="paused engine"):
        llm.generate([{"prompt_token_ids": [1]}], vllm.SamplingParams())
    assert not hasattr(fake_at("0.10.1.1").LLM, "release_kv_cache_memory")


@pytest.mark.parametrize("device, env, want", [("cuda:1", None, "1"), ("cuda:0", None, "0"),
                                               ("cuda:1", "4,5", "5"), ("cuda:0", "MIG-abc", "MIG-abc")])
def test_vllm_starts_on_the_jobs_device(vllm, tmp_path, policy, monkeypatch, device, env, want):
    """vLLM's engine process takes the first device it sees: CUDA_VISIBLE_DEVICES names the job's one while
    LLM() starts, and is restored afterwards."""
    if env is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", env)
    b = make(tmp_path / "s", device=device)
    assert vllm.ENGINES[-1].visible_devices == want
    assert os.environ.get("CUDA_VISIBLE_DEVICES") == env
    b.close()


def test_adapter_goes_to_local_fast_storage_in_the_policys_dtype(vllm, tmp_path, policy):
    """The adapter vLLM reads is written in the engine's dtype (PEFT keeps a float32 copy: half the bytes at bf16)
    under /dev/shm (or the temp dir), not in the job folder, and is removed with the backend."""
    from safetensors import safe_open

    from race_cli.engine.rollout_vllm import local_sync_dir
    from race_cli.engine.setup import build_vllm

    job = tmp_path / "job"
    b = build_vllm(_vllm_config(), _policy(policy), "cuda:0", torch.bfloat16, prompts=(_Prompts(PROMPTS),),
                   sync_dir=job / ".vllm-adapter", gpu_bytes=80 * 2**30, sleep_mode="weights")
    sync = local_sync_dir(job / ".vllm-adapter")
    assert b.sync_dir == sync and not sync.is_relative_to(tmp_path)
    assert sync.parent == Path("/dev/shm") or sync.parent == Path(__import__("tempfile").gettempdir())
    with safe_open(str(sync / "adapter-1" / "adapter_model.safetensors"), "pt") as f:
        dtypes = {f.get_tensor(k).dtype for k in f.keys()}
        assert dtypes == {torch.bfloat16} and len(list(f.keys())) == 4  # A and B of q_proj and v_proj
    assert vllm.ENGINES[-1].args["max_model_len"] == 11 + 4
    b.close()
    assert not sync.exists()
    vllm.check_no_leftovers()


# --- issue 51: the engine's own limits, platform sleep support, wake_up's answer, sync space, log-probs ------------

def test_batch_limits_by_hand():
    """max_num_seqs = B x G; max_num_batched_tokens: every prompt's prefill in one step (B x longest), at least
    a whole sequence and one token per sequence (vLLM refuses fewer tokens than sequences)."""
    from race_cli.engine.rollout_vllm import batch_limits

    assert batch_limits(sequences=32 * 16, prompts=32, longest_prompt=300, max_model_len=812) == (512, 32 * 300)
    assert batch_limits(sequences=8, prompts=2, longest_prompt=14, max_model_len=64) == (8, 64)  # max_model_len
    assert batch_limits(sequences=4096, prompts=256, longest_prompt=10, max_model_len=100) == (4096, 4096)


def test_engine_gets_the_jobs_batch_limits_and_processed_logprobs(vllm, tmp_path, policy):
    """build_vllm passes max_num_seqs / max_num_batched_tokens from B, G and the lengths, and asks for log-probs
    after temperature; the prompts here are 7 and 11 tokens, B x G = 8 x 8 (the root config's)."""
    from race_cli.engine.setup import build_vllm

    b = build_vllm(_vllm_config(), _policy(policy), "cuda:0", torch.bfloat16, prompts=(_Prompts(PROMPTS),),
                   sync_dir=tmp_path / "job" / ".vllm-adapter", gpu_bytes=80 * 2**30, sleep_mode="weights")
    args = vllm.ENGINES[-1].args
    assert args["max_num_seqs"] == 64 and args["max_num_batched_tokens"] == max(64, args["max_model_len"], 8 * 11)
    assert args["logprobs_mode"] == "processed_logprobs"
    assert "kv_cache_memory_bytes" not in args and "enable_chunked_prefill" not in args  # CPU-build settings only
    b.close()


def test_a_platform_without_sleep_mode_never_asks_for_it(vllm, tmp_path, policy, monkeypatch):
    """vLLM's CPU build has LLM.sleep but refuses enable_sleep_mode=True: the engine is started without it and
    stays awake around updates."""
    monkeypatch.setenv("FAKE_VLLM_PLATFORM", "cpu")
    with pytest.raises(ValueError, match="not supported on current platform"):  # what the real CPU build says
        vllm.LLM(model="/m", enable_sleep_mode=True)
    b = make(tmp_path / "s")
    assert "enable_sleep_mode" not in vllm.ENGINES[-1].args and not b.can_sleep
    b.sync(policy)
    b.generate(PROMPTS, group_size=2)
    b.yield_gpu()
    b.sync(policy)
    b.generate(PROMPTS, group_size=2)
    assert [k for k, _ in vllm.ENGINES[-1].calls] == ["generate", "generate"]
    b.close()


def test_a_wake_up_that_is_not_complete_is_an_error(fake_at, tmp_path, policy, monkeypatch):
    """vLLM 0.33's wake_up() answers whether the engine is fully awake: False stops the job (0.10 answers None)."""
    vllm = fake_at("0.33.0")
    b = make(tmp_path / "s")
    b.sync(policy)
    monkeypatch.setattr(vllm.LLM, "wake_up", lambda self, tags=None: False)
    with pytest.raises(RuntimeError, match="not fully awake"):
        b.generate(PROMPTS, group_size=2)
    b.close()


def test_sync_folder_needs_room_for_two_adapters_else_the_temp_dir_and_a_warning(tmp_path):
    import tempfile

    from race_cli.engine.rollout_vllm import adapter_bytes, local_sync_dir, sync_space_needed

    one = adapter_bytes(Arch(3584, 28, 28, 4, 18944, 152_064), Lora(r=32, target_modules=(
        "q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")), 2)
    assert one == 28 * 32 * (2 * 3584 + 2 * (3584 + 512) + 2 * 3584 + 3 * (3584 + 18944)) * 2  # 7B r=32: ~161 MB
    assert 155e6 < one < 165e6
    roomy = tmp_path / "roomy"
    roomy.mkdir()
    said = []
    assert local_sync_dir("job", (str(roomy),), need_bytes=sync_space_needed(one), say=said.append).parent == roomy
    assert said == []
    small = local_sync_dir("job", (str(roomy),), need_bytes=2**62, say=said.append)  # more than any disk
    assert small.parent == Path(tempfile.gettempdir())
    assert len(said) == 1 and said[0].startswith("warning: vLLM's adapter sync folder needs") and str(roomy) in said[0]
    assert "--shm-size" in said[0]


def test_sampled_tokens_come_with_the_engines_logprobs(vllm, tmp_path, policy):
    """Sampled requests ask for logprobs=0 (the sampled token only); greedy evaluation asks for none. The
    rollout keeps them [N, C], zero past each completion, through take_rows' down-sampling."""
    from race_cli.engine.rollout import take_rows

    b = make(tmp_path / "s")
    b.sync(policy)
    ro = b.generate(PROMPTS, group_size=2, seeds=[1, 2, 3, 4])
    params = [d for k, d in vllm.ENGINES[-1].calls if k == "generate"][0]
    assert all(p.logprobs == 0 for p in params)
    assert ro.sampler_logprobs.shape == ro.completion_ids.shape and ro.sampler_logprobs.dtype == torch.float32
    assert take_rows(ro, [3, 0]).sampler_logprobs.shape[0] == 2
    greedy = b.generate(PROMPTS, group_size=1, greedy=True)
    assert greedy.sampler_logprobs is None
    b.close()


def test_engine_processes_a_killed_attempt_left_are_ended_at_the_next_start(tmp_path):
    """SIGKILL leaves vLLM's EngineCore / Worker running in the dead job's process group (seen in
    tests/test_vllm_real.py): the next attempt ends those, by name, and nothing else of that group."""
    import json
    import time

    from race_cli.engine.rollout_vllm import end_stale_engines

    # a job (the group's leader) that started an "engine" and another process, then died
    leader = subprocess.Popen(["bash", "-c", "(exec -a VLLM::EngineCore sleep 120) & echo $!; "
                                             "(exec -a other-tool sleep 120) & echo $!; exit 0"],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    engine, other = int(leader.stdout.readline()), int(leader.stdout.readline())
    leader.wait()
    sync = tmp_path / "race-vllm-x"
    sync.with_name(sync.name + ".owner").write_text(json.dumps({"pid": leader.pid, "pgid": leader.pid}))
    try:
        deadline = time.monotonic() + 10  # exec -a takes effect once the child has exec'd
        while time.monotonic() < deadline and not Path(f"/proc/{engine}/cmdline").read_bytes().startswith(b"VLLM::"):
            time.sleep(0.05)
        assert end_stale_engines(sync) == [engine]
        time.sleep(0.2)
        assert open(f"/proc/{engine}/stat").read().split()[2] == "Z" if Path(f"/proc/{engine}").exists() else True
        os.kill(other, 0)  # not vLLM's: left alone
        # an owner that is alive (this process) is never a leftover
        sync.with_name(sync.name + ".owner").write_text(json.dumps({"pid": os.getpid(), "pgid": leader.pid}))
        assert end_stale_engines(sync) == []
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
