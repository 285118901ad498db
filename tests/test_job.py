"""`race train` end to end on a tiny random Qwen2 (race_cli/engine): files, determinism, resume, faults.

The policy is a 2-layer random Qwen2 whose first sampled token is usually a digit (layer outputs
zeroed, LM head rows of '0'..'9' pointed at the hidden state after "A:", small digits favoured), so on one-step
arithmetic with operands 0..4 the rule reward is 1 for some completions and 0 for others: the
GRPO updates are real, not zero.
"""

import errno
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch

from race_cli.engine import checkpoint as ckpt_io
from race_cli.engine.train import train_main
from race_cli.errors import RaceError
from race_cli.io import read_json, read_jsonl

REPO = Path(__file__).resolve().parent.parent
METRIC_KEYS = {"iteration", "train/reward_mean", "train/reward_std", "train/frac_zero_std_groups", "train/kl",
               "train/clip_frac", "train/loss", "train/completion_len", "train/trained_rows", "flops/rollout",
               "flops/update", "flops/reward", "flops/total", "time/rollout", "time/update", "time/reward", "tokens/prompt", "tokens/completion"}


def build_model(path: Path, *, pad: bool = True) -> Path:
    from transformers import AutoModelForCausalLM, Qwen2Config

    from race_cli.zoo import byte_tokenizer

    torch.manual_seed(0)
    cfg = Qwen2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      intermediate_size=64, vocab_size=257, eos_token_id=256, bos_token_id=256,
                      tie_word_embeddings=False)
    m = AutoModelForCausalLM.from_config(cfg)
    with torch.no_grad():
        for layer in m.model.layers:  # residual stream = token embedding: the next token depends on the last one
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        u = m.model.norm(m.model.embed_tokens.weight[ord(":")])  # hidden state after the prompt's "A:"
        m.lm_head.weight.zero_()
        noise = 0.3 * torch.randn(10, 32) / 32 ** 0.5
        m.lm_head.weight[48:53] = 6 * u / u.dot(u) + noise[:5]  # '0'..'4' at logit ~6: the usual answers
        m.lm_head.weight[53:58] = 3 * u / u.dot(u) + noise[5:]  # '5'..'9' at ~3; other tokens at 0
    m.save_pretrained(path)
    tok = byte_tokenizer()
    if not pad:
        tok.pad_token = None
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_model(tmp_path_factory.mktemp("tiny") / "model")


def overrides(model_dir: Path, **extra) -> list[str]:
    base = {"model.path": str(model_dir), "model.name": "tiny-rand", "grid": "none",
            "model.arch.hidden_size": 32, "model.arch.intermediate_size": 64,
            "grpo.prompts_per_iter": 2, "grpo.group_size": 4, "rollout.max_new_tokens": 3,
            "rollout.expected_completion_tokens": 3, "task.num_eval": 8, "task.num_train": 16,
            "task.max_operand": 4, "task.min_ops": 1, "task.max_ops": 1, "eval.every": 2, "eval.batch_size": 8,
            "checkpoint.every": 2, "threads": 1, "budget.flops": 1e12, "budget.max_iterations": 3}
    base.update(extra)
    return [f"{k}={v}" for k, v in base.items()]


def weights(job: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(job / "checkpoint" / "trainable.safetensors"))


