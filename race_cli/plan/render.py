"""Terminal output of `race plan` and `race flops`: rich tables, CSV and JSON (no torch here)."""

from __future__ import annotations

import csv
import io
import json
import sys
from typing import Any, Sequence

from race_cli.errors import RaceError
from race_cli.cost.walltime import fmt_duration
from race_cli.fmt import pct


def fmt_flops(x: float) -> str:
    """1.96e+11 -> '1.96e11' (short, still exact enough for a table)."""
    text = f"{x:.3g}"
    mant, _, exp = text.partition("e")
    return f"{mant}e{int(exp)}" if exp else mant


# The plan table: every column, left to right; the console's width decides which are shown. Columns go
# in DROP_ORDER until the table fits, so the job id, the search / learning / feedback shares, the peak
# memory and the job time stay at any width from 80 up; no cell is ever folded or cut (plan.csv and
# plan.json keep every column).
COLUMNS = ["job id", "model", "G", "μ", "reward", "seed", "budget", "T", "planned", "used", "search", "learning",
           "feedback", "p", "tokens", "peak mem", "mb", "inf.", "job time", "GPU-h"]
SAID_BY_ID = ["model", "reward", "seed", "G", "μ"]  # left out first when room is short (the job id says them)
DROP_ORDER = ["tokens", "planned", "budget", "inf.", "mb", "used", "GPU-h", "T", "p"]  # after SAID_BY_ID, swept keys
KEEP = ["job id", "search", "learning", "feedback", "peak mem", "job time"]  # shown at any width from 80 columns
# (narrower still, they go too, job id last: no line is wider than the console)
# The legend under the table: one entry per column, printed only for the columns the width kept (the
# entries of search, learning and feedback are one, printed once).
LEGEND = {"T": "T: iterations (+b: the last one takes b < B prompts, spending the rest of the budget)",
          "budget": "budget / planned: the job's FLOP budget and its planned FLOPs",
          "used": "used = planned / budget",
          "search": "search / learning / feedback = planned shares of the job's FLOPs (rollout / update / reward)",
          "p": "p = update fraction",
          "tokens": "tokens = planned prompt + completion tokens",
          "peak mem": "peak mem = planned peak device memory{phase}",
          "mb": "mb = sequences per micro-batch on a GPU (+ckpt: gradient checkpointing; CPU workers run "
                "micro_batch_size auto as 16 sequences)",
          "inf.": "inf. = planned share of rows the update runs on",
          "job time": "job time = the job's planned duration (total: their sum, not the grid's wall time above)",
          "GPU-h": "GPU-h = job time x its GPUs"}
LEGEND_SAME = {"planned": "budget", "learning": "search", "feedback": "search"}  # columns one entry explains
FLOPS_NOTE = "Model-convention FLOPs; evaluation is not charged."


def legend(shown: Sequence[str], phase: bool = True) -> str:
    """The legend of the columns `shown`, in their order (a column the width dropped is not explained)."""
    keys = dict.fromkeys(LEGEND_SAME.get(c, c) for c in shown)
    parts = [LEGEND[k].format(phase=" and its phase" if phase else "") for k in keys if k in LEGEND]
    return "; ".join(parts) + ". " + FLOPS_NOTE if parts else FLOPS_NOTE


LEFT_OUT = "Not shown at this width: {cols} (in plan.csv and plan.json: race plan --format csv)."


