#!/usr/bin/env bash
# Builds Weft and runs its main job on the bundled example: one GPT-2 block,
# partitioned by hand for 2-way tensor parallelism, canonicalized by weft-opt,
# with the sharding rule and cost of every op the planner will read.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${WEFT_BUILD_DIR:-$root/build}

bash "$root/scripts/build.sh"
example="$root/examples/gpt2_block_tp2.mlir"
out="$build/examples/gpt2_block_tp2.canonical.mlir"
mkdir -p "$(dirname "$out")"
echo "== weft-opt -weft-canonicalize -weft-print-op-facts $(basename "$example")"
"$build/bin/weft-opt" "$example" -weft-canonicalize -weft-print-op-facts \
  -mlir-print-op-on-diagnostic=false -o "$out" 2>&1 |
  sed -n 's/^.*gpt2_block_tp2.mlir:\([0-9]*\):[0-9]*: remark: /line \1: /p'
echo "== canonical module written to $out ($(grep -c 'weft\.' "$out") weft ops)"
