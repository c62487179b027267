// The parallel forms, partitioned from one plan each: the collectives of a
// one-layer GPT block (Inputs/gpt_block.mlir) under each form.

// Megatron tensor parallelism: the vocabulary-parallel embedding's sum, then
// exactly one all-reduce after attention and one after the MLP in forward;
// the output layer is column-parallel and gathered at the end.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="tp=2" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=TP
// The layer stays a layer, of local types, with its collectives inside.
// TP: weft.mesh @mesh(dp = 1, cp = 1, ulysses = 1, tp = 2)
// TP-LABEL: func.func @main
// TP-SAME: tensor<2x8xi64> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}], []]>}
// TP: weft.embedding {{.*}} : (tensor<16x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
// TP-NOT: weft.reduce_scatter
// TP: weft.all_reduce sum {{.*}} over @mesh ["tp"] : tensor<2x8x16xf32>
// TP-NEXT: weft.layer "h"(%{{.*}}) index 0 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
// TP-NEXT: ^bb0(%{{.*}}: tensor<2x8x16xf32>):
// TP: weft.linear {{.*}} -> tensor<2x8x8xf32>
// TP: weft.attention {{.*}} -> tensor<2x2x8x4xf32>
// TP: weft.linear {{.*}} : (tensor<2x8x8xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
// TP-NEXT: weft.all_reduce sum {{.*}} over @mesh ["tp"]
// TP: weft.linear {{.*}} -> tensor<2x8x16xf32>
// TP: weft.gelu {{.*}} : tensor<2x8x16xf32>
// TP: weft.linear {{.*}} : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
// TP-NEXT: weft.all_reduce sum {{.*}} over @mesh ["tp"]
// TP: weft.yield %{{.*}} : tensor<2x8x16xf32>
// TP-NOT: weft.all_reduce
// TP: weft.all_gather {{.*}} over @mesh ["tp"] dim 2 : tensor<2x8x16xf32> -> tensor<2x8x32xf32>
// TP-NEXT: return

// Megatron sequence parallelism: norms on sequence shards, an all-gather
// before each column-parallel region and a reduce-scatter (never an
// all-reduce, never an all-reduce then a slice) after each row-parallel one.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="tp=2 sp=1" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=SP
// SP-NOT: weft.all_reduce
// SP: weft.reduce_scatter sum {{.*}} over @mesh ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// SP: weft.rms_norm {{.*}} -> tensor<2x4x16xf32>
// SP: weft.all_gather {{.*}} over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// SP: weft.attention
// SP: weft.linear {{.*}} : (tensor<2x8x8xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
// SP-NEXT: weft.reduce_scatter sum {{.*}} over @mesh ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// SP: weft.rms_norm {{.*}} -> tensor<2x4x16xf32>
// SP: weft.all_gather {{.*}} dim 1
// SP: weft.gelu
// SP: weft.linear
// SP-NEXT: weft.reduce_scatter sum {{.*}} dim 1
// SP-NOT: weft.all_reduce
// SP-NOT: weft.all_slice {{.*}} : tensor<2x8x16xf32>

// DeepSpeed-Ulysses: activations split on the sequence, an all-to-all to
// split heads for Q, K and V, and one back after attention.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="ulysses=2" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=ULYSSES
// ULYSSES: weft.rms_norm {{.*}} -> tensor<2x4x16xf32>
// ULYSSES-COUNT-3: weft.all_to_all {{.*}} over @mesh ["ulysses"] split_dim 1 concat_dim 2 : tensor<2x4x4x4xf32> -> tensor<2x2x8x4xf32>
// ULYSSES: weft.attention {{.*}} -> tensor<2x2x8x4xf32>
// ULYSSES: weft.all_to_all {{.*}} over @mesh ["ulysses"] split_dim 1 concat_dim 2 : tensor<2x8x8xf32> -> tensor<2x4x16xf32>
// ULYSSES-NOT: weft.all_reduce
// ULYSSES-NOT: weft.all_gather

