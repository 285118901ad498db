"""Read finished (and unfinished) sweeps into one pandas table of jobs, never from logs.

`read_sweeps([runs/a, runs/b])` walks `jobs/<job_id>/` of each sweep and reads
status.json, summary.json, ledger.json, metrics.jsonl (and .hydra/overrides.yaml when
there is no summary), exactly as docs/files.md defines them. It returns a `SweepData`:

- `jobs`   one row per job: sweep, job_id, state, readable, problem, condition columns
           (model, budget_flops, reward, task), knobs, seed, eval/<target> values, actual and
           planned shares, FLOPs per phase and the fraction of the budget spent;
- `items`  per (sweep, job_id, target): the per-item ids and scores of the final evaluation;
- `items_initial` the same for the iteration-0 evaluation (the starting policy, same ids);
- `curves` long table of (job_id, iteration, flops_total, target, value) from metrics.jsonl.

Evaluation targets follow the results contract: summary.json names them in `targets` and
gives `eval`, `eval_initial`, `eval_items` and `eval_items_initial` keyed by target;
metrics.jsonl writes `eval/<target>/accuracy`. Older files keyed a single target by its
metric (`eval/accuracy`); those read as a target named `accuracy`. Per-item scores are
floats in [0, 1] (the fraction of k sampled completions that were correct).

A job whose files are missing or corrupt gets `readable=False` and a one-line `problem`;
the reading goes on. Only a folder that is not a sweep, or a sweep with no jobs at all, is
an error (RaceError), because then there is nothing to report.
"""

from __future__ import annotations

import errno
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from race_cli import folder
from race_cli.cost import budget
from race_cli.errors import RaceError
from race_cli.io import inside, jsonl_rows, load_yaml, read_bounded, read_json
from race_cli.status import status_path

CONDITION_COLS = ["model", "budget_flops", "reward", "task"]  # what a condition is (docs/design.md)
PHASES = list(budget.PHASES)  # rollout, update, reward
SHARE_NAMES = [budget.SHARE_NAMES[p] for p in PHASES]  # search, learning, feedback
# Summary knobs that are outcomes of the budget solver, not allocation choices.
DERIVED_KNOBS = {"iterations"}


@dataclass
class SweepData:
    """Everything the report computes from: a job table plus per-item scores and curves."""

    jobs: pd.DataFrame
    items: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = field(default_factory=dict)
    items_initial: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = field(default_factory=dict)
    curves: pd.DataFrame = field(default_factory=pd.DataFrame)
    knob_cols: list[str] = field(default_factory=list)  # allocation knobs seen in summaries
    targets: list[str] = field(default_factory=list)  # eval targets any job recorded
    # (sweep, job_id) -> summary.json's eval_points as read (None: none); report/frontier.py parses them
    eval_points: dict[tuple[str, str], Any] = field(default_factory=dict)
    # the same keys as items / items_initial: eval-more.json's scores on more items (engine/reeval.py), where a
    # job has one; report/more_items.py swaps them in where every compared job has them
    items_more: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = field(default_factory=dict)
    items_initial_more: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = field(default_factory=dict)


LOWER_IS_BETTER = ("loss", "error", "perplexity", "ppl", "regret")  # name fragments


def maximize_target(target: str) -> bool:
    """Higher is better unless the target's name says it is a loss or an error rate."""
    return not any(w in target.lower() for w in LOWER_IS_BETTER)


# --- small parsers ---------------------------------------------------------------------


def parse_overrides(text: str) -> list[str]:
    """The override strings of a Hydra `.hydra/overrides.yaml` (a YAML list of strings).

    Hydra writes one `- key=value` per line; quoted values are unquoted. Anything else falls
    back to a real YAML parser (imported only then).
    """
    out: list[str] = []
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        if not s.startswith("- "):
            import yaml  # rare: flow-style list or other YAML

            try:
                data = yaml.safe_load(text)
            except yaml.YAMLError as e:
                raise ValueError(f"overrides.yaml is not YAML ({str(e).splitlines()[0][:80]})") from None
            if not isinstance(data, list):
                raise ValueError("overrides.yaml is not a list of strings")
            return [str(x) for x in data]
        s = s[2:].strip()
        if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"":
            s = s[1:-1]
        out.append(s)
    return out


