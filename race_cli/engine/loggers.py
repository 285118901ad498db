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
- wandb: a run in <job>/wandb/, offline unless WANDB_MODE says otherwise (no network needed;
  `wandb sync` uploads later); run id = the job id, so a resumed job continues its run.
"""

from __future__ import annotations

import math
import os
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


class WandbLogger:
    """A W&B run (offline by default) whose id is the job id; step = iteration."""

    def __init__(self, job_dir: Path, config: dict, job_id: str):
        try:
            import wandb
        except ImportError:
            raise RaceError("logger=wandb needs the wandb package: pip install 'race-cli[wandb]' "
                            "(or logger=none; metrics.jsonl is written either way).") from None
        folder = Path(job_dir) / "wandb"
        folder.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT", "race"), id=job_id, name=job_id,
                              dir=str(job_dir), config=config, resume="allow",
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
