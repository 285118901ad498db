"""A new user's first hour, from a non-editable install (issue 53): race installed from a wheel of this
checkout into a fresh venv (its torch and other dependencies reused from the system's site-packages,
nothing fetched), an empty HOME, a folder outside the checkout, and then, as docs/own-model.md says:

    race --version; race plan
    race plan --config-dir my_conf grid=none model=no-tokenizer task=my-task     -> exit 2, the folder named
    race plan --config-dir my_conf grid=none model=my-model task=my-task task.num_eval=40  -> exit 2, the file
    race plan --config-dir my_conf model=my-model task=my-task --cfg job --each-job  -> every job evaluates
                                                                                      on my task
    race run --config-dir my_conf grid=none model=my-model task=my-task grpo.updates_per_batch=1,2 ...
    race report <sweep> --no-plots

The own model is a Qwen2 config (hidden 64, 2 layers) saved with save_pretrained, with race's byte-level
Qwen2Tokenizer (no merges) saved beside it; the own task is a 40-row question/answer JSONL.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from fresh_install import install_copy
from test_plan_checks import qa_rows, save_model

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_first_hour_from_a_non_editableinstall_copy(tmp_path):
    t0 = time.monotonic()
    bin_dir = install_copy(tmp_path)
    installed = time.monotonic() - t0
    work, home = tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RACE_CONF_DIR", "RACE_CPU_PROBE")}
    env.update(HOME=str(home), COLUMNS="80", HF_HUB_OFFLINE="1", XDG_CACHE_HOME=str(home / ".cache"))

    took: dict[str, float] = {"install": installed}

    def race(*args: str) -> subprocess.CompletedProcess:
        t = time.monotonic()
        got = subprocess.run([str(bin_dir / "race"), *args], capture_output=True, text=True, env=env, cwd=work,
                             timeout=900)
        shown = [args[0]] + [a for a in args[1:] if "=" in a or a.startswith("--") and "dir" not in a]
        took[f"{len(took)}: race " + " ".join(shown)[:48]] = time.monotonic() - t
        return got

    where = subprocess.run([str(bin_dir / "python"), "-c", "import race_cli; print(race_cli.__file__)"],
                           capture_output=True, text=True, env=env, cwd=work, timeout=120)
    assert where.stdout.startswith(str(tmp_path / "venv")), where.stdout + where.stderr  # not the checkout

    # --- the tool, as installed
    got = race("--version")
    assert got.returncode == 0 and got.stdout.startswith("race 0.1"), got.stdout + got.stderr
    got = race("plan")
    assert got.returncode == 0 and "race plan: grid 'tiny'" in got.stdout, got.stderr

    # --- my model, my task
    mine = work / "my_conf"
    (mine / "model").mkdir(parents=True)
    (mine / "task").mkdir()
    model = save_model(work / "models" / "my-model")
    bare = save_model(work / "models" / "no-tokenizer", tokenizer=False)
    for name, folder in (("my-model", model), ("no-tokenizer", bare)):
        (mine / "model" / f"{name}.yaml").write_text(f"# {name}: my own model\nname: {name}\npath: {folder}\n"
                                                     "lr: {lora: 1.0e-3, full: 1.0e-4}\nbudget_flops: 2.0e9\n")
    (work / "my.jsonl").write_text(qa_rows(40))
    (mine / "task" / "my-task.yaml").write_text(
        f"# my question/answer file\nname: jsonl\npath: {work / 'my.jsonl'}\nlabel: mine\nnum_eval: 8\n"
        "prompt_tokens: 60\nmax_new_tokens: 12\nexpected_completion_tokens: 12\n")
    own = ["--config-dir", str(mine)]

    # --- refused at plan time, before any job: exit 2, the file named
    got = race("plan", *own, "grid=none", "model=no-tokenizer", "task=my-task")
    assert got.returncode == 2 and f"{bare} holds no tokenizer" in got.stderr, got.stdout + got.stderr
    got = race("plan", *own, "grid=none", "model=my-model", "task=my-task", "task.num_eval=40")
    assert got.returncode == 2 and f"{work / 'my.jsonl'} has 40 rows" in got.stderr, got.stdout + got.stderr

    # --- the default grid with my model and task evaluates on my task
    got = race("plan", *own, "model=my-model", "task=my-task", "--cfg", "job", "--each-job")
    assert got.returncode == 0, got.stderr
    jobs = list(yaml.safe_load_all(got.stdout))
    assert len(jobs) > 1 and all(j["eval"]["targets"] == [] and j["task"]["label"] == "mine"
                                 and j["task"]["num_eval"] == 8 for j in jobs)
    assert "task=my-task is not the task of grid 'tiny'" in got.stderr

    # --- a 2-job run to a report
    sweep = work / "runs" / "mine"
    got = race("run", *own, "grid=none", "model=my-model", "task=my-task", "grpo.updates_per_batch=1,2",
               "grpo.group_size=4", "grpo.prompts_per_iter=4", "budget.flops=2e9", "eval.at=[0,1]",
               "--sweep-dir", str(sweep))
    assert got.returncode == 0, got.stdout[-3000:] + got.stderr[-3000:]
    statuses = [json.loads(p.read_text())["state"] for p in sorted((sweep / "jobs").glob("*/status.json"))]
    assert statuses == ["done", "done"]
    for metrics in (sweep / "jobs").glob("*/metrics.jsonl"):
        lines = [json.loads(x) for x in metrics.read_text().splitlines()]
        assert any("eval/mine/accuracy" in x for x in lines) and not any("eval/arithmetic/accuracy" in x for x in lines)
    got = race("report", str(sweep), "--no-plots")
    assert got.returncode == 0, got.stdout[-2000:] + got.stderr[-2000:]
    report = json.loads((sweep / "report" / "report.json").read_text())
    assert "mine" in json.dumps(report)
    print("first hour:", ", ".join(f"{k} {v:.1f} s" for k, v in took.items()), f"; all {time.monotonic() - t0:.0f} s")
