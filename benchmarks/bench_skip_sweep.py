"""What skipping zero-advantage rows bought in a finished sweep, per regime: update FLOPs per iteration against
the same iteration with every row trained, iterations run against the plan without skipping, budget spent.

    race run                                           # the default grid, skipping on (its default)
    python benchmarks/bench_skip_sweep.py runs/tiny-<hash>

Per job (metrics.jsonl, ledger.json, plan.json): the zero-advantage share = mean train/frac_zero_std_groups;
the trained share = rows updated on / rows sampled (ledger rows); update FLOPs per iteration = actual update
FLOPs / iterations, against the plan's per-iteration update with every row (grpo.skip_zero_advantage=false,
the same composed config otherwise: `iteration_spec(...).cost(trained_share=1)`); T without skipping = the
budget solver's T for that config. Means over a regime's seeds.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    import yaml

    from race_cli import folder
    from race_cli.cost.budget import iteration_spec, solve
    from race_cli.io import read_json, read_jsonl

    sweep = Path((argv or sys.argv[1:])[0])
    rows = folder.read_plan_rows(sweep)
    regimes: dict[str, list[dict]] = {}
    for jid, row in rows.items():
        d = folder.job_dir(sweep, jid)
        if not folder.summary_file(d).exists():
            continue
        cfg = yaml.safe_load(folder.job_config(d).read_text())
        led = read_json(folder.ledger_file(d))
        lines = [m for m in read_jsonl(folder.metrics_file(d)) if m.get("iteration", 0) >= 1]
        spec = iteration_spec(cfg, led["rollout_backend"])
        full = spec.cost(trained_share=1.0)["update"].model  # one full iteration, every row trained (planned lengths)
        cfg["grpo"]["skip_zero_advantage"] = False
        t_noskip = solve(iteration_spec(cfg, led["rollout_backend"]), float(cfg["budget"]["flops"]),
                         int(cfg["budget"]["max_iterations"])).iterations
        act = led["actual"]
        it = act["iterations"]
        regimes.setdefault(jid.rsplit("_s", 1)[0], []).append({
            "zero": statistics.mean(m["train/frac_zero_std_groups"] for m in lines),
            "trained": act["rows"]["trained"] / act["rows"]["total"],
            "update_ratio": (act["flops"]["update"] / it) / full,
            "T": it, "T_planned": led["planned"]["iterations"], "T_noskip": t_noskip,
            "used": act["flops"]["total"] / led["budget_flops"]})
    print(f"{'regime':<16} {'zero-adv':>8} {'trained':>8} {'upd/it vs all rows':>18} {'T run':>6} {'T plan':>6} "
          f"{'T no skip':>9} {'T gain':>6} {'budget used':>11}")
    for name, js in sorted(regimes.items()):
        m = {k: statistics.mean(j[k] for j in js) for k in js[0]}
        print(f"{name:<16} {m['zero']:8.3f} {m['trained']:8.3f} {m['update_ratio']:18.3f} {m['T']:6.0f} "
              f"{m['T_planned']:6.0f} {m['T_noskip']:9.0f} {m['T'] / m['T_noskip']:6.2f} "
              f"{min(j['used'] for j in js):.4f}-{max(j['used'] for j in js):.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
