#!/usr/bin/env bash
# Set up (first run) and run every check: format, lint, type-check the core, the test suite.
#   ./scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[test]"
.venv/bin/ruff format --check src tests bench scripts
.venv/bin/ruff check src tests bench scripts
.venv/bin/mypy
.venv/bin/python -m pytest "$@"
