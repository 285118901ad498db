"""race: run RACE pilot grids of budget-matched GRPO jobs and rank where the compute should go.

The package is a pure core (plan, budget, ledger, advantages, losses, rewards, ranking)
inside a thin shell (CLI, pool, job loop). See docs/design.md for the flow, the FLOP
conventions and the layout, and docs/files.md for every file a sweep writes.
"""

__version__ = "0.1.0"
