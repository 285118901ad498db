"""A stand-in for `python -m race_cli.engine.reeval --job-dir DIR --items N` in the race-loop tests: no torch.

    python tests/fake_reeval.py --job-dir runs/<sweep>/jobs/<id> --items N

Writes the job's eval-more.json as engine/reeval.py does (atomically, the same fields), its per-item scores
from the fake job's truth (fake_job.truth_items) on N items instead of its `items`: the first ones are the
summary's, as the engine's are (item i's score depends on the item and the seed only)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
for p in (str(ROOT), str(Path(__file__).resolve().parent)):
    if p not in sys.path:
        sys.path.insert(0, p)

from fake_job import truth_items  # noqa: E402
from race_cli.io import atomic_write_json, read_json  # noqa: E402

HERE = Path(__file__).resolve()


def command(items: int):
    """The job command a test puts in place of pool/reeval.reeval_command(items)."""
    return lambda job_dir: [sys.executable, str(HERE), "--job-dir", str(job_dir), "--items", str(items)]


def main() -> int:
    import yaml

    ap = argparse.ArgumentParser()
    ap.add_argument("--job-dir", type=Path, required=True)
    ap.add_argument("--items", type=int, required=True)
    a = ap.parse_args()
    cfg = yaml.safe_load((a.job_dir / ".hydra" / "config.yaml").read_text())
    fake = dict(cfg["fake"])
    base = read_json(a.job_dir / "summary.json")["eval_items"]
    more = truth_items(fake | {"items": a.items}, int(cfg["seed"]))
    ev, ev0 = more["eval_items"], more["eval_items_initial"]
    for t in base:
        assert ev[t]["ids"][:len(base[t]["ids"])] == base[t]["ids"]  # the summary's items come first
    atomic_write_json(a.job_dir / "eval-more.json", {
        "items": a.items, "samples": 1, "start_samples": 1, "base_items": {t: len(v["ids"]) for t, v in base.items()},
        "eval": {"accuracy": more["eval"], "items": ev}, "eval_initial": {"accuracy": more["eval_initial"],
                                                                         "items": ev0},
        "excluded": {t: [] for t in ev}, "start_key": None, "seconds": {"final_per_item": 0.001}})
    print(f"fake re-evaluation of {a.job_dir.name} on {a.items} items", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
