"""race: run RACE pilot grids of budget-matched GRPO jobs and rank where the compute should go.

The package is a pure core (plan, ledger, solver, advantages, losses, rewards, ranking)
inside a thin shell (CLI, pool, job loop). See ../shared/DESIGN.md for the flow and
docs/files.md for every file a sweep writes.
"""

__version__ = "0.1.0"
