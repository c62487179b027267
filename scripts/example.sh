#!/usr/bin/env bash
# Builds Weft and runs its main jobs on bundled examples. First the planner:
# LLaMA-3 70B on a bundled cluster of 64 DGX H100 nodes, the best plans as a
# table, why the first wins, and an HTML report. Then one GPT-2 block,
# partitioned by hand for 2-way tensor parallelism, canonicalized by weft-opt,
# with the sharding rule and cost of every op the planner will read; then a
# small GPT-2 export imported, raised and run against torch, partitioned, and
# compiled for the CPU and run on 4 simulated devices; a plan where the search
# picks pipeline stages, run on 4 simulated devices; and training.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_BUILD_DIR:-$root/build}

bash "$root/scripts/build.sh"
mkdir -p "$build/examples"
echo "== weft plan --model llama3-70b --cluster examples/clusters/dgx-h100-64-nodes.txtpb --global-batch 512"
"$build/bin/weft" plan --model llama3-70b \
  --cluster "$root/examples/clusters/dgx-h100-64-nodes.txtpb" --global-batch 512 \
  --explain --report "$build/examples/plan.html" --json "$build/examples/plan.json"
echo "== open $build/examples/plan.html for the timeline, memory and time charts"

example="$root/examples/gpt2_block_tp2.mlir"
out="$build/examples/gpt2_block_tp2.canonical.mlir"
mkdir -p "$(dirname "$out")"
echo "== weft-opt -weft-canonicalize -weft-print-op-facts $(basename "$example")"
"$build/bin/weft-opt" "$example" -weft-canonicalize -weft-print-op-facts \
  -mlir-print-op-on-diagnostic=false -o "$out" 2>&1 |
  sed -n 's/^.*gpt2_block_tp2.mlir:\([0-9]*\):[0-9]*: remark: /line \1: /p'
echo "== canonical module written to $out ($(grep -c 'weft\.' "$out") weft ops)"

# The importer and the CPU backend on a real export: a small GPT-2 written by
# torch.onnx.export with dynamic axes, imported with its ops raised, then run
# and checked against torch's outputs.
model="$root/test/models/gpt2/gpt2-opset17-dynamic.onnx"
echo "== weft import $(basename "$model") --batch-size 2 --seq-len 8 --stats"
"$build/bin/weft" import "$model" --batch-size 2 --seq-len 8 --no-weights --stats \
  -o "$build/examples/gpt2.mlir"
echo "== weft run $(basename "$model") --check (against torch)"
"$build/bin/weft" run "$model" --data-dir "$root/test/models/gpt2/test_data_set_0" \
  --check --rtol 1e-4 --atol 1e-5

# The same model partitioned for 2-way data x 2-way tensor (Megatron SP) x 2-way
# ring parallelism and run on 8 simulated devices (threads), checked again.
echo "== weft run $(basename "$model") --devices 8 --plan-spec dp=2,tp=2,sp=1,cp=2 --check"
"$build/bin/weft" run "$model" --data-dir "$root/test/models/gpt2/test_data_set_0" \
  --devices 8 --plan-spec "dp=2,tp=2,sp=1,cp=2" --check --rtol 1e-4 --atol 1e-5

# The same model compiled: the planner evaluates the chosen plan (2-way tensor
# parallelism with Megatron SP x a load-balanced ring of 2) on 4 GPUs and
# writes it as JSON; weft compile emits the rank program for the CPU against
# the installed runtime and builds it; the program runs 4 simulated devices
# (threads) and its output is checked against weft run under the same plan.
out="$build/examples/gpt2-compiled"
rm -rf "$out" && mkdir -p "$out/result" "$out/reference"
plan="$build/examples/gpt2-plan.json"
echo "== weft plan $(basename "$model") --cluster a100-80g:4x1 --evaluate dp=1,tp=2,pp=1,cp=2,sp=1,mbs=2 --json"
"$build/bin/weft" plan "$model" --cluster a100-80g:4x1 --global-batch 2 --seq-len 8 \
  --evaluate "dp=1,tp=2,pp=1,cp=2,sp=1,mbs=2" --json "$plan" | tail -2
cmake --install "$build" --prefix "$out/runtime" > /dev/null
echo "== weft compile $(basename "$model") --plan $(basename "$plan") --target cpu --build"
"$build/bin/weft" compile "$model" --batch-size 2 --seq-len 8 --plan "$plan" --target cpu \
  -o "$out/project" --build --runtime-prefix "$out/runtime" | grep -v "^\[" 
python=/usr/bin/python3
"$python" - "$root/test/models/gpt2/test_data_set_0/input_0.pb" "$out/input_0.npy" <<'PY'
import sys, numpy, onnx
from onnx import numpy_helper
tensor = onnx.TensorProto()
tensor.ParseFromString(open(sys.argv[1], "rb").read())
numpy.save(sys.argv[2], numpy_helper.to_array(tensor))
PY
echo "== the compiled program on 4 simulated devices"
"$out/project/build/program" "$out/project/weights" "$out/result" "$out/input_0.npy"
"$build/bin/weft" run "$model" --batch-size 2 --seq-len 8 -i "$out/input_0.npy" --plan "$plan" \
  -o "$out/reference" --output-format npy
