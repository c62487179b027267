#!/usr/bin/env bash
# Runs Weft's generated CUDA programs on a GPU and checks them against the
# CPU reference (weft run) of the same model, plan and dtype. Whoever next has
# a GPU runs this first.
#
#   scripts/gpu-check.sh              on a machine with Weft built and a GPU:
#                                     prepare into build/gpu-check, then run
#   scripts/gpu-check.sh prepare DIR  where Weft is built (no GPU needed):
#                                     compile every case for sm_80/sm_90,
#                                     compute the CPU references, copy the
#                                     shared libraries the programs need
#                                     beside them, and pack DIR.tar.xz
#   scripts/gpu-check.sh run DIR      on the GPU machine (needs only python3
#                                     with numpy, the CUDA driver, cuBLASLt
#                                     and NCCL): run and compare every case
#   scripts/gpu-check.sh bench DIR [attention|attention-grad|gemm]
#                                     on the GPU machine: the runtime's
#                                     attention, its backward (checked
#                                     against float64, then timed) and GEMMs
#                                     against PyTorch's
#
# The cases: the bundled GPT-2, BERT and LLaMA exports (hidden 32) and the
# same architectures exported at hidden 128 with 64-wide heads and 160
# tokens (tiles that do not divide the sequence), each on 1 rank, 2 ranks
# (tp=2 with Megatron SP) and 4 ranks (tp=2 with ring attention, cp=2), in
# f32 and bf16, plus GPT-2's bf16 training-step loss, GPT-2 and LLaMA with
# pipeline stages (pp=2 x tp=2 with SP), and training programs (GPT-2,
# dp=2 x tp=2 in f32 with ZeRO-1, in bf16 with ZeRO-1 and in f16 with loss
# scaling; LLaMA tp=2 with SP in bf16 and SGD; GPT-2 with pipeline stages:
# pp=2 x tp=2 with 1F1B, pp=2 x dp=2 with ZeRO-1 in bf16, pp=2 x tp=2 with SP
# and ZB-H1; ZeroPP over a ring; GPT-2 bf16 tp=2 with SP and LLaMA f16 cp=2 at
# heads of 64, whose attention backward runs on the tensor cores): their
# losses within 1e-4 (f32) or 2e-2 (16-bit) of weft
# train's, and the loss scale and skipped steps exactly, checked after the
# cases; WEFT_GPU_CHECK_ONLY=training prepares these alone, and
# WEFT_GPU_CHECK_CASES=REGEX only the forward cases it matches). Ranks run as threads
# sharing GPU 0 (the in-process device communicator). f32 must be within
# 1e-5 of the CPU output and bf16 within 2e-2 (max |gpu - cpu| / max |cpu|).
# Then the watchdog: a 4-rank program with one rank stalled must fail
# within its --collective-timeout, naming the rank. With more than one GPU the
# 2-rank programs also run as processes over NCCL (torchrun's environment).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_BUILD_DIR:-$root/build}
python=${WEFT_PYTHON:-/usr/bin/python3}

