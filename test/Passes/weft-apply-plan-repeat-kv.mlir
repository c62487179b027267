// Fewer KV heads than tp x ulysses (multi-query attention, one KV head for
// four query heads, under tp = 4): -weft-apply-plan repeats each KV head
// before the attention (reshape, broadcast_to, reshape: the same attention,
// a query head reads its group's head) and leaves the K and V projections
// whole; the heads' split then gives every rank its group's copy.

// RUN: weft-opt %S/Inputs/mqa_block.mlir -weft-apply-plan="tp=4" | FileCheck %s --check-prefix=REPEAT
// REPEAT: weft.parameter "q" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]} : tensor<16x16xf32>
// REPEAT: weft.parameter "k" : tensor<16x4xf32>
// REPEAT: weft.parameter "v" : tensor<16x4xf32>
// REPEAT: %[[K1:.*]] = weft.reshape %{{.*}} : tensor<2x1x8x4xf32> -> tensor<2x1x1x8x4xf32>
// REPEAT-NEXT: %[[K4:.*]] = weft.broadcast_to %[[K1]] {weft.repeated_kv_heads} : tensor<2x1x1x8x4xf32> -> tensor<2x1x4x8x4xf32>
// REPEAT-NEXT: %[[K:.*]] = weft.reshape %[[K4]] : tensor<2x1x4x8x4xf32> -> tensor<2x4x8x4xf32>
// REPEAT: %[[V:.*]] = weft.reshape %{{.*}} : tensor<2x1x4x8x4xf32> -> tensor<2x4x8x4xf32>
// REPEAT-NEXT: weft.attention %{{.*}}, %[[K]], %[[V]] scale {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], [], []]>]} : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)

// The training step as `weft train` builds it (KV heads repeated before
// -weft-differentiate, so that the forward layer keeps the copy its rank
// holds), partitioned: every rank computes the one KV head and its four
// query heads' attention with no collective between them. In the backward
// layer the copies' gradients are summed (broadcast_to's gradient, a
// reduce_sum over the copies: each rank holds one, so the sum is partial
// over tp) and all-reduced, K's and V's [batch, 1, seq, head] each, after
// which K's and V's weight gradients are whole on every rank; the other
// collectives are Megatron's.
// RUN: weft-opt %S/Inputs/mqa_block.mlir -weft-append-loss=reduction=mean -weft-repeat-kv-heads=ways=4 \
// RUN:   -weft-differentiate=recompute=none -weft-apply-plan="tp=4" -weft-propagate-sharding -weft-partition \
// RUN:   -weft-optimize-collectives -weft-canonicalize | FileCheck %s --check-prefix=STEP
// STEP: weft.layer "h"
// STEP: %[[WK:.*]] = weft.parameter "k" : tensor<16x4xf32>
// STEP-NOT: weft.all_slice %[[WK]]
// STEP: weft.linear %{{.*}}, %[[WK]] : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> tensor<2x8x4xf32>
// STEP-NOT: weft.all_to_all
// STEP-NOT: weft.all_gather
// STEP: weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 5.000000e-01 causal : (tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>) -> tensor<2x1x8x4xf32>
// STEP: weft.layer "h.backward"
// STEP-NOT: weft.all_to_all
// STEP: weft.attention_grad {{.*}} : (tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>)
// STEP: weft.reduce_sum %{{.*}} axes [2] keep_dims : tensor<2x1x1x8x4xf32> -> tensor<2x1x1x8x4xf32>
// STEP-NEXT: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<2x1x1x8x4xf32>
// STEP: weft.reduce_sum %{{.*}} axes [2] keep_dims : tensor<2x1x1x8x4xf32> -> tensor<2x1x1x8x4xf32>
// STEP-NEXT: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<2x1x1x8x4xf32>
// STEP-NOT: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<16x4xf32>

// Under Megatron SP each rank projects K and V from its block of the
// sequence; the repeated heads then trade the sequence for the heads in one
// all-to-all each (the bytes of an all-gather of the one head).
// RUN: weft-opt %S/Inputs/mqa_block.mlir -weft-apply-plan="tp=4 sp=1" -weft-propagate-sharding \
// RUN:   -weft-partition -weft-optimize-collectives -weft-canonicalize | FileCheck %s --check-prefix=SP
// SP: weft.linear %{{.*}}, %{{.*}} : (tensor<2x2x16xf32>, tensor<16x4xf32>) -> tensor<2x2x4xf32>
// SP: weft.broadcast_to %{{.*}} {weft.repeated_kv_heads} : tensor<2x1x1x2x4xf32> -> tensor<2x1x4x2x4xf32>
// SP: weft.all_to_all %{{.*}} over @mesh ["tp"] split_dim 1 concat_dim 2 : tensor<2x4x2x4xf32> -> tensor<2x1x8x4xf32>
// SP: weft.all_to_all %{{.*}} over @mesh ["tp"] split_dim 1 concat_dim 2 : tensor<2x4x2x4xf32> -> tensor<2x1x8x4xf32>
// SP-NEXT: weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 5.000000e-01 causal : (tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>) -> tensor<2x1x8x4xf32>

// RUN: weft-opt %s -split-input-file -weft-apply-plan="tp=4" -verify-diagnostics

// Three KV heads neither divide by four ways nor divide them.
func.func @three_kv_heads(%q: tensor<1x12x8x4xf32>, %k: tensor<1x3x8x4xf32>, %v: tensor<1x3x8x4xf32>) -> tensor<1x12x8x4xf32> {
  // expected-error @+1 {{plan: the 3 KV heads and tp x ulysses (4) do not divide one another (KV heads are split when they divide by it, and repeated when it divides by them)}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x12x8x4xf32>, tensor<1x3x8x4xf32>, tensor<1x3x8x4xf32>) -> tensor<1x12x8x4xf32>
  return %0 : tensor<1x12x8x4xf32>
}

