"""`race plan`, `race flops`, `race mem` and `race validate`: the grid before anything runs.

build.py             expand a sweep, compose and budget every job, write the sweep folder
wall.py              each job's planned wall time and how many run at once
cpu_probe.py         a short, cached probe of this CPU: the factor the CPU rates are scaled by
walltime_eval.py     the evaluation's share of a plan's time
measured.py          what a finished sweep measured (rates, informative shares) for the next plan
learned.py           the CPU rates race run measured on this machine, kept for its next plans
race_plan.py         a grid's race block: the schedule, the first look's seeds
race_price.py        a race's price: jobs, FLOPs and time at its minimum, expected and maximum
power.py             the smallest effects the grid detects with 80% power, per condition
render.py            print the plan, one job's FLOP ledger, one job's memory ledger
flops_audit.py       `race flops --audit`: cost/flops.py against torch's FlopCounterMode (imports torch)
memory_audit.py      `race mem --audit`: cost/memory.py against measured peaks on fake tensors (imports torch)
validate.py          turn a pilot's recommendation into a validation sweep
validate_design.py   the validation's fresh items and its seeds per condition by power
validate_preview.py  `race validate`'s preview at the console's width
"""
