"""scripts/gpu_smoke.py at reduced shapes on CPU: one real iteration, the per-phase table, exit 0."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_smoke_runs_one_iteration_on_cpu():
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "gpu_smoke.py"), "--device", "cpu", "--models", "tiny",
                          "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8", "--num-eval", "4"],
                         capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert any(line.startswith("== Qwen2.5-tiny shape") and "B=2 G=2 max_new_tokens=8 LoRA r=32" in line
               for line in lines)
    for phase in ("rollout", "update", "reward"):
        assert any(line.split()[:1] == [phase] for line in lines), phase
    assert lines[-1] == "gpu smoke: ok"
