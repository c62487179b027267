#!/usr/bin/env bash
# Builds the libFuzzer targets (the ONNX importer, the tensor file readers,
# the TCP store, the config.json reader), weft and weft-opt with clang (ASan
# + coverage) in
# $WEFT_FUZZ_BUILD_DIR (build-fuzz/) and runs each fuzzer on a corpus seeded
# from the test files. Deterministic by default (fixed seed and run count);
# WEFT_FUZZ_ARGS overrides for every fuzzer, e.g.
# WEFT_FUZZ_ARGS="-max_total_time=600" for a longer search.
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
ninja -C "$build" -j "${WEFT_JOBS:-2}" onnx-import-fuzzer npy-fuzzer store-fuzzer \
  hf-config-fuzzer weft weft-opt

corpus=$(mktemp -d)
npy_corpus=$(mktemp -d)
store_corpus=$(mktemp -d)
config_corpus=$(mktemp -d)
trap 'rm -rf "$corpus" "$npy_corpus" "$store_corpus" "$config_corpus"' EXIT
cp "$root"/test/models/*/*.onnx "$corpus"/
for test in test_matmul_2d test_softmax_axis_1 test_layer_normalization_4d_axis1 \
            test_slice test_gather_0 test_reshape_reduced_dims test_where_example \
            test_sce_mean_weight test_nllloss_NCd1d2_with_weight_reduction_mean \
            test_sce_mean_log_prob test_gather_elements_negative_indices \
            test_conv_with_strides_and_asymmetric_padding test_conv_with_autopad_same \
            test_scatternd test_scatternd_multiply; do
  model=/usr/share/libonnx-testdata/data/node/$test/model.onnx
  [ -f "$model" ] && cp "$model" "$corpus/$test.onnx"
done
# Models that call local functions, for the inliner (lib/Import/OnnxFunctions.cpp),
# models with If nodes, for the importer's inlineIf, and weights with a copy of
# their transpose, for the tie the importer recovers.
for writer in local_functions if_models tied_copies; do
  written=$(mktemp -d)
  /usr/bin/python3 "$root/test/Import/Inputs/$writer.py" "$written" --no-torch
  for model in "$written"/*.onnx; do
    cp "$model" "$corpus/$writer-$(basename "$model")"
  done
  rm -rf "$written"
done
cd "$corpus"
# Leak checks are off: containing a crash inside libonnx (lib/Import/OnnxModel.cpp)
# leaks what it had allocated. The ASan build of the test suite checks Weft's leaks.
# User poisoning is off too: Weft's instrumented code and Debian's uninstrumented
# libMLIR share the context's bump allocators, and a slab that Weft's inlined
# allocator starts (an ExternalDataAttr's storage, say) is poisoned, which only
# instrumented code unpoisons, so libMLIR's next string in it read as a
# use-after-poison (an external-data seed showed it). Real overflows are still
# caught by ASan's own redzones.
ASAN_OPTIONS=detect_leaks=0:allow_user_poisoning=0 "$build/bin/onnx-import-fuzzer" \
  ${WEFT_FUZZ_ARGS:--seed=1 -runs=4000} -rss_limit_mb=4096 -timeout=30 "$corpus" 2>&1 |
  tail -80

# The readers of .npy, .pb and .safetensors files, seeded with the test inputs
# and two small checkpoints (f32 and bf16).
cp "$root"/test/Import/Inputs/*.npy "$npy_corpus"/
/usr/bin/python3 - "$npy_corpus" <<'PY'
import json, struct, sys
for name, dtype, data in (("f32", "F32", struct.pack("<2f", 1.5, -2.0)),
                          ("bf16", "BF16", struct.pack("<2H", 0x3FC0, 0xC000))):
    header = json.dumps({"__metadata__": {"format": "pt"},
                         "w": {"dtype": dtype, "shape": [1, 2],
                               "data_offsets": [0, len(data)]}}).encode()
    with open("%s/%s.safetensors" % (sys.argv[1], name), "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + data)
PY
for pb in "$root"/test/models/*/test_data_set_0/*.pb; do
  cp "$pb" "$npy_corpus/$(basename "$(dirname "$(dirname "$pb")")")-$(basename "$pb")"
done
"$build/bin/npy-fuzzer" ${WEFT_FUZZ_ARGS:--seed=1 -runs=20000} -rss_limit_mb=2048 \
  -timeout=30 "$npy_corpus" 2>&1 | tail -20

# The TCP store: frames from strangers and from members (an odd first byte).
printf 'G\0\0\0\0\0\0\0\0\377\377\377\377\377\377\377\357' > "$store_corpus/wrap"
printf 'S\1\0\0\0\0\0\0\0k\1\0\0\0\0\0\0\0v' > "$store_corpus/set"
printf 'G\5\0\0\0\0\0\0\0abort\0\0\0\0\0\0\0\0' > "$store_corpus/get"
"$build/bin/store-fuzzer" ${WEFT_FUZZ_ARGS:--seed=1 -runs=5000} -rss_limit_mb=2048 \
  -timeout=30 "$store_corpus" 2>&1 | tail -20

# Hugging Face config.json files, seeded with the published ones the tests read.
cp "$root"/test/Planner/Inputs/hf/*.json "$config_corpus"/
"$build/bin/hf-config-fuzzer" ${WEFT_FUZZ_ARGS:--seed=1 -runs=20000} -rss_limit_mb=2048 \
  -timeout=30 "$config_corpus" 2>&1 | tail -20
