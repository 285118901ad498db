"""Write runs/tiny-demo: a finished sweep of the default grid's shape with a known truth, whose findings
docs/tutorial.md quotes (tests/test_docs.py checks the quote against `race report runs/tiny-demo`).

    python scripts/tutorial_sweep.py [FOLDER]        # default runs/tiny-demo
    COLUMNS=100 race report runs/tiny-demo --no-plots

The jobs are synthetic (tests/report_fixtures.py writes every file a finished job has, scores drawn
from the truth below): tiny-s and tiny-m x G in {4, 8} x μ in {1, 2} x rule / tiny-prm feedback, 2 seeds,
8e11 FLOPs, 400 items x 2 samples on arithmetic and arithmetic-hard. The truth: the learning share p
helps up to p = 0.8 (quadratic in log p), tiny-m is 0.06 better than tiny-s, the reward model adds
nothing, and arithmetic-hard is 0.15 harder. A real run's findings: README.md.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from report_fixtures import Regime, build_sweep  # noqa: E402

# the default grid's regimes, each at its planned update fraction p (race plan's `p` column)
REGIMES = [Regime(4, 1, 0.64), Regime(4, 2, 0.78), Regime(8, 1, 0.66), Regime(8, 2, 0.80)]
CONDITIONS = [{"model": m, "budget_flops": 8e11, "reward": r, "task": "arithmetic"}
              for m in ("tiny-s", "tiny-m") for r in ("rule", "tiny-prm")]


def truth(top: float):
    return lambda p, cond: top + (0.06 if cond["model"] == "tiny-m" else 0.0) - 2.0 * math.log(p / 0.8) ** 2


def main(folder: Path) -> Path:
    return build_sweep(folder, conditions=CONDITIONS, regimes=REGIMES, seeds=(0, 1), n_items=400, samples=2,
                       targets={"arithmetic": truth(0.55), "arithmetic-hard": truth(0.4)},
                       feedback={"rule": 0.0, "tiny-prm": 0.0})


if __name__ == "__main__":
    print(main(Path(sys.argv[1] if len(sys.argv) > 1 else "runs/tiny-demo")))