prepare() {
  local dir=$1
  local weft=$build/bin/weft
  [[ -x $weft ]] || { echo "error: $weft not found: build Weft first (scripts/build.sh)" >&2; exit 1; }
  rm -rf "$dir" && mkdir -p "$dir/cases" "$dir/lib"
  dir=$(cd "$dir" && pwd)
  local work
  work=$(mktemp -d)
  trap 'rm -rf "$work"' RETURN
  cmake --install "$build" --prefix "$work/prefix" >/dev/null

  # The bundled models, and the same architectures at a size where tiles
  # and heads look like a real model's.
  mkdir -p "$work/models/small" "$work/models/medium"
  cp -r "$root/test/models/gpt2" "$root/test/models/bert" "$root/test/models/llama" "$work/models/small/"
  (cd "$root/test/models" && "$python" - "$work/models/medium" >/dev/null <<'EOF'
import sys
import export_models as e
e.HIDDEN, e.HEADS, e.LAYERS, e.VOCAB, e.MAX_SEQ = 128, 2, 1, 256, 256
e.BATCH, e.SEQ, e.HEAD_DIM = 2, 160, 64
e.main(sys.argv[1])
EOF
  )

  local cases=()
  for size in small medium; do
    for model in gpt2 bert llama; do
      for plan in "tp=1" "tp=2,sp=1" "tp=2,cp=2"; do
        [[ $size == medium && $plan == "tp=2,sp=1" ]] && continue
        for dtype in f32 bf16; do
          cases+=("$size $model $plan $dtype")
        done
      done
    done
  done
  cases+=("small gpt2 tp=2,sp=1 bf16 loss")
  # Pipeline stages: each stage's CUDA function on the rank's device, the
  # activations through the host (cuda::pipelineProgramMain).
  cases+=("small gpt2 pp=2,tp=2,sp=1 f32" "small gpt2 pp=2,tp=2,sp=1 bf16" "small llama pp=2,tp=2,sp=1 f32")
  # WEFT_GPU_CHECK_ONLY=training prepares the training programs alone (a
  # few minutes instead of most of an hour on two cores).
  [[ ${WEFT_GPU_CHECK_ONLY:-} == training ]] && cases=()
  # WEFT_GPU_CHECK_CASES=REGEX keeps the forward cases whose names (as the
  # summary prints them, e.g. medium-gpt2-tp_2_cp_2-f32) match it.
  if [[ -n ${WEFT_GPU_CHECK_CASES:-} ]]; then
    local kept=()
    for spec in "${cases[@]}"; do
      read -r size model plan dtype loss <<<"$spec"
      [[ "$size-$model-${plan//[=,]/_}-$dtype${loss:+-loss}" =~ $WEFT_GPU_CHECK_CASES ]] && kept+=("$spec")
    done
    cases=("${kept[@]}")
  fi

  local failed=0
  for spec in "${cases[@]}"; do
    read -r size model plan dtype loss <<<"$spec"
    local name="$size-$model-${plan//[=,]/_}-$dtype${loss:+-loss}"
    local src="$work/models/$size/$model"
    local out="$dir/cases/$name"
    mkdir -p "$out/reference"
    local inputs=()
    for pb in "$src"/test_data_set_0/input_*.pb; do
      local npy="$out/$(basename "${pb%.pb}").npy"
      "$python" -c "import sys, numpy, onnx; from onnx import numpy_helper; t = onnx.TensorProto(); t.ParseFromString(open(sys.argv[1], 'rb').read()); numpy.save(sys.argv[2], numpy_helper.to_array(t))" "$pb" "$npy"
      inputs+=("$npy")
    done
    local flags=(--plan-spec "$plan" --dtype "$dtype")
    if [[ -n ${loss:-} ]]; then
      "$python" -c "import sys, numpy; x = numpy.load(sys.argv[1]); numpy.save(sys.argv[2], (x.astype(numpy.int64) + 1) % 64)" "${inputs[0]}" "$out/labels.npy"
      inputs+=("$out/labels.npy")
      flags+=(--loss)
    fi
    local runIn=()
    for npy in "${inputs[@]}"; do runIn+=(-i "$npy"); done
    if ! "$weft" compile "$src/$model-opset17.onnx" "${flags[@]}" --target cuda -o "$work/$name" \
        --build --runtime-prefix "$work/prefix" >"$work/$name.log" 2>&1 ||
       ! "$weft" run "$src/$model-opset17.onnx" "${flags[@]}" "${runIn[@]}" \
        -o "$out/reference" --output-format npy >>"$work/$name.log" 2>&1; then
      echo "FAILED to prepare $name:" >&2
      cat "$work/$name.log" >&2
      failed=1
      continue
    fi
    cp "$work/$name/build/program" "$out/program"
    strip "$out/program"
    cp -r "$work/$name/weights" "$out/weights"
    local ranks
    ranks=$("$python" -c "import sys, math; print(math.prod(int(f.split('=')[1]) for f in sys.argv[1].split(',') if f.split('=')[0] in ('tp', 'dp', 'cp', 'pp')))" "$plan")
    printf '%s %s %s\n' "$ranks" "$dtype" "$(basename -a "${inputs[@]}" | tr '\n' ' ')" >"$out/case.txt"
    echo "prepared $name ($ranks ranks)"
  done

  # Training programs (weft compile --train --target cuda) for GPT-2 under
  # dp=2 x tp=2, and weft train's log of the same run, whose step lines the
  # GPU's must match: f32 with ZeRO-1 and AdamW; bf16 compute with f32 master
  # weights (ZeRO-1); f16 with dynamic loss scaling (window 2, so that the
  # scale both falls and grows in 5 steps).
  "$python" -c "import sys, numpy; numpy.save(sys.argv[1], (numpy.arange(4000) * 37 % 64).astype(numpy.uint16))" "$work/tokens.npy"
  local trainCases=(
    "gpt2-dp_2_tp_2_zero_1 --plan-spec dp=2,tp=2,zero=1 --optimizer adamw --steps 3 --grad-accum 2 --lr 0.01 --warmup 1 --min-lr 0.001"
    "gpt2-bf16-dp_2_tp_2_zero_1 --dtype bf16 --plan-spec dp=2,tp=2,zero=1 --optimizer adamw --steps 4 --grad-accum 2 --lr 0.01 --warmup 1 --min-lr 0.001"
    "gpt2-f16-dp_2_tp_2 --dtype f16 --loss-scale-window 2 --plan-spec dp=2,tp=2 --optimizer adamw --steps 5 --lr 0.003"
    "llama-bf16-tp_2 --dtype bf16 --plan-spec tp=2,sp=1 --optimizer sgd --momentum 0.9 --steps 3 --lr 0.05"
    # Pipeline stages: each stage's forward, backward (and weight-gradient)
    # steps and each pipeline rank's optimizer step on the device, the
    # schedule's sends through the host.
    "gpt2-pp_2_tp_2 --plan-spec pp=2,tp=2,m=2,schedule=1f1b --optimizer adamw --steps 3 --lr 0.01 --warmup 1 --min-lr 0.001"
    "gpt2-bf16-pp_2_dp_2_zero_1 --dtype bf16 --plan-spec pp=2,dp=2,m=2,schedule=1f1b,zero=1 --optimizer adamw --steps 4 --lr 0.01"
    "gpt2-pp_2_zbh1_tp_2_sp --plan-spec pp=2,m=2,schedule=zb-h1,tp=2,sp=1 --optimizer sgd --momentum 0.9 --steps 3 --lr 0.05"
    # ZeroPP's FSDP over a load-balanced ring: zigzag reduce-scatters.
    "gpt2-pp_2_cp_2_zeropp_zero_3 --plan-spec pp=2,cp=2,m=2,schedule=zeropp,zero=3 --optimizer adamw --steps 3 --lr 0.01"
    # Heads of 64 in 16 bits (the medium exports): attention's backward on
    # the tensor cores, whole and as ring steps.
    "medium_gpt2-bf16-tp_2_sp --dtype bf16 --plan-spec tp=2,sp=1 --optimizer adamw --steps 3 --lr 0.01"
    "medium_llama-f16-cp_2 --dtype f16 --plan-spec cp=2 --optimizer adamw --steps 3 --lr 0.003"
  )
  for spec in "${trainCases[@]}"; do
    local tname trainFlags model
    read -r tname trainFlags <<<"$spec"
    read -ra trainFlags <<<"$trainFlags"
    model=${tname%%-*}
    local onnx="$root/test/models/$model/$model-opset17.onnx"
    if [[ $model == medium_* ]]; then
      model=${model#medium_}
      onnx="$work/models/medium/$model/$model-opset17.onnx"
    fi
    local train="$dir/training/$tname"
    mkdir -p "$train"
    cp "$work/tokens.npy" "$train/tokens.npy"
    if "$weft" compile "$onnx" --train "${trainFlags[@]}" --target cuda \
        -o "$work/train-$tname" --build --runtime-prefix "$work/prefix" >"$work/train-$tname.log" 2>&1 &&
       "$weft" train "$onnx" --data "$train/tokens.npy" "${trainFlags[@]}" \
        >"$train/reference.log" 2>&1; then
      cp "$work/train-$tname/build/program" "$train/program"
      strip "$train/program"
      cp -r "$work/train-$tname/weights" "$train/weights"
      echo "prepared training $tname"
    else
      echo "FAILED to prepare the training program $tname:" >&2
      cat "$work/train-$tname.log" >&2
      failed=1
    fi
  done

  # The kernel benchmark (bench/cuda_kernels.cpp), when it was built.
  if [[ -x $build/bin/cuda-kernels-bench ]]; then
    cp "$build/bin/cuda-kernels-bench" "$dir/" && strip "$dir/cuda-kernels-bench"
  fi

  # The shared libraries the programs link, except the C runtime and the
  # CUDA libraries, which the GPU machine has.
  local programs=()
  for program in "$dir"/cases/*/program "$dir"/training/*/program; do
    [[ -f $program ]] && programs+=("$program")
  done
  ldd "${programs[@]}" | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*|libcudart|libcublas|libcublasLt|libnccl)\.so' |
    while read -r lib; do cp -L "$lib" "$dir/lib/"; done
  # (xz -9's 64 MiB window finds the runtime every program links once: the
  # pack is about 30 MB where xz's default makes it over the 64 MiB a device
  # call may carry.)
  XZ_OPT='-9 -T1' tar -C "$(dirname "$dir")" -cJf "$dir.tar.xz" "$(basename "$dir")"
  echo "packed $dir.tar.xz ($(du -h "$dir.tar.xz" | cut -f1)); ${#cases[@]} cases"
  return $failed
}

