#!/usr/bin/env bash
# Runs the test suite built for aarch64 Linux under qemu-user on this x86_64
# machine: every unit test, and every black-box test that can run under
# emulation (the lists below name the rest, with why).
#
#   bash scripts/test-aarch64.sh             # all of them (about an hour on 2 cores)
#   bash scripts/test-aarch64.sh --sample    # what CI runs: every unit test and
#                                            # a sample of each area's black-box tests
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

# The integration-test modules (`<module>::` in each crate's one test binary,
# tests/it/) that cannot run under qemu-user, with why.
EXCLUDED_MODULES=(
  "crash_points  crash-tracer ptraces the helper: under qemu-user the traced process is the emulator"
  "migration_kit  the kit and its launchers are Python and bash choosing this machine's (x86_64) binary"
  "migration_kit_launchers  as migration_kit"
  "release_build  reads this machine's release build in target/dist and runs cargo and the x86_64 scripts on it"
  "skip_policy  tests run-suite (the suite's own x86_64 supervisor), not a helper"
  "sandbox_stress  tests the sandbox itself; starting sandboxes from many threads forks a multithreaded emulated process, which deadlocks in qemu-user"
)
# Single tests that cannot, with why.
SKIPPED_TESTS=(
  "a_silent_server_times_out_as_timeout_error  a 1 s deadline: emulation is slow enough to spend it in the ownership proof instead"
  "a_slow_body_past_the_deadline_is_refused  the same"
  "a_missing_program_is_a_file_not_found_error  qemu-user reports a failed exec in the child as exit 127, not as the kernel's error"
  "a_launchd_recovery_owner_is_judged_by_its_plist_and_launchctl  runs the absent /bin/launchctl: the same exit 127 in place of the kernel's ENOENT"
  "signals_the_installer_ignored_stay_ignored_while_the_helper_waits  reads /proc/<pid>/exe and SigIgn, which are the emulator's"
  "release_host_http_edge_cases_end_as_the_original_ends  measures peak RSS, which is the emulator's"
  "apply_killed_at_each_step_as_recorded  a recorded worker request depends on how soon the (emulated) worker listens"
  "a_retry_falls_back_to_the_update_id_for_an_empty_preparation  the original's 5 s deadline for the worker's reply covers the PID-ownership proof, which reads /proc under emulation; it ran out in a full run on two saturated cores"
  "a_release_reply_must_confirm_the_lease_is_gone  the same 5 s deadline"
  "seal_for_stop_refusals_send_nothing_further  the same 5 s deadline"
  "a_sealing_refusal_before_any_stop_releases_the_acquired_hold  the same 5 s deadline"
  "heartbeats_advance_the_row_while_the_installer_runs  counts one-second heartbeats of an emulated runner; a saturated machine skips one"
  "budget_expiry_sends_sigterm_to_the_group_and_waits_for_the_rollback  a 2 s installer budget, the same"
  "recover_after_a_kill_while_the_candidate_worker_starts_restores_the_old_worker  waits 15 s for an emulated worker to start under systemd; it did not on two saturated cores"
  "publish_again_after_a_kill_at_the_fchmod_of_a_new_staged_source  uses crash-tracer (ptrace)"
  "recover_after_a_migration_apply_killed_at_the_fsync_of_a_journal_temporary  uses crash-tracer (ptrace)"
  "recover_after_a_worker_apply_killed_at_the_fsync_of_a_journal_temporary  uses crash-tracer (ptrace)"
  "recover_after_recover_killed_at_the_fsync_of_a_journal_temporary  uses crash-tracer (ptrace)"
  "a_rerun_finishes_an_uninstall_killed_at_the_unlink_after_a_release_lost_execution_service_py  uses crash-tracer (ptrace)"
  "a_rerun_finishes_an_uninstall_killed_at_the_unlink_after_releases_1_0_0_version  uses crash-tracer (ptrace)"
  "a_rerun_finishes_an_uninstall_killed_at_the_unlink_of_the_worker_unit  uses crash-tracer (ptrace)"
  "the_next_runner_removes_a_row_temporary_of_a_runner_killed_at_its_fsync  uses crash-tracer (ptrace)"
)
# CI's sample (--sample): each area's black-box test modules, beside every unit test.
SAMPLE_MODULES=(
  fs_atomic_write fs_read_file install_lock_refusals install_lock_processes json_model json_golden
  layout_golden layout_validate services_launchd services_systemd_recorded update_status_races
  worker_control_admission http_pinned
  release_archive release_manifest release_download installer_process runner_server_health
  activation_legacy_runner activation_volume activation_durability activation_replace_config
  transaction_journal
  cli_uninstall update_runner_update update_runner_tls update_handoff_release
  execution_activation_journal execution_manage_apply uninstall_split uninstall_legacy
  test_worker_startup services_systemd darwin_abi_facts
)
sample=false
if [[ "${1:-}" == "--sample" ]]; then
  sample=true
  shift