def print_plan(plan: Any, fmt: str = "table", file=None, console=None, head: Sequence[str] = ()) -> None:
    """Print the plan rows as a table with totals, or as CSV / JSON on stdout. The table takes the console's
    width: the columns that fit (plan_table), the rest named under it. The table format opens with the
    headline (jobs, the grid's wall time, then `head`: the race's price and what the pilot resolves), so
    an 80-column screen shows it before the per-job rows, their legend and the settings."""
    out = file or sys.stdout
    rows = plan.rows()
    assumed = getattr(plan, "gpu_assumed", None)
    if assumed and fmt != "table":  # stdout stays the data; the assumption still comes first
        print(assumed, file=sys.stderr)
    if fmt == "json":
        doc = {"grid": plan.grid["name"], "axes": plan.axes, "jobs": rows}
        if getattr(plan, "race", None) is not None:  # a race: its schedule; jobs are its first look
            doc["race"] = plan.race.to_json()
        out.write(json.dumps(doc, indent=2) + "\n")
        return
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
        out.write(buf.getvalue())
        return

    from rich.console import Console

    console = console or Console(file=out)
    if assumed:
        console.print(assumed, highlight=False)
    console.print(f"race plan: grid '{plan.grid['name']}', {len(rows)} jobs", highlight=False)
    console.print(wall_line(plan), highlight=False)
    for line in head:
        console.print(line, highlight=False)
    table, left_out = plan_table(plan, rows, console)
    console.print(table)
    shown = [str(c.header) for c in table.columns]
    phase = any(" (" in c for c in table.columns[shown.index("peak mem")].cells) if "peak mem" in shown else False
    console.print(legend(shown, phase), highlight=False)
    if left_out:
        console.print(LEFT_OUT.format(cols=", ".join(left_out)), highlight=False)
    for line in settings_lines(plan):
        console.print(line, highlight=False)
    if any("vllm_sleep_mode" in r for r in rows):
        console.print(_sleep_table(rows))
    if getattr(plan, "host_note", None):
        console.print(plan.host_note, highlight=False)


def _span(values: Sequence[float]) -> str:
    """'0.113' or '0.092-0.117' (the range over conditions); '–' where none is testable."""
    import math

    vals = sorted(v for v in values if math.isfinite(v))
    if not vals:
        return "–"
    lo, hi = f"{vals[0]:.3f}", f"{vals[-1]:.3f}"
    return lo if lo == hi else f"{lo}-{hi}"


def power_line(rows: Sequence[Any], joint: Sequence[Any], seed_sd: float, source: str, table: bool = False) -> str:
    """The headline's one line on what the pilot resolves: the smallest gain over the start and gap between
    regimes detected with 80% power (plan/power.py, the report's tests), over every condition and target,
    and the joint comparison's; the per-condition table is `race plan --power-table`."""
    if not rows:
        return ""
    sd = f"seed sd {seed_sd:g} " + ("assumed" if source.startswith("assumed") else f"({source})")
    one = " (one seed per regime: not testable)" if all(r.seeds < 2 for r in rows) else ""
    text = (f"resolves with 80% power ({len(rows)} condition x target, {sd}): a gain over the start of "
            f"{_span([r.gain for r in rows])}, a gap between regimes of {_span([r.gap for r in rows])}{one}")
    if joint:
        text += (f"; joint: model size {_span([j.size for j in joint])}, rule - reward model "
                 f"{_span([j.feedback for j in joint])}")
    return text + ("." if table else ". Per condition: race plan --power-table.")


def _sleep_table(rows: list[dict]):
    """Per vLLM job: how its engine frees the GPU for each update, what that costs per iteration, what it pins."""
    from rich import box
    from rich.table import Table

    from race_cli.cost.memory import fmt_bytes

    t = Table(title="vLLM sleep per job (kv_cache: only the KV cache is released, the weights stay on the GPU; "
                    "weights: level 1, the weights copied to pinned host memory and back each iteration, priced at "
                    "cost/walltime.HOST_LINK; frac: vLLM's gpu_memory_utilization)", title_justify="left",
              box=box.SIMPLE_HEAD, show_edge=False)
    for name in ("job id", "sleep", "s/iter", "pinned host", "frac"):
        t.add_column(name, justify="left" if name in ("job id", "sleep") else "right", no_wrap=True)
    for r in rows:
        if "vllm_sleep_mode" in r:
            t.add_row(r["job_id"], r["vllm_sleep_mode"], f"{r['vllm_sleep_seconds_per_iteration']:.2f}",
                      fmt_bytes(r["pinned_host_bytes"]) if r["pinned_host_bytes"] else "0",
                      f"{r['gpu_memory_utilization']:.3f}" if r.get("gpu_memory_utilization") is not None else "")
    return t


