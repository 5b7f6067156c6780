#!/usr/bin/env bash
# Builds the five shipped helper binaries for the platforms AgentsServer runs on,
# bit for bit reproducibly, each carrying the list of crates inside it.
#
#   bash scripts/build-release.sh                # this machine's platform
#   bash scripts/build-release.sh --all-targets  # all four: x86_64 and aarch64 Linux, x86_64 and arm64 macOS
#   bash scripts/build-release.sh --target T...  # the named Rust targets
#
# Output: target/dist/ holds this run's build and nothing else:
# <target>/<helper>, SHA256SUMS (`sha256sum -c` format) and, from a clean git
# tree only, provenance.json (source commit, toolchain, the build command).
# Then a check of every binary (its header names the target's OS and CPU;
# Linux ones need at most glibc 2.17 and the standard loader; macOS ones
# require macOS 11.0 on arm64, 10.12 on x86_64 and carry a valid ad-hoc code
# signature; every one carries its dependency list) and a size table. Exit 1
# if any check fails.
#
# How: cargo-zigbuild (zig as the C compiler and linker, which links Mach-O
# without an Apple SDK and links against glibc 2.17's symbol versions) under
# cargo-auditable (the `.dep-v0` dependency list), the standard library built
# from source with Debian's rustc (rustc-web and rust-web-src), because rustup
# cannot fetch other targets' standard libraries here. Every tool's version
# is pinned in scripts/release-toolchain.env and checked; scripts/setup.sh
# installs them. Paths that differ between machines (the checkout, the target
# folder, CARGO_HOME, the standard library's source) are remapped to fixed
# names, and umask, locale and time zone are fixed, so the same commit gives
# the same bytes anywhere. RELEASE_RUSTC names another rustc of the pinned
# version whose sysroot has the library sources.
set -euo pipefail
cd "$(dirname "$0")/.."
WORKSPACE="$(pwd -P)"
# shellcheck source=scripts/release-toolchain.env
source scripts/release-toolchain.env

ALL_TARGETS=(x86_64-unknown-linux-gnu aarch64-unknown-linux-gnu x86_64-apple-darwin aarch64-apple-darwin)
HELPERS=(uninstall update-runner update-handoff execution-activation execution-manage)

fail() { echo "build-release: $*" >&2; exit 1; }

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
  -h | --help) sed -n '2,28s/^# \{0,1\}//p' "$0"; exit 0 ;;
  *) echo "build-release: unknown argument: $1" >&2; exit 2 ;;
esac
for target in "${targets[@]}"; do
  [[ " ${ALL_TARGETS[*]} " == *" $target "* ]] \
    || { echo "build-release: unsupported target $target (supported: ${ALL_TARGETS[*]})" >&2; exit 2; }
done
if [[ "${targets[*]}" == "${ALL_TARGETS[*]}" ]]; then
  build_command="bash scripts/build-release.sh --all-targets"
else
  build_command="bash scripts/build-release.sh --target ${targets[*]}"
fi

# Nothing of the caller's environment may reach the compiler: the build's own
# flags below replace every RUSTFLAGS form, and no wrapper, profile or target
# override from the environment applies. CARGO_HOME and CARGO_TARGET_DIR stay
# (where things are, which the remapping below hides).
for name in $(compgen -e); do
  case "$name" in
    CARGO_HOME | CARGO_TARGET_DIR | CARGO_BUILD_TARGET_DIR) ;;
    RUSTFLAGS | RUSTDOCFLAGS | RUSTC_WRAPPER | RUSTC_WORKSPACE_WRAPPER | RUSTC_BOOTSTRAP | CARGO_BUILD_* \
      | CARGO_PROFILE_* | CARGO_TARGET_* | CARGO_ENCODED_* | CARGO_ZIGBUILD_* | CARGO_AUDITABLE_* | CC | CFLAGS \
      | CXX | CXXFLAGS | AR | LDFLAGS | ZIG_* | MACOSX_DEPLOYMENT_TARGET | SOURCE_DATE_EPOCH | CC_* | CFLAGS_* \
      | TARGET_CC | TARGET_CFLAGS | HOST_CC | HOST_CFLAGS) unset "$name" ;;
  esac
done
umask 022
export LC_ALL=C TZ=UTC

# The pinned toolchain, checked (scripts/release-toolchain.env).
rustc_for_release="${RELEASE_RUSTC:-/usr/bin/rustc}"
[[ -x "$rustc_for_release" ]] || fail "$rustc_for_release is missing; run scripts/setup.sh"
command -v cargo-zigbuild >/dev/null || fail "cargo-zigbuild is missing; run scripts/setup.sh"
command -v cargo-auditable >/dev/null || fail "cargo-auditable is missing; run scripts/setup.sh"
version_field() { sed -n "s/^$1: //p"; }
pinned() { # what found pinned
  [[ "$2" == "$3" ]] || fail "$1 is $2, but release builds pin $3 (scripts/release-toolchain.env); a different version gives different bytes"
}
rustc_info="$("$rustc_for_release" -vV)"
pinned "rustc ($rustc_for_release)" "$(version_field release <<<"$rustc_info")" "$RELEASE_RUSTC_RELEASE"
pinned "rustc's commit" "$(version_field commit-hash <<<"$rustc_info")" "$RELEASE_RUSTC_COMMIT"
cargo_info="$(cargo -vV)"
pinned "cargo" "$(version_field release <<<"$cargo_info")" "$RELEASE_CARGO_RELEASE"
pinned "cargo's commit" "$(version_field commit-hash <<<"$cargo_info")" "$RELEASE_CARGO_COMMIT"
zig="$(python3 -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))' 2>/dev/null)" \
  || fail "zig (PyPI's ziglang) is missing; run scripts/setup.sh"
