"""A finished default run taken as a known truth: how often would a race schedule decide all its calls?

    python benchmarks/bench_default_truth.py runs/tiny-<hash>                      # the run's own schedule
    python benchmarks/bench_default_truth.py tests/data/readme-run.tar.xz          # the README's run, packed
    python benchmarks/bench_default_truth.py runs/tiny-<hash> --looks 2 3 4 --margin 0.04 --spending calibrated
    python benchmarks/bench_default_truth.py runs/tiny-<hash> --sweeps 200 --seed-scale 1.3

The truth of each condition × target is read from the run's jobs (summary.json, data only): each regime's
accuracy is the mean of its seeds' final scores, and each (model, reward)'s job-to-job spread is the pooled
variance of its regimes' job means (the two targets' spreads averaged). Sweeps are then simulated by
stats/race_sim (the simulator behind `race plan`'s price and the harnesses): items ±0.2 and an item ×
regime interaction, each run's luck `seed_effects` of --seed-kind, both targets scored from the same runs,
items × samples as the run evaluated them with common random numbers. The simulated job spread is made to
match the measured one: with the measured alike share (stats/power.CRN_SHARE, 1/3) the item sampling alone
puts (2/3)·p(1−p)/(items·samples) of variance between two runs of one regime; the seed sd supplies the
rest, and where the measured spread is below that floor (tiny-s: its runs' evaluations stay more alike)
the alike share is raised to meet it and the seed sd is 0. Seed variance is pooled per reward system on a
target, as the report pools it. Printed: per condition × target the shares of winner / equivalent /
undecided, the share of sweeps that decide every call, and the jobs a sweep needs (a regime's seeds are
the most either target's race asked for).

This is a design check, not an error rate: the truth is the run's own point estimates, so it says which
schedule a run like this one can settle, at what cost, not that its calls are right (bench_race.py
measures that on truths known exactly).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

from race_cli.stats import race_sim as S  # noqa: E402
from race_cli.stats.power import CRN_SHARE as ALIKE  # noqa: E402  (the measured share two policies answer alike)
from race_cli.stats.race import Schedule, default_spending  # noqa: E402


def read_truth(sweep: Path) -> tuple[dict, list[str], int, int]:
    """({(model, reward): {"regimes": [label], "acc": {target: [R]}, "job_var": float}}, targets, items, samples)
    from the jobs' summary.json files."""
    runs: dict[tuple, dict[str, list]] = {}
    targets, items, samples = None, 0, 0
    for f in sorted((sweep / "jobs").glob("*/summary.json")):
        s = json.loads(f.read_text())
        if s.get("state") != "done":
            continue
        c, k = s["condition"], s["knobs"]
        regime = f"G={k['group_size']} μ={k['updates_per_batch']}"
        runs.setdefault((c["model"], c["reward"]), {}).setdefault(regime, []).append(s["eval"])
        targets = targets or list(s["targets"])
        block = s["eval_items"][targets[0]]
        items = len(block["ids"])
        samples = next((int(o.split("=", 1)[1]) for o in s["overrides"] if o.startswith("eval.samples=")), 1)
    out = {}
    for key, regs in runs.items():
        labels = sorted(regs)
        acc = {t: [float(np.mean([e[t] for e in regs[r]])) for r in labels] for t in targets}
        num = den = 0.0
        for t in targets:
            for r in labels:
                v = [e[t] for e in regs[r]]
                if len(v) > 1:
                    num += np.var(v, ddof=1) * (len(v) - 1)
                    den += len(v) - 1
        out[key] = {"regimes": labels, "acc": acc, "job_var": num / den if den else math.nan}
    return out, targets, items, samples


def noise_of(job_var: float, acc: list[float], items: int, samples: int) -> tuple[float, float]:
    """(seed sd, alike share) whose simulated job-to-job variance is job_var (the module docstring)."""
    p = float(np.mean(acc))
    floor = p * (1 - p) / (items * samples)  # item sampling between two runs with nothing alike
    if job_var >= (1 - ALIKE) * floor:
        return math.sqrt(job_var - (1 - ALIKE) * floor), ALIKE
    return 0.0, 1 - job_var / floor


