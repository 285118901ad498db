"""What `race run` shows while the pool works: a live rich panel on a terminal, a line per event otherwise.

Both read the same `Progress`: job counts by state, FLOPs spent against planned (a running job's
spend is the `flops/total` of the last line of its metrics.jsonl), elapsed time, and an estimate
of the time left: the plan's wall-time model (plan.json `planned_seconds`, race_cli/cost/walltime.py)
over what is left, corrected by how fast this session's finished jobs ran against it (FLOPs still
to spend / this session's FLOP rate when the plan has no planned seconds).

    display = make_display(progress, live=None)   # None: rich when stdout is a terminal
    display.event("started", job_id, status); display.tick(running); display.close()
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from race_cli import folder
from race_cli import status as st


def fmt_seconds(s: float | None) -> str:
    if s is None or s != s or s == float("inf"):
        return "?"
    s = int(round(s))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def fmt_flops(x: float) -> str:
    for unit, scale in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6)):
        if abs(x) >= scale:
            return f"{x / scale:.3g}{unit}"
    return f"{x:.3g}"


@dataclass
class Progress:
    """The sweep as the pool sees it: state and FLOPs spent per job, planned FLOPs per job."""

    sweep_dir: Path
    planned: dict[str, float]  # job_id -> planned flops/total
    states: dict[str, str]  # job_id -> pending | running | done | failed | interrupted
    spent: dict[str, float] = field(default_factory=dict)  # job_id -> flops/total so far
    devices: dict[str, str] = field(default_factory=dict)
    started_at: dict[str, float] = field(default_factory=dict)  # job_id -> time.monotonic()
    t0: float = field(default_factory=time.monotonic)
    spent0: float = 0.0  # FLOPs already spent when this session began
    planned_seconds: dict[str, float] = field(default_factory=dict)  # job_id -> plan.json planned_seconds
    slots: int = 1  # jobs running at once
    took: dict[str, float] = field(default_factory=dict)  # job_id -> wall seconds, jobs finished this session

    def __post_init__(self) -> None:
        for j in self.states:
            self.read_spent(j)
        self.spent0 = self.total_spent()

    def read_spent(self, job_id: str) -> None:
        v = st.last_metric(folder.job_dir(self.sweep_dir, job_id), "flops/total")
        if v is not None:
            self.spent[job_id] = v

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in st.STATES}
        for s in self.states.values():
            out[s] = out.get(s, 0) + 1
        return out

    def total_spent(self) -> float:
        return sum(self.spent.values())

    def total_planned(self) -> float:
        return sum(self.planned.values())

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def eta(self) -> float | None:
        """Seconds left: the planned wall time (race_cli/cost/walltime.py, the model race plan prints) of
        what is left to run, scheduled over the slots, scaled by measured / planned seconds of the jobs this
        session finished. Without planned seconds: FLOPs left at this session's FLOP rate."""
        if self.planned_seconds and all(j in self.planned_seconds for j in self.planned):
            return self._planned_eta()
        rate = (self.total_spent() - self.spent0) / max(self.elapsed(), 1e-9)
        left = sum(max(0.0, p - self.spent.get(j, 0.0)) for j, p in self.planned.items()
                   if self.states.get(j) not in ("done", "failed"))
        if left <= 0:
            return 0.0
        return left / rate if rate > 0 else None

    def _planned_eta(self) -> float:
        from race_cli.cost.walltime import time_left

        left = []
        for j, secs in self.planned_seconds.items():
            state = self.states.get(j)
            if state in ("done", "failed"):
                continue
            planned = self.planned.get(j) or 0.0
            done = min(1.0, self.spent.get(j, 0.0) / planned) if planned > 0 else 0.0
            left.append(secs * (1.0 - done))
        pairs = [(t, self.planned_seconds[j]) for j, t in self.took.items() if self.planned_seconds.get(j)]
        speed = sum(t for t, _ in pairs) / sum(p for _, p in pairs) if pairs else 1.0
        return time_left(left, self.slots, speed)

    def apply(self, kind: str, job_id: str, info: dict[str, Any]) -> None:
        self.states[job_id] = kind if kind in st.STATES else self.states.get(job_id, "pending")
        if kind == "started":
            self.states[job_id] = "running"
            self.devices[job_id] = info.get("device", "")
            self.started_at[job_id] = time.monotonic()
        else:
            self.read_spent(job_id)
            if kind == "done" and isinstance(info.get("seconds"), (int, float)):
                self.took[job_id] = float(info["seconds"])

    def summary_line(self) -> str:
        c = self.counts()
        return (f"{c['done']} done, {c['running']} running, {c['failed']} failed, "
                f"{c['pending'] + c['interrupted']} to run | FLOPs {fmt_flops(self.total_spent())}"
                f"/{fmt_flops(self.total_planned())} | {fmt_seconds(self.elapsed())} elapsed, "
                f"~{fmt_seconds(self.eta())} left")


