#!/usr/bin/env bash
# Set up and run every check: format, lint, type-check the core, the test suite.
#   ./scripts/test.sh [pytest args]
# A fresh clone (or a changed pyproject.toml) installs first; otherwise the install in .venv is
# reused (scripts/install.sh), so a second run starts testing at once.
set -euo pipefail
cd "$(dirname "$0")/.."
# The measurement harness's tests run real training steps: the CPU build of torch (the wheel
# `pip install torch==2.13.0` finds beside pip here), transformers, peft and trl. TRAINMEM_NO_TORCH=1
# skips them (and MLX's CPU build, the mlx extra, for tests/mlx) for a quick run; CI installs them.
if [ -z "${TRAINMEM_NO_TORCH:-}" ]; then
    ./scripts/install.sh test,torch-tests,mlx torch==2.13.0
    mypy_flags=""
else
    ./scripts/install.sh test
    # Without torch and transformers the probe's imports of them cannot be type-checked (and
    # TrainerCallback is Any); the full run, which CI does, checks them strictly.
    mypy_flags="--ignore-missing-imports --allow-subclassing-any"
fi
.venv/bin/ruff format --check src tests bench scripts
.venv/bin/ruff check src tests bench scripts
.venv/bin/mypy $mypy_flags
.venv/bin/python -m pytest "$@"
