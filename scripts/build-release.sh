#!/usr/bin/env bash
# Builds the five shipped helper binaries for the platforms AgentsServer runs on.
#
#   bash scripts/build-release.sh                # this machine's platform
#   bash scripts/build-release.sh --all-targets  # all four: x86_64 and aarch64 Linux, x86_64 and arm64 macOS
#   bash scripts/build-release.sh --target T...  # the named Rust targets
#
# Output: target/dist/<target>/<helper>, then a check of every binary (its
# header names the target's OS and CPU; Linux ones need at most glibc 2.17 and
# the standard loader; macOS ones require macOS 11.0 on arm64, 10.12 on x86_64)
# and a size table. Exit 1 if any check fails.
#
# How: every target is built the same way, with cargo-zigbuild (zig as the C
# compiler and linker, which links Mach-O without an Apple SDK and links
# against glibc 2.17's symbol versions) and the standard library built from
# source with Debian's rustc (rustc-web and rust-web-src), because rustup
# cannot fetch other targets' standard libraries here. scripts/setup.sh
# installs all of it. RELEASE_RUSTC names another rustc whose sysroot has the
# library sources.
set -euo pipefail
cd "$(dirname "$0")/.."

ALL_TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin)
HELPERS=(uninstall update-runner update-handoff execution-activation execution-manage)

host_target() {
  case "$(uname -s)/$(uname -m)" in
    Linux/x86_64) echo x86_64-unknown-linux-gnu ;;
    Linux/aarch64) echo aarch64-unknown-linux-gnu ;;
    Darwin/x86_64) echo x86_64-apple-darwin ;;
    Darwin/arm64) echo aarch64-apple-darwin ;;
    *) echo "build-release: no supported target for $(uname -s)/$(uname -m)" >&2; return 1 ;;
  esac
}

targets=()
case "${1:-}" in
  "") targets=("$(host_target)") ;;
  --all-targets) (($# == 1)) || { echo "build-release: --all-targets takes no more arguments" >&2; exit 2; }
    targets=("${ALL_TARGETS[@]}") ;;
  --target) shift; (($#)) || { echo "build-release: --target needs a target" >&2; exit 2; }
    targets=("$@") ;;
  -h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "build-release: unknown argument: $1" >&2; exit 2 ;;
esac

rustc_for_release="${RELEASE_RUSTC:-/usr/bin/rustc}"
[[ -x "$rustc_for_release" ]] || { echo "build-release: $rustc_for_release is missing; run scripts/setup.sh" >&2; exit 1; }
command -v cargo-zigbuild >/dev/null || { echo "build-release: cargo-zigbuild is missing; run scripts/setup.sh" >&2; exit 1; }
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"

for target in "${targets[@]}"; do
  zig_target="$target"
  export -n MACOSX_DEPLOYMENT_TARGET CARGO_PROFILE_RELEASE_STRIP 2>/dev/null || true
  unset MACOSX_DEPLOYMENT_TARGET CARGO_PROFILE_RELEASE_STRIP
  case "$target" in
    *-linux-gnu) zig_target="$target.2.17" ;;
    # Stripping Mach-O needs rust-objcopy or Apple's strip, and would void the
    # ad-hoc signature zig's linker adds (arm64 macOS runs only signed code).
    x86_64-apple-darwin) export MACOSX_DEPLOYMENT_TARGET=10.12 CARGO_PROFILE_RELEASE_STRIP=false ;;
    aarch64-apple-darwin) export MACOSX_DEPLOYMENT_TARGET=11.0 CARGO_PROFILE_RELEASE_STRIP=false ;;
    *) echo "build-release: unsupported target $target (supported: ${ALL_TARGETS[*]})" >&2; exit 2 ;;
  esac
  packages=()
  for helper in "${HELPERS[@]}"; do packages+=(-p "$helper"); done
  RUSTC_BOOTSTRAP=1 RUSTC="$rustc_for_release" cargo-zigbuild build --quiet --release \
    -Zbuild-std=std,panic_abort --target "$zig_target" "${packages[@]}"
  mkdir -p "$TARGET_DIR/dist/$target"
  for helper in "${HELPERS[@]}"; do
    cp -f "$TARGET_DIR/$target/release/$helper" "$TARGET_DIR/dist/$target/$helper"
  done
done
python3 -B scripts/release_platforms.py check "$TARGET_DIR/dist" "${targets[@]}"
