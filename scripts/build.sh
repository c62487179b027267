#!/usr/bin/env bash
# Installs what is missing, configures (once) and builds Weft into $WEFT_BUILD_DIR (build/).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_BUILD_DIR:-$root/build}

bash "$root/scripts/install-deps.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE="${WEFT_BUILD_TYPE:-Release}" \
    ${WEFT_CMAKE_ARGS:-}
fi
ninja -C "$build" -j "${WEFT_JOBS:-2}"
bash "$root/scripts/install-python.sh"
