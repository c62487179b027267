// -weft-repeat-kv-heads: an attention with fewer KV heads than `ways` (a
// multiple of them) reads each repeated ways / kv times; an attention_grad's
// K and V gradients are summed over the copies. (Partitioned, under
// -weft-apply-plan: weft-apply-plan-repeat-kv.mlir.)

// RUN: weft-opt %s -split-input-file -weft-repeat-kv-heads=ways=4 | FileCheck %s --check-prefix=FOUR
// FOUR-LABEL: func.func @mqa
// FOUR: %[[K1:.*]] = weft.reshape %arg1 : tensor<1x1x8x4xf32> -> tensor<1x1x1x8x4xf32>
// FOUR-NEXT: %[[K4:.*]] = weft.broadcast_to %[[K1]] {weft.repeated_kv_heads} : tensor<1x1x1x8x4xf32> -> tensor<1x1x4x8x4xf32>
// FOUR-NEXT: %[[K:.*]] = weft.reshape %[[K4]] : tensor<1x1x4x8x4xf32> -> tensor<1x4x8x4xf32>
// FOUR: weft.attention %arg0, %[[K]], %{{.*}} scale 5.000000e-01 : (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>)
func.func @mqa(%q: tensor<1x4x8x4xf32>, %k: tensor<1x1x8x4xf32>, %v: tensor<1x1x8x4xf32>) -> tensor<1x4x8x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x4x8x4xf32>, tensor<1x1x8x4xf32>, tensor<1x1x8x4xf32>) -> tensor<1x4x8x4xf32>
  return %0 : tensor<1x4x8x4xf32>
}

// -----

// Two KV heads of eight query heads, four ways: each head twice.
// FOUR-LABEL: func.func @gqa
// FOUR: weft.broadcast_to %{{.*}} {weft.repeated_kv_heads} : tensor<1x2x1x8x4xf32> -> tensor<1x2x2x8x4xf32>
// FOUR: weft.attention {{.*}} : (tensor<1x8x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>)
func.func @gqa(%q: tensor<1x8x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> tensor<1x8x8x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x8x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x8x8x4xf32>
  return %0 : tensor<1x8x8x4xf32>
}

// -----

// Four KV heads are split four ways as they are.
// FOUR-LABEL: func.func @enough
// FOUR-NOT: weft.broadcast_to
// FOUR: weft.attention %arg0, %arg1, %arg2
func.func @enough(%q: tensor<1x8x8x4xf32>, %k: tensor<1x4x8x4xf32>, %v: tensor<1x4x8x4xf32>) -> tensor<1x8x8x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x8x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> tensor<1x8x8x4xf32>
  return %0 : tensor<1x8x8x4xf32>
}

// On a training step's attention_grad, K's and V's gradients are summed over the copies.
// RUN: weft-opt %S/Inputs/mqa_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-repeat-kv-heads=ways=4 | FileCheck %s --check-prefix=GRAD
// GRAD: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = weft.attention_grad {{.*}} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)
// GRAD-NEXT: %[[DK5:.*]] = weft.reshape %[[DK]] : tensor<2x4x8x4xf32> -> tensor<2x1x4x8x4xf32>
// GRAD-NEXT: weft.reduce_sum %[[DK5]] axes [2] : tensor<2x1x4x8x4xf32> -> tensor<2x1x8x4xf32>
// GRAD-NEXT: %[[DV5:.*]] = weft.reshape %[[DV]] : tensor<2x4x8x4xf32> -> tensor<2x1x4x8x4xf32>
// GRAD-NEXT: weft.reduce_sum %[[DV5]] axes [2] : tensor<2x1x4x8x4xf32> -> tensor<2x1x8x4xf32>

// The pass leaves what it cannot repeat: more ways than query heads (the
// plan refuses those heads), and KV heads that do not divide the ways.
// RUN: weft-opt %s -split-input-file -weft-repeat-kv-heads=ways=8 | FileCheck %s --check-prefix=LEAVE

// -----

// LEAVE-LABEL: func.func @more_ways_than_heads
// LEAVE-NOT: weft.broadcast_to
// LEAVE: weft.attention %arg0, %arg1, %arg2
func.func @more_ways_than_heads(%q: tensor<1x4x8x4xf32>, %k: tensor<1x1x8x4xf32>, %v: tensor<1x1x8x4xf32>) -> tensor<1x4x8x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x4x8x4xf32>, tensor<1x1x8x4xf32>, tensor<1x1x8x4xf32>) -> tensor<1x4x8x4xf32>
  return %0 : tensor<1x4x8x4xf32>
}

// -----

// LEAVE-LABEL: func.func @three_of_eight
// LEAVE-NOT: weft.broadcast_to
// LEAVE: weft.attention %arg0, %arg1, %arg2
func.func @three_of_eight(%q: tensor<1x24x8x4xf32>, %k: tensor<1x3x8x4xf32>, %v: tensor<1x3x8x4xf32>) -> tensor<1x24x8x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x24x8x4xf32>, tensor<1x3x8x4xf32>, tensor<1x3x8x4xf32>) -> tensor<1x24x8x4xf32>
  return %0 : tensor<1x24x8x4xf32>
}