def _coerce(value: str) -> Any:
    """'4' -> 4, '1e12' -> 1e12, 'rule' -> 'rule' (override values are typed loosely)."""
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value


def fields_from_overrides(overrides: list[str]) -> dict[str, Any]:
    """Condition, knob and seed fields from overrides, for jobs that never wrote a summary.

    `model=tiny-s` -> model, `budget.flops=1e12` -> budget_flops, `grpo.group_size=4` ->
    group_size (the last dotted component), `seed=0` -> seed.
    """
    out: dict[str, Any] = {}
    for ov in overrides:
        if "=" not in ov:
            continue
        key, value = ov.split("=", 1)
        key = key.lstrip("+~")
        if key == "budget.flops":
            out["budget_flops"] = _coerce(value)
        else:
            out[key.split(".")[-1]] = _coerce(value)
    return out


def _shares(flops: dict[str, float]) -> dict[str, float]:
    """share_search, share_learning, share_feedback and p (= learning share), as race_cli.cost.budget.shares
    computes them for summary.json and plan.json (NaN when nothing was spent)."""
    s = budget.shares(flops)
    return {f"share_{n}": s[n] for n in SHARE_NAMES} | {"p": s["p"]}


# --- one job ---------------------------------------------------------------------------


class MetricsOutOfOrder(ValueError):
    """metrics.jsonl iterations do not rise one line at a time: two processes wrote the job."""


def _read_metrics(path: str | os.PathLike) -> tuple[list[dict], int | None]:
    """Rows of metrics.jsonl that carry an eval/<target> value, and the last iteration.

    Every line is parsed (a corrupt line in the middle raises, marking the job unreadable);
    a torn last line is ignored, as race_cli.io.read_jsonl does. Iterations must rise strictly
    (0, 1, 2, ...; a resume cuts the file back first): anything else means two processes wrote
    the job at once, and MetricsOutOfOrder marks it unreadable rather than ranking a mixture.
    """
    evals, last = [], None
    for i, line, row in jsonl_rows(read_bounded(path).decode("utf-8")):
        it = row.get("iteration") if isinstance(row, dict) else None
        if it is not None:
            if not isinstance(it, int) or isinstance(it, bool) or (last is not None and it <= last):
                raise MetricsOutOfOrder(f"iteration {it!r} follows iteration {last} on line {i + 1}")
            last = it
        if '"eval/' in line:
            evals.append(row)
    return evals, (int(last) if last is not None else None)


# A job's files, named by status.py and folder.py; read_job joins them to the job's path as text (pathlib
# objects for a dozen files per job are a visible share of a large report).
STATUS, SUMMARY, LEDGER, METRICS = (f(".").name for f in (status_path, folder.summary_file, folder.ledger_file,
                                                           folder.metrics_file))
_ABSENT = (errno.ENOENT, errno.ENOTDIR, errno.EBADF, errno.ELOOP)  # what pathlib's exists() reads as "not there"


def _exists(path: str) -> bool:
    """Path(path).exists() without building a Path: a link counts by its target; a missing file (or
    link target) is False; any other error (a folder one may not search) raises, as pathlib does."""
    try:
        os.stat(path)
    except OSError as e:
        if e.errno in _ABSENT:
            return False
        raise
    except ValueError:  # a NUL in the name
        return False
    return True


