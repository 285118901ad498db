"""The package's layers: who may import whom (read from the source, lazy imports included).

    plan -> budget -> ledger        engine -> budget, status        pool -> plan, status, report
    rewards -> tasks                status below plan, engine and pool

No import cycle between modules; engine/ imports neither plan nor pool/; pool/command.py and
pool/slurm.py do not import each other both ways; tasks/ does not import rewards/.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "race_cli"

# tasks/gsm8k.py still reads rewards.rule.normalize_number (that file belongs to another change in
# flight); every other tasks -> rewards import is refused.
# tasks that read answers with the rewards' pure answer checkers (no torch); moving the checkers
# (rule.normalize_number, graders, math_answer) below tasks/ would remove these
KNOWN_UPWARD = {("race_cli.tasks.gsm8k", "race_cli.rewards.rule"), ("race_cli.tasks.jsonl", "race_cli.answers.graders"),
                ("race_cli.tasks.jsonl", "race_cli.answers.math")}


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


def test_the_checker_sees_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    g = graph()
    assert "race_cli.cost.budget" in g["race_cli.plan.build"] and "race_cli.cost.flops" in g["race_cli.cost.budget"]


# The one cycle left, through function-level imports: rewards.rule hands MATH answers to
# rewards.graders (rule_reward(grader=...)), whose number grader reuses rule's check.
KNOWN_CYCLES = [["race_cli.answers.graders", "race_cli.rewards.rule"]]


def test_no_module_imports_itself_back():
    assert [c for c in cycles(graph()) if c not in KNOWN_CYCLES] == []


def test_layers_point_one_way():
    g = graph()
    bad = []
    for mod, deps in g.items():
        for dep in deps:
            if mod.startswith("race_cli.engine") and (dep == "race_cli.plan.build" or dep.startswith("race_cli.pool")):
                bad.append((mod, dep))
            if mod in ("race_cli.cost.budget", "race_cli.status", "race_cli.cost.flops") and dep.startswith(
                    ("race_cli.plan.build", "race_cli.engine", "race_cli.pool", "race_cli.report")):
                bad.append((mod, dep))
            if mod.startswith("race_cli.tasks") and dep.startswith("race_cli.rewards") \
                    and (mod, dep) not in KNOWN_UPWARD:
                bad.append((mod, dep))
    assert bad == []
    assert "race_cli.pool.run" not in g["race_cli.pool.slurm"]


def test_budget_imports_no_torch_and_no_io():
    src = (PKG / "cost" / "budget.py").read_text(encoding="utf-8")
    tree = ast.parse(src)
    names = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert names <= {"__future__", "math", "collections", "dataclasses", "typing", "race_cli"}
    assert "open(" not in src
