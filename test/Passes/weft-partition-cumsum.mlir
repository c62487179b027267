// RUN: weft-opt %s -split-input-file -weft-propagate-sharding -weft-partition | FileCheck %s

// A running sum needs its axis whole: a mask split along the sequence (cp)
// is gathered before the positions are counted, while a split of the batch
// passes through with no collective.
weft.mesh @mesh(dp = 2, cp = 2)
// CHECK-LABEL: func.func @positions
func.func @positions(%mask: tensor<4x8xi64> {weft.sharding = #weft.sharding<@mesh, [[dp], [cp]]>}) -> tensor<4x8xi64> {
  // CHECK: %[[ALL:.*]] = weft.all_gather %arg0 over @mesh ["cp"] dim 1 : tensor<2x4xi64> -> tensor<2x8xi64>
  // CHECK: %[[C:.*]] = weft.cumsum %[[ALL]] axis 1 : tensor<2x8xi64>
  // The result, returned whole, is gathered over dp.
  // CHECK: weft.all_gather %[[C]] over @mesh ["dp"] dim 0 : tensor<2x8xi64> -> tensor<4x8xi64>
  %c = weft.cumsum %mask axis 1 : tensor<4x8xi64>
  return %c : tensor<4x8xi64>
}

// -----

weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @batch
func.func @batch(%x: tensor<4x8xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], []]>}) -> tensor<4x8xf32> {
  // CHECK-NOT: weft.all_gather
  // CHECK: %[[C:.*]] = weft.cumsum %arg0 axis 1 exclusive : tensor<2x8xf32>
  // CHECK: weft.all_gather %[[C]] over @mesh ["dp"] dim 0
  %c = weft.cumsum %x axis 1 exclusive : tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}