def read_job(job_dir: str | os.PathLike, sweep: str) -> tuple[dict, dict, list[dict]]:
    """One job folder -> (table row, {(stage, target): (ids, scores)}, eval curve rows).

    stage is "final" (eval_items), "initial" (eval_items_initial, the iteration-0 policy), or "more_final" /
    "more_initial" (the same from eval-more.json, scored on more items: engine/reeval.py).

    Never raises for a bad job: a missing or corrupt file sets readable=False and `problem`.
    """
    job_dir = job_dir if isinstance(job_dir, Path) else Path(job_dir)
    where = str(job_dir) + os.sep  # + a file name: str(job_dir / name), for the messages that name it
    row: dict[str, Any] = {"sweep": sweep, "job_id": job_dir.name, "state": "unknown",
                           "readable": True, "problem": ""}
    items: dict[tuple[str, str], tuple[list[str], np.ndarray]] = {}
    curve: list[dict] = []
    problems: list[str] = []

    def load(name: str) -> Any:
        try:
            return read_json(where + name)
        except FileNotFoundError:
            problems.append(f"{name} missing")
        except (ValueError, OSError, RecursionError) as e:
            problems.append(f"{name} corrupt ({type(e).__name__}: {_short(e)})")
        return None

    status = load(STATUS) if _exists(where + STATUS) else None
    if isinstance(status, dict):
        row["state"] = str(status.get("state", "unknown"))
        row["attempts"] = status.get("attempts")
        row["stop_reason"] = status.get("stop_reason")
        row["error"] = status.get("error") or ""
    elif status is not None:
        problems.append("status.json is not an object")

    if row["state"] == "done" or _exists(where + SUMMARY):
        summary, ledger = load(SUMMARY), load(LEDGER)
        try:
            evals, last_it = _read_metrics(where + METRICS)
            row["last_iteration"] = last_it
            if last_it is None and row["state"] == "done":
                problems.append("metrics.jsonl holds no iteration (a finished job writes one line per iteration)")
        except FileNotFoundError:
            problems.append("metrics.jsonl missing")
            evals = []
        except MetricsOutOfOrder as e:
            problems.append(f"metrics.jsonl out of order ({e}): two processes wrote this job at once; "
                            "rerun it into a fresh folder")
            evals = []
        except (ValueError, OSError, RecursionError) as e:
            problems.append(f"metrics.jsonl corrupt ({type(e).__name__}: {_short(e)})")
            evals = []
        if summary is not None:
            try:
                items = _fill_from_summary(row, summary)
            except (TypeError, ValueError, AttributeError, KeyError) as e:
                problems.append(f"summary.json malformed ({e})")
        if _exists(str(folder.more_eval_file(job_dir))):  # a re-evaluation on more items (engine/reeval.py)
            more = load(folder.more_eval_file(job_dir).name)
            try:
                items |= _more_items(more)
                row["eval_more_items"] = int(more["items"])  # the items per target it was asked for
            except (TypeError, ValueError, AttributeError, KeyError) as e:
                problems.append(f"eval-more.json malformed ({e})")
        if ledger is not None:
            try:
                _fill_from_ledger(row, ledger)
            except (TypeError, ValueError, AttributeError, KeyError) as e:
                problems.append(f"ledger.json malformed ({e})")
        for r in evals:
            for k, v in r.items():
                t = metric_target(k) if k.startswith("eval/") else None  # most keys are train/, flops/, ...
                if t is not None and isinstance(v, (int, float)):
                    curve.append({"job_id": row["job_id"], "sweep": sweep,
                                  "iteration": r.get("iteration"),
                                  "flops_total": float(r.get("flops/total", np.nan)),
                                  "target": t, "value": float(v)})
    for c in curve:  # no eval_initial in the summary: the iteration-0 line of metrics.jsonl is the start
        if c["iteration"] == 0 and f"eval_initial/{c['target']}" not in row:
            row[f"eval_initial/{c['target']}"] = c["value"]
    if "model" not in row:  # no summary: take what the overrides say
        try:
            text = read_bounded(inside(folder.job_overrides(job_dir), job_dir), 4 * 2**20).decode("utf-8")
            for k, v in fields_from_overrides(parse_overrides(text)).items():
                row.setdefault(k, v)
        except FileNotFoundError:
            pass
        except (ValueError, UnicodeDecodeError, OSError) as e:
            problems.append(f"overrides.yaml unreadable ({e})")
        for k, v in _condition_from_config(job_dir).items():  # what the overrides leave to the defaults (task)
            row.setdefault(k, v)
    if problems:
        row["readable"] = False
        row["problem"] = "; ".join(problems)
    return row, items, curve


