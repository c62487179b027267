#!/usr/bin/env bash
# Builds the ONNX importer's libFuzzer target, weft and weft-opt with clang (ASan +
# coverage) in $WEFT_FUZZ_BUILD_DIR (build-fuzz/) and runs the fuzzer on a corpus seeded from the test
# models. Deterministic by default (fixed seed and run count); WEFT_FUZZ_ARGS
# overrides, e.g. WEFT_FUZZ_ARGS="-max_total_time=600" for a longer search.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_FUZZ_BUILD_DIR:-$root/build-fuzz}

bash "$root/scripts/install-deps.sh"
if [ ! -f "$build/build.ninja" ]; then
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DWEFT_BUILD_FUZZERS=ON
fi
# The tools too: clang in C++17 mode refuses what GCC lets through (a lambda
# capturing a structured binding), and the main build is GCC's.
ninja -C "$build" -j "${WEFT_JOBS:-2}" onnx-import-fuzzer weft weft-opt

corpus=$(mktemp -d)
trap 'rm -rf "$corpus"' EXIT
cp "$root"/test/models/*/*.onnx "$corpus"/
for test in test_matmul_2d test_softmax_axis_1 test_layer_normalization_4d_axis1 \
            test_slice test_gather_0 test_reshape_reduced_dims test_where_example; do
  model=/usr/share/libonnx-testdata/data/node/$test/model.onnx
  [ -f "$model" ] && cp "$model" "$corpus/$test.onnx"
done
cd "$corpus"
# Leak checks are off: containing a crash inside libonnx (lib/Import/OnnxModel.cpp)
# leaks what it had allocated. The ASan build of the test suite checks Weft's leaks.
ASAN_OPTIONS=detect_leaks=0 "$build/bin/onnx-import-fuzzer" \
  ${WEFT_FUZZ_ARGS:--seed=1 -runs=4000} -rss_limit_mb=4096 -timeout=30 "$corpus" 2>&1 |
  tail -80