def _swept(plan: Any) -> list[str]:
    """The swept keys beyond the columns every plan has (model, G, μ, reward, seed: never a second column)."""
    return [k for k in plan.axes if k not in ("model", "grpo.group_size", "grpo.updates_per_batch", "reward", "seed")]


def _mb(r: dict) -> str:
    return f"{r.get('micro_batch_size', '')}{'+ckpt' if r.get('grad_checkpointing') else ''}"


def _cells(r: dict) -> dict[str, str]:
    hours = r.get("planned_gpu_hours")
    return {"job id": r["job_id"], "model": r["model"], "G": str(r["group_size"]), "μ": str(r["updates_per_batch"]),
            "reward": r["reward"], "seed": str(r["seed"]), "budget": fmt_flops(r["budget_flops"]),
            "T": _iterations(r), "planned": fmt_flops(r["planned_flops_total"]), "used": pct(r["budget_used"]),
            "search": pct(r["share_search"]), "learning": pct(r["share_learning"]),
            "feedback": pct(r["share_feedback"]), "p": f"{r['p']:.2f}",
            "tokens": fmt_flops(r["tokens_prompt"] + r["tokens_completion"]), "peak mem": _peak(r), "mb": _mb(r),
            "inf.": f"{r['informative_share']:.2f}", "job time": fmt_duration(r.get("planned_seconds")),
            "GPU-h": f"{hours:.3g}" if hours else ""}


def _totals(rows: list[dict]) -> dict[str, str]:
    total = sum(r["planned_flops_total"] for r in rows)
    budget = sum(r["budget_flops"] for r in rows)
    share = lambda k: pct(sum(r[k] for r in rows) / total) if total else ""
    hours = sum(r.get("planned_gpu_hours") or 0.0 for r in rows)
    return {"job id": "total", "budget": fmt_flops(budget), "T": str(sum(r["iterations"] for r in rows)),
            "planned": fmt_flops(total), "used": pct(total / budget) if budget else "",
            "search": share("planned_flops_rollout"), "learning": share("planned_flops_update"),
            "feedback": share("planned_flops_reward"),
            "tokens": fmt_flops(sum(r["tokens_prompt"] + r["tokens_completion"] for r in rows)),
            "peak mem": _peak(max(rows, key=lambda r: r.get("planned_peak_bytes", 0))),
            "job time": fmt_duration(sum(r.get("planned_seconds") or 0.0 for r in rows)),
            "GPU-h": f"{hours:.3g}" if hours else ""}


PEAK_PHASE = "peak mem's phase"  # the phase in the peak mem cells, the first thing to go before the column


