"""A stand-in for `race train --job-dir DIR` in the pool tests: same files, known durations, no torch.

    python tests/fake_job.py runs/<sweep>/jobs/<id>

Reads `fake:` from the job's .hydra/config.yaml (seconds, iterations, flops_per_iter, crash_at,
crash_attempts) and behaves like the engine as docs/files.md describes it: writes status.json
`running` at start, one metrics.jsonl line per iteration with a cumulative `flops/total`, an
atomic checkpoint/state.json after each iteration, and at the end summary.json and `done`.
Resumes from checkpoint/ (metrics lines past the checkpoint are dropped first, as a real resume
must), so an interrupted-and-resumed job ends with exactly the files of an uninterrupted one.
`crash_at: K` raises at iteration K while status.json attempts <= crash_attempts (default 1),
so a --retry-failed rerun succeeds. Everything it computes is a pure function of the config.

`make_sweep(sweep_dir, specs)` writes a fixture sweep folder with the layout `race plan --out`
writes (multirun.yaml, plan.json, plan.csv, jobs/<id>/.hydra/, status.json pending).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from race_cli.io import append_jsonl, atomic_write_json, read_json, read_jsonl  # noqa: E402

HERE = Path(__file__).resolve()


def command(job_dir: str) -> list[str]:
    """The job command the pool tests inject (run_main(job_command=command))."""
    return [sys.executable, str(HERE), str(job_dir)]


def score(job_id: str, iteration: int) -> float:
    """A deterministic 'reward' in [0, 1) for (job, iteration): the first 8 hex digits of sha1."""
    h = hashlib.sha1(f"{job_id}:{iteration}".encode()).hexdigest()
    return int(h[:8], 16) / 16**8


def _normal(key: str) -> float:
    """A deterministic standard normal draw for `key` (Box-Muller on two sha1 uniforms)."""
    import math

    u1 = (score(key, 1) + 0.5 / 16**8)
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * score(key, 2))


def truth_items(fake: dict, seed: int) -> dict:
    """With `fake: {items: N, mean: m, seed_sd: s, start: m0}`: per-item 0/1 scores on N items whose
    accuracy is m plus a seed effect s·z(regime mean, seed), with common random numbers (item i's draw
    depends on the item and seed only, as the engine's evaluation does), and the start's at m0. Summary
    fields to merge; {} without `items` (the default fake job)."""
    if "items" not in fake:
        return {}
    n, mean = int(fake["items"]), float(fake["mean"])
    sd, start = float(fake.get("seed_sd", 0.0)), float(fake.get("start", 0.0))
    p = min(1.0, max(0.0, mean + sd * _normal(f"regime{mean}:seed{seed}")))
    ids = [f"item-{i}" for i in range(n)]
    scores = [1.0 if score(f"item{i}", seed) < p else 0.0 for i in range(n)]
    initial = [1.0 if score(f"item{i}", -1) < start else 0.0 for i in range(n)]
    return {"eval": {"accuracy": sum(scores) / n}, "eval_initial": {"accuracy": sum(initial) / n},
            "eval_items": {"accuracy": {"ids": ids, "scores": scores}},
            "eval_items_initial": {"accuracy": {"ids": ids, "scores": initial}}}


def run(job_dir: Path) -> int:
    import yaml

    cfg = yaml.safe_load((job_dir / ".hydra" / "config.yaml").read_text())
    fake = cfg.get("fake") or {}
    seconds = float(fake.get("seconds", 0.3))
    iterations = int(fake.get("iterations", 3))
    fpi = float(fake.get("flops_per_iter", 1e9))
    crash_at = fake.get("crash_at")
    crash_attempts = int(fake.get("crash_attempts", 1))
    job_id = job_dir.name

    status_path = job_dir / "status.json"
    status = read_json(status_path)
    status.update(state="running", pid=os.getpid())
    atomic_write_json(status_path, status)
    print(f"fake job {job_id}: attempt {status.get('attempts')}, {iterations} iterations of "
          f"{seconds / iterations:.3f} s, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')}, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)

    ckpt_path = job_dir / "checkpoint" / "state.json"
    start = read_json(ckpt_path)["iteration"] if ckpt_path.is_file() else 0
    metrics = job_dir / "metrics.jsonl"
    if metrics.is_file():  # drop lines written after the last checkpoint (they will be redone)
        kept = [r for r in read_jsonl(metrics) if r["iteration"] <= start]
        tmp = metrics.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
        os.replace(tmp, metrics)
    if start:
        print(f"resuming from checkpoint at iteration {start}", flush=True)

    for it in range(start + 1, iterations + 1):
        time.sleep(seconds / iterations)
        if crash_at == it and int(status.get("attempts") or 0) <= crash_attempts:
            raise RuntimeError(f"fake crash at iteration {it}")
        append_jsonl(metrics, [{"iteration": it, "flops/total": it * fpi, "train/reward_mean": score(job_id, it)}])
        atomic_write_json(ckpt_path, {"iteration": it})

    rows = read_jsonl(metrics)
    acc = sum(r["train/reward_mean"] for r in rows) / max(1, len(rows))
    g = cfg.get("grpo", {})
    summary = {
        "job_id": job_id, "state": "done", "stop_reason": "iterations",
        "condition": {"model": cfg.get("model", {}).get("name", "fake"), "budget_flops": cfg.get("budget", {}).get("flops", 0),
                      "reward": "rule", "task": "arithmetic"},
        "knobs": {"group_size": g.get("group_size", 4), "updates_per_batch": g.get("updates_per_batch", 1),
                  "prompts_per_iter": g.get("prompts_per_iter", 8), "iterations": iterations},
        "seed": cfg.get("seed", 0),
        "overrides": [],
        "eval": {"accuracy": acc},
        "eval_initial": {"accuracy": 0.0},
        "eval_items": {"accuracy": {"ids": [f"item-{i}" for i in range(len(rows))],
                                    "scores": [round(r["train/reward_mean"]) for r in rows]}},
        **truth_items(fake, cfg.get("seed", 0)),
        "shares": {"search": 0.7, "learning": 0.3, "feedback": 0.0, "p": 0.3},
        "planned_shares": {"search": 0.7, "learning": 0.3, "feedback": 0.0, "p": 0.3},
        "flops": {"rollout": 0.7 * iterations * fpi, "update": 0.3 * iterations * fpi, "reward": 0.0,
                  "total": iterations * fpi},
        "seconds": {"rollout": 0, "update": 0, "reward": 0, "eval": 0, "total": seconds},
    }
    phases = {"rollout": 0.7 * iterations * fpi, "update": 0.3 * iterations * fpi, "reward": 0.0, "total": iterations * fpi}
    ledger = {"convention": "model", "budget_flops": iterations * fpi,
              "planned": {"iterations": iterations, "flops": phases, "executed_flops": phases,
                          "tokens": {"prompt": 0, "completion": 0}},
              "actual": {"iterations": iterations, "flops": phases, "executed_flops": phases,
                         "tokens": {"prompt": 0, "completion": 0},
                         "seconds": {"rollout": 0, "update": 0, "reward": 0, "total": seconds}},
              "eval": {"flops": 0, "executed_flops": 0, "seconds": 0, "runs": 1}}
    atomic_write_json(job_dir / "ledger.json", ledger)
    atomic_write_json(job_dir / "summary.json", summary)
    status = read_json(status_path)
    status.update(state="done", stop_reason="iterations")
    atomic_write_json(status_path, status)
    print(f"fake job {job_id}: done", flush=True)
    return 0


# --- fixture sweep folder (the layout race plan --out writes) ------------------------------------

def make_sweep(sweep_dir: Path, specs: dict[str, dict]) -> Path:
    """Write a sweep folder whose jobs run this fake job. specs: job_id -> fake: block.

    planned_flops_total = iterations x flops_per_iter, so the pool orders by it.
    """
    import yaml

    sweep_dir = Path(sweep_dir)
    rows = []
    for i, (job_id, fake) in enumerate(specs.items()):
        fake = {"seconds": 0.3, "iterations": 3, "flops_per_iter": 1e9, **fake}
        cfg = {"model": {"name": "tiny-s"}, "grpo": {"group_size": 4 * (1 + i % 2), "updates_per_batch": 1 + i // 2 % 2,
                                                     "prompts_per_iter": 8},
               "budget": {"flops": fake["iterations"] * fake["flops_per_iter"]}, "seed": 0, "fake": fake}
        hydra = sweep_dir / "jobs" / job_id / ".hydra"
        hydra.mkdir(parents=True)
        (hydra / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
        overrides = [f"grpo.group_size={cfg['grpo']['group_size']}", f"grpo.updates_per_batch={cfg['grpo']['updates_per_batch']}"]
        (hydra / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        atomic_write_json(hydra.parent / "status.json", {"job_id": job_id, "state": "pending", "attempts": 0})
        rows.append({"job_id": job_id, "iterations": fake["iterations"],
                     "planned_flops_total": fake["iterations"] * fake["flops_per_iter"], "overrides": " ".join(overrides)})
    atomic_write_json(sweep_dir / "plan.json", rows)
    (sweep_dir / "plan.csv").write_text("job_id,iterations,planned_flops_total\n" + "".join(
        f"{r['job_id']},{r['iterations']},{r['planned_flops_total']}\n" for r in rows))
    (sweep_dir / "multirun.yaml").write_text(yaml.safe_dump({"overrides": [], "grid": {"name": "fake"}, "num_jobs": len(rows)}))
    return sweep_dir


if __name__ == "__main__":
    sys.exit(run(Path(sys.argv[1])))