pinned "zig ($zig)" "$("$zig" version)" "$RELEASE_ZIG_VERSION"
pinned "cargo-zigbuild" "$(cargo-zigbuild --version | sed -n 's/^cargo-zigbuild //p')" "$RELEASE_CARGO_ZIGBUILD_VERSION"
# cargo-auditable has no version flag: cargo's install record beside it has it.
auditable_root="$(dirname -- "$(dirname -- "$(command -v cargo-auditable)")")"
auditable_version="$(cargo install --list --root "$auditable_root" | sed -n 's/^cargo-auditable v\([^:]*\):$/\1/p')"
pinned "cargo-auditable" "${auditable_version:-not installed by cargo install}" "$RELEASE_CARGO_AUDITABLE_VERSION"
export CARGO_ZIGBUILD_ZIG_PATH="$zig"

TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"
sysroot="$("$rustc_for_release" --print sysroot)"
std_source="$sysroot/lib/rustlib/src/rust"
[[ -d "$std_source/library" ]] || fail "$std_source/library is missing; run scripts/setup.sh"

# Every path that differs between machines, as the binaries name it (panic
# locations, the dependencies' build-script output) becomes a fixed one. rustc
# applies the last matching prefix, so the more specific ones come later.
remaps=()
remap() {
  local from
  for from in "$1" "$(realpath -m -- "$1")"; do
    remaps+=("--remap-path-prefix=$from=$2")
  done
}
remap "$WORKSPACE" /agents-helpers
remap "$TARGET_DIR" /agents-helpers/target
remap "$cargo_home" /cargo
# The registry's unpacked sources sit in a folder named after the registry's
# host, which no shipped binary may name: `cargo metadata` unpacks every
# locked package first, so the folders are known before the build.
while IFS= read -r folder; do
  if [[ -n "$folder" ]]; then remap "$folder" /cargo/registry/src/registry; fi
done < <(cargo metadata --format-version 1 --locked \
  | python3 -c 'import json, os, sys
folders = {os.path.dirname(os.path.dirname(p["manifest_path"])) for p in json.load(sys.stdin)["packages"]
           if (p["source"] or "").startswith(("registry+", "sparse+"))}
print("\n".join(sorted(folders)))')
remap "$std_source" "/rustc/$RELEASE_RUSTC_COMMIT"
CARGO_ENCODED_RUSTFLAGS="$(IFS=$'\x1f'; echo "${remaps[*]}")"
export CARGO_ENCODED_RUSTFLAGS
# C dependencies (ring) without debug info: ring asks for -gfull on Apple
# and -g3 elsewhere, and zig's Mach-O linker hashes the symbol-table entries
# that name each object with debug info (paths under the target folder) into
# LC_UUID before the strip removes them. The release strips debug info
# anyway; cc puts CFLAGS last, so -g0 wins.
export CFLAGS=-g0

# `clean:<commit>` for a clean git tree, `dirty`, or `none` outside git.
tree_state() {
  if ! git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    echo none
  elif [[ -n "$(git status --porcelain --untracked-files=normal)" ]]; then
    echo dirty
  else
    echo "clean:$(git rev-parse HEAD)"
  fi
}
tree_state_before="$(tree_state)"

dist="$TARGET_DIR/dist"
rm -rf -- "$dist"
packages=()
for helper in "${HELPERS[@]}"; do packages+=(-p "$helper"); done
for target in "${targets[@]}"; do
  zig_target="$target"
  unset MACOSX_DEPLOYMENT_TARGET
  case "$target" in
    *-linux-gnu) zig_target="$target.2.17" ;;
    # rustc strips Mach-O with rust-objcopy, which re-signs zig's ad-hoc
    # signature (arm64 macOS runs only signed code); the check verifies it.
    x86_64-apple-darwin) export MACOSX_DEPLOYMENT_TARGET=10.12 ;;
    aarch64-apple-darwin) export MACOSX_DEPLOYMENT_TARGET=11.0 ;;
  esac
  # cargo-auditable drives cargo-zigbuild as its cargo (CARGO) and wraps rustc.
  CARGO=cargo-zigbuild RUSTC_BOOTSTRAP=1 RUSTC="$rustc_for_release" \
    cargo-auditable auditable build --quiet --locked --release \
    -Zbuild-std=std,panic_abort --target "$zig_target" "${packages[@]}"
  mkdir -p "$dist/$target"
  for helper in "${HELPERS[@]}"; do
    cp -f "$TARGET_DIR/$target/release/$helper" "$dist/$target/$helper"
  done
done
python3 -B scripts/release_platforms.py check "$dist" "${targets[@]}"

# Provenance: only a tree that was clean from the start of the build to its
# end names the source it was built from.
tree_state_now="$(tree_state)"
commit=""
case "$tree_state_before" in
  clean:*)
    if [[ "$tree_state_now" == "$tree_state_before" ]]; then
      commit="${tree_state_before#clean:}"
    else
      echo "build-release: the tree changed during the build, so no provenance.json is written" >&2
    fi ;;
  dirty) echo "build-release: the tree has uncommitted changes (git status), so no provenance.json is written: a release is built from a commit" >&2 ;;
  *) echo "build-release: not a git checkout, so no provenance.json is written: a release is built from a commit" >&2 ;;
esac
python3 -B scripts/release_provenance.py write "$dist" --commit "$commit" --command "$build_command" "${targets[@]}"
