"""Benchmark one tiny GRPO job on CPU: wall seconds per phase and the loop's own overhead.

    python benchmarks/bench_job.py                       # zoo:tiny-s, 10 iterations, 1 thread
    python benchmarks/bench_job.py --iterations 20 --model /path/to/model --threads 2 -- grpo.group_size=4

Runs the real engine (race_cli.engine.job.Job) with a budget large enough that only
--iterations stops it, and times the model's own work with wrappers: the policy's `generate`,
its `forward` (outside generate) and every `backward`. Everything else inside an iteration
(padding, masks, advantages, the loss arithmetic, the ledger, optimizer steps) is the loop's
overhead; the share is printed per iteration and for the whole training loop (adding metrics
lines and checkpoints, evaluation excluded). Target: overhead under 10% of iteration time.
"""

from __future__ import annotations

import argparse
import functools
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class ModelClock:
    """Seconds spent inside the wrapped model calls (nested calls counted once)."""

    def __init__(self):
        self.seconds, self.depth, self.paused = 0.0, 0, False
        self.calls = {"generate": 0, "forward": 0, "backward": 0}

    def wrap(self, fn, kind):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            if self.depth or self.paused:
                return fn(*args, **kwargs)
            self.depth += 1
            self.calls[kind] += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - t0
                self.depth -= 1
        return timed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="zoo:tiny-s", help="model.path (zoo:tiny-s, a local folder)")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("overrides", nargs="*", help="extra config overrides")
    args = ap.parse_args(argv)

    import torch

    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    ov = ["grid=none", f"model.path={args.model}", f"threads={args.threads}", "budget.flops=1e18",
          f"budget.max_iterations={args.iterations}", "eval.every=100000", "checkpoint.every=100000",
          "task.num_eval=50", *args.overrides]
    cfg = compose(ov)
    with tempfile.TemporaryDirectory() as tmp:
        job = Job(cfg, Path(tmp) / "bench", ov, log=lambda m: None)
        job.job_dir.mkdir(parents=True)
        t0 = time.perf_counter()
        job.setup()
        setup_s = time.perf_counter() - t0
        clock = ModelClock()
        model = job.policy.model
        model.generate = clock.wrap(model.generate, "generate")
        model.forward = clock.wrap(model.forward, "forward")
        torch.Tensor.backward = clock.wrap(torch.Tensor.backward, "backward")
        evaluate = job.evaluate

        def untimed_eval():
            clock.paused = True
            try:
                return evaluate()
            finally:
                clock.paused = False

        job.evaluate = untimed_eval
        job.start_or_resume()
        eval0 = job.ledger.eval_seconds
        t0 = time.perf_counter()
        job.train()
        loop_s = time.perf_counter() - t0 - (job.ledger.eval_seconds - eval0)
        led = job.ledger
        iters = led.iterations
        it_s = led.seconds["total"]
        print(f"model {args.model}  threads {torch.get_num_threads()}  iterations {iters}  "
              f"B={cfg.grpo.prompts_per_iter} G={cfg.grpo.group_size} mu={cfg.grpo.updates_per_batch} "
              f"max_new_tokens={cfg.rollout.max_new_tokens}  setup {setup_s:.1f} s")
        for p in ("rollout", "reward", "update"):
            print(f"  {p:8s} {led.seconds[p]:7.2f} s  ({led.seconds[p] / it_s:5.1%} of iteration time)")
        print(f"  iteration total {it_s:7.2f} s  ({it_s / iters * 1000:.0f} ms per iteration)")
        print(f"  model calls {clock.seconds:7.2f} s  {clock.calls}")
        print(f"  overhead inside iterations: {1 - clock.seconds / it_s:6.1%}")
        print(f"  overhead of the training loop (with metrics, ledger, final checkpoint; no eval): "
              f"{1 - clock.seconds / loop_s:6.1%} of {loop_s:.2f} s")
        print(f"  completion tokens {led.tokens['completion']}, model FLOPs "
              f"{led.spent():.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
