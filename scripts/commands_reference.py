"""Write docs/commands.md: every `race` command and every option, from the Typer app itself.

    python scripts/commands_reference.py            # rewrites docs/commands.md
    python scripts/commands_reference.py --check    # exit 1 if docs/commands.md is not what it would write

Read from race_cli/cli.py's app (as docs/config.md is read from the schema by scripts/config_reference.py):
each command's docstring, each option's names, value, range, default and help, in the order `--help` lists
them, so an option added, renamed or removed changes the page; tests/test_docs.py fails when the page is
stale. Where an option's help is too short to be its documentation, DETAILS below gives the longer text the
page prints instead (an entry for an option that no longer exists fails the script).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "commands.md"
sys.path.insert(0, str(ROOT))

# "<command> <first option name or argument metavar>": the page's text for it, where --help's is shorter
DETAILS = {
    'plan OVERRIDES':
        ('Hydra overrides and sweeps, e.g. model=tiny-s,tiny-m grpo.group_size=4,8 '
         'grpo.updates_per_batch=range(1,3) budget.flops=5e11 grid=none.'),
    'plan --out':
        ('Write the sweep folder here (multirun.yaml, plan.csv, plan.json, jobs/<id>/.hydra/).'),
    'plan --gpu':
        ('Plan for this GPU kind and count, e.g. H100, H200x8 or A100-80GB, whether or not this machine has one: '
         'its memory sizes the micro-batches, its assumed rates the wall time and GPU-hours. Wins over the GPU '
         'detected here.'),
    'plan --gpu-mem':
        ('Device memory per job, e.g. 80GiB or 24GB: micro_batch_size=auto picks the largest micro-batch that '
         "fits, and a job that cannot fit is refused (exit 2). Default: the --gpu kind's memory, else the detected"
         ' GPU (nvidia-smi), else no limit.'),
    'plan --reprobe':
        ("Measure this machine's CPU speed again now, and forget the rates its earlier sweeps measured "
         "(`RACE_CPU_PROBE=refresh` does the same). On CPU the plan prices a model at the rates this machine's "
         'latest `race run` of it measured with as many workers, and otherwise scales the reference CPU rates by a'
         ' short probe of this machine; both are kept per machine under the race cache. `RACE_CPU_PROBE=off` keeps'
         ' the reference rates unscaled. `--calibrate-from` wins over all of these.'),
    'plan --calibrate-from':
        ('A finished sweep folder: plan wall time from the per-phase FLOP/s, evaluation and setup seconds its jobs'
         ' measured (per model) instead of the defaults.'),
    'plan --informative-from':
        ("A finished sweep folder: plan each job's update on the share of rows its jobs really updated on (per "
         'regime, else per reward type), where grpo.expected_informative_share is null.'),
    'plan --seed-sd':
        ("Seed spread for the power table and the race's price: a number (0.02) or an earlier sweep whose report "
         "measured it (default: the grid's seed_sd, its own run's, e.g. grid=tiny's 0.0077; else 0.02, assumed)."),
    'plan --gpus-per-job':
        ('GPUs each GPU job will hold, as race run --gpus-per-job gives them: that many GPU-hours per job-hour, '
         "GPUs // N jobs at once, and with 2 or more the PRM planned on the job's second GPU."),
    'flops --audit':
        ("Also measure the real architecture with torch's FlopCounterMode and compare with the ledger (imports "
         'torch).'),
    'mem --gpu-mem':
        ('Device memory, e.g. 80GiB: resolves micro_batch_size=auto and refuses a job that cannot fit (exit 2).'),
    'mem --audit':
        ('Measure the audited shapes (Qwen2.5-0.5B/1.5B/7B and small ones) on fake tensors and compare with the '
         'ledger (imports torch; ~5 minutes).'),
    'train --out':
        ('Job folder to create (or resume) for these overrides.'),
    'train --job-dir':
        ('Run or resume a job folder written by `race plan --out` (reads its .hydra/config.yaml).'),
    'run OVERRIDES':
        ('Hydra overrides and sweeps, e.g. model=tiny-s,tiny-m grpo.group_size=4,8 '
         'grpo.updates_per_batch=range(1,3) budget.flops=5e11 grid=none.'),
    'run --sweep-dir':
        ('Sweep folder to run or resume. Default: runs/<grid>-<hash of the plan>, so the same overrides resume the'
         ' same folder.'),
    'run --workers':
        ('CPU worker processes when no GPU is visible (default: one per core, at most one per job; cores are '
         'divided among them as torch threads).'),
    'run --gpus-per-job':
        ('GPUs per job (each job sees only its own via CUDA_VISIBLE_DEVICES). With --launcher slurm, 0 asks for '
         "CPU-only tasks. On this machine's GPUs every job is first planned against them (nvidia-smi's memory per "
         'GPU, this many per job, vLLM installed or not; with 2 or more the PRM on the second): if one cannot fit,'
         ' the run exits 2 naming each such job and what to try, before any job starts. A job given a GPU runs on '
         'it or fails naming torch and the driver, never on the CPU.'),
    'run --launcher':
        ("local (this machine's GPUs or CPU workers) or slurm (one job array via submitit)."),
    'run --retry-failed':
        ('Also rerun jobs that failed (they resume from their checkpoints).'),
    'run --max-jobs':
        ('Refuse sweeps larger than this unless --yes.'),
    'run --partition':
        ("SLURM partition (default: the cluster's default)."),
    'run --time-min':
        ('SLURM time limit per task, minutes; a task that reaches it is requeued and resumes.'),
    'run --array-parallelism':
        ('SLURM: most tasks of the array running at once (default: all).'),
    'run --cpus-per-task':
        ("SLURM: CPUs per task (default: 8 per GPU, 4 for a CPU-only task; also the job's torch threads)."),
    'run --mem-gb':
        ("SLURM: host memory per task, GB (default: sized from the plan's largest models, see "
         'pool/slurm.task_memory_gb).'),
    'run --allow-cpu':
        ('Run hub-sized models (e.g. grid=pilot) on CPU workers when no GPU is visible (refused otherwise).'),
    'run --setup':
        ("SLURM: a shell line run before each task, e.g. 'module load cuda' or 'source .venv/bin/activate' "
         '(repeatable).'),
    'run --wait':
        ('SLURM: follow the tasks to the end (default), or submit and exit.'),
    'report --target':
        ('Rank one evaluation target (the <target> of eval/<target>/accuracy); default: every target, a section '
         'each.'),
    'report --by':
        ('Condition columns (repeatable); default: model, budget, reward, task.'),
    'report --out':
        ('Folder for runs.csv, ranking.csv, summary.md and plots (default: <first sweep>/report).'),
    'report --bootstrap':
        ('Bootstrap resamples for the confidence intervals.'),
    'report --at-budget':
        ("Predict every regime's score and the ranking at this budget from its compute curve: FLOPs (2.4e12) or a "
         "multiple of each condition's budget (3x)."),
    'report --assume-seed-sd':
        ('With one seed per regime: the seed spread to assume (e.g. 0.02), so that ≈ best and > start can be '
         'tested; the report says it was assumed.'),
    'report --full':
        ('Print the whole report here after the findings (rankings, joint comparison, frontier, ...); by default '
         'the console shows the findings only. The files always hold everything.'),
    'validate PILOT':
        ('The pilot sweep folder; `race report` must have written its report/.'),
    'validate --budget':
        ('Validation budget per job, FLOPs (e.g. 1e12). Exclusive with --scale.'),
    'validate --scale':
        ("Validation budget = K x each pilot job's budget (default 2 when neither --budget, --scale nor "
         '--replicate is given).'),
    'validate --replicate':
        ("Replicate at the pilot's own budget with fresh seeds (tests the pilot's call itself; --scale/--budget "
         'test it at another budget).'),
    'validate --margin':
        ('Confirm a call only when the interval of best − control lies above this improvement (fix it before '
         'running; default 0).'),
    'validate --unlearned':
        ('Also validate conditions where no regime beat its start in the pilot (skipped by default: their ranking '
         'is not a finding).'),
    'validate --seeds':
        ("Fix the seeds per validated regime (fresh ones: after the pilot's largest). Default: sized per condition"
         ' by --power.'),
    'validate --control':
        ("The control the pilot's best is tested against: runner-up (its closest rival) or lowest (its "
         'lowest-ranked regime).'),
    'validate --power':
        ("Size the seeds so that the test confirms the gap with this probability (from the pilot's variance model,"
         ' averaged over the uncertainty of its estimates; ignored with --seeds).'),
    'validate --gap':
        ("The true gap best − control to size for (default: the pilot's observed gap less its winner's-curse "
         'bias).'),
    'validate --max-seeds':
        ('At most this many seeds per regime when sizing by power.'),
    'validate --top':
        ("Validate the K regimes with the highest best share per condition instead of the pilot's best alone."),
    'validate --tied':
        ("Also validate every regime the pilot could not tell from its best (the report's 'validate' list); costs "
         "one regime's jobs each."),
    'validate --target':
        ('Evaluation target whose recommendation to validate (default: the one the pilot report ranks).'),
    'validate --out':
        ('Validation sweep folder (default: <pilot>-validate-x<K> or -C<budget>, beside the pilot).'),
    'zoo --build':
        ('Build missing entries (tiny policies, tiny PRM).'),
    'zoo --verify':
        ('Rebuild from the recipe in a temp folder and check the weights equal the shipped copy bit for bit.'),}

INTRO = ("Every `race` command with every option, in full (generated from the command line itself by "
         "`python scripts/commands_reference.py`). `race <command> --help` prints a short form of the same, "
         "grouped in panels (What to run, Where, Resources, SLURM, Output). The flow: `race plan` → `race run` → "
         "`race report` → `race validate`.")


def _plain(text: str) -> str:
    """Help text as the page shows it: rich markup ([bold]...[/]) dropped, whitespace as written."""
    return re.sub(r"\[/?[a-z ]*\]", "", text or "").strip()


def _key(cmd: str, p) -> str:
    return f"{cmd} {p.opts[0] if p.param_type_name == 'option' else (p.metavar or p.name.upper())}"


def _number(x) -> str:
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) and abs(x) >= 10_000 else f"{x:g}"


def _facts(p) -> str:
    """'(N; 1 to 100,000; default 512)': the value it takes, its range, its default."""
    parts = []
    if p.param_type_name == "option" and not p.is_flag and p.metavar:
        parts.append(p.metavar)
    lo, hi = getattr(p, "min", None), getattr(p, "max", None)
    if lo is not None or hi is not None:
        parts.append(f"{_number(lo)} to {_number(hi)}" if lo is not None and hi is not None
                     else f"at least {_number(lo)}" if lo is not None else f"at most {_number(hi)}")
    default = p.default
    if p.param_type_name == "option" and default not in (None, False, (), []):
        value = getattr(default, "value", default)
        if p.is_flag and p.secondary_opts:
            value = p.opts[0] if default else p.secondary_opts[0]
        parts.append(f"default {_number(value) if isinstance(value, (int, float)) else value}")
    if getattr(p, "hidden", False):
        parts.append("not listed by --help")
    return f" ({'; '.join(parts)})" if parts else ""


def page() -> str:
    import typer

    from race_cli.cli import app

    group = typer.main.get_command(app)
    seen, text = set(), ["# Commands and options", "", INTRO, ""]
    top = [p for p in group.params if p.param_type_name == "option"]
    if top:
        text += ["## race", "", _plain(group.help).split("\n\n")[0], ""]
        text += [f"- `{', '.join(p.opts + p.secondary_opts)}`{_facts(p)}: {_plain(p.help)}" for p in top] + [""]
    for name, cmd in group.commands.items():
        text += [f"## race {name}", "", *[para for para in _plain(cmd.help).split("\n\n") for para in (para, "")]]
        for p in cmd.params:
            if p.param_type_name == "option" and set(p.opts) & {"--help", "-h"}:
                continue
            key = _key(name, p)
            seen.add(key)
            names = ", ".join(p.opts + p.secondary_opts) if p.param_type_name == "option" else key.split(" ", 1)[1]
            text.append(f"- `{names}`{_facts(p)}: {DETAILS.get(key, _plain(p.help))}")
        text.append("")
    stale = sorted(set(DETAILS) - seen)
    if stale:
        sys.exit(f"scripts/commands_reference.py: DETAILS names options race no longer has: {', '.join(stale)}")
    return "\n".join(text).rstrip() + "\n"


if __name__ == "__main__":
    want = page()
    if "--check" in sys.argv[1:]:
        sys.exit(0 if PAGE.exists() and PAGE.read_text(encoding="utf-8") == want else 1)
    PAGE.write_text(want, encoding="utf-8")
