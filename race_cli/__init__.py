"""race: run RACE pilot grids of budget-matched GRPO jobs and rank where the compute should go.

The package follows the flow, one folder per layer (docs/design.md "Where things live"):

    config/   what a job is: schema, Hydra composition, sweep syntax and job ids
    cost/     what it costs, pure: FLOPs, the budget solver and live Ledger, memory (+ their audits)
    plan/     race plan / flops / mem / validate: build the grid, write the sweep folder, print
    engine/   race train: one GRPO job (setup, rollout backends, log-probs, loss, checkpoints)
    pool/     race run: local slots, the fork server, SLURM
    report/   race report: read, rank, fit, recommend, validation verdicts, plots
    stats/    the inference model, pure: variance parts, decisions, power, compute curves
    tasks/, rewards/, answers/, zoo/   data, feedback, the pure answer checkers, the embedded models

and, shared by all of them: cli.py (the typer app; __main__.py runs it for `python -m race_cli`), machine.py (every probe of the machine),
folder.py (the sweep folder's paths and identity), plan_file.py (a race's plan.json and race record,
checked as data), regime.py (what a regime and a condition are: the keys jobs are grouped by),
status.py (status.json), lock.py (the sweep and job locks), io.py (atomic writes and the race cache),
quantile_cache.py (the statistics' quantiles kept in the race cache across reports),
guide.py (`race docs`: the guides, from a checkout or a pip install),
fmt.py (number formats), errors.py (RaceError).
A pure core (cost, planning, advantages and losses, rewards, ranking) inside a thin shell (CLI,
pool, job loop); docs/files.md lists every file a sweep writes.
"""

__version__ = "0.1.0"
