"""Atomic checkpoints of a job: what resume needs to continue exactly where it stopped.

`<job>/checkpoint/` holds
  adapter/            the PEFT adapter (safetensors, PeftModel.from_pretrained-loadable);
                      under full fine-tuning the whole model (save_pretrained)
  trainable.safetensors  every trainable parameter by name (restored bitwise on resume)
  optim.pt            optimizer and lr-scheduler state
  rng.pt              python, numpy, torch (and CUDA) RNG states, as tensors and plain numbers
  state.json          iteration, ledger, evaluation results so far (the job's own dict)

Sweep folders may come from other people (docs/security.md), so nothing here is unpickled:
the .pt files are read with `torch.load(weights_only=True)` (tensors, numbers, strings, lists,
dicts only; a planted pickle is refused, never run), the rest is safetensors and JSON. A file
that cannot be read is named in a `CorruptCheckpoint` error with the folder to remove.

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


class CorruptCheckpoint(RuntimeError):
    """A checkpoint file cannot be read (damaged, foreign, or written by an older race)."""


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
    """Every RNG state as tensors, ints, floats and strings (loadable with weights_only=True)."""
    import random

    import numpy as np
    import torch

    version, words, gauss = random.getstate()  # (3, 625 ints, None | float)
    name, keys, pos, has_gauss, cached = np.random.get_state()  # ('MT19937', uint32[624], int, int, float)
    state = {"python": {"version": int(version), "state": torch.tensor(words, dtype=torch.int64), "gauss": gauss},
             "numpy": {"name": str(name), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict) -> None:
    import random

    import numpy as np
    import torch

    py, npy = state["python"], state["numpy"]
    random.setstate((py["version"], tuple(int(w) for w in py["state"].tolist()), py["gauss"]))
    np.random.set_state((npy["name"], npy["keys"].numpy().astype(np.uint32), npy["pos"], npy["has_gauss"],
                         npy["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _load_pt(path: Path) -> Any:
    """torch.load with weights_only=True: tensors and plain containers only, never code."""
    import torch

    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - unpickling, zip and IO errors all mean "cannot use it"
        raise CorruptCheckpoint(_corrupt_message(path, exc)) from None


def _corrupt_message(path: Path, exc: BaseException) -> str:
    folder = path.parent
    why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
    return (f"checkpoint file {path} cannot be loaded ({type(exc).__name__}: {why}). It is damaged, was "
            "written by another program or an older race, or holds objects other than tensors (refused: "
            f"checkpoints are never unpickled). Remove the folder {folder} to restart this job from "
            "iteration 0, then rerun.")


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
    path = final / "state.json"
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(state, dict) or not isinstance(state.get("iteration"), int) \
                or not isinstance(state.get("ledger"), dict):
            raise ValueError("expected an object with an integer iteration and a ledger")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CorruptCheckpoint(_corrupt_message(path, exc)) from None
    return Checkpoint(final, state)


def restore(ckpt: Checkpoint, *, model: Any, optimizer: Any, scheduler: Any) -> None:
    """Load weights, optimizer, scheduler and RNG states saved by `save` (RNG last)."""
    import torch
    from safetensors.torch import load_file

    try:
        weights = load_file(str(ckpt.path / "trainable.safetensors"))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise CorruptCheckpoint(_corrupt_message(ckpt.path / "trainable.safetensors", exc)) from None
    params = dict(model.named_parameters())
    missing = [n for n, p in params.items() if p.requires_grad and n not in weights]
    missing += [n for n in weights if n not in params]  # a name the model lacks: a foreign checkpoint
    if missing:
        raise CorruptCheckpoint(f"checkpoint {ckpt.path} does not match the model's trainable parameters (e.g. {missing[:3]}): it was "
                                "written by a job with a different model or LoRA config. Remove the folder "
                                f"{ckpt.path} to restart this job from iteration 0, then rerun.")
    opt = _load_pt(ckpt.path / "optim.pt")
    rng = _load_pt(ckpt.path / "rng.pt")
    try:
        optimizer.load_state_dict(opt["optimizer"])
        scheduler.load_state_dict(opt["scheduler"])
    except Exception as exc:  # noqa: BLE001 - a foreign or mismatched state
        raise CorruptCheckpoint(_corrupt_message(ckpt.path / "optim.pt", exc)) from None
    try:
        with torch.no_grad():
            for name, value in weights.items():
                params[name].copy_(value.to(params[name].device, params[name].dtype))
    except RuntimeError as exc:  # a shape that does not match
        raise CorruptCheckpoint(_corrupt_message(ckpt.path / "trainable.safetensors", exc)) from None
    try:
        set_rng_state(rng)
    except Exception as exc:  # noqa: BLE001 - missing keys, wrong types
        raise CorruptCheckpoint(_corrupt_message(ckpt.path / "rng.pt", exc)) from None


def publish_adapter(ckpt_path: Path, job_dir: Path) -> Path:
    """Copy the checkpoint's adapter to `job_dir/adapter` (temp copy + rename: old or new, never half)."""
    job_dir = Path(job_dir)
    tmp, dest, old = job_dir / ".adapter.tmp", job_dir / "adapter", job_dir / ".adapter.old"
    for p in (tmp, old):
        shutil.rmtree(p, ignore_errors=True)
    shutil.copytree(ckpt_path / "adapter", tmp)
    _fsync_tree(tmp)
    return _swap_in(tmp, dest, old)
