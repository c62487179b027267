// RUN: weft-opt %s -split-input-file -weft-propagate-sharding -weft-partition | FileCheck %s

// A reshape that merges a split batch behind the sequence ([s, b, h] ->
// [s * b, h], as nn.MultiheadAttention runs its projections): the batch is
// the merged dimension's minor factor, which has no contiguous block there,
// so the input is gathered whole and the reshape runs on global shapes. The
// batch's split was kept on the input while the merged dimension was left
// whole, and the local reshape, [8, 1, 32] to [16, 32], did not verify.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[X:.*]]: tensor<8x1x32xf32>
// CHECK: %[[G:.*]] = weft.all_gather %[[X]] over @mesh ["dp"] dim 1 : tensor<8x1x32xf32> -> tensor<8x2x32xf32>
// CHECK: weft.reshape %[[G]] : tensor<8x2x32xf32> -> tensor<16x32xf32>
func.func @main(%x: tensor<8x2x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], ["dp"], []]>}) -> tensor<16x32xf32> {
  %r = weft.reshape %x : tensor<8x2x32xf32> -> tensor<16x32xf32>
  %e = weft.exp %r : tensor<16x32xf32>
  return %e : tensor<16x32xf32>
}

// -----

// Merged as the major factor ([b, s, h] -> [b * s, h]), the batch's split
// is the merged dimension's: no gather.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[X:.*]]: tensor<1x8x32xf32>
// CHECK-NOT: weft.all_gather
// CHECK: weft.reshape %[[X]] : tensor<1x8x32xf32> -> tensor<8x32xf32>
func.func @main(%x: tensor<2x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [["dp"], [], []]>}) -> tensor<16x32xf32> {
  %r = weft.reshape %x : tensor<2x8x32xf32> -> tensor<16x32xf32>
  %e = weft.exp %r : tensor<16x32xf32>
  return %e : tensor<16x32xf32>
}
