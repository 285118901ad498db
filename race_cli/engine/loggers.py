"""Metric loggers beside metrics.jsonl: `logger=none | tensorboard | wandb`.

metrics.jsonl stays the source of truth (the report reads only it); a logger mirrors each line's
numeric values to a dashboard, step = the line's `iteration`. The job calls one interface and
never branches on which logger it has (the do-nothing `NullLogger` when `logger=none`):

    logger = make_logger("tensorboard", job_dir, config_dict, resume_step=None)
    logger.log({"iteration": 3, "train/reward_mean": 0.4, "eval/arithmetic/accuracy": 0.5})
    logger.close()

- tensorboard: event files in <job>/tensorboard/ through torch.utils.tensorboard (needs the
  `tensorboard` package: pip install 'race-cli[tensorboard]'). A resumed job purges the events
  after its checkpoint (`purge_step`), as metrics.jsonl is cut back, so both hold the same values.
- wandb: one run per job in <job>/wandb/, offline unless WANDB_MODE says otherwise (no network needed;
  `wandb sync` uploads later). The runs of a sweep share its group (the sweep folder's name); a run's id is
  the sweep's id (its folder name and a hash of when race plan wrote it) and the job id, so two sweeps in one
  project never write into the same run, and a resumed job continues its own (`run_identity`).
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path

from race_cli.errors import RaceError

LOGGERS = ("none", "tensorboard", "wandb")


def scalars(line: dict) -> dict[str, float]:
    """The finite numeric values of a metrics line, `iteration` and booleans left out."""
    out = {}
    for k, v in line.items():
        if k == "iteration" or isinstance(v, bool) or not isinstance(v, (int, float)):
            continue
        if math.isfinite(v):
            out[k] = float(v)
    return out


class NullLogger:
    """Logs nothing (logger=none)."""

    def log(self, line: dict) -> None:
        pass

    def close(self) -> None:
        pass


class TensorBoardLogger:
    """One scalar per metric key, step = iteration, in <job_dir>/tensorboard/."""

    def __init__(self, job_dir: Path, resume_step: int | None = None):
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise RaceError("logger=tensorboard needs the tensorboard package: pip install 'race-cli[tensorboard]' "
                            "(or logger=none; metrics.jsonl is written either way).") from None
        purge = None if resume_step is None else resume_step + 1  # drop events after the checkpoint
        self.writer = SummaryWriter(log_dir=str(Path(job_dir) / "tensorboard"), purge_step=purge)

    def log(self, line: dict) -> None:
        step = int(line.get("iteration", 0))
        for k, v in scalars(line).items():
            self.writer.add_scalar(k, v, global_step=step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


def _safe(text: str) -> str:
    """W&B refuses ':;,#?/\'' and outer blanks in a run id: anything but letters, digits and '._=-' becomes '-'."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "-", text).strip("-") or "job"


def run_identity(job_dir: Path, job_id: str) -> tuple[str, str | None, str]:
    """(run id, group, display name) of a job's W&B run.

    In a sweep folder (<sweep>/jobs/<job_id>/ beside plan.json): group = the sweep folder's name, id =
    '<sweep>-<hash>-<job_id>' where the hash is of the sweep's name and the time race plan wrote it
    (multirun.yaml's `created`), name = '<sweep>/<job_id>'. Two sweeps, even of one name, get two ids; a resumed
    job (or a moved sweep folder) keeps its id. A job outside a sweep (race train --out DIR): no group, and
    the id hashes the folder's absolute path."""
    import hashlib

    from race_cli.folder import is_sweep, multirun_yaml

    job_dir = Path(job_dir)
    sweep = job_dir.parent.parent
    if job_dir.parent.name == "jobs" and is_sweep(sweep):
        created = ""
        try:
            from race_cli.io import load_yaml

            created = str((load_yaml(multirun_yaml(sweep).read_text(encoding="utf-8")) or {}).get("created", ""))
        except Exception:  # noqa: BLE001 - an unreadable multirun.yaml: the id still names the sweep and the job
            pass
        digest = hashlib.sha256(f"{sweep.name}|{created}".encode()).hexdigest()[:8]
        run_id = _safe(f"{sweep.name}-{digest}-{job_id}")
        group, name = sweep.name, f"{sweep.name}/{job_id}"
    else:
        digest = hashlib.sha256(str(job_dir.resolve()).encode()).hexdigest()[:8]
        run_id, group, name = _safe(f"{job_dir.name}-{digest}"), None, job_id
    if len(run_id) > 128:  # keep it short and still unique
        run_id = run_id[:119] + "-" + hashlib.sha256(run_id.encode()).hexdigest()[:8]
    return run_id, group, name


class WandbLogger:
    """One W&B run per job (offline by default), grouped by sweep, with a unique id (run_identity); step = iteration."""

    def __init__(self, job_dir: Path, config: dict, job_id: str):
        try:
            import wandb
        except ImportError:
            raise RaceError("logger=wandb needs the wandb package: pip install 'race-cli[wandb]' "
                            "(or logger=none; metrics.jsonl is written either way).") from None
        folder = Path(job_dir) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        run_id, group, name = run_identity(Path(job_dir), job_id)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "race"), id=run_id, name=name, group=group,
                              job_type="grpo", dir=str(job_dir), config=config, resume="allow",
                              mode=os.environ.get("WANDB_MODE", "offline"))

    def log(self, line: dict) -> None:
        self.run.log(scalars(line), step=int(line.get("iteration", 0)))

    def close(self) -> None:
        self.run.finish()


def make_logger(kind: str, job_dir: Path, config: dict, *, job_id: str = "job", resume_step: int | None = None):
    """The logger `logger=<kind>` names; RaceError for an unknown kind or a missing package."""
    if kind == "none":
        return NullLogger()
    if kind == "tensorboard":
        return TensorBoardLogger(job_dir, resume_step)
    if kind == "wandb":
        return WandbLogger(job_dir, config, job_id)
    raise RaceError(f"logger={kind!r} is unknown: expected one of {', '.join(LOGGERS)}.")
