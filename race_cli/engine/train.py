"""`race train`: run (or resume) one GRPO job in a job folder.

    race train model=tiny-s grpo.group_size=4 --out runs/one/jobs/try1   # compose, write .hydra/, run
    race train --job-dir runs/sweep/jobs/<job_id>                         # what `race run` calls

`--out` composes the overrides and writes DIR/.hydra/config.yaml and overrides.yaml before
running; running the same command again resumes the job from its checkpoint. `--job-dir` reloads
a folder written by `race plan --out` (and resumes it when it has a checkpoint).
Exit codes: 0 done, 1 failed run (status.json says why), 2 bad input (RaceError).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from race_cli.errors import RaceError
from race_cli.folder import hydra_dir, job_config, job_overrides, summary_file


def _write_job_config(job_dir: Path, cfg, overrides: list[str]) -> None:
    import yaml
    from omegaconf import OmegaConf

    from race_cli.io import atomic_write_text

    hydra_dir(job_dir).mkdir(parents=True, exist_ok=True)
    atomic_write_text(job_config(job_dir), OmegaConf.to_yaml(cfg, resolve=True))  # plain data: read back without interpolation
    atomic_write_text(job_overrides(job_dir), yaml.safe_dump(list(overrides), default_flow_style=False))


def _saved_overrides(job_dir: Path) -> list[str]:
    import yaml

    from race_cli.io import inside, read_bounded

    path = job_overrides(job_dir)
    if not path.exists() and not path.is_symlink():
        return []
    try:
        data = yaml.safe_load(read_bounded(inside(path, job_dir), 4 * 2**20).decode("utf-8")) or []  # no link
        if not isinstance(data, list):
            raise ValueError("expected a list of overrides")
    except (OSError, UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        raise RaceError(f"Cannot read {path} ({type(exc).__name__}: {str(exc).splitlines()[0][:120]}). Expected "
                        "the list of overrides race wrote there; choose another folder or replan the job.") from None
    return [str(o) for o in data]


def _refuse_a_grid(overrides: list[str]) -> None:
    """`grid=NAME` names a sweep; race train runs one job and would silently train the defaults
    while recording the grid in its overrides. Only grid=none (one job) is accepted."""
    from race_cli.config.compose import group_options

    for text in overrides:
        key, sep, value = text.lstrip("+").partition("=")
        if key.strip() == "grid" and sep and value.strip() != "none":
            others = ", ".join(g for g in group_options("grid") if g != "none")
            raise RaceError(f"'{text}' selects a grid (a sweep of jobs), but race train runs ONE job. Plan or run the "
                            f"grid with race plan / race run {text}, or give this job's own overrides with grid=none "
                            f"(grids: {others}).")


def _never_trained(job_dir: Path) -> bool:
    """True when the folder's job has no checkpoint and is not running or done: nothing of it is
    worth keeping, so `race train --out` may give it a corrected config."""
    from race_cli.status import read_status

    from race_cli.engine import checkpoint

    if any(p.exists() for p in (job_dir / checkpoint.NAME, job_dir / checkpoint.OLD, summary_file(job_dir))):
        return False
    return read_status(job_dir).get("state") in ("pending", "failed")


def _model_paths(cfg) -> list[str]:
    """The model paths a job loads: the policy's, and the reward model's when it has one."""
    reward_model = cfg.reward.get("model") if cfg.get("reward") is not None else None
    return [str(cfg.model.path)] + ([str(reward_model.path)] if reward_model is not None else [])


def _checked(cfg: Any) -> Any:
    """The composed config, once race plan's checks pass (tasks/checks.py: the model's tokenizer, the task's rows,
    the targets), so a job that would crash on its first prompt is refused before its folder is written."""
    from omegaconf import OmegaConf

    from race_cli.tasks.checks import check_jobs

    check_jobs([OmegaConf.to_container(cfg, resolve=True)])
    return cfg


def train_main(overrides: list[str], out: Path | None = None, job_dir: Path | None = None) -> int:
    """Compose (`out`) or reload (`job_dir`) one job's config and run or resume it; returns the exit code."""
    from race_cli.config.compose import compose, load_job_config
    from race_cli.lock import JobLock
    from race_cli.zoo.build import refuse_unusable_cache

    if (out is None) == (job_dir is None):
        raise RaceError("race train needs exactly one of --out DIR (compose these overrides into a new job folder) "
                        "or --job-dir DIR (a job folder written by race plan --out).")
    JobLock(Path(out if out is not None else job_dir)).refuse_if_busy()  # before writing or importing torch
    overrides = list(overrides or [])
    if out is not None:
        folder = Path(out)
        _refuse_a_grid(overrides)
        saved = job_config(folder)
        if not saved.is_file() and folder.is_dir() and any(folder.iterdir()):
            raise RaceError(f"{folder} exists, holds files and is not a job folder (no .hydra/config.yaml): race train "
                            "would write its job among them. Choose a new or empty --out folder.")
        if saved.is_file() and _saved_overrides(folder) != overrides and _never_trained(folder):
            cfg = _checked(compose(overrides))  # a corrected command for a job that failed before its first checkpoint
            refuse_unusable_cache(_model_paths(cfg))
            print(f"{folder}: replacing the config of a job that never reached a checkpoint "
                  f"(overrides were {_saved_overrides(folder)})", flush=True)
            _write_job_config(folder, cfg, overrides)
        elif saved.is_file():
            before = _saved_overrides(folder)
            if before != overrides:
                raise RaceError(f"{folder} already holds a job with overrides {before}, not {overrides}: "
                                "rerun with the same overrides to resume it, or choose another --out folder.")
            cfg = load_job_config(saved)
        else:
            cfg = _checked(compose(overrides))  # RaceError before anything is written
            refuse_unusable_cache(_model_paths(cfg))  # a cache that is a file: named before the job folder is written
            _write_job_config(folder, cfg, overrides)
    else:
        folder = Path(job_dir)
        if overrides:
            raise RaceError(f"--job-dir takes no overrides (got {' '.join(overrides)}): the job's config is "
                            f"{folder}/.hydra/config.yaml. Use --out DIR to compose a new job instead.")
        cfg = load_job_config(job_config(folder))
        overrides = _saved_overrides(folder)
    refuse_unusable_cache(_model_paths(cfg))
    from race_cli.engine.job import Job  # imports torch

    return Job(cfg, folder, overrides).run()

