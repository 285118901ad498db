"""Time `race report` on a large synthetic sweep: 5,000 finished jobs, where does the time go?

    python benchmarks/bench_report.py [--jobs 5000] [--items 200] [--repeats 5] [--plots]
    python benchmarks/bench_report.py --conditions 834 --sweep-dir /tmp/sweep834 \
        --trees /work/base /work/main [--runs 3] [--profile] [--read-only]
    python benchmarks/bench_report.py --real runs/tiny-<hash> --trees BEFORE AFTER [--runs 5] [--cold-runs 3]

Builds the sweep once (tests/report_fixtures.py: 50 conditions × 20 regimes × 5 seeds by
default, 200 per-item scores per job), then runs reading, ranking (1000 bootstrap draws),
fits (with their p* bootstrap intervals) and writing the CSV/markdown files `repeats` times
and prints the median of each stage. Every job carries its iteration-0 evaluation, so the
ranking also bootstraps each regime's gain over its start. Target: reading + ranking under
3 s on the 2-core dev machine.

With --conditions N it times the whole command instead: it writes (once, into --sweep-dir) a
sweep of N conditions (models × 3 budgets × rule/PRM) × --regimes × --seeds jobs, each with the
files a real finished job has (a composed .hydra/config.yaml as `race plan` writes it, status,
summary, ledger, metrics, and the sweep's plan.json), then runs `race report SWEEP --no-plots
--out TMP` in a fresh interpreter for each source tree given by --trees (PYTHONPATH=tree),
alternating the trees `runs` times, and prints every wall time and the median per tree. With
--profile it also runs each tree once under cProfile and prints the top functions by own time
and the cumulative time of the stages named in issue 32 (bounded JSON reads, job identity,
statistics, console rendering). --read-only times the reader alone (`read_sweeps`, same alternation).
The environment passes through (`race report` itself asks for one OpenBLAS thread unless
OPENBLAS_NUM_THREADS is set: OPENBLAS_NUM_THREADS=2 shows what the threads cost). --busy K keeps K
single-core busy loops running beside every timed run, as `race run` training on the same machine
would: where OpenBLAS's threads cost most.

With --real SWEEP it times `race report SWEEP --no-plots --out TMP` on a finished sweep as a user runs it (the
default run's 55 jobs: issue 53 asks ≤ 2 s), per source tree, warm (a race cache an earlier report of the sweep
filled: its kept quantiles) and cold (an empty race cache, a machine's first report), the trees' order reversed
every other round. It prints each run's wall and CPU seconds (user + system of the command: on a machine shared
with other work the honest figure; the wall time counts the neighbours' turns) with the load average beside
it, the medians per tree and case and their ratios, and whether both trees wrote the same report files and
printed the same lines, byte for byte. The sweep is only read.
"""

from __future__ import annotations

import argparse
import json
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from race_cli.report import recommend as R  # noqa: E402
from race_cli.report.views import render  # noqa: E402
from race_cli.report.build import Report, ReportOptions  # noqa: E402
from race_cli.report.rank import label_jobs, rank_all, rankable, regime_columns  # noqa: E402
from race_cli.report.table import CONDITION_COLS, read_sweeps  # noqa: E402
from report_fixtures import Regime, build_sweep, peaked  # noqa: E402


