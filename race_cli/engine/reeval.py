"""Evaluate a finished job's kept final policy on more items, common random numbers kept (issue 52).

    python -m race_cli.engine.reeval --job-dir runs/<sweep>/jobs/<job_id> --items 1200
    race evaluate runs/<sweep> --items 1200      # every finished job, through the pool (pool/reeval.py)

Evaluation is cheap next to training (a tiny job spends ~1 s of ~120 s per 400-item evaluation), and part of
every interval is the item noise of the final evaluation: a finished checkpoint scored on more items shrinks
it without a new seed. This module scores the job's final policy (jobs/<id>/adapter/: the LoRA adapter, or
the whole model under full fine-tuning) and its starting policy on the items its targets add beyond the ones
summary.json holds, and writes jobs/<id>/eval-more.json atomically (temp file + rename); summary.json is never
rewritten, so what each look of a race saw stays as it was.

Common random numbers, as in the training job's own evaluation (engine/job.Job.evaluate): the items are the
target's first `--items` (the first ones are exactly summary.json's, checked: a target whose extended list does
not begin with them is refused), and sample s of item i draws from the stream keyed by (eval.sample_seed,
target, item id, s), so every job of a sweep and its start are scored on the same items with the same draws.
Added items whose question is one of the job's training questions are left out (named in `excluded`); the
report pairs jobs on the items they have in common.

The start's added items are scored once per (starting weights, extended evaluation) in a sweep, under the
lock of start-evals/<key>.json, as the training jobs share their start evaluation. A killed re-evaluation
leaves no eval-more.json (or the previous one): rerunning it starts again. It holds the job's lock, so it
never runs beside the job's own training.

eval-more.json: {"items": N asked, "samples": k, "start_samples": k0, "base_items": {target: n summary
held}, "eval": {"accuracy", "items": {target: {"ids", "scores"}}}, "eval_initial": the same for the start,
"excluded": {target: [ids]}, "start_key", "seconds": {"setup", "start", "final", "final_per_item"}}. Each
target's ids are summary.json's followed by the kept added ones; the scores of the first are summary.json's.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable

from race_cli import folder
from race_cli.errors import RaceError

MAX_ITEMS = 100_000  # a sanity bound on --items: far beyond any shipped target


def extended_config(cfg: Any, items: int) -> Any:
    """The job's config with every target's item count raised to `items`: the training task's own held-out set
    (task.num_eval, which the arithmetic targets also read) and the caps eval.max_items / max_items_by_target."""
    from omegaconf import OmegaConf

    out = OmegaConf.create(OmegaConf.to_container(cfg, resolve=True))
    if out.task.get("num_eval") is not None and int(out.task.num_eval) < items:
        out.task.num_eval = int(items)
    if out.eval.get("max_items") is not None:
        out.eval.max_items = max(int(out.eval.max_items), int(items))
    caps = dict(out.eval.get("max_items_by_target") or {})
    out.eval.max_items_by_target = {t: max(int(n), int(items)) for t, n in caps.items()}
    return out


def added_items(target: Any, base_ids: list[str], items: int, train_questions: set[str]) -> tuple[list[int], list[str]]:
    """(indices of the target's items to add, ids left out as training questions): those past the base, up to
    `items`. Refused when the extended list does not begin with the base ids (the pairing would break)."""
    ids = [it.id for it in target.items]
    if ids[:len(base_ids)] != list(base_ids):
        raise RaceError(f"target {target.name}: its first {len(base_ids)} items with more items asked for are not "
                        "the ones summary.json holds, so scores on more items would not pair with the race's. "
                        "Extend only targets whose item list grows by adding items at its end.")
    added, excluded = [], []
    for i in range(len(base_ids), min(items, len(ids))):
        (excluded if target.items[i].question in train_questions else added).append(i)
    return added, [ids[i] for i in excluded]


def _read_summary(job_dir: Path) -> dict:
    from race_cli.io import read_json

    path = folder.summary_file(job_dir)
    try:
        s = read_json(path)
    except FileNotFoundError:
        raise RaceError(f"{path} is missing: only a finished job's kept policy can be evaluated again. "
                        "Run the job first (race run).") from None
    except (OSError, ValueError) as exc:
        raise RaceError(f"{path} cannot be read ({type(exc).__name__}); rerun the job into a fresh folder.") from None
    if not isinstance(s, dict) or not isinstance(s.get("eval_items"), dict) or \
            not isinstance(s.get("eval_items_initial"), dict):
        raise RaceError(f"{path} holds no per-item scores (eval_items, eval_items_initial): nothing to extend.")
    return s


def load_final_policy(model: Any, job_dir: Path, lora: bool) -> None:
    """Load jobs/<id>/adapter/ into `model` in place: the PEFT adapter's weights, or the whole model."""
    import torch
    from safetensors.torch import load_file

    adapter = Path(job_dir) / "adapter"
    name = "adapter_model.safetensors" if lora else "model.safetensors"
    path = adapter / name
    if not path.is_file():
        raise RaceError(f"{path} is missing: the job kept no final policy to evaluate. Rerun the job.")
    weights = load_file(str(path))
    if lora:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(model, weights)
        unexpected = list(getattr(result, "unexpected_keys", []) or [])
        if unexpected:
            raise RaceError(f"{path} holds weights the job's model has no place for ({unexpected[0]}, ...).")
        return
    own = model.state_dict()
    missing = [k for k in own if k not in weights]
    extra = [k for k in weights if k not in own]
    tied = {k for k in missing if "lm_head" in k and getattr(model.config, "tie_word_embeddings", False)}
    if extra or set(missing) - tied:
        raise RaceError(f"{path} does not match the job's model (missing {sorted(set(missing) - tied)[:2]}, "
                        f"unexpected {extra[:2]}).")
    with torch.no_grad():
        model.load_state_dict(weights, strict=False)
        if tied:
            model.tie_weights()


def _only(job: Any, plan: dict[str, list[int]]) -> None:
    """Point the job's targets at the items to add (their own prompt caches): Job.evaluate scores only them."""
    from dataclasses import replace

    from race_cli.engine.setup import PromptCache

    job.targets = [replace(t, items=[t.items[i] for i in plan[t.name]]) for t in job.all_targets]
    job.target_prompts = {t.name: PromptCache(t.items, job.policy.tokenizer, t.convention) for t in job.targets}


def _start_added(job: Any, plan: dict[str, list[int]], log: Callable[[str], None]) -> tuple[dict, str | None]:
    """The starting policy's scores on the added items, shared by the sweep's jobs of the same start
    (start-evals/<key>.json, written under its lock as engine/job.Job.start_evaluation does)."""
    from race_cli.engine.job import shared_evaluation

    sweep = folder.sweep_of(job.job_dir)
    key = job.start_key()  # the extended targets' items are part of it

    def evaluate() -> dict:
        _only(job, plan)
        return job._evaluate_start()

    if sweep is None:
        return evaluate(), None
    want = {t: [job.all_targets_by_name[t].items[i].id for i in idx] for t, idx in plan.items()}

    def ok(ev: dict) -> bool:
        return isinstance(ev.get("items"), dict) and all(
            isinstance(ev["items"].get(t), dict) and ev["items"][t].get("ids") == ids for t, ids in want.items())

    ev = shared_evaluation(folder.start_eval_file(sweep, key), sweep, key, ok, evaluate,
                           {"evaluated_by": job.job_id, "added_items": True}, log)
    return ev, key


def _joined(base: dict, added: dict, name: str) -> dict:
    """summary.json's block of one target followed by the added items' ids and scores."""
    return {"ids": list(base[name]["ids"]) + list(added[name]["ids"]),
            "scores": [float(x) for x in base[name]["scores"]] + [float(x) for x in added[name]["scores"]]}


def reevaluate(job_dir: str | Path, items: int, log: Callable[[str], None] = print) -> dict:
    """Score the job's start and final policy on its targets' first `items` items; write eval-more.json.
    Returns what it wrote."""
    from race_cli.config.compose import load_job_config
    from race_cli.io import atomic_write_json
    from race_cli.lock import JobLock

    job_dir = Path(job_dir)
    if not 1 <= int(items) <= MAX_ITEMS:
        raise RaceError(f"--items {items}: expected a number of items per target from 1 to {MAX_ITEMS}.")
    summary = _read_summary(job_dir)
    cfg0 = load_job_config(folder.job_config(job_dir))
    cfg = extended_config(cfg0, int(items))
    from race_cli.cost.budget import Ledger
    from race_cli.engine.job import Job
    from race_cli.tasks.targets import build_task

    t0 = time.perf_counter()
    with JobLock(job_dir, say=log):
        job = Job(cfg, job_dir, list(summary.get("overrides") or []), log=log)
        job.setup()
        job.ledger = Ledger()
        job.all_targets = list(job.targets)
        job.all_targets_by_name = {t.name: t for t in job.targets}
        final_base, start_base = summary["eval_items"], summary["eval_items_initial"]
        missing = [t.name for t in job.targets if t.name not in final_base or t.name not in start_base]
        if missing:
            raise RaceError(f"summary.json of {job_dir.name} holds no per-item scores for {', '.join(missing)}.")
        train_questions = {it.question for it in build_task(cfg0).train_items()}  # the job's own training set
        plan, excluded = {}, {}
        for t in job.targets:
            plan[t.name], excluded[t.name] = added_items(t, final_base[t.name]["ids"], int(items), train_questions)
            if start_base[t.name]["ids"] != final_base[t.name]["ids"]:
                raise RaceError(f"summary.json of {job_dir.name}: the start and final evaluations of {t.name} "
                                "were scored on different items, so neither can be extended in pairs.")
        t_setup = time.perf_counter()
        start, key = _start_added(job, plan, log)
        t_start = time.perf_counter()
        load_final_policy(job.policy.model, job_dir, bool(cfg.lora.enabled))
        job.rollout.sync(job.policy.model)
        _only(job, plan)
        final = job.evaluate()
        t_final = time.perf_counter()
        names = [t.name for t in job.all_targets]
        ev = {t: _joined(final_base, final["items"], t) for t in names}
        ev0 = {t: _joined(start_base, start["items"], t) for t in names}
        added = sum(len(plan[t]) for t in names)
        out = {"items": int(items), "samples": int(cfg.eval.samples),
               "start_samples": int(job.start_samples() or cfg.eval.samples),
               "base_items": {t: len(final_base[t]["ids"]) for t in names},
               "eval": {"accuracy": {t: sum(v["scores"]) / len(v["scores"]) for t, v in ev.items()}, "items": ev},
               "eval_initial": {"accuracy": {t: sum(v["scores"]) / len(v["scores"]) for t, v in ev0.items()},
                                "items": ev0},
               "excluded": excluded, "start_key": key,
               "seconds": {"setup": t_setup - t0, "start": t_start - t_setup, "final": t_final - t_start,
                           "final_per_item": (t_final - t_start) / added if added else None}}
        atomic_write_json(folder.more_eval_file(job_dir), out)
    counts = ", ".join(f"{t} {len(ev[t]['ids'])}" for t in names)
    scores = ", ".join(f"{t} {out['eval']['accuracy'][t]:.3f}" for t in names)
    log(f"{job_dir.name}: {added} items added ({counts} in all); final {scores}; {t_final - t0:.1f} s")
    return out


def main(argv: list[str] | None = None) -> int:
    """`python -m race_cli.engine.reeval --job-dir DIR --items N`: exit 0 done, 2 bad input, 1 a crash."""
    parser = argparse.ArgumentParser(prog="python -m race_cli.engine.reeval", description=__doc__.splitlines()[0])
    parser.add_argument("--job-dir", required=True, type=Path, help="a finished job folder (jobs/<job_id>)")
    parser.add_argument("--items", required=True, type=int, help="items per target to score in all (e.g. 1200)")
    args = parser.parse_args(argv)
    try:
        reevaluate(args.job_dir, args.items)
    except RaceError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
