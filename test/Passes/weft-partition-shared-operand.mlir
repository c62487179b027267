// RUN: weft-opt %s -weft-propagate-sharding -weft-partition | FileCheck %s

// One value read twice in two shardings (Q Kᵀ of a shared projection, as a
// training step's recomputed attention has): the left operand keeps its
// sequence shard, the right one is gathered whole. Each operand is resharded
// on its own; mapping the value once gave both the same local value.
weft.mesh @mesh(cp = 2)
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[X:.*]]: tensor<4x4xf32>
// CHECK: %[[G:.*]] = weft.all_gather %[[X]] over @mesh ["cp"] dim 0 : tensor<4x4xf32> -> tensor<8x4xf32>
// CHECK: weft.matmul %[[X]], %[[G]] transpose_rhs : (tensor<4x4xf32>, tensor<8x4xf32>) -> tensor<4x8xf32>
func.func @main(%x: tensor<8x4xf32> {weft.sharding = #weft.sharding<@mesh, [["cp"], []]>}) -> tensor<8x8xf32> {
  %s = weft.matmul %x, %x transpose_rhs : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x8xf32>
  return %s : tensor<8x8xf32>
}
