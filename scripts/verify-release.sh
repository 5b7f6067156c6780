#!/usr/bin/env bash
# Rebuilds a release's Rust helpers from the commit their provenance names and
# says, per binary, whether the shipped bytes are the rebuilt ones.
#
# Usage: bash scripts/verify-release.sh [--target T]... [--keep] PATH
#
#   PATH        a release migrated by scripts/migration-kit.sh (it holds
#               rust-helpers.json) or a dist folder as scripts/build-release.sh
#               leaves it (SHA256SUMS and provenance.json beside <target>/)
#   --target T  rebuild and compare only target T (repeatable; default: every
#               target the provenance names)
#   --keep      keep the scratch folder (its path is printed)
#
# Run from a clone of this repository that holds the commit: the script
# clones it into a scratch folder, checks the commit out there, runs that
# commit's scripts/build-release.sh (which refuses any toolchain but the one
# it pins) and prints `same <target>/<helper>` or `differs <target>/<helper>`
# for each binary, then a summary. Exit 0 when every binary is the same,
# 1 when any differs or cannot be rebuilt, 2 on a usage error.
set -euo pipefail
ROOT="$(cd -P -- "$(dirname -- "${BASH_SOURCE[0]}")/.." && pwd -P)"

usage() { sed -n '4,13s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
only=()
keep=false
while (($#)); do
  case "$1" in
    --target) (($# >= 2)) || { echo "verify-release: --target needs a target" >&2; exit 2; }
      only+=("$2"); shift 2 ;;
    --keep) keep=true; shift ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    -*) echo "verify-release: unknown option: $1" >&2; usage >&2; exit 2 ;;
    *) break ;;
  esac
done
(($# == 1)) || { usage >&2; exit 2; }
shipped_path="$(cd -P -- "$1" 2>/dev/null && pwd -P)" || { echo "verify-release: no such folder: $1" >&2; exit 1; }

listing="$(python3 -B "$ROOT/scripts/release_provenance.py" shipped "$shipped_path")" || exit 1
commit="$(sed -n 1p <<<"$listing")"
read -r -a named_targets <<<"$(sed -n 2p <<<"$listing")"
targets=()
for target in "${named_targets[@]}"; do
  if ((${#only[@]} == 0)) || [[ " ${only[*]} " == *" $target "* ]]; then targets+=("$target"); fi
done
for target in "${only[@]}"; do
  [[ " ${named_targets[*]} " == *" $target "* ]] \
    || { echo "verify-release: $target is not among the provenance's targets (${named_targets[*]})" >&2; exit 1; }
done
git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null \
  || { echo "verify-release: commit $commit is not in this clone ($ROOT); fetch it first" >&2; exit 1; }

scratch="$(mktemp -d "${TMPDIR:-/tmp}/verify-release.XXXXXX")"
if $keep; then
  echo "verify-release: scratch folder $scratch"
else
  trap 'rm -rf -- "$scratch"' EXIT
fi
echo "verify-release: rebuilding ${targets[*]} from $commit"
git -c init.defaultBranch=main -c advice.detachedHead=false clone --quiet --no-hardlinks -- "$ROOT" "$scratch/source"
git -C "$scratch/source" -c advice.detachedHead=false checkout --quiet --detach "$commit"
if ! (cd "$scratch/source" && env -u CARGO_TARGET_DIR -u CARGO_BUILD_TARGET_DIR \
  bash scripts/build-release.sh --target "${targets[@]}" >"$scratch/build.log" 2>&1); then
  tail -n 20 "$scratch/build.log" >&2
  echo "verify-release: the rebuild of $commit failed (above); nothing could be compared" >&2
  exit 1
fi

rebuilt="$scratch/source/target/dist"
same=0 differs=0
while read -r label digest _path; do
  [[ " ${targets[*]} " == *" ${label%%/*} "* ]] || continue
  if [[ -f "$rebuilt/$label" && "$digest" == "$(sha256sum -- "$rebuilt/$label" | cut -d' ' -f1)" ]]; then
    echo "same $label"; same=$((same + 1))
  else
    echo "differs $label"; differs=$((differs + 1))
  fi
done < <(tail -n +3 <<<"$listing")
echo "verify-release: $same same, $differs differ (commit $commit)"
((differs == 0 && same > 0))
