#!/usr/bin/env bash
# Launch the dashboard: ./scripts/run.sh [trainmem-tui flags]. The first run creates .venv and
# installs the project; later runs reinstall only when pyproject.toml changed (scripts/install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install.sh
exec .venv/bin/trainmem-tui "$@"
