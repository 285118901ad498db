"""The CPU rates this machine's own finished sweeps measured: what `race run` leaves for the next `race plan`.

    learn(sweep, workers)              # after race run: the sweep's rates (plan/measured.sweep_rates), kept
    rates = machine_rates(workers)     # race plan: {model: Rates} measured here with that many workers

A probe of a few seconds (plan/cpu_probe.py) cannot average a virtual machine's fast and slow spells,
which outlast it; a finished sweep has averaged them over its own run. So after `race run` has run CPU
jobs, the rates its finished jobs measured (the ones `race plan --calibrate-from` reads) are kept per
machine fingerprint (the probe's: CPU model, cores, architecture, torch and Python versions) in
cpu-rates.json under the race cache, one record per model, the latest sweep that ran it. A later plan on
this machine prices a CPU job of that model at those rates when it runs as many workers at once as the
sweep did (two jobs sharing two cores run slower than one alone), and at the probe's otherwise.

`race plan --calibrate-from` still takes precedence. RACE_CPU_PROBE=off neither reads nor writes them;
`refresh` (race plan --reprobe) forgets them with the probe. The file is data: a record that is not
finite positive numbers is ignored.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from pathlib import Path

from race_cli.cost.walltime import PHASES, Rates
from race_cli.plan import cpu_probe
from race_cli.plan.cpu_probe import env_mode, machine_key, read_cache, write_cache

CACHE_NAME = "cpu-rates.json"


def cache_file() -> Path:
    return cpu_probe.cache_file(CACHE_NAME)


def _figure(x, *, zero: bool = False) -> bool:
    """A finite number (not a bool) above 0, or at 0 too with `zero`."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and (x > 0 or zero and x == 0)


def _record(rates: Rates, *, sweep: Path, workers: int, jobs: int, finished: str) -> dict:
    return {"flops_per_s": dict(rates.flops_per_s), "eval_s": rates.eval_s, "overhead_s": rates.overhead_s,
            "eval_completions": rates.eval_completions, "eval_assumed": rates.eval_assumed, "workers": workers,
            "jobs": jobs, "sweep": str(sweep), "finished": finished}


def _rates(record: dict) -> Rates | None:
    """The Rates of a stored record, or None when any figure is not what it should be."""
    fps = record.get("flops_per_s")
    if not isinstance(fps, dict) or not all(_figure(fps.get(p)) for p in PHASES):
        return None
    per_point = record.get("eval_completions")
    if not (_figure(record.get("eval_s")) and _figure(record.get("overhead_s"), zero=True)
            and (per_point is None or _figure(per_point))):
        return None
    sweep, finished = record.get("sweep"), record.get("finished")
    source = (f"measured on this machine by race run of {sweep if isinstance(sweep, str) else '?'} (finished "
              f"{finished if isinstance(finished, str) else '?'}; race plan --reprobe forgets them)")
    return Rates({p: float(fps[p]) for p in PHASES}, eval_s=float(record["eval_s"]),
                 overhead_s=float(record["overhead_s"]), source=source,
                 eval_assumed=record.get("eval_assumed") is True, eval_completions=per_point)


def machine_rates(workers: int, *, path: Path | None = None) -> dict[str, Rates]:
    """{model: Rates} this machine's latest sweeps measured with `workers` jobs at once ({}: none, or
    RACE_CPU_PROBE is off; refresh, as race plan --reprobe sets it, forgets them first)."""
    path = path if path is not None else cache_file()
    if env_mode() == "refresh":  # the machine is measured afresh: what its sweeps measured goes too
        forget(path)
    if env_mode() != "cached":
        return {}
    records = read_cache(path).get(machine_key(), {})
    out = {}
    for model, record in records.items():
        if isinstance(record, dict) and record.get("workers") == workers:
            rates = _rates(record)
            if rates is not None:
                out[model] = rates
    return out


def forget(path: Path | None = None) -> None:
    """Drop this machine's learned rates (race plan --reprobe: the machine is measured afresh)."""
    path = path if path is not None else cache_file()
    machines = read_cache(path)
    if machines.pop(machine_key(), None) is not None:
        try:
            write_cache(path, machines)
        except OSError:
            pass


def learn(sweep: Path, workers: int, *, path: Path | None = None) -> list[str]:
    """Keep the rates `sweep`'s finished CPU jobs measured, run `workers` at once; returns the models kept
    ([]: RACE_CPU_PROBE is off, a job ran on a GPU, nothing finished is readable, or the cache is read-only)."""
    from race_cli.errors import RaceError
    from race_cli.plan.measured import finished_jobs, sweep_rates
    from race_cli.status import read_status

    if env_mode() == "off":
        return []
    try:
        done = [(read_status(d), row) for d, row in finished_jobs(sweep)]
        if any(status.get("device") != "cpu" for status, _ in done):
            return []
        rates = sweep_rates(sweep)
    except (RaceError, OSError, ValueError):
        return []
    sweep = Path(sweep).resolve()
    jobs = Counter(str(row.get("model")) for _, row in done)
    last = max((s["finished"] for s, _ in done if isinstance(s.get("finished"), str) and len(s["finished"]) == 20),
               default=None)  # status times are UTC, "YYYY-MM-DDTHH:MM:SSZ"
    when = f"{last[:10]} {last[11:16]} UTC" if last else time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    path = path if path is not None else cache_file()
    machines = read_cache(path)
    key = machine_key()
    records = machines.get(key, {})
    for model, r in rates.items():
        records[model] = _record(r, sweep=sweep, workers=workers, jobs=jobs[model], finished=when)
    machines[key] = records
    try:
        write_cache(path, machines)
    except OSError:
        return []
    return sorted(rates)