def _condition_from_config(job_dir) -> dict[str, Any]:
    """An unfinished job's condition columns as summary.json will write them, from its composed config
    (.hydra/config.yaml, read bounded, never through a link): so that a running job sits in the same
    condition as its finished siblings (a raced sweep's state is read mid-look). {} when unreadable."""
    import yaml

    from race_cli.cost.budget import reward_label, reward_name

    try:
        text = read_bounded(inside(folder.job_config(job_dir), job_dir), 4 * 2**20).decode("utf-8")
        cfg = load_yaml(text)
        return {"model": str(cfg["model"]["name"]), "budget_flops": float(cfg["budget"]["flops"]),
                "reward": reward_label(reward_name(cfg)), "task": str(cfg["task"]["name"])}
    except (OSError, ValueError, UnicodeDecodeError, RecursionError, yaml.YAMLError, TypeError, KeyError):
        return {}


def job_identity(job_dir: Path) -> str | None:
    """A digest of the job's composed config (.hydra/config.yaml, seed included), parsed and written
    canonically: two folders with one identity hold the same run, whatever they are called.
    None when the config is missing or unreadable (the job is then listed by its other files)."""
    import hashlib

    import yaml

    try:
        text = read_bounded(inside(folder.job_config(job_dir), job_dir), 4 * 2**20).decode("utf-8")  # no linked .hydra/
        cfg = load_yaml(text)
        text = json.dumps(cfg, sort_keys=True, default=str)
    except (OSError, ValueError, RecursionError, yaml.YAMLError, TypeError):
        return None
    return hashlib.sha1(text.encode()).hexdigest()


# Row fields every job's config decides (summary.json writes them from it; an unfinished job's
# overrides give them): two folders holding one config agree on all of them.
ALIKE_FIELDS = CONDITION_COLS + ["seed", "group_size", "updates_per_batch"]


def _alike_key(row: dict) -> tuple:
    """The ALIKE_FIELDS of a row, numbers as floats (1e12 and 1000000000000 are one budget)."""
    key = []
    for f in ALIKE_FIELDS:
        v = row.get(f)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            v = None if v != v else float(v)
        key.append(None if v is None else v if isinstance(v, float) else str(v))
    return tuple(key)


def _refuse_same_jobs(rows: list[dict]) -> None:
    """Two job folders holding one job (same config and seed: a copied or renamed sweep, a copied
    job folder) would be counted as two seeds, a fabricated interval: refused, naming both.

    Only jobs that agree on every ALIKE_FIELD can hold one config, so only their configs are
    parsed (`job_identity`); a sweep whose jobs differ in condition, G, μ or seed parses none
    (YAML-loading thousands of configs would dominate a report). Rows without a folder (planned, missing)
    have no config to compare."""
    alike: dict[tuple, list[dict]] = {}
    for r in rows:
        if "_where" in r:
            alike.setdefault(_alike_key(r), []).append(r)
    clashes = []
    for group in alike.values():
        if len(group) < 2:
            continue
        first: dict[str, dict] = {}
        for r in group:
            ident = job_identity(Path(r["_where"]))
            if ident is None:
                continue
            if ident in first:
                clashes.append(f"{first[ident]['_where']} and {r['_where']} hold the same job (the same config and seed)")
            else:
                first[ident] = r
    if clashes:
        more = f" (and {len(clashes) - 1} more pairs)" if len(clashes) > 1 else ""
        raise RaceError(f"{clashes[0]}{more}. Counted twice, one run would look like two seeds. Give each run once: "
                        "leave out the copy (a renamed or copied sweep, or a copied job folder).")


