"""The zoo cache: build an entry once into `<cache>/zoo/<name>-<hash12>/`, reuse it afterwards.

Cache root: `$RACE_CACHE` when set, else `~/.cache/race`; entries live in its `zoo/` folder.
An entry is built into a temp folder beside its final place and renamed when complete, so a
crash never leaves a half-built entry; a lock file makes concurrent `race run` workers wait
for one build instead of racing. Each entry holds the model (save_pretrained), the byte
tokenizer and `recipe.json` (recipe, hash, measured figures, build seconds).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from race_cli.errors import RaceError
from race_cli.io import atomic_write_json, read_json
from race_cli.zoo.recipes import RECIPES, count_params, recipe_hash

BUILDS = {"count": 0}  # entries built by this process (tests check that a cached entry is not rebuilt)


def cache_root() -> Path:
    return Path(os.environ.get("RACE_CACHE") or Path.home() / ".cache" / "race").expanduser()


def entry_dir(name: str) -> Path:
    """Where `name` built from the current recipe lives (whether or not it is built yet)."""
    _check_name(name)
    return cache_root() / "zoo" / f"{name}-{recipe_hash(name)}"


def is_built(path: Path) -> bool:
    return (path / "recipe.json").is_file() and (path / "config.json").is_file() and damage(path) is None


def damage(path: Path) -> str | None:
    """Why the entry at `path` cannot be used (unreadable recipe.json / config.json, a recipe hash
    that is not its folder's), or None when it looks whole. A damaged entry is rebuilt."""
    for name in ("recipe.json", "config.json"):
        if not (path / name).exists():
            continue
        try:
            data = read_json(path / name)
        except (OSError, ValueError) as exc:
            return f"{name} is unreadable ({type(exc).__name__})"
        if not isinstance(data, dict):
            return f"{name} is not a JSON object"
        if name == "recipe.json" and not path.name.endswith(f"-{data.get('hash')}"):
            return f"recipe.json names hash {str(data.get('hash'))[:20]!r}, not the folder's"
    return None


def _check_name(name: str) -> None:
    if name not in RECIPES:
        raise RaceError(f"zoo entry {name!r} is unknown; expected one of {', '.join(RECIPES)} "
                        "(e.g. model.path=zoo:tiny-s).")


def _progress_bar(name: str, total: int):
    """A rich progress bar on stderr and the callback that advances it."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(TextColumn(f"building zoo:{name}"), BarColumn(), TextColumn("step {task.completed}"),
                   TextColumn("{task.fields[figures]}"), TimeElapsedColumn(), console=Console(stderr=True), transient=False)
    task = bar.add_task(name, total=total, figures="")

    def update(step: int, figures: dict) -> None:
        text = "  ".join(f"{k} {v:.3f}" for k, v in figures.items())
        bar.update(task, completed=step, figures=text)

    return bar, update


def build(name: str, force: bool = False) -> Path:
    """Build zoo entry `name` (its base first for the PRM) unless already cached; return its folder."""
    import fcntl

    final = entry_dir(name)
    if is_built(final) and not force:
        return final
    why = damage(final) if final.exists() else None
    if why:
        from rich.console import Console

        Console(stderr=True).print(f"[yellow]zoo:{name} at {final} is damaged ({why}): rebuilding it.[/]",
                                   highlight=False)
    recipe = RECIPES[name]
    base = build(recipe["init_from"]) if recipe["kind"] == "prm" else None
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / f".{final.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process building the same entry: wait for it
        if is_built(final) and not force:
            return final
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
        try:
            from race_cli.io import umask_mode

            os.chmod(tmp, umask_mode(directory=True))  # mkdtemp makes 0700; the cache follows the umask
            figures = _build_into(name, recipe, base, tmp)
            atomic_write_json(tmp / "recipe.json", {"name": name, "hash": recipe_hash(name), "recipe": recipe,
                                                    "base": str(base) if base else None, **figures})
            if final.exists():  # force: replace the old build
                old = final.with_name(f".{final.name}.old")
                shutil.rmtree(old, ignore_errors=True)
                os.replace(final, old)
                os.replace(tmp, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    BUILDS["count"] += 1
    return final


_build_entry = build  # zoo_main's `build` flag shadows the function


def _build_into(name: str, recipe: dict[str, Any], base: Path | None, out: Path) -> dict:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("RACE_ZOO_THREADS", min(2, os.cpu_count() or 1))))
    t0 = time.perf_counter()
    bar, update = _progress_bar(name, recipe["fit"]["max_steps"])
    try:
        with bar:
            if recipe["kind"] == "prm":
                from race_cli.zoo.prm_fit import build_prm

                figures = build_prm(recipe, base, out, update)
            else:
                from race_cli.zoo.policy import build_policy

                figures = build_policy(recipe, out, update)
    finally:
        torch.set_num_threads(threads)
    figures["build_seconds"] = round(time.perf_counter() - t0, 1)
    figures["threads"] = int(os.environ.get("RACE_ZOO_THREADS", min(2, os.cpu_count() or 1)))
    if figures.get("in_band") is False or figures.get("meets_target") is False:
        from rich.console import Console

        what = f"greedy accuracy {figures['greedy']:.3f}" if recipe["kind"] == "policy" else f"held-out step AUC {figures['auc']:.3f}"
        Console(stderr=True).print(f"[yellow]warning: zoo:{name} was built but its {what} misses the recipe's target "
                                   f"(see recipe.json in {out.name}); it is usable, but results with it are weaker.[/]")
    return figures


def resolve(name_or_path: str) -> Path | str:
    """`zoo:<name>` (or a bare zoo name) -> its built folder, building it if needed; any other path unchanged."""
    if name_or_path.startswith("zoo:"):
        return build(name_or_path[len("zoo:"):])
    if name_or_path in RECIPES:
        return build(name_or_path)
    return name_or_path


def list_entries() -> list[dict]:
    """One row per recipe: name, kind, params, built?, path, greedy / sampled accuracy or AUC, build seconds."""
    rows = []
    for name, recipe in RECIPES.items():
        path = entry_dir(name)
        arch = recipe["arch"] if recipe["kind"] == "policy" else RECIPES[recipe["init_from"]]["arch"]
        head = recipe.get("num_labels")  # None: a causal LM head over the vocabulary (policies, logprob PRM)
        row = {"name": name, "kind": recipe["kind"], "params": count_params(arch, head), "built": is_built(path),
               "path": str(path), "greedy": None, "sampled": None, "auc": None, "seconds": None,
               "damage": damage(path) if path.exists() else None}
        if row["built"]:
            info = read_json(path / "recipe.json")
            row.update(greedy=info.get("greedy"), sampled=info.get("sampled"), auc=info.get("auc"),
                       seconds=info.get("build_seconds"))
        rows.append(row)
    return rows


def zoo_main(names: list[str] | None, build: bool, force: bool) -> int:
    """`race zoo [--build] [--force] [NAMES]`: build the named entries (all when none) if asked; print the table."""
    from rich.console import Console
    from rich.table import Table

    names = names or list(RECIPES)
    for n in names:
        _check_name(n)
    if build or force:
        for n in names:
            _build_entry(n, force=force)
    table = Table(title=f"race zoo ({cache_root() / 'zoo'})")
    for col in ("name", "kind", "params", "built", "greedy", "sampled", "AUC", "build s", "path"):
        table.add_column(col)
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)  # noqa: E731
    for r in list_entries():
        if r["name"] in names:
            built = "yes" if r["built"] else f"damaged: {r['damage']}" if r["damage"] else "no"
            table.add_row(r["name"], r["kind"], f"{r['params']:,}", built, fmt(r["greedy"]),
                          fmt(r["sampled"]), fmt(r["auc"]), "-" if r["seconds"] is None else f"{r['seconds']:.0f}", r["path"])
    Console().print(table)
    for r in list_entries():
        if r["name"] in names and r["damage"]:
            Console(stderr=True).print(f"zoo:{r['name']} at {r['path']} is damaged ({r['damage']}): it is rebuilt "
                                       f"when a job needs it, or now with race zoo --build {r['name']}.",
                                       highlight=False, soft_wrap=True)
    return 0
