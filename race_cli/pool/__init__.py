"""`race run`: run every job of a sweep folder, one process per job, and keep status.json true.

- local.py           the local pool: GPUs (own CUDA_VISIBLE_DEVICES per job) or CPU workers, longest job first
- forkserver.py      CPU jobs forked from a server that imported torch once (forkserver_main.py runs in it)
- slurm.py           the same grid as one SLURM job array through submitit, requeued on preemption
- display.py         the live rich display on a terminal, a line per event otherwise
- reeval.py          a sweep's finished jobs scored on more items, each a process on the pool (engine/reeval.py)
- race_loop.py       a raced sweep: run a look, decide (report/race.py), open the next look's jobs, repeat
- run.py             `run_main(RunOptions)`, what `race run` calls: plan -> sweep folder -> pool -> report's top

The sweep lock and status records it keeps are race_cli/lock.py and race_cli/status.py; the
machine's GPUs and cores come from race_cli/machine.py. Nothing here imports torch at module
level: `race --help` stays fast.
"""
