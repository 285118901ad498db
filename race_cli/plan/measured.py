"""What a finished sweep measured, for planning the next one: per-phase throughput and informative shares.

    rates = sweep_rates(Path("runs/tiny-1a2b3c4d"))          # model -> walltime.Rates (race plan --calibrate-from)
    shares = sweep_informative(Path("runs/tiny-1a2b3c4d"))   # regime key -> share of rows updated on (--informative-from)

Only finished jobs (status done) count. Files are data: every figure is checked to be a finite
number of the expected sign, and a sweep with nothing usable is refused with what was looked for.
"""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

from race_cli import folder
from race_cli.cost.walltime import Measured, Rates, calibrate, cpu_rates
from race_cli.errors import RaceError
from race_cli.io import read_json, read_jsonl


def finished_jobs(sweep: Path) -> list[tuple[Path, dict]]:
    """(job folder, its plan row) of every done job of `sweep`; refuses a folder that is not a sweep."""
    from race_cli.status import read_status

    sweep = Path(sweep)
    if not folder.plan_json(sweep).exists():
        raise RaceError(f"{sweep} is not a sweep folder (no plan.json). Give the folder `race run` wrote, "
                        "e.g. runs/tiny-<hash>.")
    rows = folder.read_plan_rows(sweep)
    out = []
    for job_id, row in rows.items():
        d = folder.job_dir(sweep, job_id)
        if read_status(d).get("state") == "done" and folder.ledger_file(d).exists():
            out.append((d, row))
    if not out:
        raise RaceError(f"{sweep} has no finished job (state done with a ledger.json) to measure. "
                        "Run it first (race run --sweep-dir ...), or plan without this option.")
    return out


def _number(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x >= 0 else None


def _wall_seconds(status: dict) -> float | None:
    try:
        t0 = dt.datetime.strptime(status["started"], "%Y-%m-%dT%H:%M:%SZ")
        t1 = dt.datetime.strptime(status["finished"], "%Y-%m-%dT%H:%M:%SZ")
    except (KeyError, TypeError, ValueError):
        return None
    s = (t1 - t0).total_seconds()
    return s if s >= 0 else None


def _ledger(d: Path) -> dict | None:
    """The parts of ledger.json the rates need, checked; None when it is not usable."""
    try:
        led = read_json(folder.ledger_file(d))
        act, ev = led["actual"], led.get("eval") or {}
        flops = {p: _number(act["flops"].get(p)) for p in ("rollout", "update", "reward")}
        secs = {p: _number(act["seconds"].get(p)) for p in ("rollout", "update", "reward", "total")}
        evs, runs = _number(ev.get("seconds", 0.0)), ev.get("runs", 0)
        items = [_number(t.get("items")) for t in (ev.get("targets") or {}).values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if None in flops.values() or None in secs.values() or evs is None or not isinstance(runs, int):
        return None
    return {"actual": {"flops": flops, "seconds": secs}, "eval": {"seconds": evs, "runs": max(0, runs)},
            "items": sum(items) if items and None not in items else None}


def _completions_per_run(d: Path, items: float | None) -> float | None:
    """Completions of one evaluation point: the ledger's items over every target × the job's eval.samples."""
    if items is None:
        return None
    try:
        k = folder.job_config_data(d).get("eval", {}).get("samples", 1)
    except (RaceError, OSError, ValueError, AttributeError):
        return None
    return items * k if isinstance(k, int) and not isinstance(k, bool) and k >= 1 else None


def sweep_rates(sweep: Path) -> dict[str, Rates]:
    """Per model: FLOP/s per phase, seconds per evaluation point (with the completions it was measured at)
    and setup seconds per job, pooled over the sweep's finished jobs (their ledgers, configs and status
    times)."""
    from race_cli.status import read_status

    per_model: dict[str, Measured] = {}
    for d, row in finished_jobs(sweep):
        led = _ledger(d)
        if led is None:
            continue
        per_model.setdefault(str(row.get("model")), Measured()).add(led, _wall_seconds(read_status(d)),
                                                                    _completions_per_run(d, led["items"]))
    rates = calibrate(per_model, cpu_rates, source=f"measured: {sweep}")
    if not rates:
        raise RaceError(f"{sweep}: no finished job has a readable ledger.json (actual flops and seconds per phase).")
    return rates


def settings_key(model: str, reward: str, group_size: Any, updates_per_batch: Any) -> tuple:
    """(model, reward, G, μ): what a measured informative share is filed under. Not race_cli/regime.regime_key
    (a job's overrides less its seed): another sweep's regimes are matched by these settings, whatever overrides
    set them."""
    from race_cli.cost.budget import reward_label

    return (str(model), str(reward_label(reward)), int(group_size), int(updates_per_batch))  # old names read as new


def _job_share(d: Path) -> float | None:
    """Rows updated on / rows sampled: summary.json's informative_share, else ledger rows, else (sweeps
    from before the skip) 1 - the mean of train/frac_zero_std_groups (exact for 0/1 rewards)."""
    for path, get in ((folder.summary_file(d), lambda j: j.get("informative_share")),
                      (folder.ledger_file(d), lambda j: _rows_share(j["actual"].get("rows")))):
        try:
            v = _number(get(read_json(path)))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            v = None
        if v is not None and v <= 1:
            return v
    try:
        zs = [_number(r.get("train/frac_zero_std_groups")) for r in read_jsonl(folder.metrics_file(d))
              if r.get("iteration", 0) >= 1]
    except (OSError, ValueError):
        return None
    zs = [z for z in zs if z is not None and z <= 1]
    return 1 - sum(zs) / len(zs) if zs else None


def _rows_share(rows: Any) -> float | None:
    if not isinstance(rows, dict):
        return None
    t, n = _number(rows.get("trained")), _number(rows.get("total"))
    return t / n if t is not None and n else None


def sweep_informative(sweep: Path) -> dict[tuple, float]:
    """Measured share of rows updated on, per regime (model, reward, G, mu), and per reward type ('rule' /
    'prm') pooled over its regimes: the mean over the finished jobs."""
    sums: dict[tuple, list[float]] = {}
    for d, row in finished_jobs(sweep):
        v = _job_share(d)
        if v is None:
            continue
        try:
            key = settings_key(row["model"], row["reward"], row["group_size"], row["updates_per_batch"])
        except (KeyError, TypeError, ValueError):
            continue
        sums.setdefault(key, []).append(v)
        sums.setdefault(("rule" if key[1] == "rule" else "prm",), []).append(v)
    if not sums:
        raise RaceError(f"{sweep}: no finished job records its informative share (summary.json, ledger.json rows "
                        "or metrics.jsonl train/frac_zero_std_groups).")
    return {k: sum(v) / len(v) for k, v in sums.items()}
