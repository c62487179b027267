// RUN: weft-opt %s -weft-apply-plan="tp=2" | FileCheck %s

// A backward layer that does not recompute the forward (selective or no
// recomputation) reads the weights through weft.parameter ops of its own,
// with no attention to find its projections by: each gets the sharding the
// forward's op of the same name was given, so that the backward reads the
// block the forward reads (not the whole weight). Here the "backward" reads
// the output projection `wo` again, transposed (dX = dY W^T).
// CHECK-LABEL: func.func @step
// CHECK: weft.parameter "wq" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]}
// CHECK: weft.parameter "wo" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}tp], []]>]}
// CHECK: weft.parameter "wo" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}tp], []]>]}
// CHECK-NEXT: weft.linear
// A parameter no rule splits stays unannotated, whatever its name's others.
// CHECK: weft.parameter "free" : tensor<16xf32>
func.func @step(%x: tensor<1x8x16xf32>, %dy: tensor<1x8x16xf32>) -> (tensor<1x8x16xf32>, tensor<1x8x16xf32>) {
  %wq = weft.parameter "wq" : tensor<16x16xf32> = dense<1.0>
  %q = weft.linear %x, %wq : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
  %r = weft.reshape %q : tensor<1x8x16xf32> -> tensor<1x8x4x4xf32>
  %t = weft.transpose %r permutation [0, 2, 1, 3] : tensor<1x8x4x4xf32> -> tensor<1x4x8x4xf32>
  %a = weft.attention %t, %t, %t scale 5.000000e-01 : (tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>, tensor<1x4x8x4xf32>) -> tensor<1x4x8x4xf32>
  %b = weft.transpose %a permutation [0, 2, 1, 3] : tensor<1x4x8x4xf32> -> tensor<1x8x4x4xf32>
  %c = weft.reshape %b : tensor<1x8x4x4xf32> -> tensor<1x8x16xf32>
  %wo = weft.parameter "wo" : tensor<16x16xf32> = dense<1.0>
  %o = weft.linear %c, %wo : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
  %wo2 = weft.parameter "wo" : tensor<16x16xf32> = dense<1.0>
  %dx = weft.linear %dy, %wo2 transpose_weight : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
  %free = weft.parameter "free" : tensor<16xf32> = dense<1.0>
  %y = weft.add %dx, %free : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
  return %o, %y : tensor<1x8x16xf32>, tensor<1x8x16xf32>
}
