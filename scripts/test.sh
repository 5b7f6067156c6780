#!/usr/bin/env bash
# Runs the whole test suite: builds every helper binary and the test worker
# first (Cargo does not build other packages' binaries for integration tests),
# then runs all unit, golden, oracle and real-systemd tests. --no-fail-fast:
# one failing test binary must not hide failures in the others.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --bins
cargo test --workspace --no-fail-fast "$@"
