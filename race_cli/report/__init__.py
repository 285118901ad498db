"""`race report`: read finished sweeps, rank the allocation regimes, fit, recommend, write it up.

table.py       every job of the sweeps into one DataFrame (failed and unfinished ones listed)
rank.py        regimes per condition with intervals over evaluation items and seeds, gain over the start
response.py    the local response of the target to the allocation variable p, with its interval
frontier.py    the rankings at every equal-FLOP checkpoint: the frontier across budgets (shown: views/)
curve.py       a compute curve per regime, fitted on the equal-FLOP checkpoints
joint.py       the joint comparison: every (model, reward, G, mu) at the same FLOPs (shown: views/)
recommend.py   the regimes worth validating, with the caveat beside them
findings.py    what the pilot answers, on one screen, first in the console and summary.md
bracket.py     where the best sits on the G x mu grid: the edge, the run past it, search vs learning
predicted.py   the predictions a validation checks: endpoint ranking and compute curves (shown: views/)
validation.py  a validation sweep's verdict on the pilot's call (best - control, paired; shown: views/)
labels.py      labels read back from provenance.json / report.json, checked against the jobs they name
more_items.py  the ranking's items from eval-more.json where every job of a condition has one
race.py        a raced sweep's state per condition, from its folder alone (the statistics: stats/race.py)
words.py       one wording per verdict (the findings, the joint comparison, a race's states)
records.py     the Report's typed parts (Frontier, Joint, Validation, Totals), shared by computing and views
build.py       `build_report(ReportOptions) -> Report`: everything the report computes, nothing written
views/        the Report's views: the files' texts, the console, the top of the ranking `race run` prints;
               the rankings' tables, summary.md and report.json (views/render.py), the joint comparison
               (views/joint.py), the frontier, predictions and validation sections, the PNGs (matplotlib only
               when drawn)
command.py     `race report` (and `race run`'s end): build the Report, check and write its files, show it

Imports neither torch nor transformers.
"""
