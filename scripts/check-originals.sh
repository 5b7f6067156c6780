#!/usr/bin/env bash
# Checks that a folder holds the five Python originals of AgentsServer
# 1.0.7-beta.5 the helpers port, byte for byte (the digests the migration kit
# accepts, PORTED_SOURCES in scripts/migration_kit.py; update_runner.py with
# its npm registry host masked, as the kit compares it).
#
# Usage: bash scripts/check-originals.sh [DIR]
#   DIR  default: $AGENTS_ORIGINALS_DIR, else $AGENTS_SEEDS_DIR, else
#        ../shared/seeds/extracted beside the checkout
# Prints one line per file (`ok` or what differs); exit 1 if any differs.
set -euo pipefail
ROOT="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
dir="${1:-${AGENTS_ORIGINALS_DIR:-${AGENTS_SEEDS_DIR:-$ROOT/../shared/seeds/extracted}}}"
exec python3 -B - "$ROOT/scripts" "$dir" <<'PY'
import os, sys
sys.path.insert(0, sys.argv[1])
import migration_kit as kit
folder = sys.argv[2]
bad = 0
for name, expected in sorted(kit.PORTED_SOURCES.items()):
    path = os.path.join(folder, name)
    try:
        with open(path, "rb") as stream:
            found = kit.recognised_digest(name, stream.read())
    except (OSError, kit.Refusal) as error:
        print("%-24s missing or unreadable: %s" % (name, error))
        bad = 1
        continue
    if found == expected:
        print("%-24s ok  sha256 %s" % (name, expected))
    else:
        print("%-24s differs: sha256 %s, the 1.0.7-beta.5 original is %s" % (name, found, expected))
        bad = 1
sys.exit(bad)
PY
