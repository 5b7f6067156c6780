#!/usr/bin/env bash
# The project's main job in one command, on a fresh Linux machine as root:
# installs what is needed (scripts/setup.sh), builds every helper and the
# test worker, then runs the sandboxed end-to-end demo (tests/src/bin/demo):
# a private systemd --user manager, loopback only, one line per step, and
# nothing left running afterwards. Exits non-zero if any step does not hold.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --workspace --bins
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
exec "$TARGET_DIR/debug/demo"
