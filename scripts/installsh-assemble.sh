#!/usr/bin/env bash
# Assembles the scratch folder for scripts/installsh-compare.sh from a clone of
# the public AgentsServer repository (docs/design/upstream-comparison.md, "install.sh comparison"):
#
#   git clone https://github.com/ZhengyiLuo/AgentsServer && git -C AgentsServer \
#     checkout 61203520f1456de6b8f4c9790953a5ac7f9823a7
#   bash scripts/installsh-assemble.sh AgentsServer ../installsh-scratch /path/to/seeds/extracted
#
# Copies every file install.sh's RELEASE_FILES and TEAM_HUB_RELEASE_FILES name
# from the clone, then puts the five helper sources of release 1.0.7-beta.5
# (the originals, which the binaries port and the migration kit recognises) in
# place of the clone's, restoring update_runner.py's npm registry line from the
# clone. Files the clone does not have at that commit are reported and left
# out: scripts/installsh_release.py stands in the server's modules anyway and
# refuses a folder that lacks one the comparison runs.
set -euo pipefail
if [ $# -ne 3 ]; then
  echo "usage: $0 CLONE OUTPUT ORIGINALS_DIR" >&2
  exit 2
fi
clone="$(cd "$1" && pwd)"
output="$2"
originals="$(cd "$3" && pwd)"
[ -f "$clone/install.sh" ] || { echo "$clone holds no install.sh" >&2; exit 1; }
[ ! -e "$output" ] || { echo "$output exists; choose a new folder" >&2; exit 1; }
mkdir -p "$output/agentsdock_team_hub/migrations"
names="$(sed -n 's/^RELEASE_FILES=(\(.*\))$/\1/p' "$clone/install.sh")"
hub="$(sed -n '/^TEAM_HUB_RELEASE_FILES=(/,/^)/p' "$clone/install.sh" | sed '1d;$d')"
missing=0
for name in $names; do
  if [ -f "$clone/$name" ]; then cp "$clone/$name" "$output/$name"; else echo "not in the clone: $name"; missing=1; fi
done
for name in $hub; do
  if [ -f "$clone/agentsdock_team_hub/$name" ]; then
    cp "$clone/agentsdock_team_hub/$name" "$output/agentsdock_team_hub/$name"
  else
    echo "not in the clone: agentsdock_team_hub/$name"; missing=1
  fi
done
registry_line="$(grep '^NPM_REGISTRY_BASE = ' "$clone/update_runner.py" || true)"
for name in execution_activation.py execution_manage.py update_runner.py update_handoff.py uninstall.sh; do
  cp "$originals/$name" "$output/$name"
done
if [ -n "$registry_line" ]; then
  python3 - "$output/update_runner.py" "$registry_line" <<'PY'
import sys
path, line = sys.argv[1], sys.argv[2]
text = open(path, encoding="utf-8").read().splitlines(keepends=True)
text = [line + "\n" if item.startswith("NPM_REGISTRY_BASE = ") else item for item in text]
open(path, "w", encoding="utf-8").write("".join(text))
PY
fi
echo "assembled $output (missing files: $missing)"
