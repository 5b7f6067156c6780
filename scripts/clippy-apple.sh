#!/usr/bin/env bash
# Lints the shipped code for both Apple targets (arm64 and x86_64 macOS):
# every library and binary of the common crates and the five helpers, with
# warnings denied, as `cargo clippy --workspace --all-targets` lints Linux.
# The test targets are Linux-only (the suite needs systemd, /proc and ptrace)
# and are linted on Linux.
#
# Like scripts/build-release.sh: Debian's rustc and clippy (rustc-web,
# rust-web-clippy) build std for the target from its sources, and
# cargo-zigbuild provides zig as the C compiler for the build scripts (ring).
set -euo pipefail
cd "$(dirname "$0")/.."
rustc_for_release="${RELEASE_RUSTC:-/usr/bin/rustc}"
clippy_driver="${RELEASE_CLIPPY_DRIVER:-$(dirname "$rustc_for_release")/clippy-driver}"
for tool in "$rustc_for_release" "$clippy_driver"; do
  [[ -x "$tool" ]] || { echo "clippy-apple: $tool is missing; run scripts/setup.sh" >&2; exit 1; }
done
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
packages=(-p python-compat -p python-source -p agents-common -p uninstall -p update-runner -p update-handoff -p execution-activation -p execution-manage)
for target in aarch64-apple-darwin x86_64-apple-darwin; do
  # clippy-driver as the workspace wrapper is what `cargo clippy` runs;
  # CLIPPY_ARGS carries `-D warnings` the way cargo-clippy passes it.
  RUSTC_BOOTSTRAP=1 RUSTC="$rustc_for_release" RUSTC_WORKSPACE_WRAPPER="$clippy_driver" \
    CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__" \
    CARGO_TARGET_DIR="$TARGET_DIR/clippy-apple" \
    cargo-zigbuild check --quiet -Zbuild-std=std,panic_abort --target "$target" --lib --bins "${packages[@]}"
  echo "clippy-apple: $target clean"
done
