"""`race run`: run every job of a sweep folder, one process per job, and keep status.json true.

- local.py    the local pool: GPUs (own CUDA_VISIBLE_DEVICES per job) or CPU workers, longest job first
- slurm.py    the same grid as one SLURM job array through submitit, requeued on preemption
- lock.py     `.race.lock`, one `race run` per sweep folder, stale locks taken over
- status.py   status.json around each attempt (attempts, host, device, exit code, log tail)
- display.py  the live rich display on a terminal, a line per event otherwise
- command.py  `run_main`, what `race run` calls: plan -> sweep folder -> pool -> report

Nothing here imports torch at module level: `race --help` stays fast.
"""
