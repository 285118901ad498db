"""What every job will need, checked before the first job: `race plan` and `race run` refuse a sweep whose
jobs would crash on their first prompt, instead of planning it and letting each job die.

- **The tokenizer.** Each model folder (a local `model.path`, a hub id's snapshot in the Hugging Face cache,
  the reward model's likewise) holds a tokenizer that loads, encodes a real prompt of the task to at least
  one token, and has the EOS token the engine stops on, with ids inside the model's vocabulary. A folder
  without tokenizer files is the trap: transformers then returns an empty tokenizer, every prompt encodes
  to no tokens, and each job dies on a tensor of 0 elements.
- **The task.** A task read from a file (`task=jsonl` with a local path, `task=gsm8k`) holds `task.num_eval`
  held-out items after the training split, and rows to train on; every row of a JSONL file is read here,
  so a wrong field name is refused with its line number now, not in every job.
- **The targets.** Every `eval.targets` name is one race knows (config/schema.validate says which) and the
  data of the standard ones is where race reads it.

No torch and no transformers: importing transformers' tokenizers imports torch (about 5 s), so the
tokenizer is read with the `tokenizers` library (transformers' own backend, installed with it) from
`tokenizer.json` (or `vocab.json` + `merges.txt`), and the EOS from `tokenizer_config.json` as transformers
resolves it (tests/test_plan_checks.py compares both with `AutoTokenizer` on real folders). The prompt is
the task's plain prompt (`Q: ...\\nA:`); a chat template only adds tokens around it. Each distinct model and
task is checked once per process. `zoo:` models are race's own byte tokenizer and hub ids not in the cache
cannot be read offline: both are left to the job.

Every problem names the file and what to add; RaceError (exit 2) lists them all at once. It sits in tasks/ so
that race plan (plan/build.py) and race train (engine/train.py) both call it, the layers pointing one way.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Optional

from race_cli.errors import RaceError

GUIDE = "docs/own-model.md"  # what a model folder holds
QWEN2_EOS = "<|endoftext|>"  # Qwen2Tokenizer's default eos_token when tokenizer_config.json names none
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")


def job_problems(configs: Iterable[dict]) -> list[str]:
    """Problems of these composed job configs (plain dicts), each distinct model x task and task checked
    once; [] when every job will find what it needs."""
    units: dict[tuple, dict] = {}  # the jobs of one regime share their sections: one look at each distinct set
    for c in configs:
        units.setdefault(tuple(id(c.get(k)) for k in ("task", "model", "reward", "eval")), c)
    configs = list(units.values())
    problems: list[str] = []
    for key in dict.fromkeys(_task_key(c) for c in configs):
        task = json.loads(key[0])
        problems.extend(p for p in _task_problems(key[0]) if p not in problems)
        for role, model, need_eos in _models(json.loads(key[1])):
            if model_folder(model.get("path"), model.get("revision")) is None:
                continue  # zoo: models, hub ids not in the cache: nothing to read here (the module docstring)
            prompt = _task_prompt(key[0])  # read only when a tokenizer is there to encode it
            if prompt is None:
                break
            problems.extend(p for p in _tokenizer_problems(model.get("path"), model.get("revision"), prompt,
                                                           need_eos, role, task.get("name", "")) if p not in problems)
    for key in dict.fromkeys(json.dumps(c.get("eval", {}).get("targets") or [], sort_keys=True) for c in configs):
        problems.extend(p for p in _target_problems(tuple(json.loads(key))) if p not in problems)
    return problems


def check_jobs(configs: Iterable[dict]) -> None:
    """RaceError listing every problem of job_problems; nothing when there is none."""
    problems = job_problems(configs)
    if problems:
        raise RaceError(*problems)


def _task_key(cfg: dict) -> tuple[str, str]:
    """(the task section, the policy's and the reward model's model sections) as JSON: the distinct units."""
    reward = (cfg.get("reward") or {}).get("model") or {}
    return (json.dumps(cfg.get("task") or {}, sort_keys=True, default=str),
            json.dumps({"policy": cfg.get("model") or {}, "reward": reward}, sort_keys=True, default=str))


def _models(models: dict) -> list[tuple[str, dict, bool]]:
    """(role, model section, whether the engine stops on its EOS): the policy, and the reward model if any."""
    out = [("model.path", models["policy"], True)]
    if models["reward"].get("path"):
        out.append(("reward.model.path", models["reward"], False))
    return out


# --- the task ------------------------------------------------------------------------------------


def _attrs(section: dict) -> Any:
    """A task section as the attribute access build_task expects."""
    from types import SimpleNamespace

    return SimpleNamespace(task=SimpleNamespace(**section), seed=0)


@lru_cache(maxsize=64)
def _task_problems(task_json: str) -> tuple[str, ...]:
    """The task's files hold num_eval held-out items and rows to train on (file-backed tasks only)."""
    t = json.loads(task_json)
    name, num_eval = t.get("name"), t.get("num_eval")
    try:
        if name == "jsonl" and t.get("path") and not str(t["path"]).startswith("hf:"):
            from race_cli.tasks.targets import build_task

            task = build_task(_attrs(t))  # reads every row: a bad row is refused with its line number
            held, train = task.eval_items(), task.train_items()
            if t.get("eval_path") and num_eval is not None and len(held) < num_eval:
                return (f"{t['eval_path']} holds {len(held)} rows but task.num_eval={num_eval}: the evaluation "
                        f"would quietly use {len(held)}. Add rows to the file, or set task.num_eval={len(held)} "
                        "(or lower).",)
            if not train:
                return (f"{t['path']}: no rows left to train on after holding out task.num_eval={num_eval}. Add "
                        "rows, lower task.num_eval, or give the held-out rows in task.eval_path.",)
        elif name == "gsm8k" and t.get("path") != "hub" and num_eval is not None:  # None: the whole split
            from race_cli.tasks.gsm8k import GSM8KTask, local_gsm8k_dir

            task = GSM8KTask(path=t.get("path"), split_train=t.get("split_train", "train"),
                             split_eval=t.get("split_eval", "test"), num_eval=None)
            held = task.eval_items()
            if num_eval is not None and len(held) < num_eval:
                where = t.get("path") or local_gsm8k_dir()
                return (f"{where}: its {t.get('split_eval', 'test')} split holds {len(held)} items but "
                        f"task.num_eval={num_eval}. Set task.num_eval={len(held)} (or lower, or null for all), or "
                        "point task.path at a folder with more.",)
    except RaceError as exc:
        return tuple(exc.problems)
    return ()


