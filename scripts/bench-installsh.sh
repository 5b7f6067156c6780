#!/usr/bin/env bash
# What a user feels during an update (docs/release-engineering.md, "What users
# feel"): upstream's unmodified install.sh on the release as published (the
# Python originals) and on the same release after the migration kit (this
# build's release-profile binaries), in identical systemd --user sandboxes,
# alternating sides, RUNS runs each (default 5). Each run: a fresh install, a
# managed update, an update whose candidate never turns healthy (rolled back)
# and an uninstall. Prints, per operation and side, the median and spread of
# install.sh's wall time, of the time inside helper calls (timed exec trace),
# and of the downtime (the health endpoint probed every 50 ms from outside),
# and the ratio of the medians.
#
# usage: scripts/bench-installsh.sh SCRATCH_FOLDER [RUNS]
#   SCRATCH_FOLDER  the upstream release tree, as for scripts/installsh-compare.sh
#
# uv's steps are served from a warm cache (one unmeasured run first), so they
# do not drown the rest; the first run also resolves the stand-in lock from PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -f "${1:-}/install.sh" ]; then
  echo "usage: $0 SCRATCH_FOLDER [RUNS]" >&2
  exit 2
fi
export AGENTS_INSTALLSH_DIR="$(cd "$1" && pwd)"
export AGENTS_BENCH_RUNS="${2:-5}"

bash scripts/setup.sh
# The binaries as they ship are release builds; the test harness runs with them.
cargo build --release --workspace --bins
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
"$TARGET_DIR/release/run-suite" -- cargo test --release -p agents-tests --test it \
  -- installsh_bench::installsh_benchmark --ignored --exact --test-threads=1 --nocapture
