// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="gx=2 gy=2 gz=2" | FileCheck %s
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-partition-with-plan="gx=2 gy=2 gz=2" | FileCheck %s --check-prefix=RANK
// RUN: weft-opt %s -split-input-file -weft-apply-plan="gx=2 gy=4" -verify-diagnostics
// RUN: not weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="gx=2 tp=2" 2>&1 | FileCheck %s --check-prefix=COMBINE
// RUN: not weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="gz=4" 2>&1 | FileCheck %s --check-prefix=BATCH
// RUN: not weft-opt %S/Inputs/stored-over-conflict.mlir -weft-partition 2>&1 | FileCheck %s --check-prefix=STORED

// COMBINE: error: plan: 3-D tensor parallelism (tp3d) takes the place of Megatron's tp and does not combine with tp, sp, cp or ulysses yet; use tp3d with dp (and pp)
// BATCH: error: plan: the batch (2) is not divisible by dp x gz (4)
// STORED: stored-over-conflict.mlir:6:10: error: stored over mesh axis 'gx', which already splits it

// AxoNN's 3-D tensor parallelism: the linears that read the residual stream
// (Q, K, V, the MLP's up projection, the output layer) contract over gx and
// split their outputs over gy; those that give it back (attention output,
// MLP down) contract over gy and split their outputs over gx. Every such
// weight is stored split over gz too; the batch goes over dp x gz, the heads
// over gy, the embedding's vocabulary over gy.
// CHECK: weft.mesh @mesh(dp = 1, gz = 2, gy = 2, gx = 2)
// CHECK: weft.parameter "embed" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gy], []]>]}
// CHECK: weft.layer "h"(%{{.*}}) index 0 {weft.input_shardings = [#weft.sharding<@mesh, {{\[\[}}gz], [], []]>]
// CHECK: weft.parameter "q" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gx], [gy]]>], weft.stored_over = ["gz"]}
// CHECK: weft.attention {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gz], [gy], [], []]>]}
// CHECK: weft.parameter "o" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gy], [gx]]>], weft.stored_over = ["gz"]}
// CHECK: weft.parameter "up" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gx], [gy]]>], weft.stored_over = ["gz"]}
// CHECK: weft.parameter "down" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gy], [gx]]>], weft.stored_over = ["gz"]}
// CHECK: weft.parameter "output" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}gx], [gy]]>], weft.stored_over = ["gz"]}

// The rank program: each weight's gz shard all-gathered before use, partial
// sums over gx after the first linears and over gy after the second, the
// MLP's norm over the residual stream split over gx (each row's sum of
// squares all-reduced), the stream gathered back over gx at the layer's end.
// RANK: weft.mesh @mesh(dp = 1, gz = 2, gy = 2, gx = 2)
// RANK: weft.layer "h"
// RANK: %[[QS:.*]] = weft.all_slice %{{.*}} over @mesh ["gx", "gz"] dim 0 : tensor<16x16xf32> -> tensor<4x16xf32>
// RANK: %[[QL:.*]] = weft.all_slice %[[QS]] over @mesh ["gy"] dim 1 : tensor<4x16xf32> -> tensor<4x8xf32>
// RANK: %[[QW:.*]] = weft.all_gather %[[QL]] over @mesh ["gz"] dim 0 : tensor<4x8xf32> -> tensor<8x8xf32>
// RANK: %[[X:.*]] = weft.all_slice %{{.*}} over @mesh ["gx"] dim 2 : tensor<1x8x16xf32> -> tensor<1x8x8xf32>
// RANK: %[[Q:.*]] = weft.linear %[[X]], %[[QW]] : (tensor<1x8x8xf32>, tensor<8x8xf32>) -> tensor<1x8x8xf32>
// RANK: weft.all_reduce sum %[[Q]] over @mesh ["gx"] : tensor<1x8x8xf32>
// RANK: weft.all_slice %{{.*}} over @mesh ["gy", "gz"] dim 0 : tensor<16x16xf32> -> tensor<4x16xf32>
// RANK: %[[OW:.*]] = weft.all_gather %{{.*}} over @mesh ["gz"] dim 0 : tensor<4x8xf32> -> tensor<8x8xf32>
// RANK: %[[O:.*]] = weft.linear %{{.*}}, %[[OW]] : (tensor<1x8x8xf32>, tensor<8x8xf32>) -> tensor<1x8x8xf32>
// RANK: weft.all_reduce sum %[[O]] over @mesh ["gy"] : tensor<1x8x8xf32>
// RANK-NOT: weft.all_gather {{.*}} over @mesh ["gx"]
// RANK: weft.all_reduce sum %{{.*}} over @mesh ["gx"] codec none {weft.decomposed} : tensor<1x8x1xf32>
// RANK: %[[DW:.*]] = weft.all_gather %{{.*}} over @mesh ["gz"] dim 0 : tensor<8x8xf32> -> tensor<16x8xf32>
// RANK: %[[D:.*]] = weft.linear %{{.*}}, %[[DW]] : (tensor<1x8x16xf32>, tensor<16x8xf32>) -> tensor<1x8x8xf32>
// RANK: weft.all_reduce sum %[[D]] over @mesh ["gy"] : tensor<1x8x8xf32>
// RANK: weft.all_gather %{{.*}} over @mesh ["gx"] dim 2 : tensor<1x8x8xf32> -> tensor<1x8x16xf32>

func.func @heads(%q: tensor<1x6x8x4xf32>, %k: tensor<1x6x8x4xf32>, %v: tensor<1x6x8x4xf32>) -> tensor<1x6x8x4xf32> {
  // expected-error @+1 {{plan: the 6 attention heads (6 KV heads) are not divisible by gy (4), the 3-D grid's axis that splits them}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x6x8x4xf32>, tensor<1x6x8x4xf32>, tensor<1x6x8x4xf32>) -> tensor<1x6x8x4xf32>
  return %0 : tensor<1x6x8x4xf32>
}
