"""A GPU pilot fits its GPUs or is refused before its first job, a job given a GPU never runs on the CPU, and
vLLM is refused on MIG devices (issue 51). The machine is stubbed where race asks it (race_cli/machine.py): the
GPUs visible, their memory, the driver; vLLM is importable through tests/fake_vllm, as on a GPU box with vLLM.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from race_cli import machine
from race_cli.cost import memory as M
from race_cli.cost.walltime import GPU_KINDS
from race_cli.errors import RaceError
from race_cli.io import read_json

ROOT = Path(__file__).resolve().parents[1]
H100 = GPU_KINDS["H100"].memory_bytes  # 79.6 GiB: what nvidia-smi reports for an H100 80GB
L40S = GPU_KINDS["L40S"].memory_bytes  # 45 GiB: too small for the 7B policy beside the 7B PRM
PILOT_7B_PRM_G16 = ["grid=pilot", "model=qwen2.5-7b", "reward=prm-7b", "grpo.group_size=16",
                    "grpo.updates_per_batch=1", "seed=0"]


@pytest.fixture
def gpu_box(monkeypatch):
    """A box with 8 GPUs of `mem` bytes (set later through the returned dict) and vLLM importable."""
    import importlib

    monkeypatch.syspath_prepend(str(ROOT / "tests" / "fake_vllm"))
    importlib.invalidate_caches()
    box = {"mem": H100, "gpus": [str(i) for i in range(8)]}
    monkeypatch.setattr(machine, "visible_gpus", lambda: list(box["gpus"]))
    monkeypatch.setattr(machine, "gpu_total_bytes", lambda: box["mem"])
    monkeypatch.setattr(machine, "gpu_visible", lambda device: device != "cpu")
    monkeypatch.setattr(machine, "gpu_name", lambda: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(machine, "host_ram_bytes", lambda: 2 * 2**40)
    assert machine.vllm_installed()
    return box


def _no_job(job_dir):
    raise AssertionError(f"a job was started: {job_dir}")


# --- race run plans with the GPUs it will use -----------------------------------------------------------

def test_race_run_refuses_before_the_first_job_naming_the_jobs_and_the_fix(gpu_box, tmp_path):
    """On 45 GiB cards the 7B policy, the 7B PRM and vLLM's engine do not fit one GPU: race run exits 2 (a
    RaceError) before writing the sweep or starting a job, naming every job, --gpus-per-job 2 among the fixes,
    and what it planned with."""
    from race_cli.pool.run import RunOptions, run_main

    gpu_box["mem"] = L40S
    overrides = ["grid=pilot", "model=qwen2.5-7b", "reward=prm-7b", "grpo.group_size=4", "grpo.updates_per_batch=1",
                 "seed=0,1"]
    with pytest.raises(RaceError) as err:
        run_main(RunOptions(overrides=overrides, race=False, runs_root=tmp_path / "runs"), job_command=_no_job,
                 say=lambda _: None)
    problems = err.value.problems
    assert [p.split(":")[0] for p in problems[:-1]] == ["Job s0", "Job s1"]  # each job, by its id
    assert all("--gpus-per-job 2" in p and "phase needs" in p for p in problems[:-1])
    assert "45.0 GiB each" in problems[-1] and "1 GPU(s) per job" in problems[-1] and "vLLM importable" in problems[-1]
    assert not (tmp_path / "runs").exists()
    # the same jobs with the PRM on each job's second GPU fit, as the message says (planned, not run)
    from race_cli.plan.build import prepare_sweep

    sweep = prepare_sweep(overrides, None, yes=False, max_jobs=512, runs_root=tmp_path / "runs", say=lambda _: None,
                          race=False, gpu_mem=L40S, gpus_per_job=2)
    assert all(r["planned_peak_bytes"] <= M.HEADROOM * L40S for r in read_json(sweep / "plan.json"))


def test_race_run_checks_a_sweep_folder_it_resumes_against_its_gpus(gpu_box, tmp_path):
    """A folder planned for 80 GB cards, resumed on 45 GiB ones: refused before anything runs."""
    from race_cli.plan.build import prepare_sweep
    from race_cli.pool.run import RunOptions, run_main

    overrides = ["grid=pilot", "model=qwen2.5-7b", "reward=prm-7b", "grpo.group_size=4", "grpo.updates_per_batch=1",
                 "seed=0"]
    sweep = prepare_sweep(overrides, tmp_path / "s", yes=False, max_jobs=512, say=lambda _: None, race=False,
                          gpu_mem=H100)
    gpu_box["mem"] = L40S
    with pytest.raises(RaceError) as err:
        run_main(RunOptions(sweep_dir=sweep), job_command=_no_job, say=lambda _: None)
    assert err.value.problems[0].startswith("Job job: the rollout phase needs") and "45.0 GiB" in err.value.problems[-1]
    assert read_json(sweep / "jobs" / "job" / "status.json")["state"] == "pending"


def test_the_shipped_pilot_fits_eight_80gb_gpus_with_vllm(gpu_box, tmp_path):
    """grid=pilot on 80 GB cards, one GPU per job, vLLM importable: every job fits. The 7B policy with the 7B PRM
    at G=16 fits only because vLLM gets the room the trainer leaves (memory.vllm_room_fraction) instead of a
    cache for all 512 sequences at full length, which would put the rollout phase over 90% of the card."""
    from race_cli.plan.build import build_plan, prepare_sweep

    sweep = prepare_sweep(["grid=pilot"], None, yes=False, max_jobs=512, runs_root=tmp_path / "runs",
                          say=lambda _: None, gpu_mem=H100, gpus_per_job=1)
    doc = read_json(sweep / "plan.json")
    rows = doc["jobs"] + doc["reserve"] if isinstance(doc, dict) else doc
    assert len(rows) == 192 and all(r["rollout_backend"] == "vllm" for r in rows)
    assert all(r["planned_peak_bytes"] <= M.HEADROOM * H100 for r in rows)

    job = build_plan(PILOT_7B_PRM_G16, gpu_mem=H100, race=False).jobs[0]
    s = replace(M.spec_from_config(job.config, vllm_installed=True), sleep_mode=job.memory.sleep_mode,
                micro_batch=job.memory.micro_batch)
    whole = M.job_memory(replace(s, expected_completion_len=0), H100)  # the cache for every sequence at full length
    assert not whole.vllm_capped and whole.total("rollout") > M.HEADROOM * H100  # the refusal of before
    cut = job.memory
    assert cut.vllm_capped and cut.phase == "rollout" and cut.total("rollout") <= M.HEADROOM * H100
    assert cut.vllm_fraction < whole.vllm_fraction
    # what the cut cache still holds: every sequence at the expected completion length (the floor of the cut)
    floor = M.vllm_need(s.arch, dtype_bytes=s.dtype_bytes, lora_r=s.lora_r, lora_targets=s.lora_targets,
                        sequences=s.sequences, max_model_len=s.prompt_len + s.expected_completion_len)
    assert cut.phases["rollout"]["vllm_reserved"] >= floor
    # the cut is the room: 90% of the card less everything else of the rollout phase, to vLLM's 3 decimals
    others = cut.total("rollout") - cut.phases["rollout"]["vllm_reserved"]
    assert cut.vllm_fraction == int((M.HEADROOM * H100 - others) / H100 * 1000) / 1000 == 0.528
    # by hand, what 0.528 of 85,520,809,984 bytes holds: 45,154,987,671 - 2 GiB of vLLM's own headroom, / 1.1 (the
    # block allocator's margin) = 39,097,730,930, less vLLM's weights, bf16: Qwen2.5-7B untied 7,615,616,512 +
    # LoRA r=32 on 7 matrices x 28 layers 80,740,352 = 15,392,713,728 bytes -> a KV cache of 23,705,017,202 bytes;
    # at 2 x 28 layers x 512 (K/V width) x 2 bytes = 57,344 bytes a token, 413,382 tokens: 509 sequences of the
    # 512 at full length (300 prompt + 512 completion = 812 tokens), every one at 300 + 300 (the expected length)
    note = M.vllm_note(job.config, cut)
    assert "gpu_memory_utilization 0.528, a KV cache for 509 of the 512 sequences at full length (812 tokens); " \
           "cut from 0.530" in note and "(600 tokens, 300 of them completion)" in note
    # every other phase, the micro-batch and the sleep mode are the uncut plan's
    assert {p: cut.total(p) for p in cut.phases if p != "rollout"} == \
        {p: whole.total(p) for p in whole.phases if p != "rollout"}


def test_the_job_starts_vllm_with_the_plans_cut(gpu_box):
    """engine/setup.vllm_room_cut: the fraction the job computes is lowered to the ledger's where the ledger cut
    it, and left alone where it did not (the 7B rule job at G=16 fits with its whole cache)."""
    pytest.importorskip("torch")
    from race_cli.engine.setup import vllm_room_cut
    from race_cli.plan.build import build_plan

    prm = build_plan(PILOT_7B_PRM_G16, gpu_mem=H100, race=False).jobs[0]
    assert vllm_room_cut(prm.config, 0.53, H100, "cuda:0") == prm.memory.vllm_fraction < 0.53
    rule = build_plan([o if o != "reward=prm-7b" else "reward=rule" for o in PILOT_7B_PRM_G16], gpu_mem=H100,
                      race=False).jobs[0]
    assert not rule.memory.vllm_capped and vllm_room_cut(rule.config, 0.53, H100, "cuda:0") == 0.53


def test_vllm_is_refused_on_mig_devices(gpu_box):
    """MIG devices (selected by UUID, as the pool does) with a job that samples with vLLM: refused at plan time,
    with the backend that runs there named; the same job on race's own sampler plans."""
    from race_cli.plan.build import build_plan

    gpu_box["gpus"] = ["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "MIG-0a7e2b19-8f3d-5c1a-b2e4-6d9f0c3a1b7e"]
    job = ["grid=pilot", "model=qwen2.5-0.5b", "reward=rule", "grpo.group_size=4", "grpo.updates_per_batch=1",
           "seed=0"]
    with pytest.raises(RaceError, match="MIG devices .* would sample with vLLM .* Try: rollout.backend=lean"):
        build_plan(job, gpu_mem=40 * 10**9, race=False)
    plan = build_plan(job + ["rollout.backend=lean"], gpu_mem=40 * 10**9, race=False)
    assert plan.jobs[0].backend == "lean"


# --- no silent CPU ----------------------------------------------------------------------------------------

def test_a_job_given_a_gpu_slot_fails_rather_than_running_on_cpu(monkeypatch, capsys):
    """device=auto in a GPU slot torch cannot use: a RaceError naming torch, its CUDA build and the driver,
    never "cpu"; outside a slot auto is still the CPU, and says so where the driver lists GPUs."""
    torch = pytest.importorskip("torch")
    from race_cli.engine import setup as S

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # what a driver older than torch's CUDA gives
    monkeypatch.setattr(machine, "driver_version", lambda: "470.57.02")
    monkeypatch.setattr(machine, "gpu_visible", lambda device: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv(S.GPU_SLOT_ENV, "3")
    with pytest.raises(RaceError) as err:
        S.resolve_device("auto")
    text = str(err.value)
    build = f"built for CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
    assert f"torch {torch.__version__} ({build})" in text and "NVIDIA driver 470.57.02" in text
    assert "race run gave this job GPU 3" in text and "device=cpu" in text
    monkeypatch.setenv(S.GPU_SLOT_ENV, "")  # a CPU worker's slot
    assert S.resolve_device("auto") == "cpu" and capsys.readouterr().err == ""
    monkeypatch.setattr(machine, "gpu_visible", lambda device: True)  # by hand, beside GPUs torch cannot use
    assert S.resolve_device("auto") == "cpu"
    said = capsys.readouterr().err
    assert "the NVIDIA driver lists GPUs here" in said and "This job runs on the CPU." in said and build in said


def test_the_pool_marks_gpu_slots_and_clears_the_mark_for_cpu_workers():
    from race_cli.pool.local import GPU_SLOT_ENV, cpu_slots, gpu_slots

    assert [s.env[GPU_SLOT_ENV] for s in gpu_slots(["0", "1", "2", "3"], 2)] == ["0,1", "2,3"]
    assert all(s.env[GPU_SLOT_ENV] == "" for s in cpu_slots(2, 2))


def _fake_smi(folder: Path) -> None:
    """nvidia-smi for one 80 GB GPU: `-L`, memory.total (MiB) and driver_version queries, as the real one prints."""
    smi = folder / "nvidia-smi"
    smi.write_text("""#!/bin/sh
case "$*" in
  -L) echo "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)" ;;
  *driver_version*) echo "535.104.05" ;;
  *memory.total*) echo "81559" ;;
  *name*) echo "NVIDIA H100 80GB HBM3" ;;
esac
""")
    smi.chmod(0o755)


@pytest.mark.slow
def test_race_run_on_a_gpu_torch_cannot_use_fails_the_job_naming_torch_and_the_driver(tmp_path):
    """A real race run on a box whose nvidia-smi lists a GPU that this CPU-only torch cannot use: the pool gives the
    job GPU 0, and the job fails at start with the message (status.json, log, race run's summary), exit 1; it
    never trains on the CPU."""
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this torch can use a GPU here: the case is a torch that cannot")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _fake_smi(bindir)
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "RACE_GPU_SLOT")}
    env |= {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    got = subprocess.run([sys.executable, "-m", "race_cli", "run", "--no-race", "model=tiny-s", "grpo.group_size=4",
                          "grpo.updates_per_batch=1", "reward=rule", "seed=0", "--sweep-dir", str(tmp_path / "s")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    out = got.stdout + got.stderr
    assert got.returncode == 1, out
    assert "1 GPU slot(s)" in out
    status = read_json(tmp_path / "s" / "jobs" / "job" / "status.json")
    assert status["state"] == "failed" and status["device"] == "cuda:0"
    for text in (status["error"], out):
        assert "race run gave this job GPU 0" in text and f"torch {torch.__version__}" in text
        assert "NVIDIA driver 535.104.05" in text
    assert not (tmp_path / "s" / "jobs" / "job" / "metrics.jsonl").exists()  # not one iteration ran
