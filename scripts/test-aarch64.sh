#!/usr/bin/env bash
# Runs the test suite built for aarch64 Linux under qemu-user on this x86_64
# machine: every unit test, and every black-box test that can run under
# emulation (README, "Supported hosts", lists the rest and why).
#
# The helpers, the test worker and the tests are built for
# aarch64-unknown-linux-gnu against glibc 2.17 (as the release is), with the
# standard library built from source by Debian's rustc. They run inside a
# private user namespace (every uid mapped to itself, so root stays root)
# with a private mount namespace and its own binfmt_misc, where aarch64 ELF
# files are handed to qemu-aarch64 with the aarch64 glibc as its loader
# prefix: a test that starts a helper, or a unit that starts the test
# worker, runs the aarch64 program. Nothing is registered on the host.
#
# Extra arguments go to the test binaries (e.g. a name filter).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

TARGET=aarch64-unknown-linux-gnu
export RUSTC_BOOTSTRAP=1 RUSTC="${RELEASE_RUSTC:-/usr/bin/rustc}"
BUILD=(-Zbuild-std=std,panic_abort --target "$TARGET.2.17")

# The test targets that cannot run under qemu-user, with why (README lists them).
EXCLUDED_TESTS=(

)
# Single tests that cannot, with why.
SKIPPED_TESTS=(

)

TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cargo build --quiet -p agents-tests --bin run-suite
cargo-zigbuild build --quiet "${BUILD[@]}" --workspace --bins

selection=(--lib --bins)
while IFS= read -r test; do
  excluded=false
  for name in "${EXCLUDED_TESTS[@]}"; do [[ "$test" == "${name%% *}" ]] && excluded=true; done
  "$excluded" || selection+=(--test "$test")
done < <(cargo metadata --format-version 1 --no-deps | python3 -c '
import json, sys
for package in json.load(sys.stdin)["packages"]:
    for target in package["targets"]:
        if "test" in target["kind"]:
            print(target["name"])')
skips=()
for name in "${SKIPPED_TESTS[@]}"; do skips+=(--skip "${name%% *}"); done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# binfmt_misc runs its interpreter with the environment the test gave the
# program, which may be empty; the wrapper supplies the loader prefix.
printf '#!/bin/sh\nQEMU_LD_PREFIX=/usr/aarch64-linux-gnu exec qemu-aarch64 "$@"\n' >"$work/qemu"
sed -i "s|exec qemu-aarch64|exec $(command -v qemu-aarch64)|" "$work/qemu"
chmod 755 "$work/qemu"
chmod 755 "$work"
# ELF, 64-bit, little-endian, ET_EXEC or ET_DYN, EM_AARCH64.
rule=":agents-aarch64:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00"
rule+=":\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:$work/qemu:"
ready="$work/ready"
mkfifo "$ready"
unshare --user --mount --propagation private bash -c '
  read -r _ <"$1"
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  printf "%s" "$2" >/proc/sys/fs/binfmt_misc/register
  shift 2
  exec "$@"' in-namespace "$ready" "$rule" \
  "$TARGET_DIR/debug/run-suite" -- cargo-zigbuild test "${BUILD[@]}" --workspace --no-fail-fast \
  "${selection[@]}" -- "${skips[@]}" "$@" &
namespaced=$!
# The maps can be written once the child has its own user namespace.
while [[ "$(readlink "/proc/$namespaced/ns/user")" == "$(readlink /proc/self/ns/user)" ]]; do sleep 0.02; done
echo "0 0 4294967295" >"/proc/$namespaced/uid_map"
echo "0 0 4294967295" >"/proc/$namespaced/gid_map"
echo go >"$ready"
wait "$namespaced"
