// RUN: weft-opt %s -split-input-file -weft-propagate-sharding -verify-diagnostics | FileCheck %s

// Through the factor rules: a column split of a linear's weight reaches its
// result, a reshape's major factor (heads) and a transpose; a blocked factor
// (the softmax axis) stays whole, so the softmax result is not split on it.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @column
func.func @column(%x: tensor<2x8x16xf32>) -> tensor<2x4x8x4xf32> {
  %w = weft.parameter "w" {weft.sharding = [#weft.sharding<@mesh, [[], [tp]]>]} : tensor<16x16xf32>
  // CHECK: weft.linear {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]}
  %y = weft.linear %x, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: weft.reshape {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], [tp], []]>]}
  %r = weft.reshape %y : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  // CHECK: weft.transpose {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], [], []]>]}
  %t = weft.transpose %r permutation [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  return %t : tensor<2x4x8x4xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @blocked
func.func @blocked(%x: tensor<4x8xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp]]>}) -> tensor<4x8xf32> {
  // CHECK: weft.softmax {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], []]>]}
  %0 = weft.softmax %x axis 1 : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

weft.mesh @mesh(dp = 2, tp = 2)
func.func @conflict(%x: tensor<4x8xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], []]>}) -> tensor<4x8xf32> {
  // expected-error @+1 {{conflicting shardings: one annotation splits a dimension over [dp], another over [tp]}}
  %0 = weft.exp %x {weft.sharding = [#weft.sharding<@mesh, [[tp], []]>]} : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

weft.mesh @mesh(tp = 2)
func.func @unknown_axis(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{invalid sharding of result #0: mesh @mesh has no axis 'sp'}}
  %0 = weft.exp %x {weft.sharding = [#weft.sharding<@mesh, [[sp], []]>]} : tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Across a layer's boundary: the input's sharding reaches the body argument
// (weft.input_shardings) and the ops inside, and the yielded value's sharding
// reaches the layer's result and its users outside.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @through_layer
func.func @through_layer(%x: tensor<4x8xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], []]>}) -> tensor<4x8xf32> {
  // CHECK: weft.layer "h"(%arg0) index 0 {weft.input_shardings = [#weft.sharding<@mesh, {{\[\[}}dp], []]>], weft.sharding = [#weft.sharding<@mesh, {{\[\[}}dp], []]>]}
  %0 = weft.layer "h"(%x) index 0 : (tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    // CHECK: weft.exp {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}dp], []]>]}
    %e = weft.exp %a : tensor<4x8xf32>
    weft.yield %e : tensor<4x8xf32>
  }
  // CHECK: weft.neg {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}dp], []]>]}
  %1 = weft.neg %0 : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// A weight's planned split decides over an annotated activation's where both
// want one axis: a backward layer's transposed linear reads the residual
// gradient split along the sequence (Megatron SP) and computes its result
// split over the weight's rows (the forward's columns), as the forward did,
// not along the sequence (which re-laid every value after it with all-to-alls
// before the weight took precedence). The activation operand comes first, so
// an operand-order tie would give the sequence the axis.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @weight_decides
func.func @weight_decides(%dy: tensor<2x8x16xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp], []]>}) -> tensor<2x8x32xf32> {
  %w = weft.parameter "w" {weft.sharding = [#weft.sharding<@mesh, [[tp], []]>]} : tensor<32x16xf32>
  // CHECK: weft.linear {{.*}} transpose_weight {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]}
  %y = weft.linear %dy, %w transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  return %y : tensor<2x8x32xf32>
}

// -----

// A gradient returned split as its parameter is (here a vocabulary-parallel
// embedding's, rows over tp) reaches back through the ops that only lay it
// out (the cast, the reshape, the sum over the batch) to the matmul that
// computes it, and decides there as a weight would: the one-hot is split over
// the vocabulary and the sequence-split gradient is read whole (gathered), as
// Megatron's embedding backward under SP does. Without it the sequence split
// took the axis, and the one-hot was re-laid with an all-to-all.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @gradient_decides
func.func @gradient_decides(%ids: tensor<2x8xi64>, %dy: tensor<2x8x16xbf16> {weft.sharding = #weft.sharding<@mesh, [[], [tp], []]>}) -> (tensor<64x16xf32> {weft.gradient_of = "wte", weft.sharding = #weft.sharding<@mesh, [[tp], []]>}) {
  // CHECK: weft.iota {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]}
  %iota = weft.iota dim 2 : tensor<2x8x64xi64>
  // CHECK: weft.reshape {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], []]>]}
  %r = weft.reshape %ids : tensor<2x8xi64> -> tensor<2x8x1xi64>
  // CHECK: weft.compare {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]}
  %eq = weft.compare eq, %r, %iota : (tensor<2x8x1xi64>, tensor<2x8x64xi64>) -> tensor<2x8x64xi1>
  %oh = weft.cast %eq : tensor<2x8x64xi1> -> tensor<2x8x64xbf16>
  // CHECK: weft.matmul {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>]}
  %g = weft.matmul %oh, %dy transpose_lhs : (tensor<2x8x64xbf16>, tensor<2x8x16xbf16>) -> tensor<2x64x16xbf16>
  %s = weft.reduce_sum %g axes [0] keep_dims : tensor<2x64x16xbf16> -> tensor<1x64x16xbf16>
  %w = weft.reshape %s : tensor<1x64x16xbf16> -> tensor<64x16xbf16>
  %f = weft.cast %w : tensor<64x16xbf16> -> tensor<64x16xf32>
  return %f : tensor<64x16xf32>
}

// -----

// A replicated gradient (a position embedding's under SP) does not reach
// back: its matmul may contract over the sequence split and leave partial
// sums, which -weft-defer-gradient-reduction reduces once per step.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @replicated_gradient
func.func @replicated_gradient(%ids: tensor<1x8xi64>, %dy: tensor<1x8x16xbf16> {weft.sharding = #weft.sharding<@mesh, [[], [tp], []]>}) -> (tensor<8x16xbf16> {weft.gradient_of = "wpe", weft.sharding = #weft.sharding<@mesh, [[], []]>}) {
  %iota = weft.iota dim 2 : tensor<1x8x8xi64>
  %r = weft.reshape %ids : tensor<1x8xi64> -> tensor<1x8x1xi64>
  // CHECK: weft.compare {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>]}
  %eq = weft.compare eq, %r, %iota : (tensor<1x8x1xi64>, tensor<1x8x8xi64>) -> tensor<1x8x8xi1>
  %oh = weft.cast %eq : tensor<1x8x8xi1> -> tensor<1x8x8xbf16>
  %g = weft.matmul %oh, %dy transpose_lhs : (tensor<1x8x8xbf16>, tensor<1x8x16xbf16>) -> tensor<1x8x16xbf16>
  %w = weft.reshape %g : tensor<1x8x16xbf16> -> tensor<8x16xbf16>
  return %w : tensor<8x16xbf16>
}
