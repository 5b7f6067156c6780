#!/usr/bin/env bash
# The generative differential campaign (docs/design/upstream-comparison.md,
# "Generated scenarios"): seeded random scenarios for the five helpers (a
# state built by the test fixtures, one to three damages, one to three
# commands with argv variations), each run by the Python original on the
# upstream modules and by the binary on identical copies at the same path.
# A difference is re-run (is it deterministic?) and shrunk to a minimal
# reproduction, printed as `generative-compare difference: ...`; the run
# ends with its figures and exits 1 on any difference the deviations do not
# list.
#
# usage: scripts/generative-compare.sh [--record] [--seed S] [--from N] [--count N] SCRATCH_FOLDER
#   --record        also write tests/fixtures/generative/campaign.facts (the
#                   originals' facts of every scenario that does not differ,
#                   which the normal suite replays against the binaries)
#   --seed S        the campaign's seed (default 1, the recorded one)
#   --from N        the first scenario's index (default 0)
#   --count N       how many scenarios (default 1000)
#   SCRATCH_FOLDER  the upstream modules (scripts/upstream-assemble.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
usage() {
  echo "usage: $0 [--record] [--seed S] [--from N] [--count N] SCRATCH_FOLDER" >&2
  exit 2
}
while [ $# -gt 1 ]; do
  case "$1" in
    --record) export AGENTS_UPSTREAM_RECORD=1; shift ;;
    --seed) export AGENTS_GENERATIVE_SEED="$2"; shift 2 ;;
    --from) export AGENTS_GENERATIVE_FROM="$2"; shift 2 ;;
    --count) export AGENTS_GENERATIVE_COUNT="$2"; shift 2 ;;
    *) usage ;;
  esac
done
[ $# -eq 1 ] && [ -d "$1" ] || usage
folder="$(cd "$1" && pwd)"
modules="$(sed -n '/^pub const UPSTREAM_MODULES/,/^];/p' tests/src/upstream.rs \
  | grep -o '"[a-z_]*\.py"' | tr -d '"')"
for module in $modules; do
  [ -f "$folder/$module" ] || { echo "generative-compare: $folder lacks $module" >&2; exit 1; }
done
export AGENTS_UPSTREAM_DIR="$folder"

bash scripts/setup.sh
cargo build --workspace --bins
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
# run-suite fails the run if a process the campaign started outlives it.
"$TARGET_DIR/debug/run-suite" -- cargo test -p agents-tests --test it \
  -- generative_compare::generated_scenarios_against_the_originals \
  --ignored --exact --test-threads=1 --nocapture
