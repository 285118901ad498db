"""How fast this machine runs the default's kind of CPU work: the factor `race plan` scales its CPU rates by.

    speed = machine_speed()        # Speed(factor, seconds, cached, source); factor 1.0 = the reference machine
    rates = walltime.scaled(walltime.cpu_rates("tiny-s"), speed.factor, speed.source)

race_cli/cost/walltime.py's CPU_RATES were measured on one reference machine, and machines of the same
description differ by 2x (docs/measurements/walltime.md). The probe times a fixed piece of single-thread
torch work shaped like the default's jobs: a tiny transformer block's forward and backward over a batch of
rows (the update), then a decode loop of small matmuls (the rollout, where per-call overhead dominates).
It counts CPU seconds, not wall seconds (a busy machine deschedules the probe, which says nothing about
its speed). It runs in one child per core at once (at most MAX_CHILDREN), because `race run` keeps every
core busy with a worker, and a lone thread on an otherwise idle virtual machine reads fast spells the grid
does not run in; it keeps the median of all the children's REPEATS runs. Spells still outlast the probe,
so one probe can mis-state the speed a twenty-minute grid averages (docs/measurements/walltime.md
measures how often). So the probe only prices models this machine has not run yet: once `race run` has,
the plan uses the rates its sweep measured (plan/learned.py). The factor is REFERENCE_SECONDS / the
seconds here.

torch takes seconds to import and `race plan` never imports it, so the probe runs in a child process, and
only when this machine has no cached result: the result is kept under the race cache (RACE_CACHE, else
~/.cache/race) in cpu-probe.json, one entry per machine fingerprint (CPU model, cores, architecture,
torch and Python versions), so a home folder shared by several machines keeps one each. RACE_CPU_PROBE
says what to do: unset or `cached` (the default), `refresh` (measure again now and forget the learned
rates; also `race plan --reprobe`), `off` (the reference rates unscaled, nothing learned). A probe that
cannot run (no torch, a timeout) leaves the reference rates unscaled and says so. `race plan
--calibrate-from` replaces all of this with a finished sweep's own rates.

`race plan` does not wait for a first probe (set_background): its torch imports alone take longer than the
whole plan, so on a machine with no cached result it plans on the reference rates, says so, and leaves the
probe running in a detached, low-priority child (`python -m race_cli.plan.cpu_probe CACHE`) that caches its
result for the next plan; `race run`, whose planned times order its jobs, and `--reprobe` still wait for it.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from race_cli import machine
from race_cli.io import atomic_write_text

ENV = "RACE_CPU_PROBE"
REPEATS = 120
MAX_CHILDREN = 8
VERSION = 3  # of the probe's work and statistic: an entry cached by another version is probed again
TIMEOUT_S = 60
CACHE_NAME = "cpu-probe.json"
# The probe's CPU seconds on a machine that runs the default grid at exactly the CPU rates: the median of this
# probe's readings on a quiet machine x the unscaled plan / the median wall time of the fixed default grid
# there (docs/measurements/walltime.md: the readings, the grid times and the check on a fresh clone).
REFERENCE_SECONDS = 0.0266

# The work, run by `python -c` in a child with one thread: a 3-layer, 96-wide block (tiny-m's shape) over
# 4 rows of 64 tokens, forward and backward, then 16 decode steps of 16 rows. Prints every repeat's seconds.
PROBE_CODE = f"""
import os, time
import torch
torch.set_num_threads(1)
torch.manual_seed(0)
d, f, rows, T, L = 96, 256, 4, 64, 3
layers = [dict(qkv=torch.nn.Linear(d, 3 * d), o=torch.nn.Linear(d, d), up=torch.nn.Linear(d, f),
               down=torch.nn.Linear(f, d)) for _ in range(L)]
params = [p for layer in layers for m in layer.values() for p in m.parameters()]
opt = torch.optim.AdamW(params, lr=1e-4)
mask = torch.full((T, T), float("-inf")).triu(1)

