"""Re-evaluate a sweep's finished jobs on more items, each as its own process through the local pool.

    race evaluate runs/<sweep> --items 1200 [--job ID ...] [--workers N]      (cli.evaluate; race run's
                                                                          evaluation look calls it too)

Each job runs `python -m race_cli.engine.reeval --job-dir jobs/<id> --items N` (engine/reeval.py) on the pool's
slots (GPU groups or CPU workers, the cores divided among them), with the pool's logs (appended to the job's
log.txt), sessions, parent-death signal and Ctrl-C handling. status.json stays the training job's record and
is not touched: a re-evaluation's record is its jobs/<id>/eval-more.json, written atomically, so a killed run
is rerun with the same command and redoes only the jobs without one (or with another item count than asked).
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import Sequence

from race_cli import folder, machine
from race_cli.errors import RaceError
from race_cli.pool.local import LocalPool, Running, child_env, make_slots, spawn


def reeval_command(items: int):
    """The pool's job command for a re-evaluation of `items` items per target."""
    def command(job_dir: Path) -> list[str]:
        return [sys.executable, "-m", "race_cli.engine.reeval", "--job-dir", str(job_dir), "--items", str(items)]
    return command


class ReevalPool(LocalPool):
    """LocalPool whose processes are re-evaluations: status.json (the training's record) is left alone; the
    result of each is its exit code (0 done, else failed) and its eval-more.json."""

    def _launch(self, job_id: str, slot) -> None:
        job_dir = folder.job_dir(self.sweep_dir, job_id)
        argv = self.job_command(job_dir)
        header = f"\n===== race re-evaluation at {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}: " \
                 f"{' '.join(shlex.quote(a) for a in argv)}\n"
        try:
            proc = spawn(job_dir, argv, child_env(slot.env), header=header)
        except OSError as exc:
            self.results[job_id] = "failed"
            self._event("failed", job_id, {"error": f"could not start {argv[0]}: {exc}"})
            self.slots.append(slot)
            return
        self.running.append(Running(job_id, proc, slot, time.monotonic()))
        self._event("started", job_id, {})

    def _finish(self, r: Running, stopped: bool) -> None:
        code = r.proc.returncode
        self.results[r.job_id] = "interrupted" if stopped else ("done" if code == 0 else "failed")
        self._event(self.results[r.job_id], r.job_id, {"exit_code": code, "seconds": time.monotonic() - r.started})


def has_items(job_dir: Path, items: int) -> bool:
    """True when the job's eval-more.json was asked for exactly `items` items per target: a race's evaluation
    look reads exactly its own (report/race.py), so another count is scored again (the file is replaced)."""
    from race_cli.io import read_json

    try:
        data = read_json(folder.more_eval_file(job_dir))
    except (OSError, ValueError):
        return False
    return isinstance(data, dict) and isinstance(data.get("items"), int) and data["items"] == items


def finished_jobs(sweep_dir: Path) -> list[str]:
    """Job ids of the sweep with a summary.json (finished), in name order."""
    jobs = folder.jobs_dir(sweep_dir)
    return sorted(p.name for p in jobs.iterdir() if p.is_dir() and folder.summary_file(p).is_file())


def reevaluate_sweep(sweep_dir: Path, items: int, job_ids: Sequence[str] | None = None, workers: int | None = None,
                     say=print) -> dict[str, str]:
    """Re-evaluate `job_ids` (default: every finished job) of the sweep that lacks `items` items; job -> state."""
    sweep_dir = Path(sweep_dir)
    if not folder.jobs_dir(sweep_dir).is_dir():
        raise RaceError(f"{sweep_dir}: not a sweep (no jobs/ folder). Expected runs/<sweep> made by race plan.")
    done = finished_jobs(sweep_dir)
    wanted = list(job_ids) if job_ids else done
    unknown = [j for j in wanted if j not in done]
    if unknown:
        raise RaceError(f"{', '.join(unknown[:5])}: not finished jobs of {sweep_dir} (no summary.json); only a "
                        "finished job's kept policy can be evaluated again.")
    todo = [j for j in wanted if not has_items(folder.job_dir(sweep_dir, j), items)]
    say(f"re-evaluating {len(todo)} of {len(wanted)} job(s) on {items} items per target "
        f"({len(wanted) - len(todo)} already have them)")
    if not todo:
        return {}
    slots = make_slots(gpus=machine.visible_gpus(), gpus_per_job=1, workers=workers, n_jobs=len(todo))
    pool = ReevalPool(sweep_dir, todo, slots, job_command=reeval_command(items))
    return pool.run()