def plan_table(plan: Any, rows: list[dict], console) -> tuple[Any, list[str]]:
    """(the table, the columns left out): COLUMNS and the plan's other swept keys, one space between
    columns, no cell ever folded or cut. While the table is wider than the console, columns go: first those
    the job id already says or that hold one value for every job, then the swept keys, then DROP_ORDER;
    KEEP stays (the 80-column pilot fits it)."""
    from rich import box
    from rich.table import Table

    swept = _swept(plan)
    cells = []
    for job, r in zip(plan.jobs, rows):
        c = _cells(r)
        c.update({k: str(_lookup(job.config, k)) for k in swept})
        cells.append(c)
    total = _totals(rows)
    names = COLUMNS[:6] + swept + COLUMNS[6:]
    if not any(c["GPU-h"] for c in cells):
        names.remove("GPU-h")

    # every column's width from its cells once (rich would measure each cell again for every try and
    # for the print: minutes for a 100,000-job plan); the table is built once, at these widths
    width = {c: max(_cell_width(console, x) for x in [c, total.get(c, "")] + [cell[c] for cell in cells])
             for c in names}
    cols = list(names)
    same = lambda c: len({cell[c] for cell in cells}) == 1  # one value for every job
    drop = [c for c in SAID_BY_ID if same(c) or all(_said_by_id(c, r) for r in rows)]
    drop += [k for k in swept if same(k)] + [c for c in SAID_BY_ID if c not in drop] + [k for k in swept if not same(k)]
    drop += [c for c in DROP_ORDER if c in names] + [PEAK_PHASE, "peak mem", "job time", "feedback", "learning",
                                                     "search"]
    left_out = []
    while sum(width[c] for c in cols) + len(cols) - 1 > console.width and drop:  # one space between columns
        c = drop.pop(0)
        if c == PEAK_PHASE and "peak mem" in cols:  # '71.3 GiB (update)' -> '71.3 GiB': the size before the column
            for cell in cells + [total]:
                if "peak mem" in cell:
                    cell["peak mem"] = cell["peak mem"].split(" (")[0]
            width["peak mem"] = max(_cell_width(console, x) for x in ["peak mem", total.get("peak mem", "")]
                                    + [cell["peak mem"] for cell in cells])
        elif c in cols:
            cols.remove(c)
            left_out.append(c)
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, padding=(0, 0), pad_edge=False)
    for c in cols:
        t.add_column(c, justify="left" if c in ("job id", "model", "reward") else "right", no_wrap=True,
                     width=width[c])
    for c in cells:
        t.add_row(*[c[k] for k in cols])
    t.add_section()
    t.add_row(*[total.get(k, "") for k in cols])
    return t, [c for c in names if c in left_out and not (c in SAID_BY_ID and all(_said_by_id(c, r) for r in rows))]


def _cell_width(console, text: str) -> int:
    """The cells a table cell's text takes as rich prints it (markup read where there is any)."""
    from rich.cells import cell_len

    return console.render_str(text).cell_len if "[" in text else cell_len(text)


def _said_by_id(col: str, r: dict) -> bool:
    """Whether the job id names this column's value (a swept axis is part of the id), or it is the same for every job."""
    value = {"model": r["model"], "reward": str(r["reward"]).split(":")[0], "seed": f"s{r['seed']}",
             "G": f"G{r['group_size']}", "μ": f"mu{r['updates_per_batch']}"}[col]
    return value in r["job_id"]


def wall_line(plan: Any) -> str:
    """'planned wall time: 7m12s on 2 CPU workers (...)': the grid's, as race run would schedule it here
    (or on the `race plan --gpu` device), and where the rates come from."""
    rows = plan.rows()
    gpu_hours = sum(r.get("planned_gpu_hours") or 0.0 for r in rows)
    gpu = getattr(plan, "gpu", None)
    per_job = max((getattr(j, "gpus", 0) or 0 for j in plan.jobs), default=0)
    if gpu_hours and per_job > 1:  # race plan --gpus-per-job N: N GPUs a job, slots jobs at once
        where = (f"{gpu.count} {gpu.kind.name} GPU(s), {per_job} per job, {plan.slots} job(s) at once "
                 f"({_gpu_source(plan)})" if gpu is not None
                 else f"{plan.slots * per_job} GPU(s), {per_job} per job, {plan.slots} job(s) at once")
    elif gpu_hours:
        where = (f"{plan.slots} {gpu.kind.name} GPU(s) ({_gpu_source(plan)})"
                 if gpu is not None else f"{plan.slots} GPU(s)")
    else:
        where = f"{plan.slots} CPU worker(s)"
    text = (f"planned wall time: {fmt_duration(plan.grid_seconds())} for the grid on {where}, longest job first "
            f"({fmt_duration(sum(r.get('planned_seconds') or 0.0 for r in rows))} of job time"
            + (f", {gpu_hours:.3g} GPU-hours" if gpu_hours else "") + f"); rates {plan.wall_source}.")
    if gpu_hours and "assumed" in plan.wall_source:
        text += (" GPU rates are assumptions (datasheet peaks at assumed shares) until race plan --calibrate-from "
                 "a finished sweep run on that GPU.")
    return text


