#!/usr/bin/env bash
# Runs the Python tests against a kartograf binary the caller has already built (this script
# builds no Rust):
#   - tests/python/test_client.py: the gRPC API from Python grpcio stubs;
#   - tests/python/test_prometheus.py: a real Prometheus server scraping `kartograf serve` and a
#     DCGM-like exporter, with deploy/prometheus/rules.yaml (promtool check + unit tests), the
#     Grafana dashboard's queries and docs/cost.md's recipes;
#   - tests/python/test_ui.py: the web view (/ui/) in headless Chromium through Selenium
#     (screenshots in target/ui-screenshots/, or $KARTOGRAF_UI_SCREENSHOTS).
#
#   cargo build && bash tests/python/run.sh
#   KARTOGRAF_BIN=/path/to/kartograf bash tests/python/run.sh
#
# Needs python3 (3.11; with the venv module) and PyPI. The virtualenv lives in
# ${TMPDIR:-/tmp}/kartograf-pyvenv and is (re)filled whenever requirements.txt changes.
# `prometheus` and `promtool` come from Debian's `prometheus` package, installed here with
# apt-get when missing (as root, or through passwordless sudo); where that is impossible the
# Prometheus tests skip and say why. Debian's `chromium` and `chromium-driver` are installed the
# same way when /usr/bin/chromium or /usr/bin/chromedriver is missing (else the browser tests skip). Extra arguments go to pytest. Exits with pytest's exit code.
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

# Installs Debian packages with apt-get (as root, or through passwordless sudo); where that is
# impossible it says which tests ($1) will be skipped. $2...: the packages.
apt_install() {
    local tests="$1"
    shift
    if ! command -v apt-get >/dev/null; then
        echo "== no apt-get: the $tests tests will be skipped (install $*)"
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" != 0 ]; then
        if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
            sudo=(sudo -n)
        else
            echo "== not root and no passwordless sudo: the $tests tests will be skipped"
            return 0
        fi
    fi
    echo "== installing Debian's $* (for the $tests tests)"
    local apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -q -y --no-install-recommends)
    if ! "${apt[@]}" install "$@" >/dev/null; then
        "${sudo[@]}" apt-get -q update >/dev/null || true
        "${apt[@]}" install "$@" >/dev/null ||
            echo "== apt-get install $* failed: the $tests tests will be skipped"
    fi
}

# Debian's `prometheus` package (Prometheus and promtool), unless both are already there.
if [ -z "${PROMETHEUS_BIN:-}" ] || [ -z "${PROMTOOL_BIN:-}" ]; then
    if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
        apt_install Prometheus prometheus
    fi
fi

# Debian's chromium and chromium-driver, for the web view's browser tests.
if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    apt_install browser chromium chromium-driver
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
"$venv/bin/python" -m pytest -q -rs -p no:cacheprovider "$here/test_client.py" "$here/test_prometheus.py" "$here/test_ui.py" "$@"
code=$?
set -e
exit "$code"