def simulate(truth: dict, targets: list[str], items: int, samples: int, schedule: Schedule,
             rng: np.random.Generator, kind: str, scale: float) -> tuple[dict, int]:
    """One simulated sweep: {(model, reward, target): state}, and its jobs."""
    races, names = [], []
    for (model, reward), t in truth.items():
        R = len(t["regimes"])
        sd, alike = noise_of(t["job_var"], [a for v in t["acc"].values() for a in v], items, samples)
        e = S.seed_effects(rng, R, schedule.cap, sd * scale, kind) if sd > 0 else np.zeros((R, schedule.cap))
        for target in targets:
            P, _ = S.true_p(rng, t["acc"][target], schedule.cap, items, effects=e)  # both targets: the same runs
            scores = S.CommonNumbers.draw(rng, items, samples, alike).scores(rng, P)
            races.append(S.SimRace(scores, f"{reward} {target}"))  # the report's pool: a reward system on a target
            names.append((model, reward, target))
    S.run_races(races, schedule)
    jobs = 0
    per = len(targets)
    for i in range(0, len(races), per):
        jobs += int(np.max([u.seeds for u in races[i:i + per]], axis=0).sum())
    return {n: u.state for n, u in zip(names, races)}, jobs


def unpacked(path: Path, tmp: Path) -> Path:
    """The sweep folder: path itself, or the one folder a scripts/readme_run.py archive holds (extracted into
    tmp with tarfile's "data" filter: no links out, no devices, no absolute names)."""
    if path.is_dir():
        return path
    import tarfile

    with tarfile.open(path) as tar:
        tar.extractall(tmp, filter="data")
    (sweep,) = [p for p in tmp.iterdir() if p.is_dir()]
    return sweep


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", type=Path, help="a finished raced sweep folder (runs/<name>-<hash>), or its archive")
    ap.add_argument("--looks", type=int, nargs="+", help="seeds per active regime at each look (default: the run's)")
    ap.add_argument("--margin", type=float, help="equivalence margin (default: the run's)")
    ap.add_argument("--spending", help="split of α over the looks (default: calibrated where measured, else bonferroni)")
    ap.add_argument("--sweeps", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seed-kind", choices=S.SEED_KINDS, default="normal")
    ap.add_argument("--seed-scale", type=float, default=1.0, help="seed sd times this (robustness to its estimate)")
    a = ap.parse_args(argv)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        sweep = unpacked(a.sweep, Path(tmp))
        truth, targets, items, samples = read_truth(sweep)
        race = json.loads((sweep / "plan.json").read_text()).get("race") or {}
    looks = tuple(a.looks or race.get("looks") or (2, 3, 4))
    margin = a.margin if a.margin is not None else race.get("margin", 0.05)
    R = max(len(t["regimes"]) for t in truth.values())
    spending = a.spending or default_spending(looks, 0.05, R)
    schedule = Schedule(looks, 0.05, margin, spending)
    rng = np.random.default_rng(a.seed)
    states: dict[tuple, list[str]] = {}
    jobs, every = [], 0
    for _ in range(a.sweeps):
        got, n = simulate(truth, targets, items, samples, schedule, rng, a.seed_kind, a.seed_scale)
        for k, v in got.items():
            states.setdefault(k, []).append(v)
        every += all(v in ("winner", "equivalent") for v in got.values())
        jobs.append(n)
    print(f"{sweep.name} as the truth ({items} items x {samples} samples, {len(truth)} (model, reward) x "
          f"{len(targets)} targets); looks {'-'.join(map(str, looks))}, margin ±{margin:g}, {spending}, "
          f"seed effects {a.seed_kind} x {a.seed_scale:g}; {a.sweeps} sweeps")
    for (model, reward), t in truth.items():
        sd, alike = noise_of(t["job_var"], [x for v in t["acc"].values() for x in v], items, samples)
        print(f"  {model} {reward}: job sd {math.sqrt(t['job_var']):.4f} -> seed sd {sd:.4f}, alike share {alike:.2f}")
    for k, v in states.items():
        v = np.array(v)
        print(f"  {' '.join(k):32s} winner {np.mean(v == 'winner'):.2f}  equivalent {np.mean(v == 'equivalent'):.2f}"
              f"  undecided {np.mean(v == 'undecided'):.2f}")
    out = {"all_decided": every / a.sweeps, "jobs_mean": float(np.mean(jobs)), "jobs_max": int(np.max(jobs))}
    print(f"every call decided in {out['all_decided']:.2f} of sweeps; jobs {out['jobs_mean']:.1f} on average, "
          f"{out['jobs_max']} at most")
    return out


if __name__ == "__main__":
    main()
