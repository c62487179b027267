// Attention's gradient is one fused op, weft.attention_grad: no S x S scores
// in the backward layer. Under cp its queries stay split with the ring: K and
// V are gathered over cp, the causal mask reads the queries' and keys'
// positions, and the partial dK and dV are reduce-scattered back.

// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   | FileCheck %s --check-prefix=VJP
// VJP: weft.layer "h.backward"
// VJP-NOT: weft.softmax
// VJP: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} scale 5.000000e-01 causal : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)
// VJP-NOT: weft.softmax
// VJP: weft.transpose %[[DV]]
// VJP-NOT: weft.softmax
// VJP: weft.yield

// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="cp=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   | FileCheck %s --check-prefix=RING
// RING: weft.layer "h.backward"
// RING: %[[KPOS:.*]] = weft.iota dim 0 : tensor<8xi64>
// RING: %[[ALL:.*]] = weft.iota dim 0 : tensor<8xi64>
// RING-NEXT: %[[QPOS:.*]] = weft.all_slice %[[ALL]] over @mesh ["cp"] dim 0 zigzag : tensor<8xi64> -> tensor<4xi64>
// RING-NEXT: %[[K:.*]] = weft.all_gather %{{.*}} over @mesh ["cp"] dim 2 zigzag : tensor<2x4x4x4xf32> -> tensor<2x4x8x4xf32>
// RING-NEXT: %[[V:.*]] = weft.all_gather %{{.*}} over @mesh ["cp"] dim 2 zigzag : tensor<2x4x4x4xf32> -> tensor<2x4x8x4xf32>
// RING-NEXT: %{{.*}}, %[[DK:.*]], %[[DV:.*]] = weft.attention_grad %{{.*}}, %[[K]], %[[V]] grad %{{.*}} positions %[[QPOS]], %[[KPOS]] scale 5.000000e-01 causal : (tensor<2x4x4x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x4x4xf32>, tensor<4xi64>, tensor<8xi64>) -> (tensor<2x4x4x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)
// RING-NEXT: weft.reduce_scatter sum %[[DV]] over @mesh ["cp"] dim 2 zigzag : tensor<2x4x8x4xf32> -> tensor<2x4x4x4xf32>
// RING: weft.reduce_scatter sum %[[DK]] over @mesh ["cp"] dim 2 zigzag : tensor<2x4x8x4xf32> -> tensor<2x4x4x4xf32>

// Under tensor parallelism each rank's op takes its heads, and nothing is
// gathered for it.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="tp=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   | FileCheck %s --check-prefix=TP
// TP: weft.layer "h.backward"
// TP-NOT: weft.all_gather
// TP: weft.attention_grad {{.*}} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>)

// Attention with dropout takes the fused gradient too, with the forward's
// dropout: no decomposed scores in its backward.
// RUN: weft-opt %s -weft-differentiate -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=DROPOUT
// DROPOUT-LABEL: func.func @dropout
// DROPOUT-NOT: weft.softmax
// DROPOUT-NOT: weft.dropout
// DROPOUT: weft.attention_grad {{.*}} scale 5.000000e-01 causal dropout 1.000000e-01 :
// DROPOUT-NOT: weft.softmax
// DROPOUT: return
func.func @dropout(%x: tensor<1x2x8x4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<1x2x8x4xf32>
  %q = weft.mul %x, %w : tensor<1x2x8x4xf32>
  %o = weft.attention %q, %q, %q scale 0.5 causal dropout 0.1 : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  %s = weft.reduce_sum %o axes [0, 1, 2, 3] : tensor<1x2x8x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// There are no second derivatives: the gradient op has none.
func.func @twice(%q: tensor<1x2x8x4xf32>, %do: tensor<1x2x8x4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<1x2x8x4xf32>
  %x = weft.mul %q, %w : tensor<1x2x8x4xf32>
  // expected-error @+1 {{'weft.attention_grad' has no gradient: a training step cannot pass through it}}
  %g:3 = weft.attention_grad %x, %x, %x grad %do scale 0.5 causal : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  %s = weft.reduce_sum %g#0 axes [0, 1, 2, 3] : tensor<1x2x8x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
