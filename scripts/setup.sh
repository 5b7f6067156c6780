#!/usr/bin/env bash
# Installs what the tests and the demo need on a fresh Debian machine (run as
# root): a systemd user manager with unshare, Python 3 with the `cryptography`
# package (the seed update_runner.py is the tests' oracle), GNU time and strace,
# and the Rust components used by the checks. Safe to run repeatedly.
set -euo pipefail
need_apt=()
command -v systemd >/dev/null 2>&1 || [ -x /lib/systemd/systemd ] || need_apt+=(systemd)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3 python3-pip)
[ -x /usr/bin/time ] || need_apt+=(time)
# strace stops a real helper at a chosen system call for the crash-resume tests.
command -v strace >/dev/null 2>&1 || need_apt+=(strace)
if [ ${#need_apt[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}"
fi
if ! python3 -c 'import cryptography' >/dev/null 2>&1; then
  python3 -m pip install --quiet cryptography \
    || python3 -m pip install --quiet --break-system-packages cryptography
fi
# uv (from PyPI) builds each release's venv when the install.sh comparison
# (scripts/installsh-compare.sh) runs upstream's installer.
if ! python3 -c 'import uv' >/dev/null 2>&1; then
  python3 -m pip install --quiet uv \
    || python3 -m pip install --quiet --break-system-packages uv
fi
if command -v rustup >/dev/null 2>&1; then
  rustup component add rustfmt clippy >/dev/null 2>&1 || true
fi
