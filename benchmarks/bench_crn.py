"""What common random numbers buy: the per-item variance of a paired difference between two policies'
evaluation scores, sampled with the same evaluation streams (CRN) and with independent ones.

    python benchmarks/bench_crn.py RUNS/tiny-<hash>/jobs/<job A> RUNS/tiny-<hash>/jobs/<job B> [--seeds 3]

Both jobs must be full fine-tuning jobs of the same model (their `adapter/` holds the whole model). Each
policy is evaluated like a job evaluates (Job.evaluate, the job's own eval settings) once per sample seed
s = 0..seeds-1. CRN pairs compare A and B at the same sample seed (what every job of a sweep now does);
independent pairs compare A at seed s with B at seed s+1 (what the jobs did when evaluation sampled
from each job's training stream). Prints per target the mean over pairs of Var_i(y_A,i - y_B,i), the
binomial part 2 p(1-p)/(k-1) averaged over items, and the ratio CRN / independent.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("job_a")
    ap.add_argument("job_b")
    ap.add_argument("--seeds", type=int, default=3)
    args = ap.parse_args(argv)

    import numpy as np
    from safetensors.torch import load_file

    from race_cli.config.compose import compose
    from race_cli.cost.budget import Ledger
    from race_cli.engine.job import Job
    from race_cli.io import read_json

    scores: dict = {}
    for name in ("a", "b"):
        job_dir = Path(getattr(args, f"job_{name}"))
        ov = [o for o in read_json(job_dir / "summary.json")["overrides"]]
        for s in range(args.seeds):
            job = Job(compose(["grid=none", *ov, f"eval.sample_seed={s}", "threads=1"]), Path("/tmp/bench-crn") / name,
                      [], log=lambda m: None)
            job.setup()
            job.policy.model.load_state_dict(load_file(str(job_dir / "adapter" / "model.safetensors")), strict=False)
            job.ledger = Ledger()
            ev = job.evaluate()
            for t, blk in ev["items"].items():
                scores[(name, s, t)] = np.array(blk["scores"])
            k = int(job.cfg.eval.samples)
            print(f"evaluated {name} ({job_dir.name}) at sample seed {s}: "
                  + ", ".join(f"{t} {a:.3f}" for t, a in ev["accuracy"].items()), flush=True)
    for t in sorted({t for _, _, t in scores}):
        crn = [np.var(scores[("a", s, t)] - scores[("b", s, t)], ddof=1) for s in range(args.seeds)]
        ind = [np.var(scores[("a", s, t)] - scores[("b", (s + 1) % args.seeds, t)], ddof=1) for s in range(args.seeds)]
        binom = np.mean([np.mean(y * (1 - y)) / (k - 1) for key, y in scores.items() if key[2] == t]) * 2
        print(f"{t}: Var(paired difference) per item: CRN {np.mean(crn):.4f}, independent {np.mean(ind):.4f} "
              f"(binomial part 2p(1-p)/k {binom:.4f}); CRN / independent = {np.mean(crn) / np.mean(ind):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