def _short(exc: BaseException) -> str:
    """The first line of an exception's text, at most 120 characters (it lands in a table cell)."""
    text = str(exc).strip().splitlines()
    return (text[0][:120] if text else "") or type(exc).__name__


def metric_target(key: str) -> str | None:
    """The evaluation target a metrics.jsonl key scores: `eval/gsm8k/accuracy` -> gsm8k.

    The older single-target form `eval/accuracy` names the target `accuracy`; any other
    `eval/...` key (a second metric of a target) is not a ranked value -> None.
    """
    if not key.startswith("eval/"):
        return None
    parts = key.split("/")
    if len(parts) == 2:
        return parts[1]
    if len(parts) == 3 and parts[2] == "accuracy":
        return parts[1]
    return None


def _item_block(block: Any, name: str) -> dict[str, tuple[list[str], np.ndarray]]:
    """{target: {"ids": [...], "scores": [...]}} -> {target: (ids, scores in [0, 1])}."""
    out = {}
    for target, d in (block or {}).items():
        ids, scores = list(d["ids"]), np.asarray(d["scores"], dtype=float)
        if len(ids) != len(scores):
            raise ValueError(f"{name}.{target}: {len(ids)} ids but {len(scores)} scores")
        # min/max settle it: a NaN makes either comparison false, and is named as what it is
        if len(scores) and not (scores.min() >= 0 and scores.max() <= 1):
            nan = np.flatnonzero(np.isnan(scores))
            if len(nan):
                raise ValueError(f"{name}.{target}: per-item score {nan[0]} (of {len(scores)}) is NaN; "
                                 "expected numbers in [0, 1]")
            raise ValueError(f"{name}.{target}: per-item scores must lie in [0, 1]")
        out[target] = (ids, scores)
    return out


def _score(v: Any, name: str) -> float:
    """A target's score from summary.json: a finite number, or null (not recorded: NaN in the table). A NaN,
    an infinity or a string is a malformed summary (named by its field), never a score that ranks as missing."""
    if v is None:
        return np.nan
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"{name} = {str(v)[:40]} is not a finite number")
    return float(v)


def _fill_from_summary(row: dict, s: dict) -> dict[tuple[str, str], tuple[list[str], np.ndarray]]:
    row["state"] = row["state"] if row["state"] != "unknown" else str(s.get("state", "unknown"))
    row.setdefault("stop_reason", s.get("stop_reason"))
    for k, v in (s.get("condition") or {}).items():
        row[k] = budget.reward_label(v) if k == "reward" else v  # old sweeps' prm:<name> read as today's name
    for k, v in (s.get("knobs") or {}).items():
        row[k] = v
    row["seed"] = s.get("seed")
    bad: list[str] = []  # malformed scores: the column is still made (NaN), so the target stays named
    for block in ("eval", "eval_initial"):
        for k, v in (s.get(block) or {}).items():
            try:
                row[f"{block}/{k}"] = _score(v, f"{block}.{k}")
            except ValueError as e:
                row[f"{block}/{k}"] = np.nan
                bad.append(str(e))
    for k, v in (s.get("seconds") or {}).items():
        row[f"seconds_{k}"] = v
    share = s.get("informative_share")  # rows the update ran on / rows sampled (absent before the skip)
    row["informative_share"] = float(share) if isinstance(share, (int, float)) and not isinstance(share, bool) else np.nan
    row["_knobs"] = list((s.get("knobs") or {}).keys())
    row["_targets"] = [str(t) for t in (s.get("targets") or [])]
    row["_eval_points"] = s.get("eval_points")
    items = {("final", t): v for t, v in _item_block(s.get("eval_items"), "eval_items").items()}
    items |= {("initial", t): v for t, v in
              _item_block(s.get("eval_items_initial"), "eval_items_initial").items()}
    if bad:
        raise ValueError("; ".join(bad))
    return items


