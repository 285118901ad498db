"""Lock files: `.race.lock` (one `race run` per sweep folder) and `.job.lock` (one process
training a job folder), stale locks taken over.

The lock file holds the owner's pid, host, boot id and process start time (JSON). It is
created with O_CREAT|O_EXCL, so two processes cannot both create it. A lock is stale when
its owner is provably gone: same host and a different boot id (the machine rebooted), or
same boot and no live process with that pid and start time (pid reuse is not mistaken for
the owner). A lock held from another host cannot be checked from here: it is refused with
a message saying how to remove it by hand.

Not the filelock package: its locks (flock, or a bare file on other systems) hold no owner, so a refusal
could not say who holds the sweep, and a lock left by a killed run or a rebooted node could not be told stale
and taken over; nor re-entered by the race's own later looks.

A sweep lock can be re-entered by the process that holds it, where the code asks for it (`reenter=True`):
`race run` holds it for a whole race and each look's pass takes it again inside (pool/run.py), so no other
run can start between two looks. Only a holder that took it with `reenter=True` is re-entered; anything
else, a second plain SweepLock in the same process included, is refused as before; a forked child (its pid differs) never re-enters its parent's lock.

    with SweepLock(sweep_dir, say=print):
        ...  # run the sweep
    with JobLock(job_dir, say=print):
        ...  # train the job (race train: by hand, or the child of race run)
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable

from race_cli.errors import RaceError

LOCK_NAME = ".race.lock"
JOB_LOCK_NAME = ".job.lock"
_HELD: dict[str, int] = {}  # re-entrant locks this process holds -> how many times they were entered


def boot_id() -> str:
    """This boot of this machine (Linux), '' where the kernel does not say."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_start(pid: int) -> str:
    """Start time of process `pid` in clock ticks since boot (Linux /proc), '' when unknown or gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = stat[stat.rfind(")") + 2:].split()
    return fields[19] if len(fields) > 19 else ""  # field 22 of stat = index 19 after ')'


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def owner_record() -> dict[str, Any]:
    pid = os.getpid()
    return {"pid": pid, "host": socket.gethostname(), "boot_id": boot_id(),
            "process_start": process_start(pid), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def stale_reason(record: dict[str, Any]) -> str | None:
    """Why the lock's owner is surely gone, or None when it may still be running."""
    if record.get("host") != socket.gethostname():
        return None
    if record.get("boot_id") and boot_id() and record["boot_id"] != boot_id():
        return "its machine has rebooted since"
    pid = record.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return f"process {pid} is no longer running"
    start = record.get("process_start")
    if start and process_start(pid) and process_start(pid) != start:
        return f"process {pid} is gone (the pid now belongs to another process)"
    return None


class LockBusy(RaceError):
    """The lock is held by a live process (or keeps being taken): wait, or stop that process. Any other
    RaceError from a lock (a folder where its file should be) is not cured by waiting."""


