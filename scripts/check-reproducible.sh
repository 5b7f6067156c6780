#!/usr/bin/env bash
# CI's reproducibility check: rebuilds the named targets of target/dist (as
# scripts/build-release.sh just left it, from a clean tree) with
# scripts/verify-release.sh from a clone in another folder, with everything a
# build could pick up from its machine changed: CARGO_HOME (the registry's
# index and downloads copied from this one's, so no network is needed, and
# its sources unpacked anew at another path), HOME (zig's and
# cargo-zigbuild's caches), umask 077, time zone and locale. Exit 1 if any
# binary differs.
#
# Usage: bash scripts/check-reproducible.sh TARGET...
set -euo pipefail
ROOT="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"
(($#)) || { sed -n '11s/^# \{0,1\}//p' "${BASH_SOURCE[0]}" >&2; exit 2; }
dist="$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')/dist"
elsewhere="$(mktemp -d "${TMPDIR:-/tmp}/reproducible.XXXXXX")"
trap 'rm -rf -- "$elsewhere"' EXIT
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
mkdir -p "$elsewhere/cargo-home/registry" "$elsewhere/home"
for part in index cache; do
  [[ -d "$cargo_home/registry/$part" ]] && cp -R "$cargo_home/registry/$part" "$elsewhere/cargo-home/registry/"
done
targets=()
for target in "$@"; do targets+=(--target "$target"); done
# rustup's toolchains stay where they are (RUSTUP_HOME); the locale and time
# zone differ from the build's own (C, UTC), which it must override.
(
  umask 077
  cd "$elsewhere"
  env CARGO_HOME="$elsewhere/cargo-home" HOME="$elsewhere/home" RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}" \
    TZ=Pacific/Chatham LANG=C.UTF-8 LC_ALL=C.UTF-8 TMPDIR="$elsewhere" \
    bash "$ROOT/scripts/verify-release.sh" "${targets[@]}" "$dist"
)
