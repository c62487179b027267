// RUN: weft-opt %s -split-input-file -weft-partition | FileCheck %s

// Moving a split from one dimension to another is an all-to-all, which moves
// contiguous chunks. A load-balanced ring lays its sequence out in mirrored
// (zigzag) chunks instead, which only its gather and slice know: a cp split
// moves by gathering the zigzag layout whole and slicing the other dimension
// (the backward of causal ring attention moves dS from query-split to
// key-split this way; by all-to-all its rows and columns were scrambled, and
// the Q and K gradients were wrong).
weft.mesh @mesh(cp = 2)
// CHECK-LABEL: func.func @zigzag
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>
// CHECK-NOT: weft.all_to_all
// CHECK: %[[G:.*]] = weft.all_gather %[[X]] over @mesh ["cp"] dim 1 zigzag : tensor<2x4x8xf32> -> tensor<2x8x8xf32>
// CHECK: %[[S:.*]] = weft.all_slice %[[G]] over @mesh ["cp"] dim 2 zigzag : tensor<2x8x8xf32> -> tensor<2x8x4xf32>
// CHECK: return %[[S]]
func.func @zigzag(%x: tensor<2x8x8xf32> {weft.sharding = #weft.sharding<@mesh, [[], ["cp"], []]>})
    -> (tensor<2x8x8xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], ["cp"]]>})
    attributes {weft.load_balanced = ["cp"]} {
  return %x : tensor<2x8x8xf32>
}

// -----

// Without load balancing the chunks are contiguous: one all-to-all.
weft.mesh @mesh(cp = 2)
// CHECK-LABEL: func.func @contiguous
// CHECK-SAME: %[[X:.*]]: tensor<2x4x8xf32>
// CHECK: %[[A:.*]] = weft.all_to_all %[[X]] over @mesh ["cp"] split_dim 2 concat_dim 1 : tensor<2x4x8xf32> -> tensor<2x8x4xf32>
// CHECK: return %[[A]]
func.func @contiguous(%x: tensor<2x8x8xf32> {weft.sharding = #weft.sharding<@mesh, [[], ["cp"], []]>})
    -> (tensor<2x8x8xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], ["cp"]]>}) {
  return %x : tensor<2x8x8xf32>
}
