#!/usr/bin/env bash
# Startup benchmark: `--help` of each release helper binary against the
# Python (or bash) program it replaces, side by side.
#
# Targets: every helper starts at least 30x faster than its counterpart and
# peaks below 6 MiB of resident memory. Exits 1 if any target is missed.
#
# Wall time: hyperfine when installed, otherwise a small Python helper that
# spawns each run and waits for it (the same spawn path for both sides).
# Peak RSS: GNU time's %M (maximum resident set, KiB), the largest of 3 runs.
# (Linux counts a child's pages from before exec in its peak, so the measuring
# parent must itself be small: a Python spawner would add its own ~13 MiB.)
#
# Environment: AGENTS_ORIGINALS_DIR (or AGENTS_SEEDS_DIR; default: <repo>/../shared/seeds/extracted) locates the
# originals; BENCH_RUNS_RUST (default 200) and BENCH_RUNS_PYTHON (default 20) set
# the number of runs; SPEEDUP_TARGET (30) and RSS_TARGET_KIB (6144) the targets.
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
ORIGINALS="${AGENTS_ORIGINALS_DIR:-${AGENTS_SEEDS_DIR:-$ROOT/../shared/seeds/extracted}}"
RUNS_RUST="${BENCH_RUNS_RUST:-200}"
RUNS_PYTHON="${BENCH_RUNS_PYTHON:-20}"
SPEEDUP_TARGET="${SPEEDUP_TARGET:-30}"
RSS_TARGET_KIB="${RSS_TARGET_KIB:-6144}"

if [[ ! -d "$ORIGINALS" ]]; then
  echo "bench-startup: originals not found at $ORIGINALS (set AGENTS_ORIGINALS_DIR)" >&2
  exit 2
fi
command -v python3 >/dev/null || { echo "bench-startup: python3 is required" >&2; exit 2; }
[[ -x /usr/bin/time ]] || { echo "bench-startup: GNU time (/usr/bin/time) is required for peak RSS" >&2; exit 2; }

cd "$ROOT"
BINARIES=(uninstall update-runner update-handoff execution-activation execution-manage)
bash "$ROOT/scripts/build-release.sh" >/dev/null
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
case "$(uname -s)/$(uname -m)" in
  Linux/aarch64) HOST_TARGET=aarch64-unknown-linux-gnu ;;
  *) HOST_TARGET=x86_64-unknown-linux-gnu ;;
esac
# The shipped binaries for this machine, as scripts/build-release.sh builds them.
RELEASE="$TARGET_DIR/dist/$HOST_TARGET"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
# uninstall.sh resolves its roots under HOME before printing help.
mkdir -p "$WORK/home"
export HOME="$WORK/home"
unset COLUMNS AGENTS_SERVER_INSTALL_DIR AGENTS_SERVER_CONFIG_DIR AGENTSDOCK_STATE_DIR \
  AGENTS_SERVER_STATE_DIR ZENITHBOT_AGENT_DIR

# Runs an original whose project modules are not all present: missing imports
# become stand-in modules, then main(argv) runs (argparse prints the help and
# exits before any stand-in is used). Without a main (update_handoff has no
# CLI), it imports the module and prints an argparse help page instead.
cat >"$WORK/stubbed_original.py" <<'PY'
import argparse, builtins, importlib.util, os, sys, types
original_dir, module, prog = sys.argv[1:4]
argv = sys.argv[4:]
class Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return type(name, (), {})
real_import = builtins.__import__
def tolerant_import(name, globals=None, locals=None, fromlist=(), level=0):
    try:
        return real_import(name, globals, locals, fromlist, level)
    except ImportError:
        sys.modules[name] = Stub(name)
        return sys.modules[name]
builtins.__import__ = tolerant_import
sys.argv = [prog] + argv
spec = importlib.util.spec_from_file_location(module, os.path.join(original_dir, module + ".py"))
original = importlib.util.module_from_spec(spec)
spec.loader.exec_module(original)
builtins.__import__ = real_import
if hasattr(original, "main"):
    original.main(argv)
else:
    argparse.ArgumentParser(prog=prog).parse_args(argv)
PY

# Measures a command: mean wall seconds over N runs and the worst exit
# status. Prints "<mean_seconds> <status>".
cat >"$WORK/measure.py" <<'PY'
import os, sys, time
runs = int(sys.argv[1])
argv = sys.argv[2:]
devnull = os.open(os.devnull, os.O_WRONLY)
total, status = 0.0, 0
for _ in range(runs):
    start = time.perf_counter()
    pid = os.posix_spawnp(argv[0], argv, os.environ,
                          file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1), (os.POSIX_SPAWN_DUP2, devnull, 2)])
    _, raw = os.waitpid(pid, 0)
    total += time.perf_counter() - start
    status = max(status, os.waitstatus_to_exitcode(raw))