def strip_time(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/")} for r in rows]


# --- a whole job: files as docs/files.md says ------------------------------------------------------


def test_job_writes_the_documented_files(model_dir, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from race_cli.cost.budget import iteration_spec
    from race_cli.config.compose import compose

    job = tmp_path / "job"
    ov = overrides(model_dir)
    assert train_main(ov, out=job) == 0
    status = read_json(job / "status.json")
    assert status["state"] == "done" and status["stop_reason"] == "iterations" and status["exit_code"] == 0
    assert status["job_id"] == "job" and status["device"] == "cpu" and status["attempts"] == 1

    rows = read_jsonl(job / "metrics.jsonl")
    assert [r["iteration"] for r in rows] == [0, 1, 2, 3]
    assert rows[0] == {"iteration": 0, "flops/rollout": 0.0, "flops/update": 0.0, "flops/reward": 0.0,
                       "flops/total": 0.0, "budget/fraction": 0.0, "budget/eval_at": 0.0,
                       "eval/arithmetic/accuracy": rows[0]["eval/arithmetic/accuracy"]}
    evaluated = METRIC_KEYS | {"eval/arithmetic/accuracy", "budget/fraction"}
    assert set(rows[1]) == METRIC_KEYS and set(rows[2]) == evaluated  # eval.every = 2
    # the final evaluation; the iteration cap stopped the job far from its budget: no fraction 1
    assert set(rows[3]) == evaluated
    assert rows[1]["train/kl"] is None  # beta = 0: no reference forward, nothing to report
    assert rows[1]["tokens/prompt"] > 0 and rows[1]["tokens/completion"] <= 2 * 4 * 3
    assert any(r["train/reward_std"] > 0 for r in rows[1:])  # the task gives this policy a signal

    ledger = read_json(job / "ledger.json")
    assert ledger["convention"] == "model" and ledger["budget_flops"] == 1e12
    act = ledger["actual"]
    assert act["iterations"] == 3
    assert act["flops"]["total"] == pytest.approx(rows[-1]["flops/total"])
    assert act["flops"]["total"] == pytest.approx(sum(act["flops"][p] for p in ("rollout", "update", "reward")))
    assert act["flops"]["reward"] == 0.0 and act["flops"]["update"] > 0 and act["flops"]["rollout"] > 0
    assert act["tokens"]["completion"] == sum(r["tokens/completion"] for r in rows[1:])
    assert set(act["seconds"]) == {"rollout", "update", "reward", "total"}
    assert ledger["eval"]["runs"] == 3 and ledger["eval"]["flops"] > 0  # start, iteration 2, end
    assert ledger["eval"]["targets"]["arithmetic"]["flops"] == ledger["eval"]["flops"]  # the only target
    # planned: floor(C / planned per-iteration total), capped at max_iterations = 3 (so no smaller last one)
    cfg = compose(ov)
    from omegaconf import OmegaConf

    per = iteration_spec(OmegaConf.to_container(cfg, resolve=True), "hf").cost()
    t = min(int(1e12 // sum(v.model for v in per.values())), 3)
    assert t == 3 and ledger["planned"]["iterations"] == t and ledger["planned"]["last_iteration_prompts"] == 0
    assert ledger["planned"]["flops"]["update"] == pytest.approx(per["update"].model * t)

    summary = read_json(job / "summary.json")
    assert summary["state"] == "done" and summary["knobs"] == {"group_size": 4, "updates_per_batch": 1,
                                                                "update_group_size": 4,  # m = G: no down-sampling
                                                                "prompts_per_iter": 2, "iterations": 3}
    assert summary["condition"] == {"model": "tiny-rand", "budget_flops": 1e12, "reward": "rule", "task": "arithmetic"}
    assert summary["overrides"] == ov and summary["seed"] == 0
    assert summary["targets"] == ["arithmetic"]  # eval.targets=[]: the training task's own
    assert summary["eval"]["arithmetic"] == rows[3]["eval/arithmetic/accuracy"]
    assert summary["eval_initial"]["arithmetic"] == rows[0]["eval/arithmetic/accuracy"]
    items = summary["eval_items"]["arithmetic"]
    assert len(items["ids"]) == 8 and items["ids"][0] == "arith-eval-0"
    assert sum(items["scores"]) / 8 == summary["eval"]["arithmetic"]
    first = summary["eval_items_initial"]["arithmetic"]
    assert first["ids"] == items["ids"] and sum(first["scores"]) / 8 == summary["eval_initial"]["arithmetic"]
    sh = summary["shares"]
    assert sh["search"] + sh["learning"] + sh["feedback"] == pytest.approx(1.0)
    assert sh["p"] == sh["learning"] == pytest.approx(act["flops"]["update"] / act["flops"]["total"])
    assert set(summary["seconds"]) == {"rollout", "update", "reward", "eval", "total"}

    # adapter/: PeftModel-loadable, equal to the trained weights, which moved away from LoRA's B = 0 start
    base = AutoModelForCausalLM.from_pretrained(str(model_dir))
    with warnings.catch_warnings():  # peft 0.21's PeftModel.__init__ reads a deprecated transformers property
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        loaded = PeftModel.from_pretrained(base, str(job / "adapter"))
    trained = weights(job)
    params = dict(loaded.named_parameters())
    for name, value in trained.items():
        assert torch.equal(params[name], value), name
    assert any("lora_B" in n and v.abs().sum() > 0 for n, v in trained.items())
    assert not list(job.glob(".checkpoint*")) and not list(job.glob(".adapter*"))


def test_same_config_twice_gives_the_same_metrics_and_weights(model_dir, tmp_path):
    ov = overrides(model_dir, **{"grpo.updates_per_batch": 2, "grpo.beta": 0.05})
    assert train_main(ov, out=tmp_path / "a") == 0
    assert train_main(ov, out=tmp_path / "b") == 0
    a, b = read_jsonl(tmp_path / "a" / "metrics.jsonl"), read_jsonl(tmp_path / "b" / "metrics.jsonl")
    assert strip_time(a) == strip_time(b)
    assert all(r["train/kl"] is not None for r in a[1:])  # beta > 0: the adapter-disabled reference ran
    wa, wb = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# --- resume after SIGKILL --------------------------------------------------------------------------


def test_sigkill_and_resume_ends_like_the_uninterrupted_run(model_dir, tmp_path):
    ov = overrides(model_dir, **{"budget.max_iterations": 16, "checkpoint.every": 3, "eval.every": 4,
                                 "rollout.max_new_tokens": 6, "rollout.expected_completion_tokens": 6})
    ref = tmp_path / "ref"
    assert train_main(ov, out=ref) == 0

    job = tmp_path / "killed"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    cmd = [sys.executable, "-m", "race_cli", "train", *ov, "--out", str(job)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    try:
        while time.time() < deadline and proc.poll() is None:  # kill after iteration 4's line, past checkpoint 3
            m = job / "metrics.jsonl"
            if (job / "checkpoint").exists() and m.exists() and any(r["iteration"] >= 4 for r in read_jsonl(m)):
                break
            time.sleep(0.005)
        assert proc.poll() is None, "the job finished before it could be killed; make it longer"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    killed_at = read_jsonl(job / "metrics.jsonl")[-1]["iteration"]
    assert 4 <= killed_at < 16 and read_json(job / "status.json")["state"] == "running"

    resumed = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resumed from checkpoint" in resumed.stdout
    assert strip_time(read_jsonl(job / "metrics.jsonl")) == strip_time(read_jsonl(ref / "metrics.jsonl"))
    wr, wk = weights(ref), weights(job)
    assert all(torch.equal(wr[k], wk[k]) for k in wr)
    lr, lk = read_json(ref / "ledger.json")["actual"], read_json(job / "ledger.json")["actual"]
    assert lr["flops"] == lk["flops"] and lr["tokens"] == lk["tokens"]
    st = read_json(job / "status.json")
    assert st["state"] == "done" and st["attempts"] == 2


# --- budget ------------------------------------------------------------------------------------------


def test_stops_cleanly_before_the_iteration_that_would_overrun(model_dir, tmp_path):
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    probe = Job(compose(overrides(model_dir)), tmp_path / "probe", [])
    probe.setup()
    worst = probe.worst_case(1)
    budget = 2.5 * worst  # real iterations cost less than the worst case: 2 to 3 of them fit
    ov = overrides(model_dir, **{"budget.flops": budget, "budget.max_iterations": 100})
    job = Job(compose(ov), tmp_path / "job", ov, log=lambda m: None)
    assert job.run() == 0
    summary = read_json(tmp_path / "job" / "summary.json")
    assert summary["stop_reason"] == "budget" and summary["knobs"]["iterations"] >= 2
    # the job went on with smaller iterations until not one more prompt's worst case fitted
    assert job.spent() <= budget < job.spent() + job.worst_case(job.iteration + 1, prompts=1)
    assert job.prompts_that_fit(job.iteration + 1) == 0
    act = read_json(tmp_path / "job" / "ledger.json")["actual"]
    assert act["iterations"] <= act["prompts"] <= 2 * act["iterations"]  # B = 2 prompts, or 1 in a smaller one


def test_evaluates_at_the_first_iteration_boundary_at_or_past_each_budget_fraction(model_dir, tmp_path):
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    probe = Job(compose(overrides(model_dir)), tmp_path / "probe", [])
    probe.setup()
    budget = 10 * probe.worst_case(1)  # real iterations cost less than the worst case: 10 or more of them
    ov = overrides(model_dir, **{"budget.flops": budget, "budget.max_iterations": 100, "eval.every": "null",
                                 "eval.at": "[0,0.25,0.5,0.75,1]"})
    job = Job(compose(ov), tmp_path / "job", ov, log=lambda m: None)
    assert job.run() == 0
    rows = read_jsonl(tmp_path / "job" / "metrics.jsonl")
    summary = read_json(tmp_path / "job" / "summary.json")
    assert summary["stop_reason"] == "budget" and len(rows) - 1 >= 10
    spent = [r["flops/total"] for r in rows]  # cumulative, index = iteration
    points = summary["eval_points"]
    assert [p["at"] for p in points] == [[0.0], [0.25], [0.5], [0.75], [1.0]]
    for p in points[1:-1]:  # the first boundary at or past f·C: this iteration reached it, the one before did not
        f, i = p["at"][0], p["iteration"]
        assert spent[i] >= f * budget > spent[i - 1]
        assert p["flops"] == spent[i] and p["fraction"] == pytest.approx(spent[i] / budget)
    assert points[-1]["iteration"] == len(rows) - 1  # the end: the budget was spent
    # metrics.jsonl: an evaluation on exactly those lines, each with the fraction it stands for
    assert [r["iteration"] for r in rows if "eval/arithmetic/accuracy" in r] == [p["iteration"] for p in points]
    assert [r.get("budget/eval_at") for r in rows if "eval/arithmetic/accuracy" in r] == [0, 0.25, 0.5, 0.75, 1]
    for p in points:
        line = rows[p["iteration"]]
        assert p["accuracy"]["arithmetic"] == line["eval/arithmetic/accuracy"]
        assert sum(p["items"]["arithmetic"]["scores"]) / 8 == p["accuracy"]["arithmetic"]
    assert summary["eval"] == points[-1]["accuracy"] and summary["eval_initial"] == points[0]["accuracy"]
    assert read_json(tmp_path / "job" / "ledger.json")["eval"]["runs"] == 5


def test_due_fractions_take_each_fraction_once_at_or_past_its_spend():
    from race_cli.engine.job import due_fractions

    at = [0, 0.125, 0.25, 0.5, 1]
    assert due_fractions(at, set(), 0.1e12, 1e12) == []  # 0.1 < 0.125: nothing yet
    assert due_fractions(at, set(), 0.125e12, 1e12) == [0.125]  # exactly at f·C counts ("at or past")
    assert due_fractions(at, {0.125}, 0.3e12, 1e12) == [0.25]  # already covered fractions are not taken again
    assert due_fractions(at, set(), 0.6e12, 1e12) == [0.125, 0.25, 0.5]  # one big iteration covers three
    assert due_fractions(at, set(), 1e12, 1e12) == [0.125, 0.25, 0.5]  # 0 and 1 are the start and the end


def test_budget_smaller_than_one_iteration_is_refused(model_dir, tmp_path):
    with pytest.raises(RaceError, match="smaller than one iteration"):
        train_main(overrides(model_dir, **{"budget.flops": 1e6}), out=tmp_path / "j")
    st = read_json(tmp_path / "j" / "status.json")
    assert st["state"] == "failed" and "budget.flops" in st["error"]
    assert not (tmp_path / "j" / "metrics.jsonl").exists()


def test_zero_completion_budget_is_refused_before_writing(model_dir, tmp_path):
    with pytest.raises(RaceError, match="max_new_tokens"):
        train_main(overrides(model_dir, **{"rollout.max_new_tokens": 0, "rollout.expected_completion_tokens": 1}),
                   out=tmp_path / "j")
    assert not (tmp_path / "j").exists()


def test_missing_model_path_exits_2_with_a_message(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    r = subprocess.run([sys.executable, "-m", "race_cli", "train", "grid=none", f"model.path={tmp_path}/nope",
                        "--out", str(tmp_path / "j")], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "does not exist" in r.stderr and "zoo:tiny-s" in r.stderr
    assert read_json(tmp_path / "j" / "status.json")["state"] == "failed"


def test_tokenizer_without_pad_token_uses_eos(tmp_path, capsys):
    model = build_model(tmp_path / "nopad", pad=False)
    assert train_main(overrides(model, **{"budget.max_iterations": 1}), out=tmp_path / "j") == 0
    assert "no pad token; using its EOS token" in capsys.readouterr().out


def test_job_dir_mode_runs_a_planned_folder_and_a_finished_job_reruns_as_done(model_dir, tmp_path):
    from race_cli.config.compose import compose
    from race_cli.engine.train import _write_job_config

    ov = overrides(model_dir, **{"budget.max_iterations": 2})
    job = tmp_path / "planned"
    _write_job_config(job, compose(ov), ov)  # what race plan --out leaves
    assert train_main([], job_dir=job) == 0
    first = read_jsonl(job / "metrics.jsonl")
    assert train_main([], job_dir=job) == 0  # nothing left to do: resumes at the end, same files
    assert read_jsonl(job / "metrics.jsonl") == first
    assert read_json(job / "summary.json")["overrides"] == ov
    with pytest.raises(RaceError, match="takes no overrides"):
        train_main(["seed=1"], job_dir=job)
    with pytest.raises(RaceError, match="already holds a job"):
        train_main(["seed=1"], out=job)


# --- faults ------------------------------------------------------------------------------------------


def test_nan_loss_fails_the_job_and_keeps_the_last_good_checkpoint(model_dir, tmp_path, monkeypatch):
    import race_cli.engine.job as job_mod

    real, calls = job_mod.grpo_loss, {"n": 0}

    def nan_on_second_iteration(*args, **kw):
        out = real(*args, **kw)
        calls["n"] += 1
        if calls["n"] == 2:  # one call per iteration (mu = 1, no micro-batches)
            return type(out)(out.loss * float("nan"), out.kl, out.clip_frac, out.tokens)
        return out

    monkeypatch.setattr(job_mod, "grpo_loss", nan_on_second_iteration)
    job = tmp_path / "j"
    # skipping off: an iteration of all-equal rewards would run no loss call and shift the count
    assert train_main(overrides(model_dir, **{"checkpoint.every": 1, "grpo.skip_zero_advantage": "false"}), out=job) == 1
    st = read_json(job / "status.json")
    assert st["state"] == "failed" and st["stop_reason"] == "nan_loss" and "nan" in st["error"]
    found = ckpt_io.find(job)
    assert found.state["iteration"] == 1
    assert [r["iteration"] for r in read_jsonl(job / "metrics.jsonl")] == [0, 1]


def test_full_disk_during_a_checkpoint_keeps_the_previous_one(model_dir, tmp_path, monkeypatch):
    calls = {"n": 0}
    real = ckpt_io._save_torch

    def disk_fills(obj, path):
        calls["n"] += 1
        if calls["n"] == 3:  # two torch files per checkpoint: the first file of the SECOND checkpoint
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))
        real(obj, path)

    monkeypatch.setattr(ckpt_io, "_save_torch", disk_fills)
    job = tmp_path / "j"
    assert train_main(overrides(model_dir, **{"checkpoint.every": 1}), out=job) == 1
    st = read_json(job / "status.json")
    assert st["state"] == "failed" and "No space left on device" in st["error"]
    assert not list(job.glob(".checkpoint*"))  # no half checkpoint left behind
    found = ckpt_io.find(job)
    assert found.state["iteration"] == 1
    assert {p.name for p in found.path.iterdir()} == {"adapter", "trainable.safetensors", "optim.pt", "rng.pt",
                                                      "state.json"}
    torch.load(found.path / "optim.pt", weights_only=False)  # complete and readable
    # and resuming from it with a working disk finishes the job
    monkeypatch.setattr(ckpt_io, "_save_torch", real)
    assert train_main(overrides(model_dir, **{"checkpoint.every": 1}), out=job) == 0
    assert read_json(job / "summary.json")["knobs"]["iterations"] == 3


def test_iterations_between_checkpoints_write_without_fsync_and_a_checkpoint_makes_them_durable(
        model_dir, tmp_path, monkeypatch):
    """fsync costs ~10 ms a file on a VM disk: per-iteration writes (metrics line, ledger.json) are atomic but not
    fsynced; each checkpoint first fsyncs metrics.jsonl, so a durable checkpoint never covers lines that are not."""
    import race_cli.engine.job as job_mod
    import race_cli.io as io_mod

    events: list[str] = []
    real_append, real_fsync_file, real_fsync = job_mod.append_jsonl, job_mod.fsync_file, os.fsync
    monkeypatch.setattr(job_mod, "append_jsonl",
                        lambda path, rows, **kw: events.extend(f"line {r['iteration']}" for r in rows)
                        or real_append(path, rows, **kw))
    monkeypatch.setattr(job_mod, "fsync_file", lambda p: events.append(f"fsync_file {Path(p).name}") or real_fsync_file(p))
    monkeypatch.setattr(io_mod.os, "fsync", lambda fd: events.append("fsync") or real_fsync(fd))
    job = tmp_path / "j"
    assert train_main(overrides(model_dir, **{"checkpoint.every": 2, "budget.max_iterations": 3}), out=job) == 0
    first, second = events.index("line 1"), events.index("line 2")
    assert "fsync" not in events[first:second]  # iteration 1: no checkpoint, no fsync
    two = events[second:events.index("line 3")]  # iteration 2 ends with a checkpoint
    k = two.index("fsync_file metrics.jsonl")  # the checkpoint starts by making the lines durable ...
    assert "fsync" in two[:k] and "fsync" in two[k + 1:]  # ... after the durable ledger.json, before its own files
    assert [r["iteration"] for r in read_jsonl(job / "metrics.jsonl")] == [0, 1, 2, 3]


def test_the_loop_yields_the_gpu_after_each_training_rollout_only(model_dir, tmp_path):
    """A backend with yield_gpu (vLLM: sleep) is asked after each training rollout, before reward and
    update, and never between evaluation batches (8 items in batches of 4: two generates, no yield)."""
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    ov = overrides(model_dir, **{"eval.batch_size": 4, "budget.max_iterations": 2})
    job = Job(compose(ov), tmp_path / "j", ov, log=lambda m: None)
    job.job_dir.mkdir(parents=True)
    job.setup()
    calls = []
    generate, reward, update = job.rollout.generate, job.reward, job.update
    job.rollout.generate = lambda *a, **k: calls.append("eval" if k.get("greedy") else "rollout") or generate(*a, **k)
    job.rollout.yield_gpu = lambda: calls.append("yield")
    job.reward = lambda *a, **k: calls.append("reward") or reward(*a, **k)
    job.update = lambda *a, **k: calls.append("update") or update(*a, **k)
    job.start_or_resume()
    job.train()
    first = calls.index("rollout")
    assert calls[:first] == ["eval"] * (len(calls[:first]))
    assert calls[first:first + 8] == ["rollout", "yield", "reward", "update"] * 2
    assert "yield" not in calls[first + 8:]  # the final evaluation's batches


# --- common random numbers in evaluation, one start per condition ------------------------------------


def _setup_job(model_dir: Path, job_dir: Path, **extra):
    from race_cli.config.compose import compose
    from race_cli.engine.job import Job

    ov = overrides(model_dir, **({"lora.enabled": "false", "eval.samples": 2, "eval.greedy": "false"} | extra))
    job = Job(compose(ov), job_dir, ov, log=lambda m: None)
    job.job_dir.mkdir(parents=True, exist_ok=True)
    job.setup()
    from race_cli.cost.budget import Ledger

    job.ledger = Ledger()  # what start_or_resume opens; evaluate() charges it
    return job


def _eval_texts(job) -> list[str]:
    """Every evaluation completion of one evaluate() call, in order."""
    texts, generate = [], job.rollout.generate
    job.rollout.generate = lambda *a, **k: (lambda ro: texts.extend(ro.texts) or ro)(generate(*a, **k))
    job.evaluate()
    job.rollout.generate = generate
    return texts


@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_equal_weights_give_byte_identical_eval_completions_whatever_the_training_seed(model_dir, tmp_path, backend):
    """Two jobs, training seeds 0 and 1, the same starting weights (full fine-tuning): every sampled
    evaluation completion is the same, although their training streams differ (their first rollouts do)."""
    jobs = [_setup_job(model_dir, tmp_path / f"s{s}", seed=s, **{"rollout.backend": backend}) for s in (0, 1)]
    texts = []
    for job in jobs:
        torch.manual_seed(job.cfg.seed)  # each job's own training stream, as setup seeds it
        texts.append(_eval_texts(job))
    assert texts[0] == texts[1] and len(texts[0]) == 8 * 2
    assert len(set(texts[0])) > 1  # sampled, not one constant completion
    rollouts = []
    for job in jobs:  # the training stream does differ between the two seeds
        torch.manual_seed(job.cfg.seed)
        rollouts.append(job.rollout.generate([job.train_prompts.ids(j) for j in range(4)], group_size=4).texts)
    assert rollouts[0] != rollouts[1]


def test_fake_vllm_eval_requests_carry_the_item_keyed_seeds(model_dir, tmp_path, monkeypatch):
    """The vLLM path: one request per (item, sample) with SamplingParams(seed=key), the same keys in two jobs
    of different training seeds (and engine seeds), so the (fake) engine returns byte-identical completions."""
    import sys

    from race_cli.engine.rollout_lean import eval_row_seed
    from race_cli.engine.rollout_vllm import VLLMRollout

    fake_root = REPO / "tests" / "fake_vllm"
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(fake_root))
    import vllm as fake

    assert Path(fake.__file__).is_relative_to(fake_root)
    fake.reset()
    from peft import LoraConfig

    from race_cli.engine.hf import lora_wrap

    texts, seeds = [], []
    try:
        for s in (0, 1):
            job = _setup_job(model_dir, tmp_path / f"v{s}", seed=s, **{"lora.enabled": "true"})
            policy = job.policy
            model = policy.model if hasattr(policy.model, "peft_config") else lora_wrap(
                policy.model, LoraConfig(r=16, target_modules=["q_proj", "v_proj"]))
            job.rollout = VLLMRollout("/models/base", policy.tokenizer, arch=policy.arch, lora=policy.lora,
                                      eos_id=job.rollout.eos_id, pad_id=job.rollout.pad_id, max_new_tokens=4,
                                      temperature=1.0, top_p=1.0, dtype="float32", seed=s,
                                      gpu_memory_utilization=0.25, max_model_len=256,
                                      sync_dir=tmp_path / f"v{s}" / ".vllm-adapter")
            job.rollout.sync(model)
            texts.append(_eval_texts(job))
            calls = [p for kind, p in fake.ENGINES[-1].calls if kind == "generate"]
            seeds.append([q.seed for p in calls for q in p])
            job.rollout.close()
        items = job.targets[0].items
        assert seeds[0] == seeds[1] == [eval_row_seed(0, job.targets[0].name, it.id, k) for it in items for k in range(2)]
        assert texts[0] == texts[1] and len(set(texts[0])) > 1
    finally:
        for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.")]:
            del sys.modules[name]


def test_evaluation_points_change_no_training_step(model_dir, tmp_path):
    """eval.at=[0, 1] and the default points (sampled evaluations, eval.every off): the same weights."""
    common = {"eval.samples": 2, "eval.greedy": "false", "eval.every": "null", "budget.max_iterations": 20,
              "budget.flops": 3e8,
              "grpo.updates_per_batch": 2}
    assert train_main(overrides(model_dir, **common, **{"eval.at": "[0,1]"}), out=tmp_path / "few") == 0
    assert train_main(overrides(model_dir, **common), out=tmp_path / "many") == 0
    few, many = read_json(tmp_path / "few" / "summary.json"), read_json(tmp_path / "many" / "summary.json")
    assert len(few["eval_points"]) < len(many["eval_points"])  # the second really evaluated more often
    wa, wb = weights(tmp_path / "few"), weights(tmp_path / "many")
    assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    assert any(v.abs().sum() > 0 for k, v in wa.items() if "lora_B" in k)  # it trained
    assert few["eval"] == many["eval"]  # and the final evaluation (same weights, same keys) agrees


def test_the_start_is_evaluated_once_per_condition_and_shared(model_dir, tmp_path, monkeypatch):
    """Four jobs of one sweep folder: three start from the same weights with the same evaluation (training
    seeds 0/1, mu 1/2) and evaluate once between them; a fourth with another eval.sample_seed evaluates its own."""
    from race_cli import folder
    from race_cli.engine.job import Job

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "plan.json").write_text("[]")  # what makes a folder a sweep (folder.is_sweep)
    count = []
    evaluate = Job.evaluate
    monkeypatch.setattr(Job, "evaluate", lambda self: count.append(self.job_id) or evaluate(self))
    specs = {"a": dict(seed=0), "b": dict(seed=1), "c": {"seed": 0, "grpo.updates_per_batch": 2},
             "d": {"seed": 0, "eval.sample_seed": 1}}
    first = {}
    for name, extra in specs.items():
        job = _setup_job(model_dir, folder.job_dir(sweep, name), **extra)
        job.start_or_resume()
        first[name] = job.state["eval_initial"]
        assert job.state["eval_points"][0]["start_key"] is not None
    assert count == ["a", "d"]  # evaluated once for a/b/c, once for d
    assert first["a"] == first["b"] == first["c"] != first["d"]
    assert len(list(folder.start_evals_dir(sweep).glob("*.json"))) == 2
    assert not list(folder.start_evals_dir(sweep).glob("*.lock"))  # every lock released


def test_the_start_can_be_measured_on_more_samples_and_stays_paired(model_dir, tmp_path):
    """eval.start_samples=6 with eval.samples=2: the shared start scores each item on 6 draws (scores in
    sixths), the first 2 of them the very draws every later evaluation makes (common random numbers), so
    the start is the same policy measured three times as well; another start key than the 2-sample start."""
    import numpy as np

    from race_cli import folder

    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "plan.json").write_text("[]")
    plain = _setup_job(model_dir, folder.job_dir(sweep, "plain"))
    more = _setup_job(model_dir, folder.job_dir(sweep, "more"), **{"eval.start_samples": 6})
    assert plain.start_samples() is None and more.start_samples() == 6
    assert plain.start_key() != more.start_key()
    two = plain.evaluate()  # what every evaluation of both jobs draws, k = 2
    texts: list[str] = []
    generate = more.rollout.generate
    more.rollout.generate = lambda *a, **k: (ro := generate(*a, **k)) and (texts.extend(ro.texts) or ro)
    start, key = more.start_evaluation()
    assert key == more.start_key()
    for target in more.targets:
        scores = np.asarray(start["items"][target.name]["scores"])
        assert np.allclose(scores * 6, np.round(scores * 6)) and not np.allclose(scores * 2, np.round(scores * 2))
        assert start["items"][target.name]["ids"] == two["items"][target.name]["ids"]
    ref: list[str] = []
    generate2 = plain.rollout.generate
    plain.rollout.generate = lambda *a, **k: (ro := generate2(*a, **k)) and (ref.extend(ro.texts) or ro)
    plain.evaluate()
    # per item, the start's first 2 completions are the 2-sample evaluation's (items in the same order)
    assert [t for i in range(0, len(texts), 6) for t in texts[i:i + 2]] == ref


def test_start_samples_below_samples_or_against_greedy_is_refused(model_dir):
    from race_cli.config.compose import compose
    from race_cli.errors import RaceError

    def problems(**extra) -> str:
        try:
            compose(overrides(model_dir, **extra))
        except RaceError as exc:
            return " ".join(exc.problems)
        return ""

    assert "below eval.samples=4" in problems(**{"eval.samples": 4, "eval.greedy": "false", "eval.start_samples": 2})
    assert "compare two decodings" in problems(**{"eval.start_samples": 4})
    assert problems(**{"eval.samples": 2, "eval.greedy": "false", "eval.start_samples": 8}) == ""
