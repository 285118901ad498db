"""The plan table and its pricing for GPUs: at 80 columns `race plan grid=pilot --gpu H100x8` keeps the job id,
the search / learning / feedback shares, the peak memory and the job time of every job; at 120, 180 and 240
columns no cell is cut; job time and the grid's wall time never share a header. A grid whose jobs need a GPU
is priced on one (an assumed H100, said on the first line) where none is visible and no --gpu is given,
never on CPU rates borrowed from a tiny model; --gpu-mem alone means a GPU."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

ROOT = Path(__file__).resolve().parents[1]
NO_GPU = {"CUDA_VISIBLE_DEVICES": ""}  # machine.visible_gpus: none, on any machine


def _race(*args: str, columns: int = 80, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": str(columns), **(env or {})}
    return subprocess.run([sys.executable, "-m", "race_cli", *args], capture_output=True, text=True, env=full,
                          timeout=600)


def _table(text: str) -> tuple[list[str], list[list[str]]]:
    """(header cells, job rows' cells) of the plan table (single spaces inside a cell: 'GiB (update)')."""
    lines = text.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("job id"))
    split = lambda line: re.split(r"\s{2,}|(?<=\S) (?=\S)(?![^(]*\))(?!GiB)", line.strip())
    header = [c for c in re.split(r"(?<=\S) +(?=\S)", lines[head].replace("job id", "job_id").replace(
        "peak mem", "peak_mem").replace("job time", "job_time"))]
    rows = []
    for line in lines[head + 2:]:
        if not line.strip():
            break
        rows.append(split(line))
    return header, rows


@pytest.fixture(scope="module")
def pilot_outputs():
    return {w: _race("plan", "grid=pilot", "--gpu", "H100x8", columns=w) for w in (80, 120, 180, 240)}


def test_pilot_at_80_columns_shows_the_split_memory_and_time_of_every_job(pilot_outputs):
    from race_cli.plan.build import build_plan
    from race_cli.fmt import pct

    got = pilot_outputs[80]
    assert got.returncode == 0, got.stderr
    assert max(cell_len(line) for line in got.stdout.splitlines()) <= 80
    header, rows = _table(got.stdout)
    assert header[:1] == ["job_id"] and {"search", "learning", "feedback", "peak_mem", "job_time"} <= set(header)
    plan = build_plan(["grid=pilot"], gpu_mem=81559 * 2**20,
                      gpu=__import__("race_cli.cost.walltime", fromlist=["x"]).parse_gpu("H100x8"))
    lines = got.stdout.splitlines()
    for r in plan.rows():  # each job's line carries its id and its three shares
        line = next(line for line in lines if line.startswith(r["job_id"] + " "))
        shares = [pct(r["share_search"]), pct(r["share_learning"]), pct(r["share_feedback"])]
        assert re.search(r"\s+".join(map(re.escape, shares)), line), (line, shares)
        assert " GiB" in line and re.search(r"\d+[hm]\d+[ms]\s*$", line)
    assert len(plan.rows()) == 96  # the first look of the race: 48 regimes x 2 seeds


@pytest.mark.parametrize("width", [120, 180, 240])
def test_no_cell_is_cut_at_any_width(pilot_outputs, width):
    got = pilot_outputs[width]
    assert got.returncode == 0, got.stderr
    assert "…" not in got.stdout and max(cell_len(line) for line in got.stdout.splitlines()) <= width
    # every job id, model name and reward name appears whole
    from race_cli.plan.build import build_plan

    for r in build_plan(["grid=pilot"]).rows():
        assert r["job_id"] + " " in got.stdout
    if width >= 180:  # wide enough for every column: G and μ are filled, never blank
        header = next(line for line in got.stdout.splitlines() if line.startswith("job id"))
        assert " G " in header and " μ " in header
        line = next(line for line in got.stdout.splitlines() if line.startswith("qwen2.5-0.5b_G16_mu2_prm-7b_s0 "))
        assert re.search(r"qwen2\.5-0\.5b\s+16\s+2\s+prm-7b", line), line


def test_job_time_and_wall_time_never_share_a_header(pilot_outputs):
    text = pilot_outputs[240].stdout
    header = next(line for line in text.splitlines() if line.startswith("job id"))
    assert "job time" in header and " wall" not in header
    total = next(line for line in text.splitlines() if line.startswith("total"))
    wall = re.search(r"planned wall time: (\S+) for the grid on 8 H100 GPU\(s\).*?\((\S+) of job time", text, re.S)
    assert wall and wall.group(2) in total and wall.group(1) != wall.group(2)  # 1h56m of wall, 15h30m of job time


@pytest.mark.parametrize("extra", [[], ["--gpu-mem", "80GiB"]])
def test_a_gpu_grid_without_a_gpu_is_priced_on_an_assumed_gpu_said_first(extra):
    got = _race("plan", "grid=pilot", *extra, env=NO_GPU)
    assert got.returncode == 0, got.stderr
    first = got.stdout.splitlines()[0]
    assert first.startswith("GPU assumed: 1 H100 per job"), first
    text = " ".join(got.stdout.split())
    assert "GPU-hours" in text and "CPU worker(s)" not in text and "CPU defaults" not in text and "tiny-m" not in text
    assert re.search(r"for the grid on 1 H100 GPU\(s\) \(assumed", text)


def test_gpu_mem_alone_means_a_gpu_even_for_tiny_models():
    got = _race("plan", "grid=none", "--gpu-mem", "24GiB", env=NO_GPU)
    assert got.returncode == 0, got.stderr
    assert "--gpu-mem names a GPU's memory" in " ".join(got.stdout.split()) and "GPU-hours" in got.stdout
    plain = _race("plan", "grid=none", env=NO_GPU)  # the tiny default on CPU: CPU workers, no assumption
    assert "GPU assumed" not in plain.stdout and "CPU worker(s)" in plain.stdout


def test_a_named_gpu_is_never_called_assumed():
    got = _race("plan", "grid=pilot", "--gpu", "A100x4", env=NO_GPU)
    assert got.returncode == 0 and "GPU assumed" not in got.stdout and "--gpu A100x4" in got.stdout