print(f"{total / runs:.6f} {status}")
PY

# Peak resident set (KiB) of a command: the largest of 3 runs under GNU time.
peak_rss_kib() {
  local peak=0 run rss
  for run in 1 2 3; do
    /usr/bin/time -f %M -o "$WORK/rss" "$@" >/dev/null 2>&1 || true
    rss="$(tail -n 1 "$WORK/rss")"
    ((rss > peak)) && peak="$rss"
  done
  echo "$peak"
}

# Mean wall seconds of a command, from hyperfine when available.
mean_seconds() {
  local runs="$1"; shift
  if command -v hyperfine >/dev/null; then
    local quoted
    quoted="$(printf '%q ' "$@")"
    hyperfine --runs "$runs" --warmup 3 -N --export-json "$WORK/hyperfine.json" \
      --style none "$quoted" >/dev/null 2>&1 || hyperfine --runs "$runs" --warmup 3 \
      --export-json "$WORK/hyperfine.json" --style none "$quoted" >/dev/null 2>&1
    python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["results"][0]["mean"])' \
      "$WORK/hyperfine.json"
  else
    python3 -B "$WORK/measure.py" "$runs" "$@" | cut -d' ' -f1
  fi
}

# The counterpart of each helper and what it is.
counterpart() {
  case "$1" in
    uninstall) echo "bash $ORIGINALS/uninstall.sh --help" ;;
    update-runner) echo "python3 -B $ORIGINALS/update_runner.py --help" ;;
    update-handoff) echo "python3 -B $WORK/stubbed_original.py $ORIGINALS update_handoff update-handoff --help" ;;
    execution-activation) echo "python3 -B $WORK/stubbed_original.py $ORIGINALS execution_activation execution-activation --help" ;;
    execution-manage) echo "python3 -B $WORK/stubbed_original.py $ORIGINALS execution_manage execution-manage --help" ;;
  esac
}
describe() {
  case "$1" in
    uninstall) echo "bash uninstall.sh --help" ;;
    update-runner) echo "update_runner.py --help (all imports present)" ;;
    update-handoff) echo "import update_handoff + argparse --help; no CLI, project imports stubbed (lower bound)" ;;
    *) echo "${1//-/_}.py --help; missing project imports stubbed (lower bound)" ;;
  esac
}

# update_runner.py runs as is only with its imports (cryptography) present.
if ! python3 -B "$ORIGINALS/update_runner.py" --help >/dev/null 2>&1; then
  counterpart_update_runner="python3 -B $WORK/stubbed_original.py $ORIGINALS update_runner update-runner --help"
else
  counterpart_update_runner=""
fi

