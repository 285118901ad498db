"""Benchmark the GRPO update alone (Job.update) on one fixed rollout batch: median ms per call.

    python benchmarks/bench_update.py                    # zoo:tiny-s, B=8, G=8, 48 tokens, mu=1 and mu=2
    python benchmarks/bench_update.py --repeats 20 -- grpo.micro_batch_size=16

One Job is set up per setting, one rollout batch is sampled, then `update` runs --repeats
times on it (the weights move, the shapes do not). Prints one line per setting; compare two
trees by running this file with each tree first on PYTHONPATH, alternating.
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
            times = []
            for _ in range(args.repeats):
                t0 = time.perf_counter()
                out = job.update(ro, adv)
                times.append(time.perf_counter() - t0)
            print(f"mu={mu} {' '.join(args.overrides)}: update median {1000 * statistics.median(times):.1f} ms "
                  f"over {args.repeats} (executed {out['flops'].executed:.4g} FLOPs, model {out['flops'].model:.4g})",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