def _more_items(more: Any) -> dict[tuple[str, str], tuple[list[str], np.ndarray]]:
    """eval-more.json's per-item blocks as stages "more_final" and "more_initial" (empty when unreadable: named)."""
    if more is None:
        return {}
    if not isinstance(more, dict) or not isinstance(more.get("eval"), dict) or \
            not isinstance(more.get("eval_initial"), dict):
        raise ValueError("expected an object with eval and eval_initial")
    out = {("more_final", t): v for t, v in _item_block(more["eval"].get("items"), "eval-more eval").items()}
    return out | {("more_initial", t): v for t, v in
                  _item_block(more["eval_initial"].get("items"), "eval-more eval_initial").items()}


def _fill_from_ledger(row: dict, ledger: dict) -> None:
    """Actual and planned FLOPs per phase, shares, and the budget actually spent."""
    actual, planned = ledger["actual"]["flops"], ledger["planned"]["flops"]
    for name, block in (("actual", actual), ("planned", planned)):
        for ph, v in block.items():  # a forged NaN or negative spend must not be ranked as a measurement
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"{name} flops {ph} = {str(v)[:40]} is not a finite number >= 0")
    b = ledger.get("budget_flops")
    if b is not None and (isinstance(b, bool) or not isinstance(b, (int, float)) or not math.isfinite(b) or b <= 0):
        raise ValueError(f"budget_flops = {str(b)[:40]} is not a finite number > 0")
    row["budget_ledger"] = float(ledger.get("budget_flops") or np.nan)
    for ph in PHASES + ["total"]:
        row[f"flops_{ph}"] = float(actual.get(ph, 0.0))
        row[f"planned_flops_{ph}"] = float(planned.get(ph, 0.0))
    row.update(_shares(actual))
    row.update({f"planned_{k}": v for k, v in _shares(planned).items()})
    row["budget_spent"] = row["flops_total"] / row["budget_ledger"] if row["budget_ledger"] else np.nan
    row["iterations_actual"] = ledger["actual"].get("iterations")
    row["iterations_planned"] = ledger["planned"].get("iterations")
    row["eval_flops"] = float((ledger.get("eval") or {}).get("flops", 0.0))


# --- sweeps ----------------------------------------------------------------------------


def _planned_job_ids(sweep_dir: Path) -> list[str]:
    """Job ids listed in plan.json (a list of rows, or {"jobs": [...]}) — for jobs with no folder."""
    try:
        plan = read_json(folder.plan_json(sweep_dir))
    except (ValueError, OSError):
        return []
    rows = plan.get("jobs", []) if isinstance(plan, dict) else plan
    return [str(r["job_id"]) for r in rows if isinstance(r, dict) and "job_id" in r] if isinstance(rows, list) else []


def _refuse_duplicates(sweep_dirs: list[Path]) -> None:
    """The same sweep given twice (or two copies of one, same folder name) would count every
    job twice, as if it were two seeds: refused."""
    seen: dict[str, Path] = {}
    problems = []
    for d in sweep_dirs:
        key = d.resolve().name
        if key in seen:
            same = d.resolve() == seen[key].resolve()
            problems.append(f"{d}: {'the same folder as' if same else 'a second sweep named like'} {seen[key]}. "
                            "Its jobs would be counted twice, as if they were more seeds. Give each sweep once"
                            + ("." if same else "; if they really are different sweeps, rename one folder."))
        else:
            seen[key] = d
    if problems:
        raise RaceError(*problems)


