"""What a job costs, as pure functions the plan and the job share (no torch, no files):

flops.py         FLOP formulas: forward, train step, sampling call, reward model, one GRPO iteration
budget.py        the backend rule, the budget solver, the planned ledger and the live `Ledger`
memory.py        peak device bytes per phase, the micro-batch that fits
walltime.py      planned wall time of a job and a grid from per-phase rates
flops_audit.py   flops.py against torch's FlopCounterMode (imports torch)
memory_audit.py  memory.py against measured peaks on fake tensors (imports torch)
"""
