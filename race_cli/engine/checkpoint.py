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

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from race_cli.engine.hf import save_model
from race_cli.io import _fsync_dir, disk_errors, dumps, read_json

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
    """torch.save, separated so a test can make the disk 'full' half-way through a checkpoint. It writes
    through a Python file: given a path, torch reports a full disk as RuntimeError('unexpected pos ...'),
    through a file object as the OSError(ENOSPC) it is."""
    import torch

    with open(path, "wb") as f:
        torch.save(obj, f)


def _save_safetensors(tensors: dict, path: Path) -> None:
    """safetensors' save_file; its own error for a full disk ("os error 28") becomes the OSError it is,
    so the job's message says what to do (free space) instead of naming a library error."""
    from safetensors.torch import save_file

    with disk_errors(path):  # SafetensorError is not an OSError
        save_file(tensors, str(path))


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

    job_dir = Path(job_dir)
    tmp = job_dir / f"{TMP_PREFIX}{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    try:
        with disk_errors(tmp / "adapter"):  # peft / transformers write through safetensors: its error for a full disk
            save_model(model, str(tmp / "adapter"))
        trainable = {n: p.detach().cpu().contiguous().clone() for n, p in model.named_parameters() if p.requires_grad}
        _save_safetensors(trainable, tmp / "trainable.safetensors")
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
    if final.is_symlink() or (final.exists() and not final.is_dir()):
        raise CorruptCheckpoint(f"{final} is not a checkpoint folder (a {'symbolic link' if final.is_symlink() else 'file'} "
                                f"is in its place), so this job has no checkpoint to resume from. Remove {final} to "
                                "restart the job from iteration 0, then rerun.")
    if not final.exists():
        return None
    path = final / "state.json"
    if not path.exists() and not path.is_symlink():
        # checkpoints are renamed into place whole, so this folder was emptied or edited: starting again
        # would rewrite metrics.jsonl and throw away every iteration it records, so the choice is the user's
        raise CorruptCheckpoint(f"{final} holds no state.json, so it is not a complete checkpoint (race renames a "
                                "checkpoint into place whole, state.json included) and this job cannot resume from "
                                "it. Nothing was changed. Remove the folder "
                                f"{final} to restart this job from iteration 0 (its metrics.jsonl is then rewritten), "
                                "then rerun.")
    try:
        state = read_json(path, limit=MAX_STATE_BYTES)
        if not isinstance(state, dict) or not isinstance(state.get("ledger"), dict):
            raise ValueError("expected an object with an integer iteration and a ledger")
        it = state.get("iteration")
        if isinstance(it, bool) or not isinstance(it, int):
            raise ValueError(f"iteration {str(it)[:40]} is not an integer")
        if it < 0:
            raise ValueError(f"iteration {it} is negative")
    except (OSError, ValueError) as exc:
        raise CorruptCheckpoint(_corrupt_message(path, exc)) from None
    return Checkpoint(final, state)


MAX_STATE_BYTES = 64 * 2**20  # state.json holds the ledger and per-item evaluation results


