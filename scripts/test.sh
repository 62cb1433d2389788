#!/usr/bin/env bash
# The project's test command: Rust tests, then the Python tests against `kartograf serve` (the
# gRPC client, and a real Prometheus: tests/python/run.sh installs Debian's `prometheus` package
# with apt-get when it is missing).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked
cargo build --locked -q
KARTOGRAF_BIN="${CARGO_TARGET_DIR:-target}/debug/kartograf" bash tests/python/run.sh
