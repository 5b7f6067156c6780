#!/usr/bin/env bash
# Builds the five shipped helper binaries into target/release.
#
# uninstall, update-handoff, execution-activation and execution-manage are
# linked statically (glibc static-pie): they start about 0.35 ms faster, which
# matters for helpers install.sh runs dozens of times, and they only ever talk
# to numeric loopback addresses, so static glibc's NSS limitation (host-name
# lookups need the shared NSS modules at run time) cannot affect them.
# update-runner resolves release hosts by name and therefore stays dynamically
# linked against the system glibc.
set -euo pipefail
cd "$(dirname "$0")/.."
for binary in uninstall update-handoff execution-activation execution-manage; do
  cargo rustc --quiet --release -p "$binary" --bin "$binary" -- -C target-feature=+crt-static
done
cargo build --quiet --release -p update-runner
