#!/usr/bin/env bash
# Runs the Python gRPC client test (tests/python/test_client.py) against a kartograf binary
# the caller has already built (this script builds nothing):
#
#   cargo build && bash tests/python/run.sh
#   KARTOGRAF_BIN=/path/to/kartograf bash tests/python/run.sh
#
# Needs only python3 (3.11; with the venv module) and PyPI. The virtualenv lives in
# ${TMPDIR:-/tmp}/kartograf-pyvenv and is (re)filled whenever requirements.txt changes.
# Extra arguments go to pytest. Exits with pytest's exit code.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
venv="${TMPDIR:-/tmp}/kartograf-pyvenv"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
    echo "== creating the virtualenv $venv"
    if ! "$python" -m venv "$venv"; then
        rm -rf "$venv"
        echo "error: '$python -m venv' failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
        exit 2
    fi
fi

# Install (again) only when the pins changed since the last successful install.
stamp="$venv/.kartograf-requirements"
if ! cmp -s "$here/requirements.txt" "$stamp"; then
    echo "== installing $here/requirements.txt into $venv"
    "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$here/requirements.txt"
    cp "$here/requirements.txt" "$stamp"
fi

cd "$repo"
# Leave no __pycache__ (nor .pytest_cache, see -p below) in the work tree.
export PYTHONDONTWRITEBYTECODE=1
export KARTOGRAF_BIN="${KARTOGRAF_BIN:-$repo/target/debug/kartograf}"
if [ ! -x "$KARTOGRAF_BIN" ]; then
    echo "error: no kartograf binary at $KARTOGRAF_BIN: build it first (cargo build) or set KARTOGRAF_BIN" >&2
    exit 2
fi

set +e
"$venv/bin/python" -m pytest -q -p no:cacheprovider "$here/test_client.py" "$@"
code=$?
set -e
exit "$code"