class FileLock:
    """Hold the lock file `path` (see the module docstring); `busy()` words the refusal."""

    who = "process"  # what holds such a lock, for messages
    reentrant = False  # whether the process holding it may take it again (`reenter`; the outermost releases)

    def __init__(self, path: Path, say: Callable[[str], None] = print, reenter: bool = False):
        self.path = Path(path)
        self.say = say
        self.held = False
        self.reenter = reenter and self.reentrant  # take it again when this process holds it already

    def busy(self, record: dict[str, Any]) -> str:
        return (f"Another process (pid {record.get('pid')} on {record.get('host')}, started "
                f"{record.get('started')}) holds {self.path}. Wait for it to finish, or, if you are sure it "
                f"is gone, delete {self.path} and rerun.")

    def refuse_not_a_file(self) -> None:
        """RaceError when something other than a plain file sits at the lock's path (a folder, a symbolic
        link, a FIFO): race never made it, so it is neither taken over nor moved aside, only named."""
        import stat

        try:
            mode = os.lstat(self.path).st_mode
        except FileNotFoundError:
            return
        if not stat.S_ISREG(mode):
            kind = ("a folder" if stat.S_ISDIR(mode) else "a symbolic link" if stat.S_ISLNK(mode)
                    else "not a plain file")
            raise RaceError(f"{self.path} is {kind}, not a lock file race wrote (race keeps its {self.who} lock in a "
                            f"plain file there). Nothing was changed. Remove it (rm -r {self.path}) and rerun.")

    def refuse_if_busy(self) -> None:
        """RaceError now when a live process holds the lock (a cheap early check; acquire() decides)."""
        self.refuse_not_a_file()
        try:
            record = json.loads(self.path.read_text() or "{}")
        except (OSError, json.JSONDecodeError):
            return
        if isinstance(record, dict) and record and stale_reason(record) is None:
            raise LockBusy(self.busy(record))

    def _create(self) -> bool:
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(owner_record(), f)
            f.flush()
            os.fsync(f.fileno())
        return True

    def _key(self) -> str:
        return os.path.realpath(self.path)

    def _ours(self) -> bool:
        """Whether the lock file names this process (a re-entrant lock held here)."""
        try:
            record = json.loads(self.path.read_text() or "{}")
        except (OSError, json.JSONDecodeError):
            return False
        return isinstance(record, dict) and record.get("pid") == os.getpid() and \
            record.get("host") == socket.gethostname()

    def acquire(self) -> "FileLock":
        self.refuse_not_a_file()
        if self.reenter and _HELD.get(self._key()) and self._ours():
            _HELD[self._key()] += 1
            self.held = True
            return self
        for _ in range(5):  # a few rounds: another process may take over a stale lock at the same time
            if self._create():
                self.held = True
                if self.reenter:  # only a holder that asked for it can be re-entered
                    _HELD[self._key()] = 1
                return self
            try:
                record = json.loads(self.path.read_text() or "{}")
            except FileNotFoundError:
                continue  # released meanwhile: try again
            except (OSError, json.JSONDecodeError):
                record = {}
            if not record:
                # empty or torn: the owner died between create and write, or is writing right now
                time.sleep(0.2)
                try:
                    record = json.loads(self.path.read_text() or "{}")
                except (OSError, json.JSONDecodeError):
                    record = {}
                if not record:
                    self.say(f"Taking over a lock file that is empty or unreadable: {self.path}")
                    self._take_over({})
                    continue
            reason = stale_reason(record)
            if reason is None:
                raise LockBusy(self.busy(record))
            self.say(f"Taking over the lock of a {self.who} that is gone ({reason}): {self.path}")
            self._take_over(record)
        raise LockBusy(f"Could not take the lock {self.path}: other processes keep taking it. "
                        "Is another race command starting on this folder? Retry in a moment.")

    def _take_over(self, judged: dict[str, Any]) -> None:
        """Move the stale file aside (an atomic rename) and drop it.

        If another process took the lock over between our reading and our rename, what we
        moved is its fresh lock: put it back (a hard link, which fails if the path is taken).
        """
        aside = self.path.with_name(f"{self.path.name}.stale.{os.getpid()}")
        try:
            os.replace(self.path, aside)
        except FileNotFoundError:
            return
        try:
            moved = json.loads(aside.read_text() or "{}")
        except (OSError, json.JSONDecodeError):
            moved = {}
        if moved and moved != judged and stale_reason(moved) is None:
            try:
                os.link(aside, self.path)
            except OSError:
                pass
        aside.unlink(missing_ok=True)

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        if self.reenter:
            n = _HELD.pop(self._key(), 0)
            if n > 1:  # an inner holder: the outermost releases
                _HELD[self._key()] = n - 1
                return
        try:
            record = json.loads(self.path.read_text())
        except (OSError, json.JSONDecodeError):
            return
        if record.get("pid") == os.getpid() and record.get("host") == socket.gethostname():
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "FileLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class SweepLock(FileLock):
    """Hold `<sweep_dir>/.race.lock` for the life of a `race run`."""

    who = "race run"
    reentrant = True

    def __init__(self, sweep_dir: Path, say: Callable[[str], None] = print, reenter: bool = False):
        super().__init__(Path(sweep_dir) / LOCK_NAME, say, reenter)

    def busy(self, record: dict[str, Any]) -> str:
        return (f"Another race run (pid {record.get('pid')} on {record.get('host')}, started "
                f"{record.get('started')}) is running this sweep: {self.path.parent}. "
                "Wait for it to finish or stop it (Ctrl-C) first. If you are sure it is gone "
                f"(e.g. it ran on another machine that died), delete {self.path} and rerun.")


class JobLock(FileLock):
    """Hold `<job_dir>/.job.lock` while a process trains the job, so two never write it at once."""

    who = "race train"

    def __init__(self, job_dir: Path, say: Callable[[str], None] = print):
        super().__init__(Path(job_dir) / JOB_LOCK_NAME, say)

    def busy(self, record: dict[str, Any]) -> str:
        return (f"Another process (pid {record.get('pid')} on {record.get('host')}, started "
                f"{record.get('started')}) is training this job: {self.path.parent}. Two at once would "
                "interleave its metrics and checkpoints. Wait for it to finish or stop it first; if you are "
                f"sure it is gone (e.g. it ran on another machine that died), delete {self.path} and rerun.")