"$python" - "$out/result/output_0.npy" "$out/reference/output_0.npy" <<'PY'
import sys, numpy
a, b = numpy.load(sys.argv[1]), numpy.load(sys.argv[2])
difference = float(abs(a - b).max() / abs(b).max())
print("== compiled program vs weft run: max relative difference %g (limit 1e-5)" % difference)
sys.exit(0 if difference <= 1e-5 else 1)
PY

# Training: the bundled GPT-2 learns a repeating token pattern on 4 simulated
# devices (2-way data x 2-way tensor parallel); the loss falls every step.
"${WEFT_NUMPY_PYTHON:-/usr/bin/python3}" -c "import numpy as n; n.save('$build/examples/tokens.npy', n.tile(n.arange(16, dtype=n.uint16), 64))"
echo "== weft train gpt2-opset17.onnx --plan-spec dp=2,tp=2 --steps 12"
"$build/bin/weft" train "$root/test/models/gpt2/gpt2-opset17.onnx" \
  --data "$build/examples/tokens.npy" --steps 12 --lr 3e-3 --warmup 2 --min-lr 3e-4 \
  --plan-spec dp=2,tp=2 --devices 4 --log "$build/examples/loss.csv"

# Pipeline stages where the search picks them: a GPT of 26M parameters on four
# single-GPU nodes over 1 Gb/s Ethernet. The plan is run on 4 simulated devices
# (weft import --model builds the model with seeded random weights at the
# plan's micro-batch) and checked against one device on the whole batch.
gpt=(--model gpt --layers 8 --hidden 512 --heads 8 --vocab 2048 --seq-len 128)
echo "== weft plan ${gpt[*]} --cluster ethernet-4-nodes.json --global-batch 16"
"$build/bin/weft" plan "${gpt[@]}" --cluster "$root/examples/clusters/ethernet-4-nodes.json" \
  --global-batch 16 --top 3 --no-progress --json "$build/examples/gpt-plan.json"
"${WEFT_NUMPY_PYTHON:-/usr/bin/python3}" - "$build/examples/gpt-plan.json" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))["plans"][0]
print("== the search's plan: pp=%d, %d micro-batches of %d, %s" % (
    plan.get("pp", 1), plan.get("num_micro_batches", 1), plan.get("micro_batch", 1),
    plan.get("schedule", "").replace("SCHEDULE_", "")))
sys.exit(0 if plan.get("pp", 1) > 1 else 1)
PY
"$build/bin/weft" import "${gpt[@]}" --batch-size 2 -o "$build/examples/gpt-micro/model.mlir"
"$build/bin/weft" import "${gpt[@]}" --batch-size 16 -o "$build/examples/gpt-whole/model.mlir"
"${WEFT_NUMPY_PYTHON:-/usr/bin/python3}" -c "import numpy as n; n.save('$build/examples/gpt-batch.npy', (n.arange(2048).reshape(16, 128) * 7919 % 2048).astype(n.int64))"
echo "== weft run gpt-micro/model.mlir --plan gpt-plan.json (on the plan's devices)"
"$build/bin/weft" run "$build/examples/gpt-micro/model.mlir" -i "$build/examples/gpt-batch.npy" \
  --plan "$build/examples/gpt-plan.json" -o "$build/examples/gpt-pp" --output-format npy
"$build/bin/weft" run "$build/examples/gpt-whole/model.mlir" -i "$build/examples/gpt-batch.npy" \
  -o "$build/examples/gpt-one" --output-format npy
"${WEFT_NUMPY_PYTHON:-/usr/bin/python3}" - "$build/examples" <<'PY'
import numpy as n, sys
a = n.load(sys.argv[1] + "/gpt-one/output_0.npy")
b = n.load(sys.argv[1] + "/gpt-pp/output_0.npy")
difference = float(abs(a - b).max() / abs(a).max())
print("== pipelined run vs one device: max relative difference %g (limit 1e-5)" % difference)
sys.exit(0 if difference <= 1e-5 else 1)
PY

# Python: the same planner, runs and compiler from a script (examples/python_api.py):
# a plan for GPT-3 175B, and a GPT written in PyTorch run on 4 simulated devices.
echo "== /usr/bin/python3 examples/python_api.py (import weft)"
if [ -d "$build/python/weft" ]; then
  PYTHONPATH="$build/python${PYTHONPATH:+:$PYTHONPATH}" /usr/bin/python3 -W ignore \
    "$root/examples/python_api.py" | grep -E "^best:|max relative difference|^wrote|^weft.Error"
fi
