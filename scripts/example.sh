#!/usr/bin/env bash
# Builds Weft and runs its main jobs on bundled examples. First the planner:
# LLaMA-3 70B on a bundled cluster of 64 DGX H100 nodes, the best plans as a
# table, why the first wins, and an HTML report. Then one GPT-2 block,
# partitioned by hand for 2-way tensor parallelism, canonicalized by weft-opt,
# with the sharding rule and cost of every op the planner will read; then a
# small GPT-2 export imported, raised and run against torch.
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
