#!/usr/bin/env bash
# Installs what the tests, the demo and the release builds need on a fresh
# Debian machine (run as root): a systemd user manager with unshare, Python 3
# with the `cryptography` package (the original update_runner.py is the tests'
# oracle), GNU time and strace, tinyproxy, squid and the CA bundle, the
# cross-build toolchain for the other platforms, and the Rust components used
# by the checks. Safe to run repeatedly.
set -euo pipefail
need_apt=()
command -v systemd >/dev/null 2>&1 || [ -x /lib/systemd/systemd ] || need_apt+=(systemd)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
[ -x /usr/bin/time ] || need_apt+=(time)
# strace stops a real helper at a chosen system call for the crash-resume tests.
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
# The other platforms (scripts/build-release.sh, scripts/test-aarch64.sh):
# Debian's rustc builds std for any target from its sources (rustup cannot
# fetch other targets here), its clippy lints them, qemu-user runs the
# aarch64 tests with the aarch64 glibc as their loader prefix, and readelf
# checks what was built.
[ -x /usr/bin/rustc ] || need_apt+=(rustc-web)
[ -d /usr/lib/rustlib/src/rust/library ] || need_apt+=(rust-web-src)
[ -x /usr/bin/clippy-driver ] || need_apt+=(rust-web-clippy)
command -v qemu-aarch64 >/dev/null 2>&1 || need_apt+=(qemu-user)
[ -e /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 ] || need_apt+=(libc6-arm64-cross)
command -v readelf >/dev/null 2>&1 || need_apt+=(binutils)
# Real forward proxies (tinyproxy; squid, reached over TLS), started by the
# proxy tests themselves, and the distribution's CA bundle, for update-runner's
# proxy and HTTPS tests; openssl makes their test CAs and server certificates.
[ -x /usr/bin/tinyproxy ] || [ -x /usr/sbin/tinyproxy ] || need_apt+=(tinyproxy)
[ -x /usr/sbin/squid ] || need_apt+=(squid)
[ -e /etc/ssl/certs/ca-certificates.crt ] || need_apt+=(ca-certificates)
command -v openssl >/dev/null 2>&1 || need_apt+=(openssl)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
  # The services of proxies installed here are not needed: tests run their own.
  for service in tinyproxy squid; do
    if [[ " ${need_apt[*]} " == *" $service "* ]]; then
      systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
  done
fi
# The release build's pinned tools (scripts/release-toolchain.env).
# shellcheck source=scripts/release-toolchain.env
source "$(dirname "$0")/release-toolchain.env"
need_pip=()
python3 -c 'import cryptography' >/dev/null 2>&1 || need_pip+=(cryptography)
# zig (PyPI's ziglang) links Mach-O without an Apple SDK and Linux binaries
# against an old glibc; cargo-zigbuild drives cargo with it.
pip_version() { python3 -m pip show "$1" 2>/dev/null | sed -n 's/^Version: //p'; }
[ "$(pip_version ziglang)" = "$RELEASE_ZIG_VERSION" ] || need_pip+=("ziglang==$RELEASE_ZIG_VERSION")
[ "$(pip_version cargo-zigbuild)" = "$RELEASE_CARGO_ZIGBUILD_VERSION" ] \
  || need_pip+=("cargo-zigbuild==$RELEASE_CARGO_ZIGBUILD_VERSION")
if [ ${#need_pip[@]} -gt 0 ]; then
  python3 -m pip install --quiet "${need_pip[@]}" \
    || python3 -m pip install --quiet --break-system-packages "${need_pip[@]}"
fi
# uv (from PyPI) builds each release's venv when the install.sh comparison
# (scripts/installsh-compare.sh) runs upstream's installer.
if ! python3 -c 'import uv' >/dev/null 2>&1; then
  python3 -m pip install --quiet uv \
    || python3 -m pip install --quiet --break-system-packages uv
fi
# cargo-auditable embeds each release binary's dependency list.
if ! cargo install --list 2>/dev/null | grep -qx "cargo-auditable v$RELEASE_CARGO_AUDITABLE_VERSION:"; then
  cargo install --locked --quiet --version "$RELEASE_CARGO_AUDITABLE_VERSION" cargo-auditable
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
