"""`race plan`, `race flops`, `race mem` and `race validate`: the grid before anything runs.

build.py     expand a sweep, compose and budget every job, write the sweep folder
render.py    print the plan, one job's FLOP ledger, one job's memory ledger
validate.py  turn a pilot's recommendation into a validation sweep
"""
