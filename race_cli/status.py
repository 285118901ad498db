"""status.json of every job of a sweep: one module for the plan, the job and the pool.

`race plan --out` writes `pending` (`pending_status`); `race train` writes `running` at start
and `done` / `failed` at the end (docs/files.md).
The pool completes the record around each attempt: before the child starts it increments
`attempts` and records host, device and start time; after the child is gone it records the
exit code and the tail of log.txt, and decides the final state when the child did not
(died, was killed, ran out of memory: `failed`; stopped by the pool or the scheduler:
`interrupted`). Every write is atomic (race_cli.io), so a crash leaves the old or the new file.
Shared by the local pool and the SLURM task, so both leave identical records. It sits below
plan, engine/ and pool/ and imports none of them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import signal
import socket
from pathlib import Path
from typing import Any, Sequence

from race_cli import folder
from race_cli.io import atomic_write_json, read_json

STATES = ("pending", "running", "done", "failed", "interrupted")
FINAL = ("done", "failed")
LOG_TAIL_LINES = 20  # lines of log.txt kept in status.json after an attempt


def now_iso() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_path(job_dir: Path) -> Path:
    return Path(job_dir) / "status.json"


def read_status(job_dir: Path) -> dict[str, Any]:
    """The job's status.json; a missing one reads as pending (never written yet).

    A garbage one (not JSON, not an object, an unknown state, attempts not a count) also reads
    as pending, but never silently from zero: the attempts are recounted from the pool's
    headers in log.txt, and `error` says the file was rebuilt.
    """
    path = status_path(job_dir)
    if not path.exists():
        return {"job_id": Path(job_dir).name, "state": "pending", "attempts": 0}
    why = "it is not a JSON object with a known state"
    try:
        data = read_json(path)
        if isinstance(data, dict) and data.get("state") in STATES:
            attempts = data.get("attempts", 0)
            if isinstance(attempts, int) and not isinstance(attempts, bool) and attempts >= 0:
                return data
            why = f"attempts={str(attempts)[:20]!r} is not a count"
    except (OSError, ValueError) as exc:
        why = f"{type(exc).__name__}"
    attempts = attempts_from_log(folder.log_file(job_dir))
    return {"job_id": Path(job_dir).name, "state": "pending", "attempts": attempts,
            "error": f"status.json was unreadable ({why}) and was rebuilt; {attempts} earlier attempt(s) "
                     "counted from log.txt"}


_ATTEMPT_HEADER = re.compile(r"^===== race run: attempt (\d+) ", re.M)


def attempts_from_log(path: Path) -> int:
    """The highest attempt number in the pool's headers of log.txt (0 when none)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return 0
    return max((int(m) for m in _ATTEMPT_HEADER.findall(text)), default=0)


def pending_status(job_id: str, created: str) -> dict[str, Any]:
    """The record of a job that was planned and never started."""
    return {"job_id": job_id, "state": "pending", "attempts": 0, "created": created}


def write_status(job_dir: Path, status: dict[str, Any]) -> None:
    atomic_write_json(status_path(job_dir), status)


def update_status(job_dir: Path, **fields: Any) -> dict[str, Any]:
    """Read, change the given fields, write back atomically; returns the new record."""
    status = read_status(job_dir)
    status.update(fields)
    write_status(job_dir, status)
    return status


