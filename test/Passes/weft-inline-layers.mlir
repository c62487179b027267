// RUN: weft-opt %s -weft-inline-layers | FileCheck %s

// Each layer's body replaces it: arguments become the layer's inputs, results
// the yielded values; weights inside the body come along.
// CHECK-LABEL: func.func @two_layers
// CHECK-NOT: weft.layer
// CHECK: %[[W0:.*]] = weft.parameter "h.0.w" : tensor<4x4xf32>
// CHECK: %[[Y0:.*]] = weft.linear %arg0, %[[W0]]
// CHECK: %[[S0:.*]] = weft.add %arg0, %[[Y0]]
// CHECK: %[[W1:.*]] = weft.parameter "h.1.w" : tensor<4x4xf32>
// CHECK: %[[Y1:.*]] = weft.linear %[[S0]], %[[W1]]
// CHECK: %[[S1:.*]] = weft.add %[[S0]], %[[Y1]]
// CHECK: return %[[S1]]
func.func @two_layers(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.layer "h"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %w = weft.parameter "h.0.w" : tensor<4x4xf32>
    %y = weft.linear %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %s = weft.add %a, %y : tensor<2x4xf32>
    weft.yield %s : tensor<2x4xf32>
  }
  %1 = weft.layer "h"(%0) index 1 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %w = weft.parameter "h.1.w" : tensor<4x4xf32>
    %y = weft.linear %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %s = weft.add %a, %y : tensor<2x4xf32>
    weft.yield %s : tensor<2x4xf32>
  }
  return %1 : tensor<2x4xf32>
}
