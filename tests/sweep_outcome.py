"""What a finished sweep's jobs hold, compared between an uninterrupted run and a killed-and-rerun one."""

from __future__ import annotations

import json
from pathlib import Path


def job_outcomes(sweep: Path, summary: bool = False) -> dict:
    """Per job: (metrics rows without their wall times, the saved adapter's bytes, the state), plus
    summary.json when `summary` (the vLLM tests read its sampler gap)."""
    out = {}
    for job in sorted((sweep / "jobs").iterdir()):
        rows = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines() if line.strip()]
        rows = [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]
        weights = (job / "adapter" / "adapter_model.safetensors").read_bytes()
        state = json.loads((job / "status.json").read_text())["state"]
        out[job.name] = (rows, weights, state) + ((json.loads((job / "summary.json").read_text()),) if summary else ())
    return out