fi

TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
cargo build --quiet -p agents-tests --bin run-suite
cargo-zigbuild build --quiet "${BUILD[@]}" --workspace --bins

skips=()
for name in "${SKIPPED_TESTS[@]}"; do skips+=(--skip "${name%% *}"); done
# The unit tests run in full; the integration tests (each crate's `it` binary)
# without the excluded modules, or only the sampled ones. A skip or filter
# matches a substring of `<module>::<test>`, so the two kinds of test run
# separately: `crash_points::` also names unit tests of the test support.
modules=()
for name in "${EXCLUDED_MODULES[@]}"; do modules+=(--skip "${name%% *}::"); done
if "$sample"; then
  for name in "${SAMPLE_MODULES[@]}"; do modules+=("$name::"); done
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# binfmt_misc runs this interpreter for every aarch64 executable, as
# `qemu <path> <argv[0]> <arguments>` (the P flag keeps argv[0], which the
# helpers name themselves by). A shell script would export PWD into every
# program's environment, so it is a compiled exec of qemu-aarch64, with the
# loader prefix as an option (in QEMU_LD_PREFIX the emulated program would
# inherit it too).
cat >"$work/qemu.c" <<C
#include <unistd.h>
int main(int argc, char **argv) {
  if (argc < 3) return 127;
  char *args[argc + 4];
  int n = 0;
  args[n++] = "$(command -v qemu-aarch64)";
  args[n++] = "-L";
  args[n++] = "/usr/aarch64-linux-gnu";
  args[n++] = "-0";
  args[n++] = argv[2];
  args[n++] = argv[1];
  for (int i = 3; i < argc; i++) args[n++] = argv[i];
  args[n] = 0;
  execv(args[0], args);
  return 127;
}
C
cc -O2 -o "$work/qemu" "$work/qemu.c"
# Both runs under one run-suite (one summary); the run fails if either does.
{
  echo 'status=0'
  printf '%q ' cargo-zigbuild test "${BUILD[@]}" --workspace --no-fail-fast --lib --bins \
    -- "${skips[@]}" "$@"
  echo '|| status=$?'
  printf '%q ' cargo-zigbuild test "${BUILD[@]}" --workspace --no-fail-fast --test it \
    -- "${modules[@]}" "${skips[@]}" "$@"
  echo '|| status=$?'
  echo 'exit "$status"'
} >"$work/run-tests.sh"
chmod 755 "$work"
# ELF, 64-bit, little-endian, ET_EXEC or ET_DYN, EM_AARCH64.
rule=":agents-aarch64:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00"
rule+=":\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:$work/qemu:P"
ready="$work/ready"
mkfifo "$ready"
unshare --user --mount --propagation private bash -c '
  read -r _ <"$1"
  mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  printf "%s" "$2" >/proc/sys/fs/binfmt_misc/register
  shift 2
  exec "$@"' in-namespace "$ready" "$rule" \
  "$TARGET_DIR/debug/run-suite" -- bash "$work/run-tests.sh" &
namespaced=$!
# The maps can be written once the child has its own user namespace.
while [[ "$(readlink "/proc/$namespaced/ns/user")" == "$(readlink /proc/self/ns/user)" ]]; do sleep 0.02; done
echo "0 0 4294967295" >"/proc/$namespaced/uid_map"
echo "0 0 4294967295" >"/proc/$namespaced/gid_map"
echo go >"$ready"
wait "$namespaced"
