"""race installed as a user installs it: not editable, into a fresh venv (issue 53's first hour)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def install_copy(tmp: Path) -> Path:
    """race built from a copy of this checkout (the build writes build/ and *.egg-info beside its source) and
    installed, not editable, into a fresh venv under `tmp` that reuses the system's packages (torch and the
    rest: nothing is fetched); returns the venv's bin/."""
    src, venv = tmp / "src", tmp / "venv"
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(".git", "runs", "build", "*.egg-info", "__pycache__",
                                                             ".pytest_cache", ".ruff_cache"))
    # --without-pip: the venv's python runs the system's pip and setuptools (a venv's bundled setuptools may
    # be too old to build a wheel), installing into the venv; --no-index: offline
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=300)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-deps",
                          "--no-build-isolation", "--no-index", str(src)], capture_output=True, text=True,
                         timeout=600, cwd=tmp)
    assert pip.returncode == 0, pip.stderr
    return venv / "bin"
