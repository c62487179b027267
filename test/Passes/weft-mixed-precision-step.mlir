// RUN: weft-opt %s -weft-mixed-precision -weft-append-loss=reduction=mean -weft-differentiate | FileCheck %s

// The training step: the loss is f32 (the logits are widened for it), and
// the weight's gradient, computed in bf16, is widened where it leaves the
// weight's cast.
// CHECK-LABEL: func.func @layer
// CHECK-SAME: -> (tensor<f32>, tensor<4x4xf32> {weft.gradient_of = "w"})
// CHECK: weft.cross_entropy {{.*}} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<2xf32>
// CHECK: weft.layer "block.backward"
// CHECK: weft.matmul {{.*}} -> tensor<4x4xbf16>
// CHECK: weft.cast %{{.*}} : tensor<4x4xbf16> -> tensor<4x4xf32>
func.func @layer(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.layer "block"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %w = weft.parameter "w" : tensor<4x4xf32> = dense<0.25>
    %y = weft.matmul %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    weft.yield %y : tensor<2x4xf32>
  }
  return %0 : tensor<2x4xf32>
}
