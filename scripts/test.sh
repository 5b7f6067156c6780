#!/usr/bin/env bash
# Runs the whole test suite: builds every helper binary and the test worker
# first (Cargo does not build other packages' binaries for integration tests),
# then runs all unit, golden, oracle and real-systemd tests.
#
# --no-fail-fast: one failing test binary must not hide failures in the others.
# run-suite (tests/src/bin/run_suite.rs) passes the output through, ends with
# one summary line (passed, failed, skipped with the reason, ignored) and
# fails the run if any process the suite started is still alive afterwards.
#
# Tests that run the Python originals side by side find them through
# AGENTS_ORIGINALS_DIR (or AGENTS_SEEDS_DIR; default ../shared/seeds/extracted); without them they
# report SKIPPED, except under CI=true, where a skip is a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --bins
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
exec "$TARGET_DIR/debug/run-suite" -- cargo test --workspace --no-fail-fast "$@"
