"""Your own configs and the architecture read from the model: --config-dir adds or replaces model, task,
reward and grid configs; a model's arch comes from its config.json (a local folder or the Hugging Face
cache, never the network), the shipped arch: block is checked against it, and a model with neither is
refused (exit 2). The last test installs race into a fresh venv (not editable) and plans from there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fresh_install import install_copy

from race_cli.config import compose as compose_mod
from race_cli.errors import RaceError

ROOT = Path(__file__).resolve().parents[1]
TINY_M = dict(hidden_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=256, vocab_size=257)  # conf/model/tiny-m.yaml's arch


def _save_tiny_model(folder: Path, **arch) -> Path:
    """A real (random) Qwen2 model written by save_pretrained: config.json and weights, and race's byte-level
    Qwen2Tokenizer beside them (race plan refuses a model folder without its tokenizer)."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from race_cli.zoo.tokenizer import byte_tokenizer

    cfg = Qwen2Config(**{**TINY_M, **arch}, max_position_embeddings=256, tie_word_embeddings=False)
    Qwen2ForCausalLM(cfg).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    return folder


def _model_yaml(name: str, path: Path | str, arch: dict | None = None) -> str:
    lines = [f"# {name}: a test model", f"name: {name}", f"path: {path}",
             "lr: {lora: 1.0e-3, full: 1.0e-4}", "budget_flops: 8.0e11"]
    if arch is not None:
        lines.append("arch: {" + ", ".join(f"{k}: {v}" for k, v in arch.items()) + "}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def own(tmp_path):
    """A --config-dir folder, searched before conf/ for the test's length."""
    d = tmp_path / "my_conf"
    for group in ("model", "task", "reward", "grid"):
        (d / group).mkdir(parents=True)
    compose_mod.set_config_dirs([d])
    yield d
    compose_mod.set_config_dirs([])


def _race(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200", **(env or {})}
    return subprocess.run([sys.executable, "-m", "race_cli", *args], capture_output=True, text=True, env=full,
                          cwd=cwd or ROOT, timeout=600)


# --- the architecture from config.json ------------------------------------------------------------

def test_a_model_without_arch_plans_from_its_config_json_as_the_hand_copied_block(own, tmp_path):
    from race_cli.plan.build import build_plan

    folder = _save_tiny_model(tmp_path / "mine")
    (own / "model" / "mine.yaml").write_text(_model_yaml("mine", folder))
    (own / "model" / "mine-block.yaml").write_text(_model_yaml("mine-block", folder, TINY_M))
    planned = {}
    for name in ("mine", "mine-block"):
        (job,) = build_plan(["grid=none", f"model={name}"]).jobs
        assert job.config["model"]["arch"]["hidden_size"] == 96
        planned[name] = (job.iterations, job.row()["planned_flops_total"], job.row()["planned_flops_update"])
    assert planned["mine"] == planned["mine-block"] and planned["mine"][0] > 0


def test_a_block_that_disagrees_with_config_json_is_an_error_naming_both(own, tmp_path):
    folder = _save_tiny_model(tmp_path / "mine")
    (own / "model" / "wrong.yaml").write_text(_model_yaml("wrong", folder, {**TINY_M, "num_hidden_layers": 4}))
    with pytest.raises(RaceError) as err:
        compose_mod.compose(["grid=none", "model=wrong"])
    text = str(err.value)
    assert "num_hidden_layers: arch: block 4 vs config.json 3" in text and str(folder) in text


def test_a_model_with_neither_exits_2_with_a_message(own, tmp_path):
    (own / "model" / "nothing.yaml").write_text(_model_yaml("nothing", "my-org/not-downloaded"))
    got = _race("plan", "--config-dir", str(own), "grid=none", "model=nothing",
                env={"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"})
    assert got.returncode == 2, got.stderr
    assert "has no arch: block and no config.json was found for my-org/not-downloaded" in got.stderr
    assert "hf download my-org/not-downloaded config.json" in got.stderr and "huggingface-cli" not in got.stderr
    assert "Traceback" not in got.stderr


def test_a_local_folder_without_config_json_gets_no_download_advice(own, tmp_path):
    """A model path that is a folder (or written as one) is fixed by fixing the folder, never by a download."""
    (tmp_path / "empty-model").mkdir()
    for name, path in (("empty", tmp_path / "empty-model"), ("gone", tmp_path / "not-there" / "model")):
        (own / "model" / f"{name}.yaml").write_text(_model_yaml(name, str(path)))
        got = _race("plan", "--config-dir", str(own), "grid=none", f"model={name}",
                    env={"HF_HUB_CACHE": str(tmp_path / "empty-cache"), "HF_HUB_OFFLINE": "1"})
        assert got.returncode == 2, got.stderr
        text = " ".join(got.stderr.split())
        assert f"{path} holds no config.json" in text and "download" not in text, text
        assert "Traceback" not in got.stderr


def test_a_hub_model_reads_config_json_from_the_hf_cache_offline(own, tmp_path):
    """The cache layout huggingface_hub writes (snapshots/<rev>/config.json linking to blobs/): read offline."""
    rev = "a" * 40
    repo = tmp_path / "hub" / "models--my-org--my-model"
    (repo / "blobs").mkdir(parents=True)
    (repo / "snapshots" / rev).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(rev)
    (repo / "blobs" / "0123").write_text(json.dumps({**TINY_M, "model_type": "qwen2", "tie_word_embeddings": False}))
    (repo / "snapshots" / rev / "config.json").symlink_to(repo / "blobs" / "0123")
    (own / "model" / "hubby.yaml").write_text(_model_yaml("hubby", "my-org/my-model") + f"revision: {rev}\n")
    (own / "model" / "hubby-block.yaml").write_text(_model_yaml("hubby-block", "my-org/my-model", TINY_M)
                                                    + f"revision: {rev}\n")
    rows = {}
    for name in ("hubby", "hubby-block"):
        got = _race("plan", "--config-dir", str(own), "grid=none", f"model={name}", "--format", "json",
                    env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"})
        assert got.returncode == 0, got.stderr
        (row,) = json.loads(got.stdout[got.stdout.index("["):got.stdout.rindex("]") + 1])
        rows[name] = (row["iterations"], row["planned_flops_total"])
    assert rows["hubby"] == rows["hubby-block"] and rows["hubby"][0] > 0


def test_shipped_blocks_are_checked_against_a_cached_config_json(tmp_path):
    """The shipped qwen2.5-0.5b block against a cached config.json that says 25 layers: refused, both named."""
    rev = "7ae557604adf67be50417f59c2c2f167def9a775"  # conf/model/qwen2.5-0.5b.yaml's revision
    snap = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / rev
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(dict(hidden_size=896, num_hidden_layers=25, num_attention_heads=14,
                                                      num_key_value_heads=2, intermediate_size=4864,
                                                      vocab_size=151936, tie_word_embeddings=True)))
    got = _race("plan", "grid=none", "model=qwen2.5-0.5b", "task=gsm8k",
                env={"HF_HUB_CACHE": str(tmp_path / "hub"), "HF_HUB_OFFLINE": "1"})
    assert got.returncode == 2
    assert "num_hidden_layers: arch: block 24 vs config.json 25" in got.stderr


# --- --config-dir -----------------------------------------------------------------------------------

def test_config_dir_adds_and_replaces_options_of_every_group(own):
    from race_cli.plan.build import build_plan

    (own / "task" / "gsm8k.yaml").write_text("# GSM8K with a longer cap\nname: gsm8k\nprompt_tokens: 150\n"
                                             "max_new_tokens: 1024\nexpected_completion_tokens: 400\n")
    (own / "reward" / "strict.yaml").write_text("# the rule reward under another name\ntype: rule\nmodel: null\n")
    (own / "grid" / "mine.yaml").write_text("# a two-job grid\nname: mine\ndescription: mine\n"
                                            "axes: {grpo.group_size: '4,8'}\nfixed: {budget.flops: 5.0e17}\n")
    assert "mine" in compose_mod.group_options("grid") and "tiny" in compose_mod.group_options("grid")
    plan = build_plan(["grid=mine", "model=qwen2.5-0.5b", "task=gsm8k", "reward=strict"])
    assert [j.config["grpo"]["group_size"] for j in plan.jobs] == [4, 8]
    c = plan.jobs[0].config
    assert (c["rollout"]["max_new_tokens"], c["rollout"]["expected_completion_tokens"]) == (1024, 400.0)
    assert c["budget"]["flops"] == 5e17 and c["reward"]["type"] == "rule"


def test_a_missing_config_dir_is_refused():
    got = _race("plan", "--config-dir", "/nonexistent/my_conf")
    assert got.returncode == 2 and "--config-dir /nonexistent/my_conf: no such folder" in got.stderr


@pytest.mark.slow
def test_a_non_editable_install_plans_with_your_own_model_and_task(tmp_path):
    """pip install . into a fresh venv (conf/ must travel in the wheel), then race plan --config-dir DIR
    model=my-model task=my-task from a folder outside the checkout."""
    venv = install_copy(tmp_path).parent
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RACE_CONF_DIR")}
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import race_cli; print(race_cli.__file__)"],
                           capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert where.stdout.startswith(str(venv)), where.stdout + where.stderr  # the installed copy, not a checkout

    mine = tmp_path / "my_conf"
    (mine / "model").mkdir(parents=True)
    (mine / "task").mkdir()
    folder = _save_tiny_model(tmp_path / "weights" / "my-model", hidden_size=128, intermediate_size=384)
    (mine / "model" / "my-model.yaml").write_text(_model_yaml("my-model", folder))
    (tmp_path / "my.jsonl").write_text("".join(json.dumps({"question": f"What is {i} + 1?", "answer": str(i + 1)}) + "\n"
                                               for i in range(300)))  # race plan reads it: 200 held out, 100 to train
    (mine / "task" / "my-task.yaml").write_text(
        "# my question/answer file\nname: jsonl\npath: my.jsonl\nlabel: mine\nprompt_tokens: 60\n"
        "max_new_tokens: 96\nexpected_completion_tokens: 40\n")
    got = subprocess.run([str(venv / "bin" / "race"), "plan", "--config-dir", str(mine), "grid=none",
                          "model=my-model", "task=my-task", "--out", str(tmp_path / "sweep")],
                         capture_output=True, text=True, env={**env, "COLUMNS": "200"}, cwd=tmp_path, timeout=600)
    assert got.returncode == 0, got.stderr
    assert "my-model" in got.stdout
    import yaml

    (job,) = (tmp_path / "sweep" / "jobs").iterdir()
    cfg = yaml.safe_load((job / ".hydra" / "config.yaml").read_text())
    assert cfg["model"]["arch"]["hidden_size"] == 128 and cfg["task"]["label"] == "mine"
    assert (cfg["rollout"]["max_new_tokens"], cfg["rollout"]["expected_completion_tokens"]) == (96, 40.0)
    assert cfg["grpo"]["lr"] == 1e-3 and cfg["budget"]["flops"] == 8e11


def test_the_examples_of_docs_own_configs_compose_and_plan(own, tmp_path):
    """Each group's example in docs/own-configs.md, written to a --config-dir folder as it stands (paths
    pointed at this test's files), composes and its grid plans."""
    import re

    from race_cli.plan.build import build_plan

    text = (ROOT / "docs" / "own-configs.md").read_text()
    blocks = dict(re.findall(r"## (\w+)/\n\n```yaml\n(.*?)```", text, re.S))
    assert set(blocks) == {"model", "task", "reward", "grid"}
    weights = tmp_path / "models" / "my-model"
    weights.mkdir(parents=True)
    (weights / "config.json").write_text(json.dumps(dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                                                         num_key_value_heads=2, intermediate_size=8960,
                                                         vocab_size=151936, tie_word_embeddings=True)))
    for group, body in blocks.items():
        name = re.search(r"^# ([\w-]+):", body).group(1)
        body = body.replace("/data/models/", f"{tmp_path}/models/").replace("/data/my.jsonl", str(tmp_path / "x.jsonl"))
        (own / group / f"{name}.yaml").write_text(body)
    (tmp_path / "models" / "my-prm").mkdir()
    # the task file the example names: race plan reads it (num_eval: 500 held out, rows left to train on)
    (tmp_path / "x.jsonl").write_text("".join(json.dumps({"question": f"{i} + {i}?", "answer": f"{i} + {i} = "
                                                           f"{2 * i}\n#### {2 * i}"}) + "\n" for i in range(600)))
    (tmp_path / "models" / "my-prm" / "config.json").write_text(
        json.dumps(dict(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4,
                        intermediate_size=18944, vocab_size=152064)))
    from race_cli.zoo.tokenizer import byte_tokenizer

    for folder in (weights, tmp_path / "models" / "my-prm"):  # a model folder holds its tokenizer (race plan reads it)
        byte_tokenizer().save_pretrained(folder)
    cfg = compose_mod.compose(["grid=none", "model=my-model", "task=my-task", "reward=my-prm"])
    assert cfg.model.arch.hidden_size == 1536 and cfg.reward.model.arch.hidden_size == 3584
    assert (cfg.rollout.max_new_tokens, cfg.grpo.lr, cfg.budget.flops) == (512, 1e-5, 3e17)
    plan = build_plan(["grid=my-grid"], gpu_mem=80 * 2**30)
    assert len(plan.jobs) == 2 * 2 * 2 * 2


def test_race_conf_dir_still_replaces_the_shipped_conf(tmp_path):
    import shutil

    conf = tmp_path / "conf"
    shutil.copytree(ROOT / "conf", conf)
    (conf / "grid" / "two.yaml").write_text("# two jobs\nname: two\ndescription: two\naxes: {seed: '0,1'}\n"
                                            "fixed: {}\n")
    got = _race("plan", "grid=two", "--format", "json", env={"RACE_CONF_DIR": str(conf)})
    assert got.returncode == 0, got.stderr
    assert len(json.loads(got.stdout)["jobs"]) == 2
