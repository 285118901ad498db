"""The embedded model zoo: tiny Qwen2-architecture policies and a tiny PRM, built offline on first use.

- `byte_tokenizer()`: the tokenizer all of them share (tokenizer.py).
- `RECIPES`: what each entry is (recipes.py); `build(name)`, `resolve("zoo:tiny-s")`,
  `list_entries()`, `zoo_main(...)`: the cache (build.py).
- policy.py / warmstart.py: the supervised warm-start of the policies; prm_fit.py: the PRM.

Importing this package loads neither torch nor transformers.
"""

from __future__ import annotations

from race_cli.zoo.build import build, cache_root, entry_dir, is_built, list_entries, resolve, zoo_main
from race_cli.zoo.recipes import RECIPES, recipe_hash
from race_cli.zoo.tokenizer import EOS_ID, EOS_TOKEN, VOCAB_SIZE, byte_tokenizer

__all__ = ["EOS_ID", "EOS_TOKEN", "RECIPES", "VOCAB_SIZE", "build", "byte_tokenizer", "cache_root", "entry_dir", "is_built",
           "list_entries", "recipe_hash", "resolve", "zoo_main"]
