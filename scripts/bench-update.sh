#!/usr/bin/env bash
# Update benchmark: the original's own download-verify-extract path
# (update_runner.py, run as is) against ours (bins/update-runner/examples/bench_update.rs,
# the same library calls update-runner makes), side by side on the same
# release: a freshly built archive just under the 200 MiB download limit, a
# manifest signed with a throwaway Ed25519 key, both served by one local HTTP
# server on 127.0.0.1.
#
# Each side runs BENCH_RUNS times (alternating, into a fresh directory each
# time); the report shows the median wall time and the largest peak RSS (GNU
# time's %M). Targets: ours takes at most half of Python's wall time and
# peaks at or below 24 MiB. Exits 1 if a target is missed, 2 on setup errors.
#
# Both sides download and extract into a tmpfs (/dev/shm when it has room,
# else BENCH_RUN_DIR): on a disk that has just seen thousands of files deleted
# by the previous run, ext4's inode allocator (its "recently deleted" scan)
# costs seconds per run on either side and drowns the difference between the
# two implementations; a single real update never starts in that state.
#
# Environment: AGENTS_ORIGINALS_DIR (or AGENTS_SEEDS_DIR; default: <repo>/../shared/seeds/extracted) locates the
# originals; BENCH_RUNS (default 3); BENCH_RUN_DIR (default /dev/shm) where the
# runs write; SPEEDUP_TARGET (2) and RSS_TARGET_KIB (24576) set the targets;
# BENCH_KEEP=1 keeps the work directories.
set -euo pipefail

ROOT="$(git -C "$(dirname "$0")" rev-parse --show-toplevel)"
ORIGINALS="${AGENTS_ORIGINALS_DIR:-${AGENTS_SEEDS_DIR:-$ROOT/../shared/seeds/extracted}}"
RUNS="${BENCH_RUNS:-3}"
SPEEDUP_TARGET="${SPEEDUP_TARGET:-2}"
RSS_TARGET_KIB="${RSS_TARGET_KIB:-24576}"
VERSION=1.2.3
MAX_ARCHIVE_BYTES=$((200 * 1024 * 1024))

fail_setup() { echo "bench-update: $*" >&2; exit 2; }
[[ -f "$ORIGINALS/update_runner.py" ]] || fail_setup "originals not found at $ORIGINALS (set AGENTS_ORIGINALS_DIR)"
command -v python3 >/dev/null || fail_setup "python3 is required"
python3 -c 'import cryptography' 2>/dev/null || fail_setup "python3 needs the cryptography package (the original imports it)"
[[ -x /usr/bin/time ]] || fail_setup "GNU time (/usr/bin/time) is required for peak RSS"
command -v tar >/dev/null && command -v gzip >/dev/null || fail_setup "tar and gzip are required"

cd "$ROOT"
echo "bench-update: building the release example" >&2
cargo build --release -p update-runner --example bench_update
TARGET_DIR="$(cargo metadata --format-version 1 --no-deps \
  | python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
OURS="$TARGET_DIR/release/examples/bench_update"

WORK="$(mktemp -d)"
RUN_PARENT="${BENCH_RUN_DIR:-/dev/shm}"
# Two extracted trees and an archive at a time: about 1.2 GiB.
if [[ ! -d "$RUN_PARENT" || ! -w "$RUN_PARENT" ]] \
  || (($(df -Pk "$RUN_PARENT" | awk 'NR == 2 { print $4 }') < 2 * 1024 * 1024)); then
  RUN_PARENT="$WORK"
fi
RUNS_DIR="$(mktemp -d -p "$RUN_PARENT" bench-update-runs.XXXXXX)"
SERVER_PID=""
cleanup() {
  if [[ -n "$SERVER_PID" ]]; then kill "$SERVER_PID" 2>/dev/null || true; fi
  if [[ "${BENCH_KEEP:-0}" == 1 ]]; then
    echo "bench-update: kept $WORK and $RUNS_DIR" >&2
  else
    rm -rf "$RUNS_DIR" "$WORK"
  fi
}
trap cleanup EXIT

# --- The release: a realistic tree (thousands of small text files in nested
# directories, a few large incompressible binaries), packed like a release.
echo "bench-update: building the release archive" >&2
python3 - "$WORK/tree/agents-server-$VERSION" "$VERSION" <<'PY'
import os, random, sys
root, version = sys.argv[1], sys.argv[2]
rng = random.Random(6)
os.makedirs(root)
with open(os.path.join(root, "install.sh"), "w") as script:
    script.write("#!/bin/sh\necho installing\n")
