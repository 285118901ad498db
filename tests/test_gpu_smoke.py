"""scripts/gpu_smoke.py at reduced shapes on CPU: every check's line, the PRM's rotary check, its --help, exit 0."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu_smoke.py"


def test_gpu_smoke_runs_every_check_at_reduced_shapes_on_cpu():
    out = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--models", "tiny", "--prompts", "2",
                          "--group-size", "2", "--max-new-tokens", "8", "--num-eval", "4", "--prm-shape", "tiny",
                          "--prm-layers", "2", "--prm-len", "600", "--prm-batch", "2"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("== Qwen2.5-tiny shape") and "B=2 G=2 max_new_tokens=8 LoRA r=32" in line
               and "rollout lean" in line for line in lines)
    passed = {line.split(":")[0].split("PASS")[1].strip() for line in lines if line.lstrip().startswith("PASS")}
    assert passed == {"tiny dtype", "tiny loss", "tiny rollout lean", "tiny rollout hf", "tiny update",
                      "prm rotary dtype", "prm rotary scores", "prm forward"}
    assert not any(line.lstrip().startswith("FAIL") for line in lines)
    for name in ("rollout lean", "rollout hf"):  # tokens/s of each backend: B*G*max_new_tokens = 32 at most
        line = next(x for x in lines if f"tiny {name}:" in x)
        assert "tokens/s" in line and 0 < int(line.split(": ")[1].split()[0]) <= 32
    assert "at positions >= 512: 0.00e+00" in next(x for x in lines if "prm rotary scores" in x)
    assert lines[-1] == "gpu smoke: ok"


def test_gpu_smoke_help_documents_the_offline_run():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    for needed in ("pip wheel antlr4-python3-runtime==4.9.3", "pip download", "hydra-core", "omegaconf",
                   "pip install --no-index --no-deps wheels/*.whl", "under 8 minutes", "PASS", "FAIL"):
        assert needed in text, needed


def test_gpu_smoke_builds_models_with_the_dtype_keyword_of_the_installed_transformers(monkeypatch, tmp_path):
    """`from_config(dtype=...)` is a TypeError before transformers 4.56: the script uses race's helper."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    seen = []

    class Model:
        def save_pretrained(self, folder):
            Path(folder).mkdir(parents=True)

    def from_config(cfg, **kw):
        seen.append(kw)
        return Model()

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_config", from_config)
    monkeypatch.setattr(transformers, "__version__", "4.55.4")
    smoke.build_model(tmp_path / "a", smoke.SHAPES["tiny"], torch.bfloat16)
    monkeypatch.setattr(transformers, "__version__", "4.56.0")
    smoke.build_model(tmp_path / "b", smoke.SHAPES["tiny"], torch.bfloat16)
    assert seen == [{"torch_dtype": torch.bfloat16}, {"dtype": torch.bfloat16}]


def test_gpu_smoke_help_documents_the_vllm_section():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=300, cwd=ROOT)
    text = " ".join(out.stdout.split())
    for needed in ("--vllm {auto,yes,no}", "two iterations with rollout.backend=vllm and LoRA", "vllm rollout 2",
                   "adapter id 2", "vllm sleep/wake", "cost/walltime.sleep_seconds", "vllm memory rollout"):
        assert needed in text, needed


def test_gpu_smoke_vllm_section_against_the_fake_vllm(tmp_path, monkeypatch, capsys):
    """The vLLM section on CPU through tests/fake_vllm (each supported release's API): engine start, rollout with
    adapter 1, sleep, update, refresh, wake, rollout with adapter 2; one PASS line each, memory on CUDA only."""
    import argparse

    pytest.importorskip("torch")
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fake_vllm"))
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    args = argparse.Namespace(device="cpu", prompts=2, group_size=2, max_new_tokens=8, lora_r=32, num_eval=4,
                              overrides=[])
    check = smoke.Checks()
    try:
        smoke.run_vllm("tiny", args, tmp_path, check)
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]
    lines = capsys.readouterr().out.splitlines()
    passed = [line.split("PASS")[1].split(":")[0].strip() for line in lines if line.lstrip().startswith("PASS")]
    assert passed == ["tiny vllm start", "tiny vllm rollout 1", "tiny vllm adapter", "tiny vllm rollout 2",
                      "tiny vllm sleep/wake"]
    # the fake has no model: its log-probs are all 0.0, so the sampled-vs-trained check must catch it
    # (the real engine passes it: tests/test_vllm_real.py)
    assert check.failed == ["tiny vllm sampled = trained"]
    assert "bound 0.0001 for float32" in next(x for x in lines if "vllm sampled = trained" in x)
    assert "LoRA request id 2 (expected 2)" in next(x for x in lines if "vllm rollout 2" in x)
    assert "sleep mode kv_cache" in next(x for x in lines if "vllm start" in x)  # the fake stands for 0.33
