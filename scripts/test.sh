#!/usr/bin/env bash
# Builds Weft and runs the whole test suite (lit, GoogleTest, round-trip mode,
# robustness, docs) through one ctest; prints how many passed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_BUILD_DIR:-$root/build}

bash "$root/scripts/build.sh"
cd "$build"
ctest --output-on-failure -j "${WEFT_JOBS:-2}"
