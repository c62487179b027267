// RUN: weft-opt %s -split-input-file -weft-optimize-collectives | FileCheck %s

weft.mesh @mesh(dp = 1, tp = 4)
// A sum that is then sliced is a reduce_scatter; a gather that is sliced back
// is its input; groups of one rank do nothing.
// CHECK-LABEL: func.func @fold
func.func @fold(%x: tensor<2x8xf32>, %y: tensor<2x2xf32>, %z: tensor<2x8xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x8xf32>) {
  // CHECK-NEXT: %[[RS:.*]] = weft.reduce_scatter sum %arg0 over @mesh ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  %0 = weft.all_reduce sum %x over @mesh ["tp"] : tensor<2x8xf32>
  %1 = weft.all_slice %0 over @mesh ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  %2 = weft.all_gather %y over @mesh ["tp"] dim 1 : tensor<2x2xf32> -> tensor<2x8xf32>
  %3 = weft.all_slice %2 over @mesh ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  %4 = weft.all_reduce sum %z over @mesh ["dp"] : tensor<2x8xf32>
  // CHECK-NEXT: return %[[RS]], %arg1, %arg2
  return %1, %3, %4 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x8xf32>
}
