#!/usr/bin/env bash
# Create .venv and install the project into it (editable), unless an install already done there
# covers what is asked: source edits need no reinstall (the editable install imports src/), a
# changed pyproject.toml (dependencies, entry points, package data) or a moved checkout does.
#   scripts/install.sh [EXTRAS [PACKAGE...]]     e.g. scripts/install.sh test,torch-tests torch==2.13.0
# PACKAGE... are installed first (torch's CPU wheel before the extras that need torch).
# FORCE_INSTALL=1 reinstalls anyway.
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-}
shift || true
stamp=.venv/trainmem-install.stamp
if [ ! -x .venv/bin/python ]; then
    "${PYTHON:-python3}" -m venv .venv
    rm -f "$stamp"
fi
# One stamp line per install done for this pyproject.toml and path: "KEY item item...", the items
# being the extras and packages it installed. An install covers a request holding no other items.
key=$({ cat pyproject.toml; pwd; } | cksum | cut -d' ' -f1)
items="${extras//,/ } $*"
covered() {
    [ -x .venv/bin/trainmem-tui ] && [ -f "$stamp" ] || return 1
    local line item
    while read -r line; do
        [ "${line%% *}" = "$key" ] || continue
        for item in $items; do
            case " $line " in *" $item "*) ;; *) continue 2 ;; esac
        done
        return 0
    done <"$stamp"
    return 1
}
if [ -z "${FORCE_INSTALL:-}" ] && covered; then
    exit 0
fi
echo "installing into .venv${extras:+ with [$extras]} (new checkout, or pyproject.toml changed)" >&2
pip=(.venv/bin/python -m pip install --quiet --disable-pip-version-check)
[ $# -eq 0 ] || "${pip[@]}" "$@"
"${pip[@]}" -e ".${extras:+[$extras]}"
# Written only after a successful install, atomically; lines for another pyproject.toml are dropped.
{ grep -s "^$key " "$stamp" || true; echo "$key" $items; } >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
