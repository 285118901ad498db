"""docs/gpu.md works as written: every `race` and `python scripts/` command in its bash blocks that does not
say `# needs: gpu / network / slurm` runs here, on a CPU machine, in the order the guide gives them (the
fake vLLM of tests/fake_vllm stands in for vLLM; a synthetic finished pilot stands in for the GPU run
before `race report`). A command marked `# exits 2` must exit 2 with its message, one marked `# exits 1`
(the smoke check against the fake, which fails its sampled = trained line on purpose) must exit 1 with that
line its only FAIL; every other one exits 0."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "gpu.md"


def doc_commands() -> list[tuple[str, int]]:
    """(command, expected exit code) for each runnable line of the guide's bash blocks, in order."""
    text = DOC.read_text()
    out = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.splitlines():
            line = line.strip()
            if not line or "# needs:" in line:
                continue
            command, _, comment = line.partition("  #")
            if not re.match(r"(race |python scripts/|PYTHONPATH=\S+ python scripts/)", command):
                continue  # shell set-up: venv, pip, export, hf download
            code = re.search(r"exits (\d)", comment)
            out.append((command.strip(), int(code.group(1)) if code else 0))
    return out


def test_the_guide_marks_what_it_cannot_run_here():
    commands = [c for c, _ in doc_commands()]
    text = DOC.read_text()
    assert "race plan grid=pilot --gpu H100x8" in commands and "race report runs/pilot" in commands
    assert any("fake_vllm" in c and "gpu_smoke.py" in c for c in commands)
    assert "python scripts/gpu_smoke.py          # needs: gpu" in text  # the one device check
    assert re.search(r"--launcher slurm --gpus-per-job 2 .*# needs: slurm", text)
    for model in ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"):  # the pinned revisions it fetches
        import yaml

        conf = yaml.safe_load((ROOT / "conf" / "model" / f"{model}.yaml").read_text())
        assert f"hf download {conf['path']} --revision {conf['revision']}" in text
    prm = yaml.safe_load((ROOT / "conf" / "reward" / "prm-7b.yaml").read_text())["model"]
    assert f"hf download {prm['path']} --revision {prm['revision']}" in text
    assert "HF_HUB_OFFLINE=1" in text and "export HF_HOME=" in text  # a shared cache, offline afterwards


@pytest.mark.slow
def test_every_cpu_runnable_command_of_the_guide_runs(tmp_path):
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    from report_fixtures import Regime, build_sweep, peaked

    work = tmp_path / "box"
    work.mkdir()
    for name in ("scripts", "tests"):
        (work / name).symlink_to(ROOT / name)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "race").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m race_cli "$@"\n')
    (bindir / "race").chmod(0o755)
    (bindir / "python").symlink_to(sys.executable)
    # vLLM importable, as on the GPU box the guide is for (the fake of tests/fake_vllm): the plans below size
    # vLLM's engine beside each job, and the pilot must fit 80 GB cards with it
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "COLUMNS": "80",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "fake_vllm")]),
           "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf"), "CUDA_VISIBLE_DEVICES": ""}
    found = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('vllm').origin)"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert "fake_vllm" in found.stdout, found.stderr
    swapped = False
    for command, code in doc_commands():
        if command.startswith("race report") and not swapped:  # the pilot has run: a finished synthetic one
            shutil.rmtree(work / "runs" / "pilot")
            conds = [{"model": m, "budget_flops": 3e17, "reward": r, "task": "gsm8k"}
                     for m in ("qwen2.5-0.5b", "qwen2.5-1.5b") for r in ("rule", "prm-7b")]
            build_sweep(work / "runs" / "pilot", acc=peaked(0.3), conditions=conds, seeds=(0, 1), n_items=100,
                        regimes=[Regime(4, 1, 0.5), Regime(8, 1, 0.45), Regime(4, 2, 0.7)],
                        targets={"gsm8k": peaked(0.3)}, feedback={"rule": 0.0, "prm-7b": 0.2})
            swapped = True
        got = subprocess.run(["bash", "-c", command], capture_output=True, text=True, env=env, cwd=work,
                             timeout=900)
        assert got.returncode == code, f"{command}\n{got.stdout[-2000:]}\n{got.stderr[-2000:]}"
        if command == "race plan grid=pilot --gpu H100x8":  # the whole pilot on 80 GB cards, vLLM beside each job
            assert "vLLM sleep per job" in got.stdout and "race plan: grid 'pilot'" in got.stdout
        assert "Traceback" not in got.stderr, command
        if code == 2:
            assert "error:" in got.stderr and "Try:" in got.stderr, command
        if code == 1:  # the smoke check against the fake: everything passes but what the fake cannot give
            fails = [x.strip() for x in got.stdout.splitlines() if x.lstrip().startswith("FAIL")]
            assert len(fails) == 1 and fails[0].startswith("FAIL  tiny vllm sampled = trained"), got.stdout[-2000:]
    assert swapped and (work / "runs" / "pilot" / "report" / "summary.md").is_file()
    assert (work / "runs" / "pilot-validate-x2").is_dir()
