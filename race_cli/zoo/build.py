"""The zoo cache: build an entry once into `<cache>/zoo/<name>-<hash12>/`, reuse it afterwards.

Cache root: `$RACE_CACHE` when set, else `~/.cache/race`; entries live in its `zoo/` folder.
The entries the default grid needs ship with the package (`race_cli/zoo/weights/<name>-<hash12>/`,
a few MB): when the cache lacks an entry whose current recipe hash matches a shipped folder, the
shipped files are copied into the cache instead of training (seconds instead of minutes). The
recipe stays the source of truth: `race zoo --verify NAME` rebuilds an entry from its recipe in a
temp folder and checks that its weights equal the shipped ones bit for bit.
Bit for bit holds only on the stack an entry was built on: hundreds of optimizer steps amplify
1-ulp differences between CPU kernels (MKL picks its SGEMM code path by CPU vendor and ISA, ATen by
ATEN_CPU_CAPABILITY) into a different trajectory (the first steps' losses agree, later ones drift:
docs/measurements/code.md). So
recipe.json records the build's `fingerprint` (build_fingerprint) and its first steps' exact
losses; verify reports whether the fingerprints agree, and a rebuild must start from the same
losses (to float rounding) everywhere.
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
from race_cli.io import atomic_write_json, cache_root, read_json
from race_cli.zoo.recipes import RECIPES, count_params, recipe_hash

SHIPPED = Path(__file__).parent / "weights"  # prebuilt entries that ship with the package
BUILDS = {"count": 0}  # entries built by this process (tests check that a cached entry is not rebuilt)


def refuse_unusable_cache(paths=None) -> None:
    """RaceError (exit 2) when the zoo cache cannot be a folder: `cache_root()/zoo` or a folder above it
    is a file (RACE_CACHE=/etc/passwd). paths: the model paths a command will load; the check applies
    only when one names a zoo entry (zoo:<name>), None checks always. Run before a command writes
    anything, so the message names the cache, not the job folder being written."""
    if paths is not None and not any(isinstance(p, str) and p.startswith("zoo:") for p in paths):
        return
    root = cache_root()
    here = root / "zoo"
    for part in [here, *here.parents]:
        if part.exists() or part.is_symlink():
            if not part.is_dir():
                env, kind = os.environ.get("RACE_CACHE"), "a file" if part.is_file() else "not a folder"
                raise RaceError(f"the zoo cache cannot be made: {part} is {kind}, and race builds its embedded "
                                f"models in {here}" + (f" (RACE_CACHE={env})" if env else "")
                                + ". Set RACE_CACHE to a folder you can write (unset: ~/.cache/race), then rerun.")
            return


def entry_dir(name: str) -> Path:
    """Where `name` built from the current recipe lives (whether or not it is built yet)."""
    _check_name(name)
    return cache_root() / "zoo" / f"{name}-{recipe_hash(name)}"


def shipped_dir(name: str) -> Path:
    """Where a prebuilt copy of `name` from the current recipe would ship (it may not exist)."""
    _check_name(name)
    return SHIPPED / f"{name}-{recipe_hash(name)}"


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

    refuse_unusable_cache()
    final = entry_dir(name)
    stale = not force and is_built(final) and stale_copy(name, final)
    if is_built(final) and not force and not stale:
        return final
    if stale:
        from rich.console import Console

        Console(stderr=True).print(f"[yellow]zoo:{name} at {final} is an older shipment of the same recipe "
                                   "(its files differ from the ones this release ships): replacing it with "
                                   "the shipped copy.[/]", highlight=False)
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
        if is_built(final) and not force and not (stale and stale_copy(name, final)):  # another process refreshed it
            return final
        tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".{final.name}.", suffix=".tmp"))
        try:
            shipped = shipped_dir(name)
            if is_built(shipped) and not force:  # a prebuilt copy of exactly this recipe: no training needed
                shutil.copytree(shipped, tmp, dirs_exist_ok=True)
            else:
                _build_fresh(name, recipe, base, tmp)
            from race_cli.io import umask_mode

            os.chmod(tmp, umask_mode(directory=True))  # mkdtemp makes 0700; the cache follows the umask
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


def stale_copy(name: str, cached: Path) -> bool:
    """True when the cached entry is a copy of an earlier shipment of the same recipe: a prebuilt copy
    ships, its files differ from the cached ones, and the cached one was not built on this
    stack (a `race zoo --build --force` here records this stack's fingerprint, and is kept). The
    folder name holds the recipe's hash, not the weights', so a reshipped model (built on another
    machine, other rounding) would otherwise never reach a cache that already had the old one."""
    import filecmp

    shipped = shipped_dir(name)
    if not is_built(shipped):
        return False
    try:
        here = read_json(cached / "recipe.json")
        same = all((cached / f.name).is_file() and filecmp.cmp(f, cached / f.name, shallow=False)
                   for f in shipped.iterdir() if f.is_file())
    except (OSError, ValueError):
        return False
    if same:
        return False
    return here.get("fingerprint") != build_fingerprint()


def _build_fresh(name: str, recipe: dict[str, Any], base: Path | None, out: Path) -> None:
    """Train entry `name` from its recipe into the (empty) folder `out`, with its recipe.json."""
    figures = _build_into(name, recipe, base, out)
    atomic_write_json(out / "recipe.json", {"name": name, "hash": recipe_hash(name), "recipe": recipe, **figures})


def verify(name: str) -> dict:
    """Rebuild `name` from its recipe in a temp folder and compare its weights with the shipped copy.

    Returns {"name", "shipped", "match", "files": {file: equal?}, "seconds"}; the cache is untouched.
    """
    shipped = shipped_dir(name)
    if not is_built(shipped):
        raise RaceError(f"zoo:{name} has no shipped copy for its current recipe ({shipped.name}); "
                        "nothing to verify. Ship it with scripts/ship_zoo.py after changing a recipe.")
    recipe = RECIPES[name]
    base = build(recipe["init_from"]) if recipe["kind"] == "prm" else None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=f"race-verify-{name}-") as tmp:
        figures = _build_into(name, recipe, base, Path(tmp))
        files = {f.name: f.read_bytes() == (Path(tmp) / f.name).read_bytes()
                 for f in sorted(shipped.glob("*.safetensors"))}
    built_on = read_json(shipped / "recipe.json").get("fingerprint")
    return {"name": name, "shipped": str(shipped), "match": bool(files) and all(files.values()), "files": files,
            "seconds": round(time.perf_counter() - t0, 1), "figures": figures,
            "fingerprint": figures["fingerprint"], "shipped_fingerprint": built_on,
            "same_stack": built_on == figures["fingerprint"]}


_build_entry = build  # zoo_main's `build` flag shadows the function


def build_threads() -> int:
    """Torch threads of a zoo build: $RACE_ZOO_THREADS, else 1. One thread makes a build bitwise
    reproducible on a machine whatever its load (a reduction's order can change with the thread count),
    and for models this small a second thread buys little."""
    return int(os.environ.get("RACE_ZOO_THREADS", 1))


def build_fingerprint() -> dict[str, Any]:
    """What a build's floating-point results depend on besides the recipe and race's code: the torch
    and transformers versions, ATen's CPU kernels, the CPU (MKL's SGEMM path follows its vendor and
    ISA), the architecture and the thread count. Equal fingerprints: a rebuild is expected bit for bit."""
    import platform

    import torch
    import transformers

    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), cpu)
    except OSError:
        pass
    return {"torch": torch.__version__, "transformers": transformers.__version__,
            "cpu_capability": torch.backends.cpu.get_cpu_capability(), "cpu": cpu, "machine": platform.machine(),
            "threads": build_threads()}


def _build_into(name: str, recipe: dict[str, Any], base: Path | None, out: Path) -> dict:
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # only race's own bar: no "Writing model shards" / "Loading weights"

    threads = torch.get_num_threads()
    torch.set_num_threads(build_threads())
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
    figures["threads"] = build_threads()
    figures["fingerprint"] = build_fingerprint()
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


def zoo_main(names: list[str] | None, build: bool, force: bool, verify: bool = False) -> int:
    """`race zoo [--build] [--force] [--verify] [NAMES]`: build (or verify) the named entries; print the table.

    --verify: 0 when every named entry's rebuild equals its shipped copy, 1 otherwise.
    """
    from rich.console import Console
    from rich.table import Table

    names = names or ([n for n in RECIPES if is_built(shipped_dir(n))] if verify else list(RECIPES))
    for n in names:
        _check_name(n)
    if verify:
        results = [globals()["verify"](n) for n in names]
        for r in results:
            verdict = "[green]bitwise equal[/]" if r["match"] else "[red]DIFFERENT[/]"
            Console().print(f"zoo:{r['name']}: rebuilt in {r['seconds']:.0f} s, weights {verdict} to {r['shipped']}")
            if not r["match"] and not r["same_stack"]:
                Console().print(f"  it was built on another stack ({r['shipped_fingerprint'] or 'not recorded'}; here "
                                f"{r['fingerprint']}): bit for bit is expected only on the same one", highlight=False)
        return 0 if all(r["match"] for r in results) else 1
    if build or force:
        for n in names:
            _build_entry(n, force=force)
    # no path column: a full path does not fit 80 columns beside eight others; the folders are named below
    table = Table(title=f"race zoo ({cache_root() / 'zoo'})", title_justify="left")
    for col in ("name", "kind", "params", "built", "greedy", "sampled", "AUC", "build s"):
        table.add_column(col, justify="left" if col in ("name", "kind", "built") else "right", overflow="fold")
    fmt = lambda v: "-" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)
    for r in list_entries():
        if r["name"] in names:
            built = "yes" if r["built"] else f"damaged: {r['damage']}" if r["damage"] else "no"
            table.add_row(r["name"], r["kind"], f"{r['params']:,}", built, fmt(r["greedy"]),
                          fmt(r["sampled"]), fmt(r["auc"]), "-" if r["seconds"] is None else f"{r['seconds']:.0f}")
    Console().print(table)
    for r in list_entries():
        if r["name"] in names:
            Console().print(f"zoo:{r['name']}: {r['path']}", highlight=False, soft_wrap=True)
    for r in list_entries():
        if r["name"] in names and r["damage"]:
            Console(stderr=True).print(f"zoo:{r['name']} at {r['path']} is damaged ({r['damage']}): it is rebuilt "
                                       f"when a job needs it, or now with race zoo --build {r['name']}.",
                                       highlight=False, soft_wrap=True)
    return 0