def block(x):
    for lay in layers:
        q, k, v = lay["qkv"](x).chunk(3, dim=-1)
        a = torch.softmax(q @ k.transpose(-1, -2) / d ** 0.5 + mask[: x.shape[1], : x.shape[1]], dim=-1)
        x = x + lay["o"](a @ v)
        x = x + lay["down"](torch.nn.functional.silu(lay["up"](x)))
    return x

times = []
for _ in range({REPEATS}):
    t0 = time.process_time()
    x = torch.randn(rows, T, d)
    loss = block(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    with torch.no_grad():
        h = torch.randn(16, 1, d)
        for _ in range(16):
            h = torch.tanh(block(h))
    times.append(time.process_time() - t0)
print(" ".join(repr(t) for t in times))
"""


@dataclass(frozen=True)
class Speed:
    """This machine against the reference machine of the CPU rates."""

    factor: float  # rates here / reference rates (1.0: unscaled)
    seconds: float | None  # the probe's median run here (None: not probed)
    cached: bool  # read from cpu-probe.json rather than measured now
    source: str  # what `race plan` prints as where its CPU rates come from


def fingerprint() -> dict[str, str]:
    """What makes two machines run the probe alike, as far as this process can tell without torch."""
    from importlib import metadata

    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = ""
    return {"cpu": machine.cpu_model(), "cores": str(machine.cpu_cores()), "arch": platform.machine(),
            "torch": torch_version, "python": platform.python_version()}


def _key(fp: dict[str, str]) -> str:
    return " | ".join(f"{k}={fp[k]}" for k in sorted(fp))


def machine_key() -> str:
    """This machine's key in the race cache's per-machine files (cpu-probe.json, cpu-rates.json)."""
    return _key(fingerprint())


def cache_file(name: str = CACHE_NAME) -> Path:
    from race_cli.io import cache_root

    return cache_root() / name


def read_cache(path: Path) -> dict:
    """{fingerprint key: entry} of a per-machine file (cpu-probe.json, cpu-rates.json); an unreadable or
    foreign file reads as empty (the probe runs again, nothing learned is used)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    machines = data.get("machines") if isinstance(data, dict) else None
    return {k: v for k, v in machines.items() if isinstance(v, dict)} if isinstance(machines, dict) else {}


def write_cache(path: Path, machines: dict) -> None:
    """Replace a per-machine file with `machines` (atomically; raises OSError where it cannot be written)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"version": 1, "machines": machines}, indent=2) + "\n", durable=False)


def env_mode() -> str:
    """What RACE_CPU_PROBE asks for: cached (unset), refresh or off (machine_speed refuses anything else)."""
    return (os.environ.get(ENV, "") or "cached").strip().lower()


def probe_children(cores: int | None = None) -> int:
    """Children the probe runs at once: one per core, as `race run` runs one worker per core, at most
    MAX_CHILDREN (each imports torch)."""
    return max(1, min(cores if cores is not None else machine.cpu_cores(), MAX_CHILDREN))


def run_probe(timeout: float = TIMEOUT_S, children: int | None = None) -> float:
    """The median repeat of the probe run by `children` child processes at once (default probe_children()),
    pooled over all of them, in seconds (raises RuntimeError if one fails)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", PROBE_CODE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(children or probe_children())]
    deadline = time.monotonic() + timeout
    times: list[float] = []
    try:
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                raise RuntimeError(f"the CPU probe did not finish in {timeout:g} s") from None
            try:
                got = [float(t) for t in out.split()]
            except ValueError:
                got = []
            if proc.returncode != 0 or not got or not all(math.isfinite(t) and t > 0 for t in got):
                last = (err.strip().splitlines() or ["no output"])[-1]
                raise RuntimeError(f"the CPU probe failed: {last}")
            times += got
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return sorted(times)[len(times) // 2]


def _source(seconds: float, factor: float, cached: bool) -> str:
    how = "cached probe" if cached else "probe"
    return (f"the reference CPU rates x {factor:.2f} ({how} of this machine: {seconds:.3f} s against the "
            f"reference's {REFERENCE_SECONDS:.3f} s; refresh: race plan --reprobe)")


def machine_speed(mode: str | None = None, *, path: Path | None = None, probe=run_probe) -> Speed:
    """This machine's Speed: from the cache when it has this fingerprint, else measured and cached.
    `mode`: cached | refresh | off (default: $RACE_CPU_PROBE, else cached)."""
    mode = (mode if mode is not None else env_mode()).strip().lower()
    if mode not in ("cached", "refresh", "off"):
        from race_cli.errors import RaceError

        raise RaceError(f"{ENV}={mode!r}: expected cached, refresh or off.",
                        f"Unset it to use the cached probe of this machine, or set {ENV}=off for the reference rates.")
    if mode == "off":
        return Speed(1.0, None, False, f"the reference CPU rates, unscaled ({ENV}=off)")
    path = path if path is not None else cache_file()
    fp = fingerprint()
    key = _key(fp)
    entries = read_cache(path)
    entry = entries.get(key)
    figure = entry.get("seconds") if entry else None
    if (mode == "cached" and entry and entry.get("probe") == VERSION and isinstance(figure, (int, float))
            and not isinstance(figure, bool) and math.isfinite(figure) and figure > 0):
        seconds = float(entry["seconds"])
        return Speed(REFERENCE_SECONDS / seconds, seconds, True, _source(seconds, REFERENCE_SECONDS / seconds, True))
    if mode == "cached" and _background["on"] and probe is run_probe:
        started = start_background(path)
        return Speed(1.0, None, False, "the reference CPU rates, unscaled: this machine's first CPU probe "
                     + ("runs" if started else "is running") + " in the background (about 10 s), and the next "
                     "race plan uses it")
    try:
        seconds = probe()
    except RuntimeError as exc:
        return Speed(1.0, None, False, f"the reference CPU rates, unscaled ({exc})")
    entries[key] = {"seconds": seconds, "probe": VERSION, "measured": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "fingerprint": fp}
    try:
        write_cache(path, entries)
    except OSError:
        pass  # a read-only cache: the plan still uses this run's probe
    return Speed(REFERENCE_SECONDS / seconds, seconds, False, _source(seconds, REFERENCE_SECONDS / seconds, False))


# --- the first probe, off race plan's critical path ------------------------------------------------------

RUNNING_NAME = "cpu-probe.running"  # beside the cache file while a background probe runs
_background = {"on": False}


def set_background(on: bool = True) -> None:
    """`race plan`: a machine with no cached probe is planned on the reference rates while the probe runs in
    the background (see the module docstring), instead of waiting for it."""
    _background["on"] = on


def start_background(path: Path) -> bool:
    """Start the probe, when this process exits, in a detached child that writes `path` when done (so the
    probe's children do not share the cores with the plan, and it measures as `race run`'s probe does);
    False when one was started less than TIMEOUT_S + 30 s ago (it is still running, or died and is tried
    again after that) or the race cache cannot be written."""
    import atexit

    marker = path.with_name(RUNNING_NAME)
    try:
        if time.time() - marker.stat().st_mtime < TIMEOUT_S + 30:
            return False
    except OSError:
        pass
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(f"{os.getpid()}\n", encoding="utf-8")
    except OSError:
        return False
    atexit.register(_spawn, path)
    return True


def _spawn(path: Path) -> None:
    try:
        subprocess.Popen([sys.executable, "-m", "race_cli.plan.cpu_probe", str(path)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        path.with_name(RUNNING_NAME).unlink(missing_ok=True)


def _probe_in_background(path: Path) -> None:
    """The detached child: probe (unless another probe cached this machine meanwhile), then remove the marker."""
    try:
        machine_speed("cached", path=path)
    finally:
        path.with_name(RUNNING_NAME).unlink(missing_ok=True)


if __name__ == "__main__":
    _probe_in_background(Path(sys.argv[1]))
