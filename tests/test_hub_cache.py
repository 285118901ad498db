"""io.hub_cache_has: the folders it checks hold every cache huggingface_hub reads, so a False (which spares a
plan the library's import) never hides a model the library would have found."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# in a fresh interpreter: the library's constants are read from the environment at import
CHILD = """
import json, os, sys
from pathlib import Path
from huggingface_hub import constants, try_to_load_from_cache
from race_cli.io import hub_cache_has
snap = Path(constants.HF_HUB_CACHE) / "models--my-org--my-model" / "snapshots" / "abc"
snap.mkdir(parents=True)
(snap / "config.json").write_text("{}")
(snap.parents[1] / "refs").mkdir()
(snap.parents[1] / "refs" / "main").write_text("abc")
print(json.dumps({"library": try_to_load_from_cache("my-org/my-model", "config.json") is not None,
                  "ours": hub_cache_has("my-org/my-model"), "other": hub_cache_has("my-org/other-model"),
                  "root": constants.HF_HUB_CACHE}))
"""


@pytest.mark.parametrize("env", ["HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME", "HOME"])
def test_every_cache_the_library_reads_is_checked(env, tmp_path):
    names = ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME")
    base = {k: v for k, v in os.environ.items() if k not in names}
    base["HOME"] = str(tmp_path / "home")
    base[env] = str(tmp_path / env.lower())
    done = subprocess.run([sys.executable, "-c", CHILD], env=base, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    got = json.loads(done.stdout)
    assert got["root"].startswith(str(tmp_path))  # the library did read this variable
    assert got["library"] and got["ours"] and not got["other"]
