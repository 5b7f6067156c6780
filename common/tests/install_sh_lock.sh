#!/bin/sh
# A test stand-in for install.sh's `.install-lock` protocol, written in POSIX sh
# from the documented contract (install.sh itself runs the same steps through an
# inline Python program). Tests run it against the Rust InstallationLock to
# prove that an installer and the Rust helpers exclude each other.
#
# Usage (the same interface as the Rust holder in install_lock_support):
#   install_sh_lock.sh ROOT GO REPORT UNTIL
#   GO: wait for this file before acquiring (`-`: at once); REPORT: receives
#   `acquired` or `refused <message>`; UNTIL: hold until this file exists and
#   then release (`-`: at once; `abandon`: exit holding it); REPORT.done then
#   receives `released` or the release failure.
#
# Protocol (install-sh-contract.md §3): a private candidate directory
# `.install-lock.<pid>.<24 hex>.tmp` holding `pid` (the installer's own PID,
# decimal, newline, mode 0600, created exclusively, fsynced) is renamed onto
# `.install-lock`; rename(2) fails on a populated lock and replaces an empty
# one. A populated lock must be a private directory owned by us whose `pid` is a
# safe regular file (owned, one link, 0600/0644, 1-32 bytes, digits, > 1). A
# live owner (kill -0 succeeds or is not permitted) refuses; a dead owner's
# `pid` is removed after re-checking it is unchanged, and the rename is retried
# (32 attempts). Release re-checks the lock identity and owner, removes `pid`,
# then the directory. Unlike install.sh, the shell cannot pin the dead owner's
# unlink to a directory descriptor, so tests never race two reapers.
set -u
umask 077
root=$1 go=$2 report_file=$3 until=$4
lock="$root/.install-lock"
me=$$
euid=$(id -u)
candidate=""

# Writes a line to a file under a temporary name first, so readers see it whole.
publish() {
  printf '%s\n' "$2" >"$1.tmp" && mv -f "$1.tmp" "$1"
}

report() { publish "$report_file" "$1"; }

remove_candidate() {
  [ -n "$candidate" ] || return 0
  rm -f "$candidate/pid"
  rmdir "$candidate" 2>/dev/null
  candidate=""
}

refuse() {
  remove_candidate
  report "refused $1"
  exit 1
}

identity() { stat -c '%d:%i' -- "$1" 2>/dev/null; }

wait_for() {
  while [ ! -e "$1" ]; do sleep 0.005; done
}

# An owned directory whose mode has none of the bits in $2 (octal).
owned_directory() {
  [ -d "$1" ] && [ ! -L "$1" ] || return 1
  [ "$(stat -c %u -- "$1")" = "$euid" ] || return 1
  [ $((0$(stat -c %a -- "$1") & $2)) -eq 0 ]
}

# Prints the owner PID of the current lock; fails with the refusal text.
read_owner() {
  file="$lock/pid"
  if [ ! -f "$file" ] || [ -L "$file" ]; then
    echo "AgentsServer install lock owner is unsafe"
    return 1
  fi
  set -- $(stat -c '%u %h %a %s' -- "$file")
  if [ "$1" != "$euid" ] || [ "$2" != 1 ] || { [ "$3" != 600 ] && [ "$3" != 644 ]; } \
    || [ "$4" -lt 1 ] || [ "$4" -gt 32 ]; then
    echo "AgentsServer install lock owner is unsafe"
    return 1
  fi
  value=$(tr -d ' \t\n\r' <"$file")
  case $value in
    '' | *[!0-9]*) echo "AgentsServer install lock owner is invalid"; return 1 ;;
  esac
  # No real PID has more than 18 digits; longer values would overflow test(1).
  if [ ${#value} -gt 18 ] || [ "$value" -le 1 ]; then
    echo "AgentsServer install lock owner is invalid"
    return 1
  fi
  echo "$value"
}

# kill -0 succeeding or failing with EPERM both mean the owner is alive.
alive() {
  failure=$(kill -0 "$1" 2>&1) && return 0
  case $failure in *"not permitted"*) return 0 ;; esac
  return 1
}

owned_directory "$root" 022 || refuse "AgentsServer install root is unsafe"
[ "$go" = "-" ] || wait_for "$go"

candidate="$root/.install-lock.$me.$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n').tmp"
mkdir -m 700 "$candidate" || exit 1
candidate_identity=$(identity "$candidate")
# noclobber makes the redirection an exclusive create, like O_EXCL.
(set -C && printf '%s\n' "$me" >"$candidate/pid") || refuse "pid file could not be created"
chmod 600 "$candidate/pid" && sync "$candidate/pid" "$candidate" || refuse "pid file is not durable"

acquired=false
attempt=0
while [ $attempt -lt 32 ]; do
  attempt=$((attempt + 1))
  if mv -T -- "$candidate" "$lock" 2>/dev/null; then
    acquired=true
    candidate=""
    break
  fi
  # Vanished between the rename and this look: just retry.
  [ -e "$lock" ] || [ -L "$lock" ] || continue
  owned_directory "$lock" 077 || refuse "AgentsServer install lock directory is unsafe"
  # An empty lock (a crash between mkdir and pid) is replaced by the next rename.
  [ -e "$lock/pid" ] || [ -L "$lock/pid" ] || continue
  owner=$(read_owner) || refuse "$owner"
  alive "$owner" && refuse "another AgentsServer installation is active ($owner)"
  owner_identity=$(identity "$lock/pid")
  current=$(read_owner) || continue
  [ "$current" = "$owner" ] && [ "$(identity "$lock/pid")" = "$owner_identity" ] || continue
  rm -f "$lock/pid"
  sync "$lock"
done
$acquired || refuse "AgentsServer install lock ownership kept changing"
sync "$root"
[ "$(identity "$lock")" = "$candidate_identity" ] || refuse "AgentsServer install lock ownership changed"
report acquired

case $until in
  abandon) exit 0 ;;
  -) ;;
  *) wait_for "$until" ;;
esac

fail_release() {
  publish "$report_file.done" "$1"
  exit 1
}
[ "$(identity "$lock")" = "$candidate_identity" ] || fail_release "AgentsServer install lock ownership changed"
owner=$(read_owner) || fail_release "$owner"
[ "$owner" = "$me" ] || fail_release "AgentsServer install lock owner changed"
rm -f "$lock/pid"
sync "$lock"
[ "$(identity "$lock")" = "$candidate_identity" ] || fail_release "AgentsServer install lock ownership changed"
rmdir "$lock" || fail_release "AgentsServer install lock could not be removed"
sync "$root"
publish "$report_file.done" released
