#!/usr/bin/env bash
# Reruns the comparison with upstream (docs/design/upstream-comparison.md): every
# #[ignore]d test in tests/tests/it/upstream_compare_*.rs runs the Python originals
# with the real upstream modules they import, and the binaries, on identical
# installations (in the same private systemd --user sandbox the tests use),
# and prints one line per scenario:
#   upstream-compare <scenario>: same
#   upstream-compare <scenario>: same but listed deviations: <deviation entries>
#   upstream-compare <scenario>: differs: <facets>   (details on stderr)
# It ends with a summary and exits 1 if any scenario differs beyond the
# deviations docs/design/deviations.md lists (agents_tests::upstream::LISTED_DEVIATIONS) or
# a comparison failed to run.
#
# usage: scripts/upstream-compare.sh [--record] SCRATCH_FOLDER [SCENARIO_PART]
#   --record        also write the original's facts of each scenario that
#                   does not differ to tests/fixtures/upstream/, which the
#                   normal suite checks the binaries against
#   SCRATCH_FOLDER  the upstream modules, fetched outside the project
#   SCENARIO_PART   run only the scenarios whose name contains it
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = "--record" ]; then
  export AGENTS_UPSTREAM_RECORD=1
  shift
fi
if [ $# -lt 1 ] || [ $# -gt 2 ] || [ ! -d "$1" ]; then
  echo "usage: $0 [--record] SCRATCH_FOLDER [SCENARIO_PART]" >&2
  exit 2
fi
folder="$(cd "$1" && pwd)"
# The module list is the harness's (UPSTREAM_MODULES), read from its source.
modules="$(sed -n '/^pub const UPSTREAM_MODULES/,/^];/p' tests/src/upstream.rs \
  | grep -o '"[a-z_]*\.py"' | tr -d '"')"
missing=0
for module in $modules; do
  if [ ! -f "$folder/$module" ]; then
    echo "upstream-compare: $folder lacks $module (docs/design/upstream-comparison.md)" >&2
    missing=1
  fi
done
[ "$missing" = 0 ] || exit 1
export AGENTS_UPSTREAM_DIR="$folder"
if [ $# -eq 2 ]; then
  export AGENTS_UPSTREAM_ONLY="$2"
fi

bash scripts/setup.sh
cargo build --workspace --bins
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
# Their modules in the suite's one test binary (`<module>::<test>`).
modules=()
for file in tests/tests/it/upstream_compare_*.rs; do
  modules+=("$(basename "$file" .rs)::")
done
# Not comparisons: doctor's plan followed on states the originals leave
# (they need the same upstream modules); a failure fails the run.
modules+=("execution_manage_doctor::an_original_")
# The originals under the crash-point campaign (publish, apply, recover,
# update_handoff, the split uninstall and update_runner.py's prepared and
# recovery paths), observed: they do not fail the run;
# docs/design/crash-safety.md lists where they do not converge.
modules+=("crash_points::an_original_")

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
# run-suite fails the run if a process the comparisons started outlives it.
"$TARGET_DIR/debug/run-suite" -- cargo test -p agents-tests --test it \
  -- "${modules[@]}" --ignored --test-threads=1 --nocapture | tee "$log" || status=$?

lines="$(grep -o 'upstream-compare [^ ]*: .*' "$log" | grep -v ': not run: ' || true)"
count() { if [ -z "$lines" ]; then echo 0; else grep -c "$1" <<<"$lines" || true; fi; }
same="$(count ': same$')"
listed="$(count ': same but listed deviations: ')"
differs="$(count ': differs: ')"
echo
echo "=== upstream comparison: scenarios"
[ -z "$lines" ] || printf '%s\n' "$lines"
echo "upstream-compare summary: $((same + listed + differs)) scenarios, $same same," \
  "$listed with listed deviations only, $differs differing"
if [ "$status" != 0 ]; then
  echo "upstream-compare: a comparison failed to run (exit $status)" >&2
  exit 1
fi
if [ "$differs" != 0 ] || [ $((same + listed)) = 0 ]; then
  exit 1
fi