def read_sweeps(sweep_dirs: list[Path]) -> SweepData:
    """Read every job of every sweep into one SweepData (see the module docstring)."""
    if not sweep_dirs:
        raise RaceError("no sweep folder given.",
                        "Expected: race report runs/<sweep> [runs/<other> ...].")
    sweep_dirs = [Path(d) for d in sweep_dirs]
    bad = []
    for d in sweep_dirs:
        if not d.is_dir():
            bad.append(f"{d}: no such folder. Expected a sweep folder made by `race plan` (runs/<sweep>).")
        elif not folder.jobs_dir(d).is_dir():
            bad.append(f"{d}: not a sweep (no jobs/ folder inside). Expected runs/<sweep> with "
                       f"jobs/<job_id>/; try `race plan --out {d}` first, or point at the sweep, not a job.")
    if bad:
        raise RaceError(*bad)
    for d in sweep_dirs:  # as race run refuses them: a linked job would be ranked from outside the sweep
        folder.refuse_linked_jobs(d)
    _refuse_duplicates(sweep_dirs)

    rows, curves = [], []
    items: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = {}
    items_initial: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = {}
    items_more: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = {}
    items_initial_more: dict[tuple[str, str, str], tuple[list[str], np.ndarray]] = {}
    knob_cols: list[str] = []
    named_targets: list[str] = []  # in the order summaries list them
    eval_points: dict[tuple[str, str], Any] = {}
    for d in sweep_dirs:
        sweep = d.resolve().name
        job_dirs = sorted(p for p in folder.jobs_dir(d).iterdir() if p.is_dir())
        seen = set()
        for jd in job_dirs:
            row, its, curve = read_job(jd, sweep)
            row["_where"] = str(jd)
            for k in row.pop("_knobs", []):
                if k not in knob_cols:
                    knob_cols.append(k)
            for t in row.pop("_targets", []):
                if t not in named_targets:
                    named_targets.append(t)
            if "_eval_points" in row:
                eval_points[(sweep, row["job_id"])] = row.pop("_eval_points")
            rows.append(row)
            curves.extend(curve)
            seen.add(jd.name)
            for (stage, t), v in its.items():
                where = {"final": items, "initial": items_initial, "more_final": items_more,
                         "more_initial": items_initial_more}[stage]
                where[(sweep, row["job_id"], t)] = v
        for jid in _planned_job_ids(d):
            if jid not in seen:
                rows.append({"sweep": sweep, "job_id": jid, "state": "missing", "readable": False,
                             "problem": "planned in plan.json but jobs/<job_id>/ is missing"})
    if not rows:
        raise RaceError(f"{', '.join(map(str, sweep_dirs))}: the sweep has no jobs (jobs/ is empty).",
                        "Expected jobs/<job_id>/ folders written by `race plan --out`; run `race run` "
                        "and then report.")
    _refuse_same_jobs(rows)
    for r in rows:
        r.pop("_where", None)
    jobs = pd.DataFrame(rows)
    for c in CONDITION_COLS + ["seed"]:
        if c not in jobs:
            jobs[c] = np.nan
    for c in knob_cols + ["seed"]:  # whole-number knobs stay integers despite missing values
        if c in jobs and jobs[c].dtype.kind == "f":
            v = jobs[c].dropna()
            if len(v) and (v == v.round()).all():
                jobs[c] = jobs[c].astype("Int64")
    recorded = [c[5:] for c in jobs.columns if c.startswith("eval/")]
    # the summaries' own order first (the first named target is the job's main one), then the rest
    targets = [t for t in named_targets if t in recorded] + sorted(set(recorded) - set(named_targets))
    curves_df = pd.DataFrame(curves, columns=["job_id", "sweep", "iteration", "flops_total",
                                              "target", "value"])
    return SweepData(jobs=jobs, items=items, items_initial=items_initial, curves=curves_df,
                     knob_cols=[k for k in knob_cols if k not in DERIVED_KNOBS], targets=targets,
                     eval_points=eval_points, items_more=items_more, items_initial_more=items_initial_more)
