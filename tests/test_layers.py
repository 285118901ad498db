"""The package's layers: who may import whom (read from the source, lazy imports included).

LAYERS declares them, bottom first: a module imports modules of its own layer and of the layers below, and
exactly one import runs up, the fork server's deliberate import of cli (UPWARD). Within and beside them:

    answers -> errors                      pure answer checkers, below tasks and rewards
    cost -> errors (no torch, no files; the two audits, which measure the engine's own code, sit in plan/)
    stats -> errors (the inference model, numpy/scipy; plan/ and report/ take their statistics from it)
    engine, report: peers that never import each other; report/views/ imports records, words, formats only

No import cycle; engine/ imports neither plan/ nor pool/; only race_cli/folder.py spells the paths
of a sweep folder (docs/files.md).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "race_cli"


def modules() -> dict[str, Path]:
    out = {}
    for f in sorted(PKG.rglob("*.py")):
        parts = f.relative_to(PKG.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """race_cli modules `name` imports anywhere in its file (function-level imports too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    return {m for m in found if m in known and m != name}


def third_party(path: Path) -> set[str]:
    """Top-level names of every module `path` imports that is not race_cli's."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and not n.level}
    return names - {"race_cli", ""}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(name, path, known) for name, path in known.items()}


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


def under(mod: str, *packages: str) -> bool:
    return any(mod == f"race_cli.{p}" or mod.startswith(f"race_cli.{p}.") for p in packages)


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    g = graph()
    assert "race_cli.cost.budget" in g["race_cli.plan.build"] and "race_cli.cost.flops" in g["race_cli.cost.budget"]


def test_no_module_imports_itself_back():
    assert cycles(graph()) == []


def test_answers_import_only_errors():
    g = graph()
    bad = {m: deps for m, deps in g.items() if under(m, "answers") and not all(
        under(d, "answers") or d == "race_cli.errors" for d in deps)}
    assert bad == {}
    for m, path in modules().items():
        if under(m, "answers"):
            assert third_party(path) <= {"__future__", "cmath", "math", "re", "typing", "unicodedata", "fractions",
                                         "math_verify"}, m


def test_cost_is_pure():
    """cost/ imports no torch and opens no files, and nothing above it: its audits, which run torch on the
    engine's own code, sit in plan/ (and plan/ asks cost/, not pool/, which models are too big for CPU)."""
    g = graph()
    audits = {"race_cli.plan.flops_audit", "race_cli.plan.memory_audit"}
    for m in audits:
        # of the engine they use its log-prob code (what they measure) and engine/hf.py (how to build a
        # transformers/peft model on every supported version), and the PRM's own scoring forward (what the
        # reward ledger is audited against), nothing of a job's lifecycle
        engine_ok = {"race_cli.engine.logprobs", "race_cli.engine.hf", "race_cli.rewards.prm"}
        assert all(under(d, "cost") or d in engine_ok or d == "race_cli.errors" for d in g[m]), (m, g[m])
    assert not any(under(d, "pool") for m in g if under(m, "plan") for d in g[m])
    for m, path in modules().items():
        if not under(m, "cost"):
            continue
        assert all(under(d, "cost") or d == "race_cli.errors" for d in g[m]), (m, g[m])
        assert third_party(path) <= {"__future__", "math", "re", "collections", "dataclasses", "typing"}, m
        src = path.read_text(encoding="utf-8")
        assert "open(" not in src and "read_text(" not in src and "write_text(" not in src, m


def test_stats_is_pure_and_below_plan_and_report():
    """stats/ imports nothing of race_cli but errors, no pandas and no files; plan/ and report/ take their
    statistics from it (no t function of their own)."""
    g = graph()
    mods = modules()
    assert any(under(m, "stats") for m in mods)
    for m, path in mods.items():
        if under(m, "stats"):
            assert all(under(d, "stats") or d == "race_cli.errors" for d in g[m]), (m, g[m])
            assert third_party(path) <= {"__future__", "math", "dataclasses", "functools", "typing", "warnings", "numpy",
                                         "scipy"}, (m, third_party(path))
            src = path.read_text(encoding="utf-8")
            assert "open(" not in src and "read_text(" not in src and "write_text(" not in src, m
        if under(m, "plan", "report"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            assert not own & {"t_cdf", "t_quantile", "_betainc", "_betacf"}, (m, own & {"t_cdf", "t_quantile"})
    assert "race_cli.stats.power" in g["race_cli.plan.power"]
    assert "race_cli.stats.decisions" in g["race_cli.report.rank"]


# race_cli's top-level modules and packages in layers, bottom first; a new one is given its layer here
LAYERS = (
    ("errors", "io", "fmt", "machine", "lock"),  # the shared bottom
    ("answers", "cost", "stats", "guide"),  # pure: answer checkers, FLOPs and memory, the inference model; the guide
    ("tasks",),  # training tasks and evaluation targets
    ("config", "rewards"),  # what a job is; its feedback
    ("folder", "status", "regime", "zoo", "quantile_cache"),  # the sweep folder's paths and states, the regime and
    # condition keys, the embedded models, the statistics' quantiles kept across reports
    ("engine", "report", "plan_file"),  # race train; race report, with the reader of plan.json pool/ shares
    ("plan",),  # race plan and validate (its audits run the engine's code, validate reads the pilot's report)
    ("pool",),  # race run
    ("cli",),
    ("race_cli", "__main__"),  # the package's own __init__ and python -m race_cli
)
# the one import that runs up: the fork server preloads the code a forked job runs, race train's entry point
UPWARD = [("race_cli.pool.forkserver_main", "race_cli.cli")]


def layer_of(module: str) -> str:
    """'race_cli.report.views.render' -> 'report'; the package's own __init__ -> 'race_cli'."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def upward(g: dict[str, set[str]], layers=LAYERS) -> list[tuple[str, str]]:
    """(module, import) for each import into a higher layer than the module's own."""
    rank = {name: i for i, layer in enumerate(layers) for name in layer}
    return sorted((m, d) for m, deps in g.items() for d in deps if rank[layer_of(d)] > rank[layer_of(m)])


def test_one_import_runs_up_the_layers():
    """Every import points down (or stays in its layer) but the fork server's of cli."""
    planted = {"race_cli.report.rank": {"race_cli.pool.run", "race_cli.stats.power"},
               "race_cli.pool.run": {"race_cli.report.rank"}}
    assert upward(planted) == [("race_cli.report.rank", "race_cli.pool.run")]  # the check sees one
    g = graph()
    placed = {name for layer in LAYERS for name in layer}
    assert {layer_of(m) for m in g} - placed == set(), "give each top-level module or package a layer in LAYERS"
    assert upward(g) == UPWARD


def test_layers_point_one_way():
    g = graph()
    bad = []
    for mod, deps in g.items():
        for dep in deps:
            if under(mod, "engine") and under(dep, "plan", "pool", "report"):
                bad.append((mod, dep))
            if under(mod, "tasks") and under(dep, "rewards", "engine", "zoo"):
                bad.append((mod, dep))
            if under(mod, "config", "answers", "tasks") and under(dep, "cost", "plan", "engine", "pool", "report"):
                bad.append((mod, dep))
            if mod in ("race_cli.status", "race_cli.folder", "race_cli.machine", "race_cli.io", "race_cli.lock",
                       "race_cli.fmt") and under(dep, "cost", "plan", "engine", "pool", "report", "rewards", "zoo"):
                bad.append((mod, dep))
            if under(mod, "report") and under(dep, "plan", "engine", "pool"):
                bad.append((mod, dep))
            if under(mod, "stats") and under(dep, "plan", "report", "engine", "pool", "cost", "config"):
                bad.append((mod, dep))
    assert bad == []
    assert "race_cli.pool.run" not in g["race_cli.pool.slurm"]


def test_machine_is_probed_in_machine_py_only():
    """find_spec, nvidia-smi and the driver's GPU listing: one module asks them."""
    for m, path in modules().items():
        if m == "race_cli.machine":
            continue
        src = path.read_text(encoding="utf-8")
        for probe in ("find_spec(", '"nvidia-smi"', "/proc/driver/nvidia", "sched_getaffinity", "cpu_count(",
                      "get_device_properties("):
            assert probe not in src, (m, probe)


SWEEP_NAMES = {"jobs", "plan.json", "plan.csv", "multirun.yaml", ".hydra", "config.yaml", "overrides.yaml",
               "summary.json", "ledger.json", "metrics.jsonl", "log.txt"}


def spelled_paths(path: Path) -> list[str]:
    """Sweep-folder names used to build a path in `path`: an operand of `/`, or an argument of Path(),
    os.path.join, joinpath or glob; docstrings, messages and JSON keys do not count."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            operands = [node.left, node.right]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "glob", "rglob", "joinpath", "join", "Path"):
            operands = list(node.args)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Path":
            operands = list(node.args)
        else:
            continue
        for o in operands:
            if isinstance(o, ast.Constant) and isinstance(o.value, str):
                parts = set(o.value.split("/"))
                if parts & SWEEP_NAMES and (o.value in SWEEP_NAMES or "*" in o.value or o.value.count("/")):
                    found.append(o.value)
    return found


def test_only_folder_py_spells_the_sweep_folder():
    assert spelled_paths(PKG / "folder.py")  # the check sees the paths where they are spelled
    bad = {m: spelled_paths(p) for m, p in modules().items() if m != "race_cli.folder" and spelled_paths(p)}
    assert bad == {}


def unlisted(package: Path) -> list[str]:
    """Modules (`name.py`) and subpackages (`name/`) of `package` its __init__ docstring does not name.

    A name counts only standing alone: `power.py` is not named by `validation_power.py`, nor by a path
    into another package such as `race_cli/plan/power.py`."""
    import re

    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8"))) or ""
    names = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    names += [p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(n for n in names if not re.search(rf"(?<![\w/.]){re.escape(n)}", doc))


def test_every_package_lists_its_modules(tmp_path):
    (tmp_path / "__init__.py").write_text('"""a.py: one\nsub/: two\nold_b.py: three"""\n')
    for name in ("a.py", "b.py", "c.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "__init__.py").write_text("")
    assert unlisted(tmp_path) == ["b.py", "c.py"]  # the check sees a missing entry (b.py is not old_b.py's)
    packages = [PKG] + sorted(p.parent for p in PKG.rglob("__init__.py") if p.parent != PKG)
    missing = {str(p.relative_to(PKG.parent)): unlisted(p) for p in packages if unlisted(p)}
    assert missing == {}, f"name each module in its package's docstring: {missing}"


# what a view (report/views/) may import besides other views: the report's records, its words and its number
# and JSON formats (fmt.py, io.dumps); never stats/ or a module of report/ that computes
VIEW_MAY_IMPORT = {"race_cli.report.records", "race_cli.report.words", "race_cli.fmt", "race_cli.io"}


def views_calling_back(g: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(view, module) for each race_cli module a report/views/ module imports that is neither a view nor in
    VIEW_MAY_IMPORT."""
    return sorted((m, d) for m in g if under(m, "report.views") for d in g[m]
                  if not (under(d, "report.views") or d in VIEW_MAY_IMPORT))


def test_views_never_call_back_into_computing():
    """Compute, then show: a view (report/views/) imports the report's records, its words and number formats, and
    other views only, so rendering can never recompute what build_report did."""
    planted = {"race_cli.report.views.x": {"race_cli.report.words", "race_cli.report.rank", "race_cli.stats.power"}}
    assert views_calling_back(planted) == [("race_cli.report.views.x", "race_cli.report.rank"),
                                           ("race_cli.report.views.x", "race_cli.stats.power")]  # the check sees it
    g = graph()
    views = [m for m in g if under(m, "report.views")]
    assert {"race_cli.report.views.render", "race_cli.report.views.joint", "race_cli.report.views.validation",
            "race_cli.report.views.frontier"} <= set(views)
    assert views_calling_back(g) == []
    # every renderer lives there: no module of report/ outside views/ draws or prints a table
    for m, path in modules().items():
        if under(m, "report") and not (under(m, "report.views") or m == "race_cli.report.command"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            drawn = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
            drawn |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
            assert not {d for d in drawn if d.startswith(("rich", "matplotlib"))}, m


MAX_PARAMETERS = 6  # a renderer takes the Report or one record (and where it draws), never its fields one by one


def parameters(path: Path) -> dict[str, int]:
    """{function: how many parameters it takes} for every function and method defined in `path` (a method's
    self or cls not counted; *args and **kwargs count one each)."""
    out = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            a = node.args
            names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs] + [x.arg for x in (a.vararg, a.kwarg) if x]
            out[node.name] = len([n for n in names if n not in ("self", "cls")])
    return out


def test_no_renderer_takes_more_than_six_parameters(tmp_path):
    """Every function of report/views/, and the findings (report/findings.py, built from the Report), takes
    at most MAX_PARAMETERS parameters: the Report or one of its records, not ten of its fields."""
    (tmp_path / "v.py").write_text("def show(a, b, c, d, e, f, *, g=1):\n    pass\n\n\nclass V:\n"
                                   "    def m(self, a, *args, **kw):\n        pass\n")
    assert parameters(tmp_path / "v.py") == {"show": 7, "m": 3}  # the count sees keyword-only and starred ones
    mods = modules()
    views = {m: parameters(p) for m, p in mods.items() if under(m, "report.views")}
    views["race_cli.report.findings"] = {"findings": parameters(mods["race_cli.report.findings"])["findings"]}
    assert len(views) > 5 and all(views.values())
    too_many = {f"{m}.{f}": n for m, counts in views.items() for f, n in counts.items() if n > MAX_PARAMETERS}
    assert too_many == {}


# wordings report/words.py holds; each must not be typed out again in a string anywhere else in the package
ONE_HOME_WORDS = ("not testable with one seed", "no regime shown to beat its start", "equivalent within",
                  "a pilot grid is a diagnostic")


def test_every_verdict_and_race_state_is_worded_in_words_py_only():
    """One decision, one wording: a verdict, race state or caveat typed out again elsewhere drifts from
    report/words.py's (docstrings may name them; the strings the program prints may not)."""
    words = PKG / "report" / "words.py"
    assert all(w in words.read_text(encoding="utf-8").lower() for w in ONE_HOME_WORDS)
    found = []
    for m, path in modules().items():
        if path == words:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docs = {id(n.body[0].value) for n in ast.walk(tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs:
                found += [(m, n.lineno, w) for w in ONE_HOME_WORDS if w in n.value.lower()]
    assert found == []