os.chmod(os.path.join(root, "install.sh"), 0o755)
with open(os.path.join(root, "VERSION"), "w") as stream:
    stream.write(version + "\n")
words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(2, 12)))
         for _ in range(4000)]
corpus = []
size = 0
while size < 8 * 1024 * 1024:
    line = " ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) + "\n"
    corpus.append(line)
    size += len(line)
corpus = "".join(corpus).encode()
# About 120 MiB of source-like text in 12,000 files...
for index in range(12_000):
    directory = os.path.join(root, "lib", f"pkg{index % 300:03d}", f"mod{index % 7}")
    os.makedirs(directory, exist_ok=True)
    length = rng.randint(1_000, 20_000)
    start = rng.randrange(len(corpus) - length)
    with open(os.path.join(directory, f"file{index:05d}.py"), "wb") as stream:
        stream.write(corpus[start:start + length])
# ...and 140 MiB of compiled, incompressible payload.
os.makedirs(os.path.join(root, "bin"))
for index in range(7):
    with open(os.path.join(root, "bin", f"payload{index}.bin"), "wb") as stream:
        for _ in range(20):
            stream.write(os.urandom(1024 * 1024))
PY
DOWNLOAD="$WORK/www/releases/download/v$VERSION"
mkdir -p "$DOWNLOAD"
ARCHIVE="$DOWNLOAD/agents-server-$VERSION.tar.gz"
tar -C "$WORK/tree" --sort=name --owner=0 --group=0 --numeric-owner -cf - "agents-server-$VERSION" \
  | gzip -6 >"$ARCHIVE"
rm -rf "$WORK/tree"
ARCHIVE_BYTES="$(stat -c %s "$ARCHIVE")"
((ARCHIVE_BYTES <= MAX_ARCHIVE_BYTES)) || fail_setup "archive is $ARCHIVE_BYTES bytes, over the download limit"

# --- One HTTP server on 127.0.0.1 for both sides (an ephemeral port).
python3 - "$WORK/www" "$WORK/port" <<'PY' &
import functools, http.server, os, sys
directory, port_file = sys.argv[1:]
class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *arguments):
        pass
server = http.server.ThreadingHTTPServer(
    ("127.0.0.1", 0), functools.partial(Quiet, directory=directory))
with open(port_file + ".tmp", "w") as stream:
    stream.write(str(server.server_address[1]))
os.rename(port_file + ".tmp", port_file)
server.serve_forever()
PY
SERVER_PID=$!
for _ in $(seq 100); do [[ -s "$WORK/port" ]] && break; sleep 0.1; done
[[ -s "$WORK/port" ]] || fail_setup "the local HTTP server did not start"
BASE="http://127.0.0.1:$(cat "$WORK/port")/releases"