def _numbers(obj: Any, where: str):
    """Every number in a JSON tree with its dotted path (bools excluded)."""
    stack = [(obj, where)]
    while stack:
        node, at = stack.pop()
        if isinstance(node, dict):
            stack.extend((v, f"{at}.{k}") for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((v, f"{at}[{i}]") for i, v in enumerate(node))
        elif isinstance(node, (int, float)) and not isinstance(node, bool):
            yield at, node


def check_resume(ckpt: Checkpoint, metrics: list[dict], *, budget: float, max_iterations: int,
                 prompts_per_iter: int, group_size: int, least_cost_per_prompt: Callable[[float], float]) -> Any:
    """The checkpoint's iteration and ledger, checked against metrics.jsonl and the budget before
    anything is restored or cut; returns its Ledger, or raises CorruptCheckpoint naming what is wrong.

    - iteration: 1 <= it <= budget.max_iterations, and metrics.jsonl has its line (the job writes
      the line before the checkpoint), so cutting the file back to it never loses a line it covers;
    - ledger: every number finite and >= 0; its iterations equal the checkpoint's; its prompts
      between one and B per iteration; its spend within the budget and equal to the `flops/total`
      (and per-phase `flops/...`) of that metrics line;
    - and at least half of what its own token counts cost with 1-token completions
      (`least_cost_per_prompt(mean prompt tokens)` per prompt): a ledger claiming less than its
      work would let the job spend the budget again.
    """
    import math

    from race_cli.cost.budget import PHASES, Ledger

    path = ckpt.path / "state.json"
    it = int(ckpt.state["iteration"])

    def bad(why: str) -> CorruptCheckpoint:
        return CorruptCheckpoint(f"checkpoint {path} is not one this job wrote: {why}. Nothing was changed "
                                 f"(metrics.jsonl is kept as it is). Remove the folder {ckpt.path} to restart this "
                                 "job from iteration 0, then rerun.")

    if it > max_iterations:
        raise bad(f"iteration {it} is past budget.max_iterations = {max_iterations}")
    lines = [r for r in metrics if isinstance(r, dict) and r.get("iteration") == it]
    if not lines:
        last = max((r.get("iteration") for r in metrics if isinstance(r, dict)
                    and isinstance(r.get("iteration"), int)), default=None)
        raise bad(f"iteration {it} has no line in metrics.jsonl (its last iteration is {last})")
    raw = ckpt.state["ledger"]
    for at, v in _numbers(raw, "ledger"):
        if not math.isfinite(v) or v < 0:
            raise bad(f"{at} = {str(v)[:40]} is not a finite number >= 0")
    try:
        ledger = Ledger.from_json(raw)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise bad(f"its ledger is incomplete ({type(exc).__name__}: {str(exc)[:80]})") from None
    spent = ledger.spent()
    if ledger.iterations != it:
        raise bad(f"its ledger counts {ledger.iterations} iterations, not {it}")
    if not it <= ledger.prompts <= it * prompts_per_iter:
        raise bad(f"its ledger counts {ledger.prompts} prompts for {it} iterations of at most {prompts_per_iter}")
    if spent > budget * (1 + 1e-9):
        raise bad(f"its ledger has spent {spent:.6g} FLOPs, more than budget.flops = {budget:.6g}")
    line = lines[-1]
    recorded = {"total": spent} | {p: ledger.flops[p].model for p in PHASES}
    for key, value in recorded.items():
        logged = line.get(f"flops/{key}")
        if not isinstance(logged, (int, float)) or isinstance(logged, bool) \
                or not math.isclose(float(logged), value, rel_tol=1e-9, abs_tol=1e-6):
            raise bad(f"its ledger's {key} FLOPs ({value:.6g}) differ from flops/{key} = {str(logged)[:40]} on "
                      f"metrics.jsonl's line for iteration {it}")
    rows = ledger.prompts * group_size
    mean_prompt = ledger.tokens.get("prompt", 0) / rows
    if ledger.tokens.get("completion", 0) < rows:
        raise bad(f"its ledger counts {ledger.tokens.get('completion', 0)} completion tokens for {rows} completions")
    least = 0.5 * ledger.prompts * least_cost_per_prompt(mean_prompt)
    if spent < least:
        raise bad(f"its ledger has spent {spent:.6g} FLOPs, less than {ledger.prompts} prompts of "
                  f"{mean_prompt:.1f} tokens can cost ({least:.6g})")
    return ledger


def restore(ckpt: Checkpoint, *, model: Any, optimizer: Any, scheduler: Any) -> None:
    """Load weights, optimizer, scheduler and RNG states saved by `save` (RNG last)."""
    import torch
    from safetensors.torch import load_file

    try:
        weights = load_file(str(ckpt.path / "trainable.safetensors"))
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise CorruptCheckpoint(_corrupt_message(ckpt.path / "trainable.safetensors", exc)) from None
    params = dict(model.named_parameters())
    for name, value in weights.items():  # shapes and values before anything is copied (copy_ would broadcast)
        if name in params and tuple(value.shape) != tuple(params[name].shape):
            raise CorruptCheckpoint(f"checkpoint file {ckpt.path / 'trainable.safetensors'} holds {name} of shape "
                                    f"{list(value.shape)}, but the model's is {list(params[name].shape)}: it was written "
                                    "by a job with another model or LoRA config, or edited. Remove the folder "
                                    f"{ckpt.path} to restart this job from iteration 0, then rerun.")
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CorruptCheckpoint(f"checkpoint file {ckpt.path / 'trainable.safetensors'} holds non-finite values "
                                    f"(NaN or inf) in {name}: resuming would train from broken weights. Remove the "
                                    f"folder {ckpt.path} to restart this job from iteration 0, then rerun.")
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
    try:
        with disk_errors(tmp):  # copytree gathers its errors in shutil.Error (no errno): the full disk is named
            shutil.copytree(ckpt_path / "adapter", tmp)
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _swap_in(tmp, dest, old)