@lru_cache(maxsize=64)
def _task_prompt(task_json: str) -> Optional[str]:
    """The plain prompt of one real item of the task (None when the task cannot be read offline here)."""
    from race_cli.tasks.prompting import format_prompt

    t = json.loads(task_json)
    name = t.get("name")
    try:
        if name == "arithmetic":
            from race_cli.tasks.arithmetic import ArithmeticTask

            item = ArithmeticTask(num_train=0, num_eval=1, min_ops=t.get("min_ops", 2), max_ops=t.get("max_ops", 3),
                                  max_operand=t.get("max_operand", 99)).eval_items()[0]
        elif name == "jsonl" and t.get("path") and not str(t["path"]).startswith("hf:"):
            from race_cli.tasks.targets import build_task

            item = build_task(_attrs(t)).train_items()[0]
        elif name == "gsm8k" and t.get("path") != "hub":
            from race_cli.tasks.gsm8k import GSM8KTask

            item = GSM8KTask(path=t.get("path"), split_eval=t.get("split_eval", "test")).eval_items()[0]
        else:
            return None
    except (RaceError, IndexError):  # the task's own problems are _task_problems'
        return None
    return format_prompt(item, None, style="plain")


# --- the tokenizer -------------------------------------------------------------------------------


def model_folder(path: Optional[str], revision: Optional[str] = None) -> Optional[Path]:
    """The folder whose tokenizer a job loads: a local folder, or a hub id's snapshot in the Hugging Face
    cache; None for zoo: models, hub ids not in the cache, and paths the composition already refused."""
    if not path or str(path).startswith("zoo:"):
        return None
    local = Path(str(path)).expanduser()
    if local.is_dir():
        return local
    if str(path).count("/") != 1 or str(path).startswith((".", "/", "~")):
        return None
    from race_cli.io import hub_cache_has

    if not hub_cache_has(str(path)):  # in no cache the hub library reads, known without importing it
        return None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        try:
            found = try_to_load_from_cache(str(path), name, revision=revision)
        except Exception:  # noqa: BLE001 - an id the hub library refuses is simply not in the cache
            return None
        if isinstance(found, str):
            folder = Path(found).parent
            return folder if any((folder / f).exists() for f in TOKENIZER_FILES) else None
    return None