failed=0
printf '%-22s %10s %10s %9s %9s %9s  %s\n' helper "ours ms" "original ms" speedup "ours KiB" "original KiB" "counterpart"
for binary in "${BINARIES[@]}"; do
  read -r -a ours <<<"$RELEASE/$binary --help"
  read -r -a original <<<"$(counterpart "$binary")"
  what="$(describe "$binary")"
  if [[ "$binary" == update-runner && -n "$counterpart_update_runner" ]]; then
    read -r -a original <<<"$counterpart_update_runner"
    what="update_runner.py --help; missing imports stubbed (lower bound)"
  fi
  read -r _ ours_status < <(python3 -B "$WORK/measure.py" 1 "${ours[@]}")
  read -r _ original_status < <(python3 -B "$WORK/measure.py" 1 "${original[@]}")
  if [[ "$ours_status" != 0 || "$original_status" != 0 ]]; then
    echo "bench-startup: --help failed for $binary (ours $ours_status, counterpart $original_status)" >&2
    failed=1
    continue
  fi
  ours_rss="$(peak_rss_kib "${ours[@]}")"
  original_rss="$(peak_rss_kib "${original[@]}")"
  ours_s="$(mean_seconds "$RUNS_RUST" "${ours[@]}")"
  original_s="$(mean_seconds "$RUNS_PYTHON" "${original[@]}")"
  read -r ours_ms original_ms speedup verdict < <(python3 -c '
import sys
ours, original, target, rss, rss_target = map(float, sys.argv[1:])
speedup = original / ours
ok = speedup >= target and rss < rss_target
verdict = "ok" if ok else "MISSED"
print(f"{ours * 1000:.2f} {original * 1000:.2f} {speedup:.1f} {verdict}")
' "$ours_s" "$original_s" "$SPEEDUP_TARGET" "$ours_rss" "$RSS_TARGET_KIB")
  printf '%-22s %10s %10s %8sx %9s %9s  %s%s\n' "$binary" "$ours_ms" "$original_ms" "$speedup" \
    "$ours_rss" "$original_rss" "$what" "$([[ $verdict == ok ]] || echo '  <- MISSED')"
  [[ "$verdict" == ok ]] || failed=1
done

# The migrated path: what a launcher adds before the binary runs. Each
# launcher is the migration kit's own text for this host's binary (its size
# and sha256 inlined), beside a copy of the binary; `checks only` is the same
# launcher with its exec replaced by an exit, so it costs the interpreter's
# start plus the launcher's checks (uname, glibc, the sha256 of the binary).
LAUNCH="$WORK/launch"
mkdir -p "$LAUNCH"
python3 -B - "$ROOT/scripts" "$RELEASE" "$LAUNCH" <<'PY'
import os, shutil, sys
sys.path.insert(0, sys.argv[1])
import migration_kit as kit
from release_platforms import PLATFORMS
release, launch = sys.argv[2:4]
host = kit.host_platform()
for entry, binary in kit.LAUNCHERS.items():
    if entry == "execution_uninstall.py":
        continue
    staged = os.path.join(launch, host.staged_name(binary))
    shutil.copy2(os.path.join(release, binary), staged)
    recorded = {host.staged_name(binary): (os.path.getsize(staged), kit.sha256(open(staged, "rb").read()))}
    block = kit.launcher(entry, [host], recorded).decode("ascii")
    if entry in kit.SHELL_ENTRY_POINTS:
        head, tail = "#!/usr/bin/env bash\n", 'echo "the original ran" >&2; exit 3\n'
        checks = block.replace('exec -a "$0" "$binary" "$@"', "exit 0")
    else:
        head, tail = "from __future__ import annotations\n", 'raise SystemExit("the original ran")\n'
        checks = block.replace("os.execv(path, sys.argv)", "os._exit(0)")
    assert checks != block, entry
    for name, text in ((entry, block), ("checks-" + entry, checks)):
        with open(os.path.join(launch, name), "w") as stream:
            stream.write(head + text + tail)
with open(os.path.join(launch, "empty.py"), "w") as stream:
    stream.write("")
PY
echo
echo "The migrated path, per call (ms): the interpreter's start alone, the launcher's checks (interpreter start"
echo "included; the sha256 of the binary is most of the rest), the whole launcher-then-binary path, the binary alone."
printf '%-26s %12s %12s %12s %12s %14s\n' "entry point" "interpreter" "checks only" "migrated" "binary" "launcher cost"
for entry in execution_activation.py execution_manage.py update_runner.py uninstall.sh; do
  case "$entry" in
    uninstall.sh) interpreter=(bash -c :); run=(bash) binary=uninstall ;;
    *) interpreter=(python3 -B "$LAUNCH/empty.py"); run=(python3 -B) binary="${entry%.py}"; binary="${binary//_/-}" ;;
  esac
  interpreter_s="$(mean_seconds "$RUNS_PYTHON" "${interpreter[@]}")"
  checks_s="$(mean_seconds "$RUNS_PYTHON" "${run[@]}" "$LAUNCH/checks-$entry" --help)"
  migrated_s="$(mean_seconds "$RUNS_PYTHON" "${run[@]}" "$LAUNCH/$entry" --help)"
  binary_s="$(mean_seconds "$RUNS_RUST" "$RELEASE/$binary" --help)"
  python3 -c '
import sys
entry = sys.argv[1]
interpreter, checks, migrated, binary = (float(value) * 1000 for value in sys.argv[2:])
print("%-26s %12.2f %12.2f %12.2f %12.2f %14.2f" % (entry, interpreter, checks, migrated, binary, migrated - binary))
' "$entry" "$interpreter_s" "$checks_s" "$migrated_s" "$binary_s"
done

echo
echo "targets: speedup >= ${SPEEDUP_TARGET}x, peak RSS < ${RSS_TARGET_KIB} KiB;" \
  "timing by $(command -v hyperfine >/dev/null && echo hyperfine || echo 'a spawn-and-wait helper')," \
  "$RUNS_RUST runs ours, $RUNS_PYTHON runs counterpart"
if ((failed)); then
  echo "bench-startup: a target was missed" >&2
  exit 1
fi
echo "bench-startup: all targets met"
