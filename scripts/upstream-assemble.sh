#!/usr/bin/env bash
# Assembles the scratch folder for scripts/upstream-compare.sh from a clone of
# the public AgentsServer repository (docs/design/upstream-comparison.md):
#
#   git clone https://github.com/ZhengyiLuo/AgentsServer
#   bash scripts/upstream-assemble.sh AgentsServer ../upstream-scratch
#
# Writes each upstream module the originals import (UPSTREAM_MODULES in
# tests/src/upstream.rs) as the clone holds it at the commit the comparison
# uses, with `git show COMMIT:NAME`, so the clone's checked-out branch does not
# matter. Nothing is written into this project.
set -euo pipefail
if [ $# -ne 2 ]; then
  echo "usage: $0 CLONE OUTPUT" >&2
  exit 2
fi
clone="$1"
output="$2"
git -C "$clone" rev-parse --git-dir >/dev/null 2>&1 || { echo "$clone is not a git clone" >&2; exit 1; }
[ ! -e "$output" ] || { echo "$output exists; choose a new folder" >&2; exit 1; }

RELEASE=61203520f1456de6b8f4c9790953a5ac7f9823a7
# Modules with no version at RELEASE: the commit of the version the comparison uses.
declare -A COMMIT_OF=(
  [execution_transport.py]=3f51a359ecf6f83c76bad1a852306c890e8f66ff
  [execution_legacy_runner.py]=25743c4d613f88cd1a128cdf1f20eac444626574
)
modules="$(sed -n '/^pub const UPSTREAM_MODULES/,/^];/p' "$(dirname "$0")/../tests/src/upstream.rs" \
  | sed -n 's/^ *"\([a-z_]*\.py\)",$/\1/p')"
[ -n "$modules" ] || { echo "cannot read UPSTREAM_MODULES from tests/src/upstream.rs" >&2; exit 1; }
mkdir -p "$output.partial"
for name in $modules; do
  commit="${COMMIT_OF[$name]:-$RELEASE}"
  if ! git -C "$clone" show "$commit:$name" >"$output.partial/$name" 2>/dev/null; then
    echo "the clone has no $name at $commit (fetch the full history: git -C $clone fetch --unshallow)" >&2
    rm -rf "$output.partial"
    exit 1
  fi
done
mv "$output.partial" "$output"
echo "assembled $output ($(echo "$modules" | wc -w) modules)"
