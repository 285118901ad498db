"""Error rates of the joint comparison (race_cli/report/joint.py) on synthetic sweeps with a known truth.

    python benchmarks/bench_joint.py                       # 300 conditions per kind and scenario
    python benchmarks/bench_joint.py --conditions 100      # quicker, noisier
    python benchmarks/bench_joint.py --scenario 0.03,2     # one scenario: seed sd, seeds per regime
    python benchmarks/bench_joint.py --conditions 1000 --in-memory   # >= 1,000 per scenario, no folders

Every simulated joint condition is written as real job folders (tests/report_fixtures.py's writer,
plus a .hydra/config.yaml naming each model's architecture, so the report knows which is larger) and
read back by the report's own code (read_sweeps, then the joint section's calls: joint_table,
model_sizes, joint_compare; `--full-report` runs the whole build_report instead, within-condition rankings
included, and gets the same sentences); `--in-memory` feeds joint_compare the table joint_table would
build from those folders (the same draws, the same procedure: for 1,000 conditions per scenario in
minutes rather than hours of folder writing); the harness only counts the sentences' verdicts.

One joint condition: two model sizes (tiny-s and tiny-m shapes) × rule and PRM reward × the default
grid's three μ, every job scored on the same 200 items, k = 4 sampled completions each, correct with
probability

    P = acc + d_i + d_i^model + e_s     d_i ~ U(-0.2, 0.2) item difficulty shared by every job,
                                        d_i^model ~ U(-0.05, 0.05) the model's own item effect (items
                                        pair across models, not perfectly), e_s ~ U(-h, h) the run's
                                        luck, SD = seed sd

The starting policy of each model is evaluated by every job on the same items (P = start + d_i + d_i^m).
Kinds of truth, per scenario:

- null: every regime of both sizes and both rewards at 0.45, both starts 0.40: no sentence may name a
  winner (model size on final scores or on gains, feedback at either size or across sizes);
- size: the larger policy's regimes all at 0.51 (+0.06), the smaller's at 0.45; starts 0.46 and 0.40,
  so the gains are equal: the final-score sentences (best against best, and allocation by allocation)
  should name the larger policy (power), the gain sentences and the feedback sentences nothing;
- skewed: the selection worst case for best-against-best — the larger policy's six regimes all at
  0.45, the smaller's best (rule μ=1) at 0.45 and its other five at 0.35: the bests are equal, and the
  larger side's best is the maximum of six noisy equals (biased upward), the smaller's of one. Best
  against best must name nothing; allocation by allocation the larger policy truly is ahead on average
  (+0.083), so that sentence may name it (and its rate is printed).

"any false" counts a joint condition in which some sentence names a side that is not truly ahead by that
sentence's own comparison (true_difference: best against best, the picked regimes' gains, or the mean over
matched allocations): the familywise error the report controls (the gatekept graph over the condition's
claims, report/joint.py, stats/gatekeeping.py).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from race_cli.report import joint as J  # noqa: E402
from race_cli.report.build import ReportOptions, build_report  # noqa: E402
from race_cli.report.rank import rankable  # noqa: E402
from race_cli.report.table import read_sweeps  # noqa: E402
from report_fixtures import Regime, write_job  # noqa: E402

GRID = [(1, 0.83), (2, 0.91), (4, 0.95)]  # (μ, p): the default grid's G=4 regimes
ARCH = {"s": {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 128, "vocab_size": 257},
        "m": {"hidden_size": 96, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
              "intermediate_size": 256, "vocab_size": 257}}
REWARDS = {"rule": 0.0, "prm": 0.15}  # feedback share of the FLOPs
N_ITEMS, SAMPLES, BUDGET, TARGET = 200, 4, 8e11, "arithmetic"
SCENARIOS = [(0.02, 2), (0.03, 3), (0.01, 3), (0.01, 4)]  # the pilot measured a seed sd of 0.011–0.026


SIZE_GAP = 0.06  # the "size" truth's difference (--size-gap: e.g. the gap `race plan` calls detectable)


def truth(kind: str, size: str, reward: str, mu: int) -> float:
    if kind == "null":
        return 0.45
    if kind == "size":
        return 0.45 + SIZE_GAP if size == "m" else 0.45
    if size == "m":  # skewed
        return 0.45
    return 0.45 if (reward, mu) == ("rule", 1) else 0.35


def start_of(kind: str, size: str) -> float:
    return 0.40 + SIZE_GAP if (kind == "size" and size == "m") else 0.40


def draw_condition(c: int, kind: str, n_seeds: int, seed_sd: float, rng):
    """One joint condition's jobs (its own task name): (task, [job dicts with per-item final and start
    scores]). The same draws feed the job folders (write_condition) and the in-memory table (table_of)."""
    task = f"{kind}{c:05d}"
    d = rng.uniform(-0.2, 0.2, N_ITEMS)
    h = seed_sd * math.sqrt(3.0)
    jobs = []
    for size in ("s", "m"):
        dm = d + rng.uniform(-0.05, 0.05, N_ITEMS)
        model = f"{task}-{size}"
        for reward, fb in REWARDS.items():
            for mu, p in GRID:
                for s in range(n_seeds):
                    fin = rng.binomial(SAMPLES, truth(kind, size, reward, mu) + dm + rng.uniform(-h, h)) / SAMPLES
                    ini = rng.binomial(SAMPLES, start_of(kind, size) + dm) / SAMPLES
                    jobs.append({"size": size, "model": model, "reward": reward, "fb": fb, "mu": mu, "p": p,
                                 "seed": s, "fin": fin, "ini": ini})
    return task, jobs


def write_condition(jobs_dir: Path, c: int, kind: str, n_seeds: int, seed_sd: float, rng) -> str:
    """One joint condition as real job folders; returns the task."""
    import yaml

    task, jobs = draw_condition(c, kind, n_seeds, seed_sd, rng)
    aux = np.random.default_rng([c, n_seeds])  # the writer's own draws (metrics), apart from the truth's
    for j in jobs:
        cond = {"model": j["model"], "budget_flops": BUDGET, "reward": j["reward"], "task": task}
        jid = write_job(jobs_dir, cond, Regime(4, j["mu"], j["p"] * (1 - j["fb"])), j["seed"], {TARGET: j["fin"]}, aux,
                        feedback=j["fb"], iterations=2, eval_every=2, start={TARGET: j["ini"]})
        # the model's shapes (its size), and what tells one run from another (the report refuses
        # two folders with the same config and seed as a counterfeit second seed)
        (jobs_dir / jid / ".hydra" / "config.yaml").write_text(
            yaml.safe_dump({"model": {"name": j["model"], "arch": ARCH[j["size"]]}, "seed": j["seed"], "run": jid}))
    return task


def table_of(task: str, jobs: list[dict]) -> list[dict]:
    """joint_table's rows for one drawn condition, without the folders (the in-memory harness: the same
    joint_compare, fed the columns read_sweeps + joint_table would give it)."""
    ids = [f"{TARGET}-eval-{i}" for i in range(N_ITEMS)]
    return [{"budget": BUDGET, "task": task, "target": TARGET, "sweep": "mem", "job_id": f"{task}-{k}",
             "model": j["model"], "reward": j["reward"], "seed": j["seed"], "value": float(j["fin"].mean()),
             "start_value": float(j["ini"].mean()), "ids": ids, "scores": j["fin"], "start_ids": ids,
             "start": j["ini"], "share_feedback": j["fb"], "iterations": 2.0, "group_size": 4,
             "updates_per_batch": j["mu"], "prompts_per_iter": 8} for k, j in enumerate(jobs)]


def _linear_params(size: str) -> int:
    from race_cli.cost.flops import Arch

    a = Arch.from_config(ARCH[size])
    return int(a.n_body + a.n_head)


def run_scenario(tmp: Path, n: int, seed_sd: float, n_seeds: int, seed: int, n_boot: int,
                 full_report: bool = False, in_memory: bool = False) -> dict:
    rng = np.random.default_rng([seed, int(seed_sd * 1000), n_seeds])
    root = tmp / f"joint-{seed_sd}-{n_seeds}"
    (root / "jobs").mkdir(parents=True)
    t0, c0 = time.perf_counter(), time.process_time()
    kinds, rows, sizes = {}, [], {}
    for kind in ("null", "size", "skewed"):
        for c in range(n):
            if in_memory:
                task, jobs = draw_condition(c, kind, n_seeds, seed_sd, rng)
                rows += table_of(task, jobs)
                sizes |= {f"{task}-{sz}": _linear_params(sz) for sz in ("s", "m")}
            else:
                task = write_condition(root / "jobs", c, kind, n_seeds, seed_sd, rng)
            kinds[task] = kind
    if in_memory:
        joint = J.joint_compare(pd.DataFrame(rows), ["group_size", "updates_per_batch", "prompts_per_iter"],
                                {TARGET: True}, sizes, n_boot=n_boot, seed=seed)
    elif full_report:
        joint = build_report(ReportOptions((root,), plots=False, bootstrap=n_boot)).joint
    else:  # the calls build_report makes for its joint section, without the within-condition rankings
        data = read_sweeps([root])
        ranked = {TARGET: rankable(data.jobs, TARGET)}
        joint = J.joint_compare(J.joint_table(data, [TARGET], ranked), data.knob_cols, {TARGET: True},
                                J.model_sizes([root], data.jobs), n_boot=n_boot, seed=seed)
    cpu = time.process_time() - c0
    s = joint.sentences
    s = s[s["question"] != "split"]
    count = {k: {"n": 0, "final": 0, "final_big": 0, "matched": 0, "matched_big": 0, "gain": 0, "feedback": 0,
                 "any": 0} for k in ("null", "size", "skewed")}
    one = lambda g, q: (lambda v: None if pd.isna(v) else v)(g[g["question"] == q]["winner"].iloc[0])
    for task, g in s.groupby("task"):
        kind = kinds[task]
        c = count[kind]
        c["n"] += 1
        fin, matched = one(g, "size_final"), one(g, "size_matched")
        big = f"{task}-m"
        c["final"] += int(fin is not None)
        c["final_big"] += int(fin == big)
        c["matched"] += int(matched is not None)
        c["matched_big"] += int(matched == big)
        c["gain"] += int(g[g["question"].isin(["size_gain", "size_gain_matched"])]["winner"].notna().any())
        c["feedback"] += int(g[g["question"].str.startswith("feedback")]["winner"].notna().any())
        c["any"] += int(any(false_winner(kind, task, row) for _, row in g.iterrows()))
    rate = lambda k, f: count[k][f] / max(count[k]["n"], 1)
    half = lambda q: float(np.median((s.loc[s["question"] == q, "ci_hi"] - s.loc[s["question"] == q, "ci_lo"]) / 2))
    return {"seed_sd": seed_sd, "n_seeds": n_seeds, "conditions": n, "seconds": time.perf_counter() - t0,
            "cpu_seconds": cpu,
            "null_final": rate("null", "final"), "null_matched": rate("null", "matched"),
            "null_gain": rate("null", "gain"), "null_feedback": rate("null", "feedback"),
            "null_any": rate("null", "any"),
            "power_final": rate("size", "final_big"), "power_matched": rate("size", "matched_big"),
            "size_false_gain": rate("size", "gain"), "size_false_feedback": rate("size", "feedback"),
            "size_false_any": rate("size", "any"), "skewed_final": rate("skewed", "final"),
            "skewed_matched_big": rate("skewed", "matched_big"), "skewed_false_any": rate("skewed", "any"),
            "median_half_width": half("size_final"), "median_half_width_matched": half("size_matched"),
            "detectable": detectable(s, kinds, "size_final"),
            "detectable_matched": detectable(s, kinds, "size_matched")}


def true_difference(kind: str, task: str, row) -> float:
    """The truth of one sentence's difference a − b, from the scenario's truth (the sentence's own
    comparison: best against best, the two picked regimes' gains, or the mean over matched allocations)."""
    size = lambda model: str(model).rsplit("-", 1)[-1]
    t = lambda sz, rw, mu: truth(kind, sz, rw, mu)
    mus = [mu for mu, _ in GRID]
    q, a, b = row["question"], row["a"], row["b"]
    if q in ("size_final", "size_matched", "size_gain_matched"):
        va = [t(size(a), r, mu) for r in REWARDS for mu in mus]
        vb = [t(size(b), r, mu) for r in REWARDS for mu in mus]
        if q == "size_final":
            return max(va) - max(vb)
        d = float(np.mean(np.subtract(va, vb)))
        return d if q == "size_matched" else d - (start_of(kind, size(a)) - start_of(kind, size(b)))
    if q == "size_gain":  # the two regimes the final-score sentence picked: "<task>-m · rule · μ=1"
        parse = lambda lab: (size(lab.split(" · ")[0]), lab.split(" · ")[1], int(lab.split("μ=")[1]))
        (sa, ra, ma), (sb, rb, mb) = parse(row["a_regime"]), parse(row["b_regime"])
        return (t(sa, ra, ma) - start_of(kind, sa)) - (t(sb, rb, mb) - start_of(kind, sb))
    sizes = ["s", "m"] if row["scope"] == "across sizes" else [size(row["scope"])]
    va = [t(sz, a, mu) for sz in sizes for mu in mus]
    vb = [t(sz, b, mu) for sz in sizes for mu in mus]
    return max(va) - max(vb) if q in ("feedback", "feedback_all") else float(np.mean(np.subtract(va, vb)))


def false_winner(kind: str, task: str, row) -> bool:
    """A sentence names a side that is not truly ahead (a true difference of zero, or of the other sign)."""
    w = row["winner"]
    if w is None or (isinstance(w, float) and math.isnan(w)):
        return False
    d = true_difference(kind, task, row)
    return d <= 1e-12 if w == row["a"] else d >= -1e-12


def detectable(s, kinds: dict, question: str) -> float:
    """Smallest size gap (to 0.005) a size sentence would resolve 80% of the time: the size
    conditions' lower interval ends shifted from the true gap (SIZE_GAP) (the standard errors do not depend on
    the gap; the best-against-best rule's other contrasts are looser than this one when every regime
    shifts)."""
    f = s[(s["question"] == question) & s["task"].map(kinds).eq("size")]
    lo = f["ci_lo"].to_numpy(float) - SIZE_GAP
    for gap in np.arange(0.005, 0.5, 0.005):
        if np.mean(lo + gap > 0) >= 0.8:
            return round(float(gap), 3)
    return math.nan


def print_table(results: list[dict]) -> None:
    n = results[0]["conditions"]
    print(f"\nJoint comparison on synthetic sweeps with a known truth: {n} null, {n} size (+{SIZE_GAP:g}) and {n} "
          "skewed joint conditions per scenario (2 sizes × rule/PRM × 3 μ, 200 items × 4 samples)\n")
    cols = {"null: best vs best": "null_final", "null: matched": "null_matched", "null: gains": "null_gain",
            "null: feedback": "null_feedback", "null: any": "null_any", "size: power best vs best": "power_final",
            "size: power matched": "power_matched", "size: any false": "size_false_any",
            "skewed: best vs best named": "skewed_final", "skewed: matched names larger": "skewed_matched_big",
            "skewed: any false": "skewed_false_any", "half-width best vs best": "median_half_width",
            "half-width matched": "median_half_width_matched", "gap found 80% (bvb)": "detectable",
            "gap found 80% (matched)": "detectable_matched"}
    head = ["seed sd", "seeds", *cols]
    print(" | ".join(head))
    print("|".join("---" for _ in head))
    for r in results:
        print(" | ".join([f"{r['seed_sd']:.2f}", str(r["n_seeds"])] + [f"{r[k]:.3f}" for k in cols.values()]))


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conditions", type=int, default=300, help="joint conditions per kind and scenario")
    ap.add_argument("--scenario", action="append", help="SEED_SD,SEEDS (repeatable); default four")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--bootstrap", type=int, default=200, help="draws per condition (best share only)")
    ap.add_argument("--json", type=Path, help="also write the results here")
    ap.add_argument("--full-report", action="store_true",
                    help="read each sweep with the whole build_report (within-condition rankings and fits too: "
                         "the same joint section, ~3x slower)")
    ap.add_argument("--in-memory", action="store_true",
                    help="feed joint_compare the table joint_table would read from the folders, without writing "
                         "them (same draws, same procedure; 1,000 conditions per scenario in minutes)")
    ap.add_argument("--size-gap", type=float, default=SIZE_GAP,
                    help="the size truth's difference (default 0.06; e.g. race plan's detectable figure)")
    a = ap.parse_args(argv)
    globals()["SIZE_GAP"] = a.size_gap
    scen = [(float(s.split(",")[0]), int(s.split(",")[1])) for s in a.scenario] if a.scenario else SCENARIOS
    results = []
    with tempfile.TemporaryDirectory(prefix="race-joint-") as tmp:
        for sd, k in scen:
            r = run_scenario(Path(tmp), a.conditions, sd, k, a.seed, a.bootstrap, a.full_report, a.in_memory)
            print(f"scenario seed sd {sd}, {k} seeds: {r['seconds']:.0f} s: {json.dumps(r)}", file=sys.stderr,
                  flush=True)
            results.append(r)
    print_table(results)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