def make_sweep(root: Path, n_jobs: int, n_items: int) -> Path:
    """50 conditions (5 models × 5 budgets × 2 rewards) × 20 regimes × 5 seeds = 5,000 jobs."""
    seeds = (0, 1, 2, 3, 4)
    regimes = [Regime(g, mu, round(0.06 + 0.5 * k / 19, 3))
               for k, (g, mu) in enumerate((g, mu) for g in (2, 4, 8, 16, 32) for mu in (1, 2, 3, 4))]
    n_cond = max(1, n_jobs // (len(regimes) * len(seeds)))
    conds = [{"model": f"m{m}", "budget_flops": 10.0 ** (11 + b), "reward": r, "task": "arithmetic"}
             for m in range(5) for b in range(5) for r in ("rule", "prm")][:n_cond]
    return build_sweep(root, acc=peaked(0.25, top=0.6, width=0.12), conditions=conds,
                       regimes=regimes, seeds=seeds, n_items=n_items, item_sd=0.1)


def _report(sweep: Path, jobs, ranked, ranking, rec, fits, moves, totals, curves) -> Report:
    """The Report the views read, of the parts timed here (no frontier, joint, findings or validation)."""
    import pandas as pd

    from race_cli.report.records import ConditionFit, Frontier, Joint, Target

    empty = pd.DataFrame()
    return Report(options=ReportOptions((sweep,), bootstrap=1000), targets=(Target("arithmetic", True),),
                  by=CONDITION_COLS, jobs=jobs, ranked=ranked, ranking=ranking, recommendations=rec,
                  fits=tuple(ConditionFit(c, f) for c, f in fits.items()),
                  moves=moves, target_differences=[], totals=totals, reg_cols=[], curves=curves,
                  frontier=Frontier(empty, empty, [], [], None), predictions=None, joint=Joint(empty, empty),
                  findings=[], settles=[], validation=None)


def run_once(sweep: Path, out: Path, plots: bool) -> dict[str, float]:
    t = {}
    t0 = time.perf_counter()
    data = read_sweeps([sweep])
    t["read"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    draws: dict = {}
    ranking = rank_all(data, "arithmetic", CONDITION_COLS, n_boot=1000, seed=0, draws_out=draws)
    t["rank"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    fits = R.fit_all(ranking, True, draws)
    rec = R.recommend(ranking, fits, CONDITION_COLS)
    moves = R.frontier_moves(rec, CONDITION_COLS + ["target"])
    t["fit+recommend"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ranked = rankable(data.jobs, "arithmetic")
    jobs = label_jobs(data.jobs, CONDITION_COLS, regime_columns(data.jobs[ranked], data.knob_cols, CONDITION_COLS))
    jobs["ranked"] = ranked
    totals = replace(R.compute_totals(jobs), by_condition=R.totals_by(jobs, "condition"))
    rep = _report(sweep, jobs, ranked, ranking, rec, fits, moves, totals, data.curves)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.csv").write_text(jobs.to_csv(index=False))
    (out / "ranking.csv").write_text(ranking.to_csv(index=False))
    (out / "summary.md").write_text(render.markdown_summary(rep, []))
    t["write csv+md"] = time.perf_counter() - t0
    if plots:
        from race_cli.report.views.plots import write_plots

        t0 = time.perf_counter()
        write_plots(out, rep)
        t["plots"] = time.perf_counter() - t0
    t["jobs"], t["conditions"] = len(jobs), len(rec)
    return t


# --- the whole command on a sweep of many small conditions (issue 32) ---------------------------

SCALE_REGIMES = [Regime(8, 1, 0.12), Regime(4, 2, 0.25), Regime(4, 4, 0.45),
                 Regime(2, 4, 0.6), Regime(16, 1, 0.08), Regime(2, 8, 0.75)]


def _config_template() -> dict:
    """The default job config as `race plan` composes it (hydra and the schema: the benchmark only)."""
    from omegaconf import OmegaConf

    from race_cli.config.compose import compose

    return OmegaConf.to_container(compose([]), resolve=True)


def make_scale_sweep(root: Path, n_conditions: int, n_regimes: int, n_seeds: int, n_items: int) -> Path:
    """n_conditions (models m0.. × 3 budgets × rule/PRM, in that order) × n_regimes × n_seeds jobs,
    as report_fixtures writes them, plus each job's composed .hydra/config.yaml (its model,
    G, μ, reward, budget and seed set) and plan.json rows with the overrides `race plan` records."""
    import copy

    import yaml

    n_models = -(-n_conditions // 6)
    conds = [{"model": f"m{m}", "budget_flops": b, "reward": r, "task": "arithmetic"}
             for m in range(n_models) for b in (1e11, 3e11, 1e12) for r in ("rule", "prm")][:n_conditions]
    regimes = SCALE_REGIMES[:n_regimes]
    build_sweep(root, acc=peaked(0.25, top=0.55, width=0.05), conditions=conds, regimes=regimes,
                seeds=tuple(range(n_seeds)), n_items=n_items, item_sd=0.15, seed_sd=0.02)
    template = _config_template()
    plan = json.loads((root / "plan.json").read_text())
    for row in plan:
        cfg = copy.deepcopy(template)
        cfg["model"]["name"], cfg["model"]["path"] = row["model"], f"zoo:{row['model']}"
        cfg["grpo"]["group_size"], cfg["grpo"]["updates_per_batch"] = row["group_size"], row["updates_per_batch"]
        cfg["reward"]["type"] = row["reward"]
        cfg["budget"]["flops"], cfg["seed"] = row["budget_flops"], row["seed"]
        hydra = root / "jobs" / row["job_id"] / ".hydra"
        (hydra / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        row["overrides"] = " ".join((hydra / "overrides.yaml").read_text().replace("- ", "").split())
    (root / "plan.json").write_text(json.dumps(plan, indent=2))
    return root


READ_ONLY = "import sys; from race_cli.report.table import read_sweeps; read_sweeps([sys.argv[1]])"
READ_ONLY_STAGE = False  # --read-only: time the reader (read_sweeps) alone, not the whole command
CACHE_ENV: dict[str, str] = {}  # --real: the race cache of the run being timed (RACE_CACHE)


def _report_cmd(tree: Path, sweep: Path, out: Path, prof: Path | None) -> tuple[list[str], dict]:
    env = dict(os.environ, PYTHONPATH=str(tree), COLUMNS="160", **CACHE_ENV)
    run = ["-m", "cProfile", "-o", str(prof)] if prof else []
    if READ_ONLY_STAGE:
        return [sys.executable, *run, "-c", READ_ONLY, str(sweep)], env
    return [sys.executable, *run, "-m", "race_cli", "report", str(sweep), "--no-plots", "--out", str(out)], env


def time_report(tree: Path, sweep: Path, out: Path, prof: Path | None = None) -> tuple[float, float]:
    """(wall, CPU) seconds of one `race report SWEEP --no-plots` by `tree`'s code in a fresh
    interpreter. CPU = user + system time of the child: on a shared machine the wall time also
    counts the other processes' turns, the CPU time much less so."""
    import resource

    cmd, env = _report_cmd(tree, sweep, out, prof)
    shutil_rm(out)
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    if done.returncode != 0:
        raise SystemExit(f"race report ({tree}) exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    LAST_STDOUT[tree] = done.stdout.replace(str(out), "OUT")  # what it printed, the report folder's name aside
    return wall, cpu


LAST_STDOUT: dict[Path, str] = {}


def shutil_rm(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


STAGES = {  # where issue 32's profile found the time, and the stages after it (matched on file:function)
    "bounded JSON reads (io.loads_bounded)": ("io.py", "loads_bounded"),
    "job identity (table.job_identity)": ("table.py", "job_identity"),
    "reading (table.read_sweeps)": ("table.py", "read_sweeps"),
    "ranking (rank.rank_all)": ("rank.py", "rank_all"),
    "  seed noise (stats/variance.noise_of)": ("variance.py", "noise_of"),
    "  decisions (stats/decisions.rank_decisions)": ("decisions.py", "rank_decisions"),
    "  item weights (stats/draws.item_weights)": ("draws.py", "item_weights"),
    "  draws (stats/draws.draws_of)": ("draws.py", "draws_of"),
    "response fits (recommend.fit_all)": ("recommend.py", "fit_all"),
    "recommendations (recommend.recommend)": ("recommend.py", "recommend"),
    "frontier (frontier.frontier_report)": ("frontier.py", "frontier_report"),
    "joint comparison (joint.joint_compare)": ("joint.py", "joint_compare"),
    "model sizes (joint.model_sizes)": ("joint.py", "model_sizes"),
    "findings (findings.findings)": ("findings.py", "findings"),
    "  power simulations (stats/power.separation_power)": ("power.py", "separation_power"),
    "console tables (render.print_report)": ("render.py", "print_report"),
    "summary.md (render.markdown_summary)": ("render.py", "markdown_summary"),
    "report.json (render.to_json)": ("render.py", "to_json"),
}


def print_profile(tree: Path, prof: Path, top: int = 10) -> None:
    st = pstats.Stats(str(prof))
    total = st.total_tt
    print(f"\n  cProfile of {tree} (total {total:.1f} s under the profiler)")
    for name, (file, func) in STAGES.items():
        cum = sum(v[3] for k, v in st.stats.items() if k[0].endswith(file) and k[2] == func)
        if cum:
            print(f"    {name:45s} {cum:6.2f} s cumulative")
    rows = sorted(st.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    print(f"    top {top} by own time:")
    for (file, line, func), (cc, nc, tt, ct, _) in rows:
        short = "/".join(Path(file).parts[-2:]) if file != "~" else "builtin"
        print(f"      {tt:6.2f} s own {ct:6.2f} s cum {nc:9d} calls  {short}:{line}({func})")


def scale_main(a: argparse.Namespace) -> None:
    global READ_ONLY_STAGE
    READ_ONLY_STAGE = a.read_only
    sweep = Path(a.sweep_dir)
    if not (sweep / "plan.json").is_file():
        t0 = time.perf_counter()
        make_scale_sweep(sweep, a.conditions, a.regimes, a.seeds, a.items)
        print(f"built {sweep} in {time.perf_counter() - t0:.1f} s")
    n_jobs = sum(1 for _ in (sweep / "jobs").iterdir())
    trees = [Path(t).resolve() for t in a.trees]
    print(f"{sweep}: {n_jobs} jobs ({a.conditions} conditions × {a.regimes} regimes × {a.seeds} seeds, "
          f"{a.items} items); {'read_sweeps only' if a.read_only else 'race report SWEEP --no-plots'}, "
          f"{a.runs} alternating runs per tree")
    walls: dict[Path, list[float]] = {t: [] for t in trees}
    cpus: dict[Path, list[float]] = {t: [] for t in trees}
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(a.busy)]
    if busy:
        print(f"  with {a.busy} busy loop(s) beside every run")
    try:
        _alternate(a, sweep, trees, walls, cpus)
    finally:
        for b in busy:
            b.kill()
            b.wait()


def _alternate(a: argparse.Namespace, sweep: Path, trees: list[Path], walls: dict, cpus: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(a.runs):
            for t in trees:
                wall, cpu = time_report(t, sweep, Path(tmp) / "out")
                walls[t].append(wall)
                cpus[t].append(cpu)
                print(f"  run {i + 1} {t}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)
        for t in trees:
            print(f"  {t}: median {statistics.median(walls[t]):.2f} s wall ({', '.join(f'{w:.2f}' for w in walls[t])}), "
                  f"{statistics.median(cpus[t]):.2f} s CPU ({', '.join(f'{w:.2f}' for w in cpus[t])})")
        if len(trees) == 2:
            (w0, w1), (c0, c1) = ([statistics.median(d[t]) for t in trees] for d in (walls, cpus))
            print(f"  ratio {trees[0].name}/{trees[1].name}: {w0 / w1:.1f}x wall, {c0 / c1:.1f}x CPU")
        if a.profile:
            for t in trees:
                prof = Path(tmp) / f"{t.name}.prof"
                wall, cpu = time_report(t, sweep, Path(tmp) / "out", prof)
                print(f"\n  {t} under cProfile: {wall:.1f} s wall, {cpu:.1f} s CPU")
                print_profile(t, prof)


# --- a real finished sweep, warm and cold (issue 53) --------------------------------------------------------


def _same_files(a: Path, b: Path) -> bool:
    names = sorted(p.name for p in a.iterdir())
    return names == sorted(p.name for p in b.iterdir()) and all(
        (a / n).read_bytes() == (b / n).read_bytes() for n in names)


def real_main(a: argparse.Namespace) -> None:
    sweep = Path(a.real).resolve()
    if not (sweep / "jobs").is_dir():
        raise SystemExit(f"--real {sweep}: not a sweep folder (no jobs/)")
    trees = [Path(t).resolve() for t in a.trees]
    n_jobs = sum(1 for p in (sweep / "jobs").iterdir() if p.is_dir())
    print(f"{sweep}: {n_jobs} jobs; race report SWEEP --no-plots --out TMP, {a.runs} warm and {a.cold_runs} cold "
          f"runs per tree, order reversed every other round")
    got: dict[tuple[str, int], list[tuple[float, float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        outs = {i: tmp / f"out{i}" for i in range(len(trees))}
        for i, tree in enumerate(trees):  # the warm caches: one untimed report each
            CACHE_ENV["RACE_CACHE"] = str(tmp / f"warm{i}")
            time_report(tree, sweep, outs[i])
        for r in range(max(a.runs, a.cold_runs)):
            order = list(range(len(trees)))[:: 1 if r % 2 == 0 else -1]
            for kind, n in (("warm", a.runs), ("cold", a.cold_runs)):
                for i in order if r < n else ():
                    cache = tmp / (f"warm{i}" if kind == "warm" else f"cold{i}-{r}")
                    CACHE_ENV["RACE_CACHE"] = str(cache)
                    load = os.getloadavg()[0]
                    wall, cpu = time_report(trees[i], sweep, outs[i])
                    got.setdefault((kind, i), []).append((wall, cpu, load))
                    print(f"  {kind} run {r + 1} tree {i}: {wall:.2f} s wall, {cpu:.2f} s CPU (load {load:.1f})",
                          flush=True)
        same = len(trees) < 2 or (_same_files(outs[0], outs[1]) and len({LAST_STDOUT[t] for t in trees}) == 1)
    for (kind, i), xs in sorted(got.items()):
        walls, cpus, loads = zip(*xs)
        print(f"{kind} tree {i} ({trees[i]}): CPU median {statistics.median(cpus):.2f} s "
              f"({', '.join(f'{c:.2f}' for c in cpus)}), wall median {statistics.median(walls):.2f} s "
              f"({', '.join(f'{w:.2f}' for w in walls)}), load {min(loads):.1f}-{max(loads):.1f}")
    for kind in ("warm", "cold"):
        if (kind, 0) in got and (kind, 1) in got:
            c0, c1 = (statistics.median(x[1] for x in got[(kind, i)]) for i in (0, 1))
            w0, w1 = (statistics.median(x[0] for x in got[(kind, i)]) for i in (0, 1))
            print(f"{kind}: CPU {c0:.2f} -> {c1:.2f} s (x{c0 / c1:.2f}), wall {w0:.2f} -> {w1:.2f} s (x{w0 / w1:.2f})")
    if len(trees) == 2:
        print(f"report files and printed lines of the two trees byte-identical: {'yes' if same else 'NO'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=5000)
    ap.add_argument("--items", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--plots", action="store_true", help="also time the PNGs (imports matplotlib)")
    ap.add_argument("--conditions", type=int, help="time the whole `race report` on this many conditions")
    ap.add_argument("--regimes", type=int, default=3, help="regimes per condition (with --conditions, at most 6)")
    ap.add_argument("--seeds", type=int, default=2, help="seeds per regime (with --conditions)")
    ap.add_argument("--sweep-dir", default="/tmp/race-bench-report", help="where the sweep is written once and reused")
    ap.add_argument("--trees", nargs="+", default=[str(ROOT)], help="source trees to time (PYTHONPATH=tree)")
    ap.add_argument("--runs", type=int, default=3, help="alternating runs per tree (with --conditions)")
    ap.add_argument("--profile", action="store_true", help="also one run per tree under cProfile")
    ap.add_argument("--read-only", action="store_true", help="with --conditions: time read_sweeps alone")
    ap.add_argument("--busy", type=int, default=0, help="with --conditions: single-core busy loops beside each run")
    ap.add_argument("--real", metavar="SWEEP", help="time `race report` on this finished sweep, warm and cold")
    ap.add_argument("--cold-runs", type=int, default=3, help="with --real: runs per tree on an empty race cache")
    a = ap.parse_args()
    if a.real:
        return real_main(a)
    if a.conditions:
        return scale_main(a)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        sweep = make_sweep(Path(tmp) / "sweep", a.jobs, a.items)
        print(f"built {a.jobs} jobs in {time.perf_counter() - t0:.1f} s")
        runs = [run_once(sweep, Path(tmp) / "report", a.plots) for _ in range(a.repeats)]
    print(f"{runs[0]['jobs']} jobs, {runs[0]['conditions']} conditions, {a.items} items, 1000 bootstrap draws")
    stages = [k for k in runs[0] if k not in ("jobs", "conditions")]
    for k in stages:
        vals = [r[k] for r in runs]
        print(f"  {k:15s} median {statistics.median(vals):6.3f} s   (min {min(vals):.3f}, max {max(vals):.3f})")
    rr = [r["read"] + r["rank"] for r in runs]
    print(f"  read+rank       median {statistics.median(rr):6.3f} s   target < 3 s")


if __name__ == "__main__":
    main()
