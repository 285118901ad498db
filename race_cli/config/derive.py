"""Settings taken from what they depend on, filled into a composed job config before it is validated.

The root config (conf/config.yaml) leaves these keys null; each is then taken from the config it
depends on, unless an override, a grid's `fixed:` block or your own config gives it:

| key                                  | null takes                                              |
|--------------------------------------|---------------------------------------------------------|
| rollout.max_new_tokens               | task.max_new_tokens (what the task's answers need)       |
| rollout.expected_completion_tokens   | task.expected_completion_tokens, at most the cap; else the cap |
| grpo.lr                              | model.lr.lora, or model.lr.full with lora.enabled=false |
| budget.flops                         | model.budget_flops (a budget of the model's scale)      |
| model.arch, reward.model.arch        | the model's own config.json (a local folder, or the Hugging Face cache) |

A shipped `arch:` block is the offline fallback: when the model's config.json can be read too,
the two must agree (a mismatch names both). A model with neither is refused, never planned with
the schema's defaults. Evaluation caps come from each target (race_cli/tasks/targets.py).

`derive` is pure (it takes the config.json reader as an argument); `read_config_json` is the one
place that touches the disk: it never downloads (the cache only, whatever HF_HUB_OFFLINE says).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Optional

from race_cli.config.schema import ARCH_KEYS
from race_cli.errors import RaceError

ArchReader = Callable[[str, Optional[str]], Optional[dict]]  # (path, revision) -> config.json's numbers or None


def derive(cfg: dict, read_arch: ArchReader) -> list[str]:
    """Fill the null keys of the table above in `cfg` (a plain dict, changed in place); the problems
    that stop it, as messages (empty = every key resolved)."""
    problems: list[str] = []
    task, ro = cfg["task"], cfg["rollout"]
    if ro.get("max_new_tokens") is None:
        ro["max_new_tokens"] = task.get("max_new_tokens")
        if ro["max_new_tokens"] is None:
            problems.append(f"rollout.max_new_tokens is not set and task {task.get('name')!r} names no completion "
                            "cap: set task.max_new_tokens in the task's config, or give rollout.max_new_tokens=N.")
    if ro.get("expected_completion_tokens") is None and task.get("expected_completion_tokens") is not None:
        cap = ro["max_new_tokens"]
        ect = task["expected_completion_tokens"]
        ro["expected_completion_tokens"] = min(ect, cap) if cap is not None else ect  # a mean cannot pass the cap

    model, grpo, lora = cfg["model"], cfg["grpo"], cfg["lora"]
    if grpo.get("lr") is None:
        which = "lora" if lora.get("enabled", True) else "full"
        grpo["lr"] = (model.get("lr") or {}).get(which)
        if grpo["lr"] is None:
            adapter = "LoRA" if which == "lora" else "full fine-tuning"
            problems.append(f"grpo.lr is not set and model {model.get('name')!r} names no {adapter} learning rate: "
                            f"set model.lr.{which} in the model's config, or give grpo.lr=X.")
    budget = cfg["budget"]
    if budget.get("flops") is None:
        budget["flops"] = model.get("budget_flops")
        if budget["flops"] is None:
            problems.append(f"budget.flops is not set and model {model.get('name')!r} names no default budget: give "
                            "budget.flops=C (training FLOPs per job), or set model.budget_flops in the model's config.")

    problems += _derive_arch(model, "model", read_arch)
    reward_model = (cfg.get("reward") or {}).get("model")
    if reward_model is not None:
        problems += _derive_arch(reward_model, "reward.model", read_arch)
    return problems


def _derive_arch(node: dict, key: str, read_arch: ArchReader) -> list[str]:
    """node['arch'] from config.json where it is null; checked against it where both exist."""
    path, revision = str(node.get("path")), node.get("revision")
    given = node.get("arch")
    found = None if path.startswith("zoo:") else read_arch(path, revision)  # the zoo builds from the conf block
    if given is None and found is None:
        if is_local_path(path):  # a folder on this machine: nothing to download, the folder is wrong
            return [f"{key}.arch: {node.get('name')!r} has no arch: block and {path} holds no config.json (or does "
                    "not exist here): expected a transformers model folder (save_pretrained output). Fix "
                    f"{key}.path, or copy the model's architecture into the config's arch: block "
                    "(docs/own-configs.md)."]
        return [f"{key}.arch: {node.get('name')!r} has no arch: block and no config.json was found for {path} in the "
                "Hugging Face cache (HF_HOME). Fetch the config first (hf download "
                f"{path} config.json{' --revision ' + revision if revision else ''}), or copy its architecture "
                "into the config's arch: block (docs/own-configs.md)."]
    if found is None:
        return []
    if given is None:
        node["arch"] = found if isinstance(node, dict) else _typed_arch(found)
        return []
    differ = [k for k in ARCH_KEYS if _effective(given, k) != _effective(found, k)]
    if differ:
        pairs = ", ".join(f"{k}: arch: block {_effective(given, k)} vs config.json {_effective(found, k)}"
                          for k in differ)
        return [f"{key}.arch of {node.get('name')!r} disagrees with {path}'s config.json ({pairs}). Fix the "
                "config's arch: block, or delete it to use config.json's."]
    return []


def _typed_arch(found: dict) -> Any:
    """config.json's numbers as the schema's ArchConf, for a typed (OmegaConf) config."""
    from omegaconf import OmegaConf

    from race_cli.config.schema import ArchConf

    return OmegaConf.structured(ArchConf(**found))


def _effective(arch: dict, key: str) -> Any:
    if key == "head_dim":  # None means hidden_size / num_attention_heads
        return arch.get("head_dim") or arch["hidden_size"] // arch["num_attention_heads"]
    if key == "tie_word_embeddings":
        return bool(arch.get(key, False))
    return arch.get(key)


# --- the shell: reading a config.json ------------------------------------------------------------

def arch_of(data: dict) -> dict:
    """The ArchConf numbers of a transformers config.json (text_config for multimodal wrappers)."""
    data = data.get("text_config") or data
    try:
        arch = {k: int(data[k]) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                          "intermediate_size", "vocab_size")}
    except (KeyError, TypeError, ValueError) as exc:
        raise RaceError(f"config.json lacks {exc} (or it is not a number): expected a decoder's hidden_size, "
                        "num_hidden_layers, num_attention_heads, intermediate_size and vocab_size.") from None
    arch["num_key_value_heads"] = int(data.get("num_key_value_heads") or arch["num_attention_heads"])
    arch["head_dim"] = int(data["head_dim"]) if data.get("head_dim") else None
    arch["tie_word_embeddings"] = bool(data.get("tie_word_embeddings", False))  # Qwen2Config's default
    return {k: arch[k] for k in ARCH_KEYS}


def read_config_json(path: str, revision: Optional[str] = None) -> Optional[dict]:
    """The architecture in `path`'s config.json: a local folder, else the Hugging Face cache (never the
    network); None when neither holds one."""
    return _read_cached(path, revision)


@lru_cache(maxsize=256)
def _read_cached(path: str, revision: Optional[str]) -> Optional[dict]:
    local = Path(path).expanduser()
    if local.is_dir():
        file = local / "config.json"
    else:
        file = _hub_cache_file(path, revision)
    if file is None or not Path(file).is_file():
        return None
    from race_cli.io import read_bounded

    try:
        # the hub cache links snapshots/<rev>/config.json to blobs/<hash>: read the file the link names
        data = json.loads(read_bounded(Path(file).resolve(), 4 * 2**20).decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - not JSON, too large, a link: one message
        raise RaceError(f"Cannot read {file}: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}. "
                        "Expected a model's config.json.") from None
    if not isinstance(data, dict):
        raise RaceError(f"{file} is not a JSON object: expected a model's config.json.")
    try:
        return arch_of(data)
    except RaceError as exc:
        raise RaceError(f"{file}: {exc}") from None


def is_local_path(path: str) -> bool:
    """Whether `path` names a folder on this machine rather than a hub id (Org/Name): it exists, or it is
    written as a path (/, ., ~ first, or other than one slash); the same reading as engine/setup.resolve_model_path."""
    return Path(path).expanduser().exists() or path.startswith(("/", ".", "~")) or path.count("/") != 1


def _hub_cache_file(repo_id: str, revision: Optional[str]) -> Optional[str]:
    """config.json of a hub id in the local Hugging Face cache, or None (no download, no network)."""
    if repo_id.count("/") != 1 or repo_id.startswith((".", "/", "~")):
        return None
    from race_cli.io import hub_cache_has

    if not hub_cache_has(repo_id):  # in no cache the library reads: not cached, known without importing it
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    except Exception:  # noqa: BLE001 - an id the hub library refuses is simply not in the cache
        return None
    return found if isinstance(found, str) else None