# --- A manifest signed with a throwaway key, published beside the archive.
python3 - "$WORK" "$DOWNLOAD" "$VERSION" "$ARCHIVE" <<'PY'
import hashlib, json, sys
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
work, download, version, archive = sys.argv[1:]
key = Ed25519PrivateKey.generate()
with open(f"{work}/release-key.pem", "wb") as stream:
    stream.write(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
digest = hashlib.sha256()
with open(archive, "rb") as stream:
    for chunk in iter(lambda: stream.read(1 << 20), b""):
        digest.update(chunk)
with open(f"{work}/port") as stream:
    base = f"http://127.0.0.1:{stream.read().strip()}/releases"
name = f"agents-server-{version}.tar.gz"
manifest = {"schema": 1, "version": version, "archive": {
    "name": name, "url": f"{base}/download/v{version}/{name}", "sha256": digest.hexdigest()}}
content = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
with open(f"{download}/agents-server-manifest.json", "wb") as stream:
    stream.write(content)
with open(f"{download}/agents-server-manifest.sig", "wb") as stream:
    stream.write(key.sign(content))
PY

# --- The original's path, as run_update does it: manifest and signature,
# verify_manifest, download_bytes of the archive into memory, SHA-256 check,
# write, safe_extract. Only RELEASE_BASE is pointed at the local server.
cat >"$WORK/original_path.py" <<'PY'
import hashlib, sys
from pathlib import Path
originals, base, version, public_key, work_dir = sys.argv[1:]
sys.path.insert(0, originals)
import update_runner as original
original.RELEASE_BASE = base
manifest_bytes = original.download_bytes(original.release_manifest_url(version), original.MAX_METADATA_BYTES)
signature = original.download_bytes(original.release_signature_url(version), original.MAX_METADATA_BYTES)
manifest = original.verify_manifest(manifest_bytes, signature, Path(public_key), expected_version=version)
root = Path(work_dir)
archive_path = root / str(manifest["archive"]["name"])
archive_bytes = original.download_bytes(str(manifest["archive"]["url"]), original.MAX_ARCHIVE_BYTES, timeout=120.0)
digest = hashlib.sha256(archive_bytes).hexdigest()
if digest != manifest["archive"]["sha256"]:
    raise RuntimeError("release archive checksum does not match the signed manifest")
archive_path.write_bytes(archive_bytes)
print(original.safe_extract(archive_path, root / "extracted"))
PY

KEY="$WORK/release-key.pem"
# run SIDE INDEX: one timed run into a fresh directory; appends "wall rss".
run() {
  local side=$1 index=$2 dir="$RUNS_DIR/run-$1-$2"
  mkdir "$dir"
  local command
  if [[ $side == python ]]; then
    command=(python3 -B "$WORK/original_path.py" "$ORIGINALS" "$BASE" "$VERSION" "$KEY" "$dir")
  else
    command=("$OURS" "$BASE" "$VERSION" "$KEY" "$dir")
  fi
  # Start each run with no dirty pages of earlier runs, so neither side pays
  # for the other's writeback.
  sync
  if ! /usr/bin/time -f "%e %M" -o "$WORK/time-$side-$index" "${command[@]}" >"$WORK/out-$side-$index"; then
    echo "bench-update: the $side side failed:" >&2
    cat "$WORK/time-$side-$index" >&2
    exit 1
  fi
  cat "$WORK/time-$side-$index" >>"$WORK/results-$side"
  if ((index == RUNS)); then
    mv "$dir" "$RUNS_DIR/last-$side"
  else
    rm -rf "$dir"
  fi
}

echo "bench-update: archive $((ARCHIVE_BYTES / 1024 / 1024)) MiB, $RUNS runs per side in $RUNS_DIR" >&2
for index in $(seq "$RUNS"); do
  run python "$index"
  run rust "$index"
done

# Both sides must have produced the same release tree.
if ! diff -r "$RUNS_DIR/last-python/extracted" "$RUNS_DIR/last-rust/extracted" >/dev/null; then
  echo "bench-update: the extracted trees differ" >&2
  exit 1
fi
for side in python rust; do
  [[ "$(cat "$WORK/out-$side-$RUNS")" == "$RUNS_DIR/run-$side-$RUNS/extracted/agents-server-$VERSION" ]] \
    || { echo "bench-update: unexpected $side source directory: $(cat "$WORK/out-$side-$RUNS")" >&2; exit 1; }
done

summary() { # SIDE -> "median_wall max_rss_kib"
  python3 - "$WORK/results-$1" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if line.strip()]
print(statistics.median(float(row[0]) for row in rows), max(int(row[1]) for row in rows))
PY
}
read -r PY_WALL PY_RSS < <(summary python)
read -r RS_WALL RS_RSS < <(summary rust)

python3 - "$PY_WALL" "$PY_RSS" "$RS_WALL" "$RS_RSS" "$SPEEDUP_TARGET" "$RSS_TARGET_KIB" <<'PY'
import sys
py_wall, py_rss, rs_wall, rs_rss = float(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
speedup_target, rss_target = float(sys.argv[5]), int(sys.argv[6])
print(f"{'side':<8} {'wall (median)':>14} {'peak RSS':>12}")
print(f"{'python':<8} {py_wall:>13.2f}s {py_rss / 1024:>9.1f} MiB")
print(f"{'rust':<8} {rs_wall:>13.2f}s {rs_rss / 1024:>9.1f} MiB")
speedup = py_wall / rs_wall if rs_wall > 0 else float("inf")
print(f"speedup {speedup:.2f}x (target >= {speedup_target:g}x), "
      f"peak {rs_rss / 1024:.1f} MiB (target <= {rss_target / 1024:g} MiB)")
PY
MISSED=0
python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) * float(sys.argv[3]) <= float(sys.argv[2]) else 1)" \
  "$RS_WALL" "$PY_WALL" "$SPEEDUP_TARGET" || { echo "bench-update: MISSED the wall-time target" >&2; MISSED=1; }
((RS_RSS <= RSS_TARGET_KIB)) || { echo "bench-update: MISSED the peak memory target" >&2; MISSED=1; }
exit "$MISSED"
