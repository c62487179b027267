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

// -----

weft.mesh @mesh(dp = 2)
// Independent all-reduces over one group are bucketed into one.
// CHECK-LABEL: func.func @bucket
func.func @bucket(%loss: tensor<f32>, %count: tensor<f32>, %g: tensor<2x3xf32>) -> (tensor<f32>, tensor<f32>, tensor<2x3xf32>) {
  // CHECK: %[[JOINED:.*]] = weft.concat {{.*}} axis 0 : (tensor<1xf32>, tensor<1xf32>, tensor<6xf32>) -> tensor<8xf32>
  // CHECK-NEXT: %[[SUM:.*]] = weft.all_reduce sum %[[JOINED]] over @mesh ["dp"] : tensor<8xf32>
  // CHECK-NEXT: weft.split %[[SUM]] axis 0 sizes [1, 1, 6]
  // CHECK-NOT: weft.all_reduce
  %0 = weft.all_reduce sum %loss over @mesh ["dp"] : tensor<f32>
  %1 = weft.all_reduce sum %count over @mesh ["dp"] : tensor<f32>
  %2 = weft.all_reduce sum %g over @mesh ["dp"] : tensor<2x3xf32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<2x3xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// A chain (the second reduces what the first produced) stays two.
// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-COUNT-2: weft.all_reduce
  %0 = weft.all_reduce sum %x over @mesh ["tp"] : tensor<4xf32>
  %1 = weft.exp %0 : tensor<4xf32>
  %2 = weft.all_reduce sum %1 over @mesh ["tp"] : tensor<4xf32>
  return %2 : tensor<4xf32>
}
