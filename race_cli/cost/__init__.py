"""What a job costs, as pure functions the plan and the job share (no torch, no files):

flops.py         FLOP formulas: forward, train step, sampling call, reward model, one GRPO iteration; which
                 models are too big for CPU workers
budget.py        the backend rule, the budget solver, the planned ledger and the live `Ledger`
memory.py        peak device bytes per phase, the micro-batch that fits
walltime.py      planned wall time of a job and a grid from per-phase rates

Their audits against torch (which run the engine's own code) are plan/flops_audit.py and plan/memory_audit.py.
"""
