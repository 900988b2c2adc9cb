#!/usr/bin/env bash
# Set up (first run) and run every check: format, lint, type-check the core, the test suite.
#   ./scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# The measurement harness's tests run real training steps: the CPU build of torch (the wheel
# `pip install torch==2.13.0` finds beside pip here), transformers, peft and trl. TRAINMEM_NO_TORCH=1
# skips them for a quick run; CI installs them.
if [ -z "${TRAINMEM_NO_TORCH:-}" ]; then
    .venv/bin/python -m pip install --quiet --disable-pip-version-check torch==2.13.0
    extras="test,torch-tests"
else
    extras="test"
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[$extras]"
.venv/bin/ruff format --check src tests bench scripts
.venv/bin/ruff check src tests bench scripts
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
