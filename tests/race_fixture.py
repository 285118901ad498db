"""A raced sweep folder of fake jobs (tests/fake_job.py) with a known truth, written as `race plan --out`
writes a race: plan.json {"jobs": the first look, "race": the schedule, "reserve": the later seeds}."""

from __future__ import annotations

from pathlib import Path

import yaml

from race_cli.io import atomic_write_json


def make_race_sweep(sweep: Path, regimes: dict[str, dict], *, looks=(2, 3, 4), margin: float = 0.05,
                    alpha: float = 0.05, items: int = 200, seed_sd: float = 0.03, start: float = 0.3,
                    seconds: float = 0.2) -> Path:
    """regimes: job id prefix -> {"group_size": G, "mean": true accuracy}; seeds 0..looks[-1]-1 each."""
    sweep = Path(sweep)
    jobs, reserve = [], []
    for name, spec in regimes.items():
        for seed in range(looks[-1]):
            job_id = f"{name}_s{seed}"
            fake = {"seconds": seconds, "iterations": 3, "flops_per_iter": 1e9, "items": items,
                    "mean": spec["mean"], "seed_sd": seed_sd, "start": start}
            cfg = {"model": {"name": spec.get("model", "tiny-s")},
                   "grpo": {"group_size": spec["group_size"], "updates_per_batch": 1, "prompts_per_iter": 8},
                   "budget": {"flops": 3e9}, "seed": seed, "fake": fake}
            overrides = [f"model={cfg['model']['name']}", f"grpo.group_size={spec['group_size']}", f"seed={seed}"]
            row = {"job_id": job_id, "seed": seed, "iterations": 3, "planned_flops_total": 3e9,
                   "planned_seconds": seconds, "overrides": " ".join(overrides)}
            if seed >= looks[0]:
                reserve.append(row)
                continue
            hydra = sweep / "jobs" / job_id / ".hydra"
            hydra.mkdir(parents=True)
            (hydra / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
            (hydra / "overrides.yaml").write_text(yaml.safe_dump(overrides))
            atomic_write_json(hydra.parent / "status.json", {"job_id": job_id, "state": "pending", "attempts": 0})
            jobs.append(row)
    race = {"looks": list(looks), "alpha": alpha, "margin": margin, "spending": "bonferroni"}
    atomic_write_json(sweep / "plan.json", {"jobs": jobs, "race": race, "reserve": reserve})
    (sweep / "plan.csv").write_text("job_id\n" + "".join(f"{r['job_id']}\n" for r in jobs))
    (sweep / "multirun.yaml").write_text(yaml.safe_dump({"overrides": [], "grid": {"name": "fake"},
                                                         "num_jobs": len(jobs)}))
    return sweep


def simulated_look(rng, n: int, regimes: int, seeds: int, items: int, gap: float, schedule, samples: int = 4,
                   seed_sd: float = 0.02) -> list:
    """One look decided on `n` conditions simulated item by item (stats/race_sim.condition_scores: regime 0
    better by `gap`), their seed variances pooled two conditions to a pool as the report pools them; the
    list of stats/race.LookDecision."""
    import numpy as np

    from race_cli.stats import variance as V
    from race_cli.stats.race import decide_look
    from race_cli.stats.race_sim import condition_scores

    runs = [condition_scores(rng, regimes, seeds, items, samples, gap, seed_sd) for _ in range(n)]
    codes = np.repeat(np.arange(regimes), seeds)
    noises = [V.noise_of(codes, r.reshape(regimes * seeds, -1), regimes, own_pool=False) for r in runs]
    keys = [f"p{c // 2}" for c in range(n)]
    pri = V.fit_pools(noises, keys)
    return decide_look([x.pooled(pri[k]) for x, k in zip(noises, keys)], [None] * n, schedule, 0)