unpack() {
  local dir=$1
  if [[ -f $dir.tar.xz && ! -d $dir ]]; then
    tar -C "$(dirname "$dir")" -xJf "$dir.tar.xz"
  fi
  dir=$(cd "$dir" && pwd)
  # cuBLASLt and NCCL: the CUDA toolkit's, else the Python wheels'.
  local libs="$dir/lib"
  for want in libcublasLt.so.13 libnccl.so.2 libcudart.so.13; do
    local found
    found=$(find /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu /opt /usr/local/lib \
      -name "$want" 2>/dev/null | head -1 || true)
    [[ -n $found ]] && libs="$libs:$(dirname "$found")"
  done
  export LD_LIBRARY_PATH="$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

# Weft's attention and GEMMs against PyTorch's on the same GPU, one after
# the other in one run (bench/cuda_kernels.cpp, bench/cuda_torch.py).
bench() {
  local dir=$1
  shift
  unpack "$dir"
  dir=$(cd "$dir" && pwd)
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv,noheader || true
  "$dir/cuda-kernels-bench" "$@"
  "$python" "$root/bench/cuda_torch.py" "$@"
}

run() {
  local dir=$1
  unpack "$dir"
  dir=$(cd "$dir" && pwd)
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
  local gpus
  gpus=$(nvidia-smi -L 2>/dev/null | wc -l || true)

  local failed=0 passed=0
  local table=()
  compare() { # name reference-dir output-dir tolerance
    "$python" - "$@" <<'EOF'
import glob, os, sys
import numpy
name, ref, out, tol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
worst = 0.0
for r in sorted(glob.glob(os.path.join(ref, "output_*.npy"))):
    o = os.path.join(out, os.path.basename(r))
    if not os.path.exists(o):
        print("%s: %s missing" % (name, os.path.basename(r))); sys.exit(1)
    a, b = numpy.load(o).astype(numpy.float64), numpy.load(r).astype(numpy.float64)
    if a.shape != b.shape:
        print("%s: shape %s, expected %s" % (name, a.shape, b.shape)); sys.exit(1)
    if not numpy.all(numpy.isfinite(a)):
        print("%s: non-finite values" % name); sys.exit(1)
    worst = max(worst, float(numpy.abs(a - b).max() / max(numpy.abs(b).max(), 1e-30)))
print("%.2e" % worst)
sys.exit(0 if worst <= tol else 1)
EOF
  }
  # Runs one case as threads sharing GPU 0 (threads) or one process per
  # GPU over NCCL (nccl), and compares its outputs with the CPU's.
  checkCase() { # threads|nccl case-dir
    local mode=$1 case=$2
    local name ranks dtype inputs
    name=$(basename "$case")
    read -r ranks dtype inputs <"$case/case.txt"
    local tol=1e-5
    [[ $dtype == bf16 ]] && tol=2e-2
    local args=() launcher=()
    for i in $inputs; do args+=("$case/$i"); done
    [[ $mode == nccl ]] && launcher=("$python" "$root/test/tools/Inputs/torchrun-env.py" --nproc "$ranks")
    rm -rf "$case/out" && mkdir -p "$case/out"
    local start end result error
    start=$(date +%s.%N)
    if ! timeout 300 "${launcher[@]}" "$case/program" --collective-timeout 60 "$case/weights" "$case/out" \
        "${args[@]}" >"$case/$mode.log" 2>&1; then
      result="FAIL (exit): $(tail -3 "$case/$mode.log" | tr '\n' ' ')"
      failed=$((failed + 1))
    elif end=$(date +%s.%N) && error=$(compare "$name" "$case/reference" "$case/out" "$tol"); then
      result="ok   max rel error $error (<= $tol), $(awk "BEGIN {printf \"%.2f\", $end - $start}") s"
      passed=$((passed + 1))
    else
      result="FAIL $error (tolerance $tol)"
      failed=$((failed + 1))
    fi
    [[ $mode == nccl ]] && name="nccl $name"
    table+=("$(printf '%-36s %d ranks  %s' "$name" "$ranks" "$result")")
    echo "${table[-1]}"
  }
  for case in "$dir"/cases/*/; do
    [[ -d $case ]] || continue
    checkCase threads "$case"
  done

  # The watchdog: rank 3 of a 4-rank program stalls; the others must fail
  # within the 3 s timeout and the program exit non-zero, naming rank 3
  # (waited for, or, when the first to time out waits on a peer that waits
  # on rank 3 in a ring, left behind).
  local stall
  stall=$(ls -d "$dir"/cases/medium-gpt2-tp_2_cp_2-f32 2>/dev/null || true)
  if [[ -n $stall ]]; then
    local ranks dtype inputs
    read -r ranks dtype inputs <"$stall/case.txt"
    local args=()
    for i in $inputs; do args+=("$stall/$i"); done
    local start code=0
    start=$(date +%s)
    WEFT_STALL_RANK=3 timeout 120 "$stall/program" --collective-timeout 3 "$stall/weights" "$stall/out" "${args[@]}" \
      >"$dir/watchdog.log" 2>&1 || code=$?
    local took=$(($(date +%s) - start))
    cat "$dir/watchdog.log"
    if [[ $code -ne 0 && $code -ne 124 && $took -le 60 ]] && grep -Eq "waiting for rank\(s\) 3|rank\(s\) 3 did not stop" "$dir/watchdog.log"; then
      table+=("watchdog: rank 3 stalled; exit $code after $took s, naming rank 3: ok")
      passed=$((passed + 1))
    else
      table+=("watchdog: FAIL (exit $code after $took s)")
      failed=$((failed + 1))
    fi
    echo "${table[-1]}"
  fi

  # The training programs: their losses against weft train's (f32: 1e-4
  # relative, as cuBLASLt's reduction order differs from the CPU's; bf16 and
  # f16: 2e-2), and each step's loss scale and skip exactly.
  for train in "$dir"/training/*/; do
    [[ -d $train ]] || continue
    local name result
    name="training $(basename "$train")"
    local tol=1e-4
    [[ $name == *-bf16-* || $name == *-f16-* ]] && tol=2e-2
    if ! timeout 600 "$train/program" --collective-timeout 60 "$train/weights" "$train/out" "$train/tokens.npy" \
        >"$train/threads.log" 2>&1; then
      result="FAIL (exit): $(tail -3 "$train/threads.log" | tr '\n' ' ')"
      failed=$((failed + 1))
    elif result=$("$python" "$root/test/tools/Inputs/compare-losses.py" "$tol" "$train/threads.log" "$train/reference.log"); then
      result="ok   $result"
      passed=$((passed + 1))
    else
      result="FAIL $result"
      failed=$((failed + 1))
    fi
    table+=("$(printf '%-36s %s' "$name" "$result")")
    echo "${table[-1]}"
  done

  # NCCL, one process per rank, where the machine has a GPU per rank.
  if [[ $gpus -ge 2 ]]; then
    for case in "$dir"/cases/*tp_2_sp_1*/; do
      checkCase nccl "$case"
    done
  else
    table+=("nccl: not run (the machine has $gpus GPU; NCCL needs a GPU per rank)")
  fi

  echo
  echo "== summary"
  printf '%s\n' "${table[@]}"
  echo "$passed passed, $failed failed"
  [[ $failed -eq 0 ]]
}

case "${1:-all}" in
prepare) prepare "${2:?usage: gpu-check.sh prepare DIR}" ;;
run) run "${2:?usage: gpu-check.sh run DIR}" ;;
bench) bench "${2:?usage: gpu-check.sh bench DIR [attention|attention-grad|gemm]}" "${@:3}" ;;
all)
  prepare "$build/gpu-check"
  run "$build/gpu-check"
  ;;
*)
  echo "usage: gpu-check.sh [prepare DIR | run DIR]" >&2
  exit 2
  ;;
esac
