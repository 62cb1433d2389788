#!/usr/bin/env bash
# The project's test command: Rust tests, then the Python gRPC client against `kartograf serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --locked
cargo build --locked -q
KARTOGRAF_BIN="${CARGO_TARGET_DIR:-target}/debug/kartograf" bash tests/python/run.sh
