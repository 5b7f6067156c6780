#!/bin/bash
# Stand-in for a release's install.sh, used by the installer supervision tests.
#
# Usage: stand_in_install.sh RECORD_DIR STEP...
# It first records how it was started ($0 and argv, initial environment, /proc stat
# with its session and process group, working directory, fds 0-2), then runs
# the steps in order:
#   say:TEXT          print TEXT and a newline on stdout
#   err:TEXT          print TEXT and a newline on stderr
#   cat:FILE          copy FILE to stdout
#   sleep:SECONDS     sleep
#   exit:CODE         exit with CODE
#   signal:NAME       send signal NAME to itself
#   on-term:SECS:CODE on SIGTERM: say so, sleep SECS, say so, exit CODE
#   ignore-term       ignore SIGTERM
#   grandchild        start a background process in the same group that
#                     records its PID and, on SIGTERM, a marker
#   wait-for:FILE     poll until FILE exists
set -u
# Sleeps run in the background and are waited for: a trapped SIGTERM then
# interrupts the wait at once, and bash prints no "Terminated" job report
# into the log when the group signal kills the sleep.
pause() { sleep "$1" & wait $!; }
record=$1
shift
printf '%s\0' "$0" "$record" "$@" > "$record/argv"
cat "/proc/$$/environ" > "$record/environ"
cat "/proc/$$/stat" > "$record/stat"
readlink "/proc/$$/cwd" > "$record/cwd"
for fd in 0 1 2; do readlink "/proc/$$/fd/$fd" > "$record/fd$fd"; done
echo $$ > "$record/pid"
for step in "$@"; do
    case $step in
        say:*) printf '%s\n' "${step#say:}" ;;
        err:*) printf '%s\n' "${step#err:}" >&2 ;;
        cat:*) cat "${step#cat:}" ;;
        sleep:*) pause "${step#sleep:}" ;;
        exit:*) exit "${step#exit:}" ;;
        signal:*) kill -s "${step#signal:}" $$ ;;
        on-term:*)
            spec=${step#on-term:}
            term_delay=${spec%%:*}
            term_code=${spec#*:}
            trap 'echo "term received"; touch "$record/term"; pause "$term_delay"; echo "rollback finished"; touch "$record/finished"; exit "$term_code"' TERM
            ;;
        ignore-term) trap '' TERM ;;
        grandchild)
            (
                trap 'touch "$record/grandchild-term"; exit 0' TERM
                echo "$BASHPID" > "$record/grandchild"
                # Bounded, so a failed test leaves nothing running for long.
                end=$((SECONDS + 30))
                while [ "$SECONDS" -lt "$end" ]; do pause 0.05; done
            ) &
            ;;
        wait-for:*) while [ ! -e "${step#wait-for:}" ]; do pause 0.02; done ;;
        *) echo "unknown step: $step" >&2; exit 99 ;;
    esac
done
