#!/usr/bin/env bash
# Offline advisory check of Cargo.lock: cargo-audit against the RustSec
# advisory database snapshot at ../shared/advisory-db beside the checkout
# (its crates/ folder), or the folder AGENTS_ADVISORY_DB names. Any advisory
# that affects a locked version fails it unless .cargo/audit.toml ignores it
# with the reason. Without the database it prints a SKIPPED line and exits 0,
# except under CI=true, where it fails. Installs cargo-audit (pinned) first
# when it is missing.
#
#   bash scripts/audit.sh                      # Cargo.lock
#   bash scripts/audit.sh --binaries DIST      # and every <target>/<helper> in DIST,
#                                              # by the dependency list inside it
set -euo pipefail
cd "$(dirname "$0")/.."
binaries=()
case "${1:-}" in
  "") ;;
  --binaries)
    (($# == 2)) || { echo "audit: --binaries takes one dist folder" >&2; exit 2; }
    binaries=("$2"/*/*)
    [[ -f "${binaries[0]}" ]] || { echo "audit: no <target>/<helper> binaries in $2" >&2; exit 1; } ;;
  *) echo "audit: unknown argument: $1" >&2; exit 2 ;;
esac
db="${AGENTS_ADVISORY_DB:-../shared/advisory-db}"
if [ ! -d "$db/crates" ]; then
  reason="no advisory database at $db (set AGENTS_ADVISORY_DB)"
  if [ "${CI:-}" = "true" ]; then
    echo "advisory check: $reason (CI=true: nothing may be skipped)" >&2
    exit 1
  fi
  echo "SKIPPED advisory check: $reason"
  exit 0
fi
if ! cargo audit --version >/dev/null 2>&1; then
  cargo install --locked --quiet --version 0.22.2 cargo-audit
fi
cargo audit --db "$db" --no-fetch --no-yanked --deny warnings
echo "advisory check: no advisory affects Cargo.lock ($db)"
if ((${#binaries[@]})); then
  # Each binary must carry its dependency list: cargo-audit would otherwise
  # guess from panic messages, which lists only some crates.
  for binary in "${binaries[@]}"; do
    grep -q -a -F ".dep-v0" "$binary" || { echo "audit: $binary carries no .dep-v0 dependency list" >&2; exit 1; }
  done
  cargo audit --db "$db" --no-fetch --deny warnings bin "${binaries[@]}"
  echo "advisory check: no advisory affects the ${#binaries[@]} binaries' embedded dependency lists"
fi