SETTINGS_SHOWN = 4  # distinct settings lines printed; the rest are in the job configs


def settings_lines(plan: Any) -> list[str]:
    """'settings: qwen2.5-1.5b on gsm8k: completion cap 512 (task), expected 300 tokens (task), lr 1e-05 (model,
    LoRA), budget 3e+17 (model)': the settings a job takes from its task and model (config/derive.py), each
    with where it came from (task, model, or set: a grid's fixed block or an override), once per distinct set."""
    seen: dict[tuple, None] = {}
    for job in plan.jobs:
        c = job.config
        given = {o.lstrip("+").partition("=")[0] for o in job.overrides}
        src = lambda key, own: "set" if key in given else own
        lora = "LoRA" if c["lora"]["enabled"] else "full FT"
        ect = c["rollout"].get("expected_completion_tokens")
        seen[(c["model"]["name"], c["task"]["name"],
              f"completion cap {c['rollout']['max_new_tokens']} ({src('rollout.max_new_tokens', 'task')})",
              f"expected {ect:g} tokens ({src('rollout.expected_completion_tokens', 'task')})" if ect is not None
              else "expected = the cap",
              f"lr {c['grpo']['lr']:g} ({src('grpo.lr', 'model')}, {lora})",
              f"budget {c['budget']['flops']:g} ({src('budget.flops', 'model')})") + _targets_setting(c)] = None
    models: dict[tuple, list[str]] = {}  # models that take the same settings on the same task share a line
    for m, t, *rest in seen:
        models.setdefault((t, *rest), []).append(m)
    lines = [f"settings: {', '.join(ms)} on {t}: " + ", ".join(rest) for (t, *rest), ms in models.items()]
    more = len(lines) - SETTINGS_SHOWN
    return lines[:SETTINGS_SHOWN] + ([f"settings: {more} more (each job's .hydra/config.yaml)"] if more > 0 else [])


def _targets_setting(c: dict) -> tuple[str, ...]:
    """('evaluated on arithmetic, arithmetic-hard (set)',) when a job's targets are not its task's own, else ()."""
    from race_cli.tasks.targets import target_names, task_target_name

    names = target_names(c)
    return () if names == [task_target_name(c["task"])] else (f"evaluated on {', '.join(names)} (set)",)


def _gpu_source(plan: Any) -> str:
    gpu = plan.gpu
    if getattr(plan, "gpu_assumed", None):
        return "assumed: no GPU here and no --gpu"
    return f"--gpu {gpu.kind.name}x{gpu.count}; not detected here"


def _iterations(row: dict) -> str:
    """'12' or '11+3' (11 full iterations, then one of 3 prompts)."""
    b = row.get("last_iteration_prompts") or 0
    return f"{row['iterations'] - 1}+{b}" if b else str(row["iterations"])
def _peak(row: dict) -> str:
    """'12.3 GiB (update)': the planned peak device memory and the phase that reaches it."""
    from race_cli.cost.memory import fmt_bytes

    if "planned_peak_bytes" not in row:
        return ""
    return f"{fmt_bytes(row['planned_peak_bytes'])} ({row['peak_phase']})"


