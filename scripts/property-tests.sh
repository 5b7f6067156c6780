#!/usr/bin/env bash
# The long run of the property tests: the same tests the suite runs with a
# few hundred cases each, here with PROPTEST_CASES (default 5000) cases of
# generated JSON, release archives, manifests and handoff files. The ones
# compared with the Python originals need AGENTS_ORIGINALS_DIR (default
# ../shared/seeds/extracted), as in the suite.
#
#   bash scripts/property-tests.sh          # 5000 cases each
#   PROPTEST_CASES=50000 bash scripts/property-tests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
export PROPTEST_CASES="${PROPTEST_CASES:-5000}"
echo "property tests with $PROPTEST_CASES cases each"
# Each crate's one test binary, filtered to the property tests' modules.
cargo test --release -p python-compat --test it -- json_properties::
cargo test --release -p agents-common --test it -- handoff_properties::
cargo test --release -p update-runner --test it -- release_archive_properties:: \
  release_archive::generated release_manifest::generated
