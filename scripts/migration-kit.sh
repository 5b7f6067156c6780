#!/usr/bin/env bash
# The drop-in migration kit: puts the Rust helpers, for every platform built,
# into an unpacked AgentsServer 1.0.7-beta.5 release so install.sh,
# uninstall.sh, the server and support staff keep calling the same files, and
# any host without a fitting binary keeps running the Python originals
# (docs/release-engineering.md, "Migration kit").
#
# Usage: bash scripts/migration-kit.sh [--dist DIR] RELEASE_DIR
#
#   RELEASE_DIR  the unpacked release: the directory holding install.sh,
#                before install.sh has staged it (no .venv)
#   --dist DIR   stage the binaries of DIR/<target>/ for each target folder
#                DIR holds (x86_64-unknown-linux-gnu, aarch64-unknown-linux-gnu,
#                x86_64-apple-darwin, aarch64-apple-darwin) instead of building
#                all four with scripts/build-release.sh --all-targets
#
# Refuses (exit 1, nothing changed) a release whose helper sources are not the
# ones the binaries port; running it again finishes an interrupted run and
# otherwise changes nothing. Needs python3 (the release itself is Python).
set -euo pipefail

ROOT="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"

usage() {
  sed -n 's/^# \{0,1\}//; 8,16p' "${BASH_SOURCE[0]}"
}

dist=""
while (($#)); do
  case "$1" in
    --dist)
      (($# >= 2)) || { echo "migration-kit: --dist needs a directory" >&2; exit 2; }
      dist="$2"
      shift 2
      ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "migration-kit: unknown option: $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
if (($# != 1)); then
  usage >&2
  exit 2
fi
command -v python3 >/dev/null || { echo "migration-kit: python3 is required" >&2; exit 1; }

if [[ -z "$dist" ]]; then
  bash "$ROOT/scripts/build-release.sh" --all-targets
  dist="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/dist"
fi
exec python3 -B "$ROOT/scripts/migration_kit.py" --dist "$dist" "$1"