// Ring attention (context parallelism): the sequence split over cp in mirrored
// chunks (rank i holds chunks i and 2cp-1-i: load-balanced under the causal
// mask). Each step's K/V block and its positions leave for the next rank
// before this step's block is attended to (fused, masked causally by
// position); the blocks merge through their log-sum-exps, in f32. No
// weft.attention and no S x S matrix is left. The ring's ops are the
// attention's decomposition (weft.decomposed): the step's backward is the
// attention's, which reads q, k and v.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="cp=2" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=RING
// RING: func.func @main{{.*}} attributes {weft.load_balanced = ["cp"]}
// RING-NOT: weft.attention %
// RING: %[[QPOS:.*]] = weft.all_slice {{.*}} over @mesh ["cp"] dim 0 zigzag {weft.decomposed} : tensor<8xi64> -> tensor<4xi64>
// RING-NEXT: %[[K1:.*]] = weft.collective_permute %[[K0:.*]] over @mesh ["cp"] shift 1 {weft.decomposed} : tensor<2x4x4x4xf32>
// RING-NEXT: %[[V1:.*]] = weft.collective_permute %[[V0:.*]] over @mesh ["cp"] shift 1 {weft.decomposed} : tensor<2x4x4x4xf32>
// RING-NEXT: %[[KPOS:.*]] = weft.collective_permute %[[QPOS]] over @mesh ["cp"] shift 1 {weft.decomposed} : tensor<4xi64>
// RING-NEXT: %[[O0:.*]], %[[L0:.*]] = weft.attention_block %[[Q:.*]], %[[K0]], %[[V0]] positions %[[QPOS]], %[[QPOS]] scale 5.000000e-01 causal visible 10 {weft.decomposed}
// RING-NEXT: %[[O1:.*]], %[[L1:.*]] = weft.attention_block %[[Q]], %[[K1]], %[[V1]] positions %[[QPOS]], %[[KPOS]] scale 5.000000e-01 causal visible 8 {weft.decomposed}
// RING-NEXT: %[[TOP:.*]] = weft.maximum %[[L0]], %[[L1]] {weft.decomposed} : tensor<2x4x4x1xf32>
// RING: weft.log
// RING: weft.mul %[[O0]]
// RING: weft.mul %[[O1]]
// RING-NOT: weft.all_gather {{.*}} dim 2
// RING-NOT: weft.matmul

// All-gather context parallelism (cp-comm=all-gather): K and V are gathered
// (zigzag blocks back in order) before one attention of the rank's queries,
// at their positions, over every key; nothing goes around a ring.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="cp=2 cp-comm=all-gather" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=GATHER
// GATHER: func.func @main{{.*}} attributes {weft.load_balanced = ["cp"]}
// GATHER-NOT: weft.collective_permute
// GATHER: %[[K:.*]] = weft.all_gather %{{.*}} over @mesh ["cp"] dim 2 zigzag {weft.decomposed} : tensor<2x4x4x4xf32> -> tensor<2x4x8x4xf32>
// GATHER-NEXT: %[[V:.*]] = weft.all_gather %{{.*}} over @mesh ["cp"] dim 2 zigzag {weft.decomposed} : tensor<2x4x4x4xf32> -> tensor<2x4x8x4xf32>
// GATHER: %[[QPOS:.*]] = weft.all_slice %{{.*}} over @mesh ["cp"] dim 0 zigzag {weft.decomposed} : tensor<8xi64> -> tensor<4xi64>
// GATHER-NEXT: %[[KPOS:.*]] = weft.iota dim 0 {weft.decomposed} : tensor<8xi64>
// GATHER-NEXT: %{{.*}}, %{{.*}} = weft.attention_block %{{.*}}, %[[K]], %[[V]] positions %[[QPOS]], %[[KPOS]] scale 5.000000e-01 causal {weft.decomposed} : (tensor<2x4x4x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<4xi64>, tensor<8xi64>)
// GATHER-NOT: weft.collective_permute
// GATHER-NOT: weft.attention_block
// RUN: not weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="cp=2 cp-comm=a2a" 2>&1 \
// RUN:   | FileCheck %s --check-prefix=BADCOMM
// BADCOMM: error: cp-comm is 'ring' or 'all-gather', got 'a2a'

// The Ulysses x ring hybrid over a 2-D sequence mesh, with TP.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="tp=2 ulysses=2 cp=2" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=HYBRID
// HYBRID: weft.mesh @mesh(dp = 1, cp = 2, ulysses = 2, tp = 2)
// HYBRID: weft.all_to_all {{.*}} ["ulysses"]
// HYBRID: weft.collective_permute {{.*}} ["cp"]

// Data parallelism in forward: the batch is split, nothing is communicated.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="dp=2" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives | FileCheck %s --check-prefix=DP
// DP: func.func @main(%arg0: tensor<1x8xi64> {weft.local_sharding = #weft.sharding<@mesh, {{\[\[}}dp], []]>})
// DP-NOT: weft.all_
// DP-NOT: weft.reduce_scatter
// DP: return {{.*}} : tensor<1x8x32xf32>
