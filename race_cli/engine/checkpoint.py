"""Atomic checkpoints of a job: what resume needs to continue exactly where it stopped.

`<job>/checkpoint/` holds
  adapter/            the PEFT adapter (safetensors, PeftModel.from_pretrained-loadable);
                      under full fine-tuning the whole model (save_pretrained)
  trainable.safetensors  every trainable parameter by name (restored bitwise on resume)
  optim.pt            optimizer and lr-scheduler state
  rng.pt              python, numpy, torch (and CUDA) RNG states
  state.json          iteration, ledger, evaluation results so far (the job's own dict)

Writing is all-or-nothing: everything goes to `.checkpoint.tmp-<pid>/`, each file and the
folder are fsynced, the previous checkpoint is renamed to `.checkpoint.old`, the new one
renamed into place, then the old one removed. A crash (or a full disk) at any point leaves a
complete checkpoint: `load` picks up `.checkpoint.old` if the swap was cut short, and removes
half-written temp folders.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from race_cli.io import _fsync_dir, dumps

NAME, OLD, TMP_PREFIX = "checkpoint", ".checkpoint.old", ".checkpoint.tmp-"


@dataclass
class Checkpoint:
    path: Path
    state: dict  # state.json


def _fsync_tree(folder: Path) -> None:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            fd = os.open(Path(root) / name, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


def _save_torch(obj: Any, path: Path) -> None:
    """torch.save, separated so a test can make the disk 'full' half-way through a checkpoint."""
    import torch

    torch.save(obj, path)


def rng_state() -> dict:
    import random

    import numpy as np
    import torch

    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np
    import torch

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(job_dir: Path, *, model: Any, optimizer: Any, scheduler: Any, state: dict) -> Path:
    """Write a complete new checkpoint into `job_dir/checkpoint`, replacing the old one atomically."""
    from safetensors.torch import save_file

    job_dir = Path(job_dir)
    tmp = job_dir / f"{TMP_PREFIX}{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        model.save_pretrained(str(tmp / "adapter"))
        trainable = {n: p.detach().cpu().contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}
        save_file(trainable, str(tmp / "trainable.safetensors"))
        _save_torch({"optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict()}, tmp / "optim.pt")
        _save_torch(rng_state(), tmp / "rng.pt")
        (tmp / "state.json").write_text(dumps(state), encoding="utf-8")
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)  # never leave a half checkpoint; the old one is untouched
        raise
    return _swap_in(tmp, job_dir / NAME, job_dir / OLD)


def _swap_in(tmp: Path, final: Path, old: Path) -> Path:
    """Put the complete folder `tmp` at `final`; the previous one is kept as `old` until the rename is done."""
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    _fsync_dir(final.parent)
    shutil.rmtree(old, ignore_errors=True)
    return final


def find(job_dir: Path) -> Checkpoint | None:
    """The job's last complete checkpoint (after tidying an interrupted write), or None."""
    job_dir = Path(job_dir)
    for stale in job_dir.glob(f"{TMP_PREFIX}*"):
        shutil.rmtree(stale, ignore_errors=True)
    final, old = job_dir / NAME, job_dir / OLD
    if not final.exists() and old.exists():  # crashed between the two renames
        os.replace(old, final)
    elif old.exists():
        shutil.rmtree(old, ignore_errors=True)
    if not (final / "state.json").is_file():
        return None
    return Checkpoint(final, json.loads((final / "state.json").read_text(encoding="utf-8")))


def restore(ckpt: Checkpoint, *, model: Any, optimizer: Any, scheduler: Any) -> None:
    """Load weights, optimizer, scheduler and RNG states saved by `save` (RNG last)."""
    import torch
    from safetensors.torch import load_file

    weights = load_file(str(ckpt.path / "trainable.safetensors"))
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
    if missing:
        raise RuntimeError(f"checkpoint {ckpt.path} lacks trainable parameters {missing[:3]}: "
                           "it was written by a job with a different model or LoRA config")
    with torch.no_grad():
        for name, value in weights.items():
            params[name].copy_(value.to(params[name].device, params[name].dtype))
    opt = torch.load(ckpt.path / "optim.pt", weights_only=False)
    optimizer.load_state_dict(opt["optimizer"])
    scheduler.load_state_dict(opt["scheduler"])
    set_rng_state(torch.load(ckpt.path / "rng.pt", weights_only=False))


def publish_adapter(ckpt_path: Path, job_dir: Path) -> Path:
    """Copy the checkpoint's adapter to `job_dir/adapter` (temp copy + rename: old or new, never half)."""
    job_dir = Path(job_dir)
    tmp, dest, old = job_dir / ".adapter.tmp", job_dir / "adapter", job_dir / ".adapter.old"
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(ckpt_path / "adapter", tmp)
    _fsync_tree(tmp)
    return _swap_in(tmp, dest, old)
