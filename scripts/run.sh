#!/usr/bin/env bash
# Set up (first run) and launch the dashboard: ./scripts/run.sh [trainmem-tui flags]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e .
exec .venv/bin/trainmem-tui "$@"
