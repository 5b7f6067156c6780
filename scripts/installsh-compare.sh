#!/usr/bin/env bash
# Runs upstream's unmodified install.sh against the Python originals and against
# the binaries (docs/design/upstream-comparison.md, "install.sh comparison"): every #[ignore]d scenario of
# tests/tests/it/installsh_compare.rs installs, updates, rolls back, resumes and
# uninstalls the release as published and the same release after
# scripts/migration-kit.sh, each on a fresh identical systemd sandbox, and
# prints one line per scenario:
#   upstream-compare <scenario>: same
#   upstream-compare <scenario>: same but listed deviations: <deviation entries>
#   upstream-compare <scenario>: differs: <facets>   (details on stderr)
# It ends with a summary and exits 1 if any scenario differs beyond the listed
# deviations or a comparison failed to run.
#
# usage: scripts/installsh-compare.sh [--record] SCRATCH_FOLDER [SCENARIO_PART]
#   --record        also write the originals' facts of each scenario that does
#                   not differ to tests/fixtures/upstream/installsh-*.facets,
#                   and the installation before each uninstall step to
#                   tests/fixtures/installsh/*.state, which the normal suite's
#                   installsh_uninstall_as_recorded replays with the binaries
#   SCRATCH_FOLDER  the upstream release tree, outside the project (docs/design/upstream-comparison.md says
#                   how to assemble it; scripts/installsh-assemble.sh does it
#                   from a clone)
#   SCENARIO_PART   run only the scenarios whose name contains it (several
#                   parts separated by ",": any of them; a part =NAME selects
#                   the scenario NAME alone)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--record" ]; then
  export AGENTS_UPSTREAM_RECORD=1
  shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -f "${1:-}/install.sh" ]; then
  echo "usage: $0 [--record] SCRATCH_FOLDER [SCENARIO_PART]" >&2
  echo "  SCRATCH_FOLDER must hold the upstream release tree (install.sh and the rest)" >&2
  exit 2
fi
export AGENTS_INSTALLSH_DIR="$(cd "$1" && pwd)"
if [ $# -eq 2 ]; then
  export AGENTS_UPSTREAM_ONLY="$2"
fi

bash scripts/setup.sh
cargo build --workspace --bins
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# run-suite fails the run if a process the comparisons started outlives it.
"$TARGET_DIR/debug/run-suite" -- cargo test -p agents-tests --test it \
  -- installsh_compare:: --ignored --test-threads=1 --nocapture | tee "$log" || status=$?

lines="$(grep -o 'upstream-compare [^ ]*: .*' "$log" | grep -v ': not run: ' || true)"
count() { if [ -z "$lines" ]; then echo 0; else grep -c "$1" <<<"$lines" || true; fi; }
same="$(count ': same$')"
listed="$(count ': same but listed deviations: ')"
differs="$(count ': differs: ')"
echo
echo "=== install.sh comparison: scenarios"
[ -z "$lines" ] || printf '%s\n' "$lines"
echo "installsh-compare summary: $((same + listed + differs)) scenarios, $same same," \
  "$listed with listed deviations only, $differs differing"
if [ "$status" != 0 ]; then
  echo "installsh-compare: a comparison failed to run (exit $status)" >&2
  exit 1
fi
if [ "$differs" != 0 ] || [ $((same + listed)) = 0 ]; then
  exit 1
fi