def log_tail(path: Path, lines: int = LOG_TAIL_LINES, max_bytes: int = 16_384) -> str:
    """The last `lines` lines of a (possibly large) log file, reading only its last `max_bytes`."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


def last_metric(job_dir: Path, key: str = "flops/total", max_bytes: int = 65_536) -> float | None:
    """`key` from the last complete line of metrics.jsonl that has it (None when there is none).

    Reads only the end of the file; a torn last line (a write in progress) is skipped.
    """
    path = folder.metrics_file(job_dir)
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    for line in reversed(data.split("\n")):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get(key), (int, float)):
            return float(row[key])
    return None


def begin_attempt(job_dir: Path, *, device: str, host: str | None = None, **extra: Any) -> dict[str, Any]:
    """Mark the job running before its process starts: attempts + 1, host, device, start time.

    Fields of the previous attempt that no longer hold (exit code, error, finish time) are cleared.
    """
    status = read_status(job_dir)
    for stale in ("exit_code", "error", "finished", "log_tail", "stop_reason", "pid"):
        status.pop(stale, None)
    status.update(job_id=status.get("job_id") or Path(job_dir).name, state="running",
                  attempts=int(status.get("attempts") or 0) + 1, started=now_iso(),
                  host=host or socket.gethostname(), device=device, **extra)
    write_status(job_dir, status)
    return status


def describe_exit(returncode: int) -> str:
    """A one-line reason for a non-zero exit: the signal's name, and the usual cause of a SIGKILL."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if -returncode == signal.SIGKILL:
            return f"killed by {name} (out of memory, or killed by hand)"
        return f"killed by {name}"
    if returncode == 2:
        return "exit code 2: bad input (see log.txt)"
    return f"exit code {returncode}"


def end_attempt(job_dir: Path, returncode: int, *, stopped: bool) -> dict[str, Any]:
    """Close an attempt once the child is gone, from its exit code and what it wrote itself.

    - `stopped`: the pool (Ctrl-C, SIGTERM) or the scheduler (preemption) stopped the child:
      `interrupted`, unless the child still managed to finish (`done`).
    - exit 0 and the child wrote `done`: `done`.
    - anything else: `failed`, with the exit code, a one-line error and the log tail.
    """
    status = read_status(job_dir)
    log = log_tail(folder.log_file(job_dir))
    child_state = status.get("state")
    status.update(exit_code=returncode, log_tail=log, finished=now_iso())
    if returncode == 0 and child_state == "done":
        status["state"] = "done"
    elif stopped:
        status.update(state="interrupted", stop_reason="signal",
                      error="stopped before the end; the next race run resumes it from its checkpoint")
    else:
        status["state"] = "failed"
        if returncode == 0:
            status["error"] = f"exited 0 without marking itself done (state was {child_state!r})"
        elif child_state != "failed" or not status.get("error"):
            last = next((ln.strip() for ln in reversed(log.splitlines()) if ln.strip()), "")
            status["error"] = describe_exit(returncode) + (f": {last[:300]}" if last and not last.startswith("=====") else "")
        if child_state != "failed" or not status.get("stop_reason"):
            status["stop_reason"] = "error"
    write_status(job_dir, status)
    return status


# --- the jobs of a sweep ----------------------------------------------------------------------------

def select_jobs(states: dict[str, str], retry_failed: bool) -> list[str]:
    """Jobs to (re)run: everything not done; failed ones only with retry_failed."""
    return [j for j, s in states.items() if s != "done" and (s != "failed" or retry_failed)]


def adopt_orphans(sweep_dir: Path, states: dict[str, str]) -> list[str]:
    """Jobs still marked running while we hold the lock: their race run died. Mark them interrupted."""
    orphans = [j for j, s in states.items() if s == "running"]
    for j in orphans:
        update_status(folder.job_dir(sweep_dir, j), state="interrupted", stop_reason="signal",
                         error="the race run that ran it stopped without closing it; resumed by the next run")
        states[j] = "interrupted"
    return orphans


def sweep_temp_files(sweep_dir: Path) -> int:
    """Remove temp files of atomic writes cut short by a kill (.NAME.XXXX.tmp, race_cli.io's pattern)
    from the job folders; safe only under the sweep lock, when no process of this sweep is writing."""
    n = 0
    for pattern in ("*/.*.tmp", "*/*/.*.tmp"):
        for tmp in folder.jobs_dir(sweep_dir).glob(pattern):
            tmp.unlink(missing_ok=True)
            n += 1
    return n


def read_states(sweep_dir: Path, job_ids: Sequence[str]) -> dict[str, str]:
    return {j: read_status(folder.job_dir(sweep_dir, j))["state"] for j in job_ids}