def _json_file(file: Path) -> dict:
    if not file.is_file():
        return {}
    from race_cli.io import read_bounded

    try:
        data = json.loads(read_bounded(file.resolve(), 64 * 2**20).decode("utf-8"))
    except Exception as exc:  # noqa: BLE001 - not JSON, not UTF-8, too large: one message
        raise RaceError(f"Cannot read {file}: {str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__}. "
                        "Expected the JSON file tokenizer.save_pretrained writes.") from None
    return data if isinstance(data, dict) else {}


def eos_token(folder: Path) -> Optional[str]:
    """The EOS token transformers gives this folder's tokenizer: tokenizer_config.json's eos_token, else
    special_tokens_map.json's, else Qwen2Tokenizer's default for a Qwen2 tokenizer; None when none is named."""
    config = _json_file(folder / "tokenizer_config.json")
    for data in (config, _json_file(folder / "special_tokens_map.json")):
        eos = data.get("eos_token")
        eos = eos.get("content") if isinstance(eos, dict) else eos
        if isinstance(eos, str) and eos:
            return eos
    cls = config.get("tokenizer_class") or ("Qwen2Tokenizer" if _json_file(folder / "config.json").get("model_type")
                                            in ("qwen2", "qwen2_moe", "qwen3") else None)
    return QWEN2_EOS if str(cls).startswith("Qwen2Tokenizer") else None


def load_tokenizer(folder: Path) -> Any:
    """The folder's tokenizer as a `tokenizers.Tokenizer`; RaceError naming the folder when it holds none.
    Added tokens of tokenizer_config.json (added_tokens_decoder) are added, as transformers adds them."""
    from tokenizers import AddedToken, Tokenizer

    file = folder / "tokenizer.json"
    try:
        if file.is_file():
            tok = Tokenizer.from_file(str(file))
        elif (folder / "vocab.json").is_file() and (folder / "merges.txt").is_file():
            from tokenizers import decoders, models, pre_tokenizers

            tok = Tokenizer(models.BPE.from_file(str(folder / "vocab.json"), str(folder / "merges.txt")))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
        else:
            raise RaceError(
                f"{folder} holds no tokenizer (no tokenizer.json, nor vocab.json with merges.txt): transformers would "
                "give an empty one, every prompt would encode to no tokens and each job would crash. Save the "
                f"model's tokenizer beside its weights: tokenizer.save_pretrained('{folder}') (what a model folder "
                f"holds: {GUIDE}).")
    except RaceError:
        raise
    except Exception as exc:  # noqa: BLE001 - the library's errors come in several types
        raise RaceError(f"Cannot load the tokenizer in {folder}: {str(exc).splitlines()[0][:160]}. Save it again "
                        f"with tokenizer.save_pretrained('{folder}') ({GUIDE}).") from None
    added = _json_file(folder / "tokenizer_config.json").get("added_tokens_decoder") or {}
    missing = [v["content"] for v in added.values() if isinstance(v, dict) and isinstance(v.get("content"), str)
               and tok.token_to_id(v["content"]) is None]
    if missing:
        tok.add_special_tokens([AddedToken(m, special=True) for m in missing])
    return tok


