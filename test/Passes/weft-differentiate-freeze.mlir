// RUN: weft-opt '-weft-differentiate=freeze=_cached$' -split-input-file -verify-diagnostics %s | FileCheck %s
// RUN: weft-opt -weft-differentiate -split-input-file %s | FileCheck %s --check-prefix=TRAINED
// RUN: not weft-opt '-weft-differentiate=freeze=(' %s 2>&1 | FileCheck %s --check-prefix=BAD
// BAD: -weft-differentiate: freeze '(' is not a regular expression

// A frozen parameter (a rotary table an exporter left as an initializer) is a
// constant to the sweep: it gets no gradient, and a layer that reads it as an
// input computes none for that input, where a trained one is differentiated.
// CHECK-LABEL: func.func @rotary
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32> {weft.gradient_of = "layers.0.scale"})
// CHECK: weft.layer "layers.backward"
// CHECK-SAME: -> tensor<4xf32>
// CHECK-NOT: gradient_of = "cos_cached"
// TRAINED-LABEL: func.func @rotary
// TRAINED-SAME: -> (tensor<f32>, tensor<2x4xf32> {weft.gradient_of = "cos_cached"}, tensor<4xf32> {weft.gradient_of = "layers.0.scale"})
// TRAINED: weft.layer "layers.backward"
// TRAINED-SAME: -> (tensor<2x4xf32>, tensor<4xf32>)
func.func @rotary(%x: tensor<2x4xf32>) -> tensor<f32> {
  %cos = weft.parameter "cos_cached" : tensor<2x4xf32> = dense<0.5>
  %y = weft.layer "layers"(%x, %cos) index 0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%in: tensor<2x4xf32>, %c: tensor<2x4xf32>):
    %g = weft.parameter "layers.0.scale" : tensor<4xf32> = dense<1.5>
    %r = weft.mul %in, %c : tensor<2x4xf32>
    %n = weft.rms_norm %r, %g axis 1 epsilon 1.0e-5 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    weft.yield %n : tensor<2x4xf32>
  }
  %s = weft.reduce_mean %y axes [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// With every parameter frozen, nothing is trained.
// expected-error @+1 {{the loss depends on no parameter that is not frozen, so there is nothing to train}}
func.func @all_frozen(%x: tensor<4xf32>) -> tensor<f32> {
  %w = weft.parameter "sin_cached" : tensor<4xf32> = dense<1.0>
  %p = weft.mul %w, %x : tensor<4xf32>
  %s = weft.reduce_sum %p axes [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