class PlainLog:
    """One line per event (and a progress line every `every_s` seconds): logs, CI, nohup."""

    def __init__(self, progress: Progress, out=None, every_s: float = 60.0):
        self.p = progress
        self.out = out or sys.stdout
        self.every_s = every_s
        self._last = time.monotonic()

    def _print(self, text: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {text}", file=self.out, flush=True)

    def note(self, text: str) -> None:
        self._print(text)

    def event(self, kind: str, job_id: str, info: dict[str, Any]) -> None:
        self.p.apply(kind, job_id, info)
        if kind == "started":
            text = f"start  {job_id} on {info.get('device')} (attempt {info.get('attempts')})"
        elif kind == "done":
            text = f"done   {job_id} in {fmt_seconds(info.get('seconds'))}"
        elif kind == "failed":
            text = f"FAILED {job_id}: {info.get('error', '')} (log: {folder.log_file(folder.job_dir(self.p.sweep_dir, job_id))})"
        else:
            text = f"{kind} {job_id}"
        self._print(f"{text}  [{self.p.summary_line()}]")

    def tick(self, running: Sequence[Any]) -> None:
        if time.monotonic() - self._last >= self.every_s:
            self._last = time.monotonic()
            for r in running:
                self.p.read_spent(r.job_id)
            self._print(self.p.summary_line())

    def close(self) -> None:
        self._print(self.p.summary_line())


class RichLive:
    """A live panel (rich.Live, refreshed by the pool's loop: no refresh thread, so forking is safe)."""

    def __init__(self, progress: Progress, console=None, refresh_s: float = 0.5):
        from rich.console import Console
        from rich.live import Live

        self.p = progress
        self.console = console or Console()
        self.refresh_s = refresh_s
        self._last_read = 0.0
        self._last_draw = 0.0
        self.live = Live(self._render([]), console=self.console, auto_refresh=False, transient=False)
        self.live.start()

    def _render(self, running: Sequence[Any]):
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        c = self.p.counts()
        head = Table.grid(padding=(0, 2))
        head.add_row(f"[green]{c['done']} done", f"[cyan]{c['running']} running", f"[red]{c['failed']} failed",
                     f"{c['pending'] + c['interrupted']} to run", f"{fmt_seconds(self.p.elapsed())} elapsed",
                     f"~{fmt_seconds(self.p.eta())} left")
        total, spent = self.p.total_planned(), self.p.total_spent()
        bar = Table.grid(padding=(0, 1))
        bar.add_row("FLOPs", ProgressBar(total=max(total, 1.0), completed=min(spent, total), width=40),
                    f"{fmt_flops(spent)} / {fmt_flops(total)}")
        jobs = Table(box=None, show_header=bool(running), padding=(0, 1))
        for col in ("running job", "device", "time", "FLOPs"):
            jobs.add_column(col)
        now = time.monotonic()
        for r in running:
            planned = self.p.planned.get(r.job_id, 0.0)
            done = self.p.spent.get(r.job_id, 0.0)
            pct = f" ({100 * done / planned:.0f}%)" if planned else ""
            jobs.add_row(r.job_id, r.slot.name, fmt_seconds(now - r.started), f"{fmt_flops(done)}{pct}")
        return Group(head, bar, jobs)

    def note(self, text: str) -> None:
        self.live.console.print(text)

    def event(self, kind: str, job_id: str, info: dict[str, Any]) -> None:
        self.p.apply(kind, job_id, info)
        if kind == "failed":
            self.live.console.print(f"[red]FAILED[/] {job_id}: {info.get('error', '')}", highlight=False)
        elif kind == "done":
            self.live.console.print(f"[green]done[/]   {job_id} in {fmt_seconds(info.get('seconds'))}", highlight=False)

    def tick(self, running: Sequence[Any]) -> None:
        now = time.monotonic()
        if now - self._last_read >= 1.0:  # metrics.jsonl tails: once a second is plenty
            self._last_read = now
            for r in running:
                self.p.read_spent(r.job_id)
        if now - self._last_draw >= self.refresh_s:
            self._last_draw = now
            self.live.update(self._render(running), refresh=True)

    def close(self) -> None:
        self.live.update(self._render([]), refresh=True)
        self.live.stop()


def make_display(progress: Progress, live: bool | None = None, console=None):
    """RichLive on a terminal (or live=True), PlainLog otherwise."""
    if live is None:
        live = sys.stdout.isatty()
    return RichLive(progress, console=console) if live else PlainLog(progress)
