#!/usr/bin/env bash
# The whole crash-point campaign (issue 16) in the real systemd sandbox:
# every state-changing operation of the helpers is killed with SIGKILL on
# entry to each of its durable system calls in turn (tests/src/bin/
# crash_tracer.rs), then recovered as an operator or the next caller would,
# and every invariant is checked (tests/tests/it/crash_points.rs). The normal
# test suite runs only a sample of the points; this runs them all
# (AGENTS_CRASH_POINTS=all), which takes a while.
#
# Prints one line per operation (`<operation>: N kill points, N converged`),
# the total over the binaries, then the same for the Python originals that
# run under the same injection (with each point where they do not converge).
# Exits non-zero if any point of a binary does not converge or a test fails.
#
# `--power-cut` (issue 24) builds, at every kill point, the crash states a
# power cut may leave beside the SIGKILL one (tests/src/power_cut.rs:
# everything not made durable lost; names persisted before unsynced data),
# runs the same recovery and checks on each, and prints
# `<operation>: N crash states, N converged` and their total instead.
#
# Extra arguments go to the test binary; a name filter (an argument not
# starting with `-`) picks among the campaign's tests only.
set -euo pipefail
cd "$(dirname "$0")/.."
unit="kill points"
if [[ "${1:-}" == "--power-cut" ]]; then
  shift
  export AGENTS_POWER_CUT=all
  unit="crash states"
fi
bash scripts/setup.sh >/dev/null
cargo build --workspace --bins
cargo test -p agents-tests --test it --no-run

# The campaign is the `crash_points` module of the suite's one test binary.
# libtest ORs its name filters, so a filter of ours is turned into the exact
# names of the campaign's tests that contain it.
options=()
filters=()
for argument in "$@"; do
  if [[ "$argument" == -* ]]; then options+=("$argument"); else filters+=("$argument"); fi
done
selection=(crash_points::)
if [[ ${#filters[@]} -gt 0 ]]; then
  selection=(--exact)
  while IFS= read -r name; do
    for filter in "${filters[@]}"; do
      if [[ "$name" == *"$filter"* ]]; then
        selection+=("$name")
        break
      fi
    done
  done < <(cargo test -q -p agents-tests --test it -- --list crash_points:: | sed -n 's/: test$//p')
  if [[ ${#selection[@]} -eq 1 ]]; then
    echo "crash-points: no test of the campaign matches ${filters[*]}" >&2
    exit 2
  fi
fi

scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
report="$scratch/report"
log="$scratch/log"
: >"$report"

status=0
AGENTS_CRASH_POINTS=all AGENTS_CRASH_REPORT="$report" \
  cargo test -p agents-tests --test it -- \
  --test-threads="${CRASH_POINTS_THREADS:-2}" "${selection[@]}" "${options[@]}" >"$log" 2>&1 || status=$?

# Only the lines of the figures asked for (and the originals' failures).
lines="$(grep -E ": [0-9]+ $unit, |: [0-9]+ more $unit not built|^  " "$report" || true)"
binaries="$(echo "$lines" | grep -v '^original ' | grep -v '^  ' | sort || true)"
originals="$(echo "$lines" | awk '/^original /{keep=1} /^[^ ]/ && !/^original /{keep=0} keep' || true)"

# The two figures of a line `<operation>: N kill points, M converged`.
figures() {
  sed -nE "s/.*: ([0-9]+) $unit, ([0-9]+) converged\$/\\1 \\2/p"
}

echo "$binaries"
echo "$binaries" | figures | awk -v unit="$unit" '
  { points += $1; converged += $2 }
  END { printf "total: %d %s, %d converged\n", points, unit, converged }'
if [[ -n "$originals" ]]; then
  echo
  echo "Python originals under the same injection:"
  echo "$originals"
fi

diverged="$(echo "$binaries" | figures | awk '$1 != $2')"
if [[ "$status" -ne 0 || -n "$diverged" ]]; then
  echo
  echo "crash-points: not every point converged (test status $status); the test output ends:" >&2
  tail -n 60 "$log" >&2
  exit 1
fi