@lru_cache(maxsize=64)
def _tokenizer_problems(path: Optional[str], revision: Optional[str], prompt: str, need_eos: bool, role: str,
                        task: str) -> tuple[str, ...]:
    folder = model_folder(path, revision)
    if folder is None:
        return ()
    if not (folder / "tokenizer.json").is_file() and (folder / "tokenizer.model").is_file():
        return ()  # a SentencePiece model (transformers converts it; the tokenizers library cannot read it): the job's
    try:
        tok = load_tokenizer(folder)
    except RaceError as exc:
        return tuple(f"{role}={path}: {p}" for p in exc.problems)
    problems = []
    ids = tok.encode(prompt, add_special_tokens=False).ids
    if not ids:
        problems.append(f"{role}={path}: the tokenizer in {folder} encodes a {task} prompt ({prompt[:40]!r}...) to "
                        "no tokens: its vocabulary lacks the prompt's characters. Save the model's own tokenizer "
                        f"there (tokenizer.save_pretrained), {GUIDE}.")
    vocab = _json_file(folder / "config.json").get("vocab_size")
    if need_eos:
        eos = eos_token(folder)
        eos_id = tok.token_to_id(eos) if eos else None
        if eos is None:
            problems.append(f"{role}={path}: {folder / 'tokenizer_config.json'} names no eos_token, the token a "
                            "completion ends on: add \"eos_token\": \"<your end token>\" to it (tokenizer.eos_token = "
                            f"... then save_pretrained), {GUIDE}.")
        elif eos_id is None:
            problems.append(f"{role}={path}: the EOS token {eos!r} named in {folder / 'tokenizer_config.json'} is not "
                            "in the tokenizer's vocabulary, so no completion could end: add it (tokenizer.add_special_"
                            f"tokens({{'eos_token': {eos!r}}}) and save_pretrained), {GUIDE}.")
        else:
            ids = ids + [eos_id]
    if isinstance(vocab, int) and ids and max(ids) >= vocab:
        problems.append(f"{role}={path}: the tokenizer in {folder} gives token id {max(ids)} but "
                        f"{folder / 'config.json'} says vocab_size {vocab}: the embedding has no row for it. Save "
                        f"the tokenizer the model was trained with, or resize the model's embeddings ({GUIDE}).")
    return tuple(problems)


# --- the targets ---------------------------------------------------------------------------------


@lru_cache(maxsize=64)
def _target_problems(targets: tuple) -> tuple[str, ...]:
    """The standard targets' data is where race reads it (names are checked by config/schema.validate)."""
    problems = []
    for name in targets:
        try:
            if name == "gsm8k":
                from race_cli.tasks.gsm8k import local_gsm8k_dir

                where = Path(local_gsm8k_dir())
                if not any((where / f"test.jsonl{gz}").is_file() for gz in ("", ".gz")):
                    problems.append(f"eval.targets has gsm8k but {where} holds no test.jsonl: reinstall race (its "
                                    "copy of GSM8K ships in race_cli/data/) or set RACE_GSM8K_DIR to a folder with "
                                    "test.jsonl.")
            elif name == "math500":
                from race_cli.tasks.math500 import PACKAGED_FILE

                if not PACKAGED_FILE.is_file():
                    problems.append(f"eval.targets has math500 but {PACKAGED_FILE} is missing: reinstall race (its "
                                    "copy of MATH-500 ships in race_cli/data/).")
        except RaceError as exc:
            problems.extend(exc.problems)
    return tuple(problems)
