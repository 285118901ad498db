"""race plan: sweep expansion, job ids, the budget solver and the sweep folder."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from race_cli.config.compose import compose
from race_cli.errors import RaceError
from race_cli.plan.build import build_plan, write_sweep
from race_cli.config.sweep import job_id


def test_default_plan_is_the_tiny_grid():
    plan = build_plan([])
    assert plan.grid["name"] == "tiny"
    assert len(plan.jobs) == 2 * 2 * 2 * 2 * 2  # model x G x mu x reward x seed of conf/grid/tiny.yaml
    assert plan.jobs[0].job_id == "tiny-s_G4_mu1_rule_s0"
    regimes = {(j.config["grpo"]["group_size"], j.config["grpo"]["updates_per_batch"]) for j in plan.jobs}
    assert regimes == {(4, 1), (4, 2), (8, 1), (8, 2)}  # search (G) x learning (mu): G=8 mu=1 vs G=4 mu=2
    assert {j.config["seed"] for j in plan.jobs} == {0, 1}  # two seeds: intervals with training noise
    from race_cli.plan.build import one_seed_regimes

    assert one_seed_regimes(plan.jobs) == 0
    assert one_seed_regimes(build_plan(["seed=0"]).jobs) == 16  # race plan warns about these
    assert len({j.job_id for j in plan.jobs}) == len(plan.jobs)


def test_pilot_grid_is_paper_like():
    plan = build_plan(["grid=pilot"])
    assert len(plan.jobs) == 4 * 3 * 2 * 2 * 2  # x 2 seeds: the first look of its race
    assert list(plan.race.looks) == [2, 3, 4] and len(plan.reserve) == len(plan.jobs)
    models = {j.config["model"]["name"] for j in plan.jobs}
    assert models == {"qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b"}
    assert {j.config["task"]["name"] for j in plan.jobs} == {"gsm8k"}  # grid.fixed applied
    prm = [j for j in plan.jobs if j.config["reward"]["type"] == "prm"]
    assert prm and all(j.row()["share_feedback"] > 0 for j in prm)


def test_sweep_forms_range_glob_and_plus():
    plan = build_plan(["grid=none", "grpo.group_size=range(4,13,4)", "model=glob(tiny-*)", "seed=0,1"])
    assert len(plan.jobs) == 3 * 3 * 2
    assert sorted({j.config["grpo"]["group_size"] for j in plan.jobs}) == [4, 8, 12]
    assert {j.config["model"]["name"] for j in plan.jobs} == {"tiny-s", "tiny-m", "tiny-l"}


def test_command_line_axis_replaces_the_grid_axis():
    plan = build_plan(["seed=3"])  # grid=tiny sweeps the seed; a fixed value wins
    assert {j.config["seed"] for j in plan.jobs} == {3}
    assert len(plan.jobs) == 16  # model x G x mu x reward (2 x 2 x 2 x 2)
    plan = build_plan(["grpo.group_size=16"])  # and a value typed beats the grid's fixed one
    assert {j.config["grpo"]["group_size"] for j in plan.jobs} == {16}


@pytest.mark.parametrize("overrides, fragment", [
    (["grpo.group_size=shuffle(4,8)"], "shuffle()"),
    (["grpo.lr=interval(0.1,1.0)"], "interval()"),
    (["model=glob(nothing*)"], "expands to no values"),
    (["grid=tiny,pilot"], "one grid at a time"),
    (["model=tiny-s,tiny-x"], "Unknown model option 'tiny-x'"),
    (["grpo.group_size=4,abc"], "Wrong type for grpo.group_size"),
    (["budget.flops=1e9"], "smaller than one iteration"),
    (["grid=none", "seed=range(0,600)"], "more than the maximum"),
    (["~seed=0,1"], "deleting keys is not supported"),  # swept: was refused only at composition, "Unknown key"
    (["~grpo.lr=0.1"], "deleting keys is not supported"),
])
def test_bad_sweeps_are_refused(overrides, fragment):
    with pytest.raises(RaceError) as err:
        build_plan(overrides)
    assert fragment in str(err.value)


def test_budget_error_names_the_job_and_the_shortfall():
    with pytest.raises(RaceError) as err:
        build_plan(["grid=none", "model=tiny-s", "budget.flops=1e9"])
    msg = str(err.value)
    assert "This job" in msg and "short by" in msg


def test_fast_path_equals_hydra_composition():
    """The plain-dict override path must give exactly what Hydra composes for the same overrides."""
    overrides = ["grid=none", "model=tiny-m", "reward=prm", "grpo.group_size=4", "grpo.lr=3e-4",
                 "rollout.expected_completion_tokens=20", "lora.enabled=false", "eval.targets=[arithmetic,math500]",
                 "reward.model.arch.num_hidden_layers=3", "device=cpu", "budget.flops=5e12"]
    (job,) = build_plan(overrides).jobs
    reference = OmegaConf.to_container(compose(overrides), resolve=True)
    assert job.config == reference


def test_solver_matches_a_hand_count():
    plan = build_plan(["grid=none", "model=tiny-s", "budget.flops=1.1e11"])
    (job,) = plan.jobs
    per_it = sum(f.model for f in job.per_iteration.values())
    full = math.floor(1.1e11 / per_it)
    assert job.budget.full_iterations == full
    # the rest buys b < B = 8 prompts: every phase is linear in the prompts (one group each)
    b = math.floor((1.1e11 - full * per_it) / (per_it / 8))
    assert 0 < b < 8 and job.budget.last_prompts == b and job.iterations == full + 1
    assert job.row()["planned_flops_total"] == pytest.approx((full + b / 8) * per_it, rel=1e-12)
    assert job.row()["planned_flops_total"] <= 1.1e11
    # the rollout phase by hand, tiny-s (d=64, L=2, h=4, kv=2, f=128, V=257), B*G=64 sequences,
    # prompt 40 + completion 33 tokens (conf/config.yaml), LoRA r=16 on all 7 projections:
    d, L, f, V, r = 64, 2, 128, 257, 16
    n_body = L * (d * (64 + 2 * 32) + 64 * d + 3 * d * f)  # q + k,v (2 kv heads x 16) + o + mlp
    lora = L * 2 * r * ((d + 64) + 2 * (d + 32) + (64 + d) + 2 * (d + f) + (f + d))  # 2r(in+out) per matrix
    prefill = 40 * (2 * n_body + lora) + 4 * L * 4 * 16 * (40 * 41 / 2) + 2 * d * V  # logits at last prompt pos
    decode = sum(2 * n_body + lora + 4 * L * 4 * 16 * t + 2 * d * V for t in range(41, 41 + 32))
    # 33 sampled tokens = prefill's logits + 32 decode forwards (the last token is never fed back)
    # rollout.backend=auto (lean without vLLM): one prefill per prompt (B=8) shared by its G=8 rows
    assert job.per_iteration["rollout"].model == pytest.approx(8 * prefill + 64 * decode, rel=1e-9)
    # rollout.backend=hf: every one of the 64 rows prefilled
    (hf,) = build_plan(["grid=none", "model=tiny-s", "budget.flops=1e11", "rollout.backend=hf"]).jobs
    assert hf.per_iteration["rollout"].model == pytest.approx(64 * (prefill + decode), rel=1e-9)


def test_job_ids_are_readable_and_safe():
    assert job_id(["model=tiny-s", "grpo.group_size=4", "grpo.updates_per_batch=2", "reward=prm", "seed=1"]) \
        == "tiny-s_G4_mu2_prm_s1"
    assert job_id(["task.path=/data/gsm 8k"]) == "path--data-gsm-8k"
    assert job_id([]) == "job"
    long = job_id([f"grpo.lr={i}" for i in range(40)])
    assert len(long) <= 120


def test_write_sweep_layout_and_idempotence(tmp_path):
    plan = build_plan(["model=tiny-s"])
    out = tmp_path / "sweep"
    assert write_sweep(plan, out) is True
    assert (out / "multirun.yaml").is_file() and (out / "plan.csv").is_file()
    doc = json.loads((out / "plan.json").read_text())  # the tiny grid races: the first look's rows, the rest reserved
    rows = doc["jobs"]
    assert [r["job_id"] for r in rows] == [j.job_id for j in plan.jobs]
    assert doc["race"] == plan.race.to_json() and [r["job_id"] for r in doc["reserve"]] == [j.job_id for j in plan.reserve]
    assert sorted(p.name for p in (out / "jobs").iterdir()) == sorted(j.job_id for j in plan.jobs)
    for job in plan.jobs:
        hydra = out / "jobs" / job.job_id / ".hydra"
        cfg = yaml.safe_load((hydra / "config.yaml").read_text())
        assert cfg == job.config
        assert yaml.safe_load((hydra / "overrides.yaml").read_text()) == job.overrides
        assert json.loads((hydra.parent / "status.json").read_text())["state"] == "pending"
    multirun = yaml.safe_load((out / "multirun.yaml").read_text())
    assert multirun["overrides"] == ["model=tiny-s"] and multirun["grid"]["name"] == "tiny"
    (out / "jobs" / plan.jobs[0].job_id / "marker").write_text("progress")
    assert write_sweep(plan, out) is False  # same plan: untouched
    assert (out / "jobs" / plan.jobs[0].job_id / "marker").is_file()
    with pytest.raises(RaceError, match="different plan"):
        write_sweep(build_plan(["model=tiny-m"]), out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp folders left


def test_write_sweep_leaves_nothing_when_interrupted(tmp_path, monkeypatch):
    plan = build_plan([])
    import race_cli.plan.build as plan_mod

    def boom(path, obj):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("race_cli.io.atomic_write_json", boom)
    with pytest.raises(OSError):
        plan_mod.write_sweep(plan, tmp_path / "sweep")
    assert list(tmp_path.iterdir()) == []


def _race(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "race_cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "COLUMNS": "200"})


def test_cli_plan_formats_and_exit_codes(tmp_path):
    res = _race("plan", "--format", "json")
    assert res.returncode == 0, res.stderr
    assert len(json.loads(res.stdout)["jobs"]) == 32
    res = _race("plan", "--format", "csv", "model=tiny-s")
    assert res.returncode == 0 and res.stdout.splitlines()[0].startswith("job_id,model,group_size")
    res = _race("plan")
    assert "tiny-s_G4_mu1_rule_s0" in res.stdout and "total" in res.stdout
    res = _race("plan", "grpo.group_size=abc", "--out", str(tmp_path / "s"))
    assert res.returncode == 2 and "Wrong type for grpo.group_size" in res.stderr
    assert not (tmp_path / "s").exists()


def test_plan_and_help_do_not_import_torch():
    code = ("import sys; from race_cli.cli import app; from typer.testing import CliRunner; "
            "r = CliRunner().invoke(app, {args}); assert r.exit_code == 0, r.output; "
            "heavy = [m for m in ('torch', 'transformers', 'peft', 'vllm', 'matplotlib') if m in sys.modules]; "
            "print(heavy); sys.exit(1 if heavy else 0)")
    for args in (["--help"], ["plan"], ["plan", "grid=pilot", "--format", "json"]):
        res = subprocess.run([sys.executable, "-c", code.format(args=args)], capture_output=True, text=True)
        assert res.returncode == 0, f"race {' '.join(args)} imported {res.stdout} {res.stderr[-500:]}"


def test_cli_flops_prints_the_ledger_and_an_exact_audit():
    res = _race("flops", "model=tiny-s", "--audit")
    assert res.returncode == 0, res.stderr
    assert "rollout/search" in res.stdout and "update/learning" in res.stdout
    assert "within the 1% target" in res.stdout
    res = _race("flops", "grpo.group_size=4,8")
    assert res.returncode == 2 and "ONE job" in res.stderr


# --- race plan --gpu KIND[xN]: GPU-hours and memory for a device this machine does not have -------


def test_plan_for_a_gpu_kind_without_having_one(monkeypatch):
    from race_cli import machine
    from race_cli.cost.memory import GiB
    from race_cli.cost.walltime import GPU_KINDS, grid_seconds, parse_gpu
    from race_cli.plan.render import wall_line

    monkeypatch.setattr(machine, "gpu_visible", lambda device: False)  # a laptop: no GPU at all
    monkeypatch.setattr(machine, "gpu_name", lambda: None)
    h100 = GPU_KINDS["H100"]
    plans = {}
    for text in ("H100x8", "H200"):
        spec = parse_gpu(text)
        plans[text] = build_plan(["grid=pilot"], gpu_mem=spec.kind.memory_bytes, gpu=spec)
    p8, p200 = plans["H100x8"], plans["H200"]
    rows = p8.rows()
    assert p8.slots == 8 and all(j.gpus == 1 for j in p8.jobs)
    # memory: each job planned against the H100's 81559 MiB, micro-batches resolved (not CPU's 16)
    assert all(0 < r["planned_peak_bytes"] <= 81559 * 2**20 for r in rows)
    assert max(r["planned_peak_bytes"] for r in rows) > 60 * GiB  # auto fills the device
    # the update at the stated 35% of the H100's 989 TFLOP/s: seconds = planned update FLOPs / 3.46e14
    j = p8.jobs[0]
    assert j.wall.phases["update"] == pytest.approx(j.budget.flops()["update"].model / (989e12 * 0.35))
    hours = sum(r["planned_seconds"] for r in rows) / 3600  # one GPU per job
    assert sum(r["planned_gpu_hours"] for r in rows) == pytest.approx(hours)
    assert p8.grid_seconds() == pytest.approx(grid_seconds([r["planned_seconds"] for r in rows], 8))
    line = wall_line(p8)
    assert "on 8 H100 GPU(s)" in line and f"{hours:.3g} GPU-hours" in line
    assert "assumptions" in line and "--calibrate-from" in line
    # an H200 has more memory (bigger micro-batches) and more bandwidth (a faster rollout)
    mb8 = {r["job_id"]: r["micro_batch_size"] for r in rows}
    mb200 = {r["job_id"]: r["micro_batch_size"] for r in p200.rows()}
    assert all(mb200[k] >= mb8[k] for k in mb8) and any(mb200[k] > mb8[k] for k in mb8)
    assert p200.slots == 1 and "on 1 H200 GPU(s)" in wall_line(p200)
    assert sum(r["planned_gpu_hours"] for r in p200.rows()) < hours
    assert h100.memory_bytes < GPU_KINDS["H200"].memory_bytes


def test_gpu_option_wins_over_the_detected_gpu(monkeypatch):
    from race_cli import machine
    from race_cli.cost.walltime import parse_gpu

    monkeypatch.setattr(machine, "gpu_visible", lambda device: device != "cpu")  # an A10 box
    monkeypatch.setattr(machine, "gpu_name", lambda: "NVIDIA A10")
    monkeypatch.setattr(machine, "visible_gpus", lambda: ["0"])
    here = build_plan(["grid=pilot", "model=qwen2.5-0.5b"], gpu_mem=24 * 2**30)
    assert here.slots == 1 and "A10" in here.wall_source
    there = build_plan(["grid=pilot", "model=qwen2.5-0.5b"], gpu_mem=parse_gpu("H100x8").kind.memory_bytes,
                       gpu=parse_gpu("H100x8"))
    assert there.slots == 8 and "H100" in there.wall_source and "A10," not in there.wall_source


def test_two_gpus_per_job_double_the_gpu_hours_halve_the_slots_and_move_the_prm(monkeypatch):
    """race plan --gpus-per-job 2 (as race run --gpus-per-job 2 gives them): each job holds 2 of the 8
    H100s, so GPU-hours are 2 x its hours, 4 jobs run at once, and the PRM (prm-7b) sits on the job's
    second GPU (engine/setup.reward_device): the policy's GPU has its ~15 GB of weights free for
    bigger micro-batches; rule-reward jobs plan the same memory."""
    from race_cli import machine
    from race_cli.cost.walltime import grid_seconds, parse_gpu
    from race_cli.plan.render import wall_line

    monkeypatch.setattr(machine, "gpu_visible", lambda device: False)
    monkeypatch.setattr(machine, "gpu_name", lambda: None)
    spec = parse_gpu("H100x8")
    one, two = (build_plan(["grid=pilot", "model=qwen2.5-0.5b"], gpu_mem=spec.kind.memory_bytes, gpu=spec,
                           gpus_per_job=n) for n in (1, 2))
    assert one.slots == 8 and two.slots == 4 and all(j.gpus == 2 for j in two.jobs)
    r1 = {r["job_id"]: r for r in one.rows()}
    r2 = {r["job_id"]: r for r in two.rows()}
    hours = sum(r["planned_seconds"] for r in r2.values()) / 3600
    assert sum(r["planned_gpu_hours"] for r in r2.values()) == pytest.approx(2 * hours)
    assert sum(r["planned_gpu_hours"] for r in r1.values()) == pytest.approx(hours)
    assert two.grid_seconds() == pytest.approx(grid_seconds([r["planned_seconds"] for r in r2.values()], 4))
    prm = [k for k in r1 if "prm" in k]
    rule = [k for k in r1 if "rule" in k]
    assert prm and rule
    assert all(r2[k]["micro_batch_size"] > r1[k]["micro_batch_size"] for k in prm)
    assert all(r2[k]["micro_batch_size"] == r1[k]["micro_batch_size"] for k in rule)
    line = wall_line(two)
    assert "8 H100 GPU(s), 2 per job, 4 job(s) at once" in line and f"{2 * hours:.3g} GPU-hours" in line


def test_more_gpus_per_job_than_the_plan_has_is_exit_2(tmp_path):
    res = _race("plan", "--gpu", "H100x2", "--gpus-per-job", "4", "--out", str(tmp_path / "s"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "--gpus-per-job 4 but --gpu H100x2 has 2 GPU(s)" in res.stderr and "--gpu H100x4" in res.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("text", ["bogus", "H100x0", "x8"])
def test_an_unknown_gpu_kind_is_exit_2_naming_the_known_ones(tmp_path, text):
    res = _race("plan", "--gpu", text, "--out", str(tmp_path / "s"))
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert ("Known kinds: A100, A100-80GB, A100-40GB, H100, H200" in res.stderr) or "expected 1 to" in res.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.parametrize("width", [60, 80, 100])
def test_the_narrow_table_prints_what_rich_would_measure_for_itself(width):
    """plan/render.plan_table sizes its columns from the cells once (rich measuring every cell again
    took minutes at 100,000 jobs): the text printed equals that of the same columns measured by rich."""
    import io

    from rich import box
    from rich.console import Console
    from rich.table import Table

    from race_cli.plan.render import plan_table

    plan = build_plan(["grid=pilot"])
    rows = plan.rows()
    out = lambda t: (lambda c: (c.print(t), c.file.getvalue())[1])(Console(file=io.StringIO(), width=width))
    ours, _ = plan_table(plan, rows, Console(file=io.StringIO(), width=width))
    ref = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False)
    for col in ours.columns:  # the same columns and cells, widths left to rich
        ref.add_column(col.header, justify=col.justify, no_wrap=True)
    for i in range(ours.row_count):
        ref.add_row(*[list(col.cells)[i] for col in ours.columns])
        if i == ours.row_count - 2:
            ref.add_section()
    assert out(ours) == out(ref)
    assert max(len(line) for line in out(ours).splitlines()) <= width
    if width == 60:
        assert len(ours.columns) < 12  # columns dropped to fit
