"""Benchmark the GRPO update alone (Job.update) on one fixed rollout batch: median ms per call.

    python benchmarks/bench_update.py                    # zoo:tiny-s, B=8, G=8, 48 tokens, mu=1 and mu=2
    python benchmarks/bench_update.py --repeats 20 -- grpo.micro_batch_size=16
    python benchmarks/bench_update.py --zero-shares 0.61 0.46 --mu 1 -- grpo.group_size=4 lora.enabled=false \
        grpo.micro_batch_size=auto                       # skipping zero-advantage rows, before / after

One Job is set up per setting, one rollout batch is sampled, then `update` runs --repeats
times on it (the weights move, the shapes do not). Prints one line per setting; compare two
trees by running this file with each tree first on PYTHONPATH, alternating.

With --zero-shares, the advantages of the first round(share x B) groups are set to exactly 0
(their rewards all equal, as in that share of a rule-reward job's groups) and each repeat runs
the update twice, alternating, with grpo.skip_zero_advantage off (before: every row runs) and on
(after): medians of each, the median of the per-repeat ratios, and the FLOPs each charged.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent)) if "--no-path" not in sys.argv else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--mu", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-path", action="store_true", help="import race_cli from PYTHONPATH, not this checkout")
    ap.add_argument("--zero-shares", type=float, nargs="*", default=None,
                    help="shares of groups with advantage exactly 0: time the update with skipping off and on")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args(argv)

    import torch

    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    for mu in args.mu:
        ov = ["grid=none", "threads=1", "budget.flops=1e18", "task.num_eval=8", f"grpo.updates_per_batch={mu}",
              *args.overrides]
        with tempfile.TemporaryDirectory() as tmp:
            job = Job(compose(ov), Path(tmp) / "bench", ov, log=lambda m: None)
            job.setup()
            job.iteration = 0
            torch.manual_seed(0)
            ro = job.rollout.generate([job.train_prompts.ids(j) for j in job.batch(1)],
                                      group_size=job.cfg.grpo.group_size, greedy=False)
            adv = torch.randn(ro.completion_ids.size(0))
            if args.zero_shares is None:
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    out = job.update(ro, adv)
                    times.append(time.perf_counter() - t0)
                print(f"mu={mu} {' '.join(args.overrides)}: update median {1000 * statistics.median(times):.1f} ms "
                      f"over {args.repeats} (executed {out['flops'].executed:.4g} FLOPs, model {out['flops'].model:.4g})",
                      flush=True)
                continue
            G, B = job.cfg.grpo.group_size, job.cfg.grpo.prompts_per_iter
            for share in args.zero_shares:
                zero = round(share * B)
                a = adv.clone()
                a[: zero * G] = 0.0  # those groups' rewards are all equal: advantage exactly 0
                times, flops = {False: [], True: []}, {}
                for k in range(args.repeats):
                    for skip in ((False, True) if k % 2 == 0 else (True, False)):
                        job.cfg.grpo.skip_zero_advantage = skip
                        t0 = time.perf_counter()
                        out = job.update(ro, a)
                        times[skip].append(time.perf_counter() - t0)
                        flops[skip] = out["flops"].model
                ratios = [t1 / t0 for t0, t1 in zip(times[False], times[True])]
                print(f"mu={mu} zero-advantage groups {zero}/{B} ({zero / B:.2f}) {' '.join(args.overrides)}: "
                      f"update median {1000 * statistics.median(times[False]):.1f} ms without skipping, "
                      f"{1000 * statistics.median(times[True]):.1f} ms with; after/before median "
                      f"{statistics.median(ratios):.2f} over {args.repeats} alternating pairs; model FLOPs "
                      f"{flops[False]:.4g} -> {flops[True]:.4g} ({flops[True] / flops[False]:.2f})", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