def _lookup(cfg: dict, dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return node if isinstance(node, (str, int, float)) else ""
        node = node[part]
    if isinstance(node, dict):
        return node.get("name", "")
    return node


def print_flops(overrides: Sequence[str], *, audit: bool = False, batch: int = 2, file=None) -> int:
    """`race flops`: one job's per-phase ledger, one iteration and the planned whole job.

    Returns the exit code: 2 for a job race plan would refuse (its budget buys no iteration, or
    more than budget.max_iterations), after printing the ledger that shows why; else 0.
    """
    from rich.console import Console
    from rich.table import Table

    from race_cli.cost.budget import completion_estimate
    from race_cli.plan.build import build_plan

    plan = build_plan(["grid=none", *overrides], max_jobs=1, yes=True, check_budget=False)
    if len(plan.jobs) != 1:
        raise RaceError(f"race flops shows ONE job, but the overrides sweep {len(plan.jobs)} jobs. "
                        "Drop the comma lists / range() (race plan previews sweeps).")
    job = plan.jobs[0]
    pl = job.planned()
    console = Console(file=file or sys.stdout)  # the terminal's width (a pipe: 80, or $COLUMNS)
    c = job.config
    console.print(f"[bold]{c['model']['name']}[/] G={c['grpo']['group_size']} μ={c['grpo']['updates_per_batch']} "
                  f"B={c['grpo']['prompts_per_iter']} reward={job.row()['reward']} "
                  f"lora={'r=' + str(c['lora']['r']) if c['lora']['enabled'] else 'off (full FT)'} "
                  f"budget={fmt_flops(c['budget']['flops'])} -> T={_iterations(job.row())} iterations", highlight=False)
    table = Table(title="planned ledger (FLOPs)", title_justify="left")
    for name in ("phase", "iter.\nmodel", "iter.\nexecuted", "job\nmodel", "job\nexecuted", "share"):
        table.add_column(name, justify="left" if name == "phase" else "right", no_wrap=name in ("phase", "share"))
    total = pl["flops"]["total"]
    names = {"rollout": "rollout/search", "update": "update/learning", "reward": "reward/feedback"}
    for k, label in names.items():
        f = job.per_iteration[k]
        table.add_row(label, fmt_flops(f.model), fmt_flops(f.executed), fmt_flops(pl["flops"][k]),
                      fmt_flops(pl["executed_flops"][k]), pct(pl["flops"][k] / total if total else 0))
    per_it = sum(f.model for f in job.per_iteration.values())
    per_it_x = sum(f.executed for f in job.per_iteration.values())
    table.add_section()
    table.add_row("total", fmt_flops(per_it), fmt_flops(per_it_x), fmt_flops(total),
                  fmt_flops(pl["executed_flops"]["total"]), pct(total / c["budget"]["flops"]) + " of budget")
    console.print(table)
    console.print(f"planning lengths: prompt {c['task']['prompt_tokens']:g} tokens, completion "
                  f"{completion_estimate(c):g} tokens (rollout.expected_completion_tokens); the job's live ledger uses real counts.", highlight=False)
    if audit:
        _print_audit(job, batch, console)
    refused = None
    if job.budget.full_iterations < 1:
        refused = (f"budget.flops={c['budget']['flops']:.3g} buys no iteration: one costs {per_it:.3g} FLOPs. "
                   "race plan and race run refuse this job; raise budget.flops or shrink the batch.")
    if refused:
        Console(stderr=True).print(f"[bold red]error:[/] {refused}", highlight=False, soft_wrap=True)
        return 2
    return 0


def _print_audit(job: Any, batch: int, console: Any) -> None:
    """Measured (FlopCounterMode on the real architecture) against the ledger's executed figure."""
    from rich.table import Table

    from race_cli.cost import flops
    from race_cli.plan import flops_audit

    c = job.config
    arch = flops.Arch.from_config(c["model"]["arch"])
    big = arch.n_body > 50_000_000  # real Qwen2.5 shapes: count on the meta device, no memory
    prompt = max(2, min(int(c["task"]["prompt_tokens"]), 64))
    completion = max(1, min(int(c["rollout"]["max_new_tokens"]), 16))
    import warnings

    with warnings.catch_warnings():  # transformers' deprecation notices are not the user's concern here
        warnings.simplefilter("ignore", FutureWarning)
        rows = flops_audit.audit_arch(arch, lora_r=c["lora"]["r"] if c["lora"]["enabled"] else None, batch=batch,
                                      prompt_len=prompt, completion_len=completion, device="meta" if big else "cpu")
    table = Table(title=f"audit: torch FlopCounterMode vs ledger (executed), batch {batch}, prompt ≤{prompt}, "
                  f"completion {completion}{', meta device' if big else ''}", title_justify="left")
    for name in ("case", "measured", "ledger executed", "ledger model", "rel. error"):
        table.add_column(name, justify="left" if name == "case" else "right")
    worst = 0.0
    for r in rows:
        if r["measured"] is None:
            table.add_row(r["what"], "—", fmt_flops(r["ledger_executed"]), fmt_flops(r["ledger_model"]),
                          r.get("note", "skipped"))
            continue
        worst = max(worst, abs(r["rel_err"]))
        table.add_row(r["what"], fmt_flops(r["measured"]), fmt_flops(r["ledger_executed"]),
                      fmt_flops(r["ledger_model"]), f"{100 * r['rel_err']:+.3f}%")
    console.print(table)
    console.print(f"largest |error|: {100 * worst:.3f}% ({'within' if worst <= 0.01 else 'OUTSIDE'} the 1% target)")


def print_memory(overrides: Sequence[str], *, gpu_mem: int | None = None, audit: bool = False, quick: bool = False,
                 file=None) -> int:
    """One job's memory ledger per phase (and, with `audit`, the measured comparison); returns the exit code."""
    from rich.console import Console
    from rich.table import Table

    from race_cli.cost.memory import fmt_bytes
    from race_cli.plan.build import build_plan

    console = Console(file=file or sys.stdout)  # the terminal's width (a pipe: 80, or $COLUMNS)
    (job,) = build_plan(["grid=none", *overrides], max_jobs=1, yes=True, check_budget=False, gpu_mem=gpu_mem).jobs
    m = job.memory
    table = Table(title=f"memory ledger: {job.config['model']['name']}, micro-batch {m.micro_batch}"
                  f"{' + checkpointing' if m.grad_checkpointing else ''}"
                  + (f", device {fmt_bytes(gpu_mem)}" if gpu_mem else ""), title_justify="left")
    for name in ("phase", "part", "bytes"):
        table.add_column(name, justify="right" if name == "bytes" else "left")
    for phase, parts in m.phases.items():
        for part, n in parts.items():
            table.add_row(phase, part, fmt_bytes(n))
        table.add_row(phase, "[bold]peak[/]", f"[bold]{fmt_bytes(m.total(phase))}[/]")
        table.add_section()
    console.print(table)
    from race_cli.cost.memory import vllm_note

    note = vllm_note(job.config, m)
    if note:
        console.print(note, highlight=False)
    if not audit:
        return 0
    from race_cli.plan import memory_audit

    cases = [memory_audit.CASES[i] for i in memory_audit.QUICK] if quick else memory_audit.CASES
    t = Table(title="memory audit: ledger vs measured peak (fake tensors, real engine code)", title_justify="left")
    for name in ("case", "n x S", "ledger", "measured", "error"):
        t.add_column(name, justify="left" if name == "case" else "right")
    worst = 0.0
    for r in memory_audit.audit(cases):
        worst = max(worst, abs(r["error"]))
        t.add_row(r["case"], f"{r['n']} x {r['seq']}", fmt_bytes(r["ledger"]), fmt_bytes(r["measured"]),
                  f"{r['error']:+.1%}")
    console.print(t)
    console.print(f"largest error {worst:.1%} (tolerance {memory_audit.TOLERANCE:.0%})")
    return 0 if worst <= memory_audit.TOLERANCE else 1
