// RUN: weft-opt %s -split-input-file -weft-convert-float-type=to=bf16 | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-convert-float-type=to=f16 | FileCheck %s --check-prefix=F16
// RUN: not weft-opt %s -split-input-file -weft-convert-float-type=to=f8 2>&1 | FileCheck %s --check-prefix=BAD

// Every f32 tensor becomes bf16: arguments, results, op results, constants
// (rounded: 1.00390625 is not a bf16 and rounds to 1.0); integer tensors and
// scalar attributes (the norm's epsilon) stay.
// CHECK-LABEL: func.func @main(%arg0: tensor<2x4xbf16>, %arg1: tensor<2xi64>) -> (tensor<2x4xbf16>, tensor<2xi64>)
// CHECK: weft.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xbf16>
// CHECK: weft.parameter "scale" : tensor<4xbf16> = dense<5.000000e-01>
// CHECK: weft.add {{.*}} : (tensor<2x4xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
// CHECK: weft.layer_norm {{.*}} epsilon 9.99999974E-6 : {{.*}}tensor<2x4xbf16>
// CHECK: weft.add {{.*}} : tensor<2xi64>
// F16-LABEL: func.func @main(%arg0: tensor<2x4xf16>, %arg1: tensor<2xi64>) -> (tensor<2x4xf16>, tensor<2xi64>)
func.func @main(%x: tensor<2x4xf32>, %i: tensor<2xi64>) -> (tensor<2x4xf32>, tensor<2xi64>) {
  %c = weft.constant dense<[1.00390625, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %s = weft.parameter "scale" : tensor<4xf32> = dense<0.5>
  %0 = weft.add %x, %c : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = weft.layer_norm %0, %s axis 1 epsilon 1.0e-5 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = weft.add %i, %i : tensor<2xi64>
  return %1, %2 : tensor<2x4xf32>, tensor<2xi64>
}

// -----

// A weight in a file keeps its file: the parameter says that the file holds
// f32 (stored = f32), which whoever reads it rounds to bf16.
// CHECK-LABEL: func.func @external
// CHECK: weft.parameter "w" external <"model.weights", offset = 16, length = 32, stored = f32> : tensor<2x4xbf16>
// CHECK: weft.parameter "i" external <"model.weights", offset = 48, length = 64> : tensor<8xi64>
func.func @external(%x: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<8xi64>) {
  %w = weft.parameter "w" external <"model.weights", offset = 16, length = 32> : tensor<2x4xf32>
  %i = weft.parameter "i" external <"model.weights", offset = 48, length = 64> : tensor<8xi64>
  %0 = weft.add %x, %w : tensor<2x4xf32>
  return %0, %i : tensor<2x4xf32>, tensor<8xi64>
}

// -----

// Positions are computed in f32 (the rotary embedding's angles, their cos
// and sin: what reads iotas and constants alone, as the builder and
// Hugging Face's forward compute them; bf16 has no 257): they keep their
// type, the frequencies their f32 value (0.1 is no bf16), and one cast
// narrows each where the query reads it. A constant that a narrowed op reads
// is narrowed as before.
// CHECK-LABEL: func.func @rotary(%arg0: tensor<2x300x4xbf16>) -> tensor<2x300x4xbf16>
// CHECK: %[[F:.*]] = weft.constant dense<{{\[\[}}1.000000e+00, 1.000000e-01, 1.000000e+00, 1.000000e-01]]> : tensor<1x4xf32>
// CHECK: %[[P:.*]] = weft.iota dim 0 : tensor<300x1xf32>
// CHECK: %[[A:.*]] = weft.mul %[[P]], %[[F]] : (tensor<300x1xf32>, tensor<1x4xf32>) -> tensor<300x4xf32>
// CHECK: %[[C:.*]] = weft.cos %[[A]] : tensor<300x4xf32>
// CHECK: %[[NC:.*]] = weft.cast %[[C]] : tensor<300x4xf32> -> tensor<300x4xbf16>
// CHECK: %[[S:.*]] = weft.sin %[[A]] : tensor<300x4xf32>
// CHECK: %[[NS:.*]] = weft.cast %[[S]] : tensor<300x4xf32> -> tensor<300x4xbf16>
// CHECK: weft.mul %arg0, %[[NC]] : (tensor<2x300x4xbf16>, tensor<300x4xbf16>) -> tensor<2x300x4xbf16>
// CHECK: weft.mul %arg0, %[[NS]] : (tensor<2x300x4xbf16>, tensor<300x4xbf16>) -> tensor<2x300x4xbf16>
// CHECK: weft.constant dense<2.000000e+00> : tensor<4xbf16>
func.func @rotary(%x: tensor<2x300x4xf32>) -> tensor<2x300x4xf32> {
  %f = weft.constant dense<[[1.0, 0.1, 1.0, 0.1]]> : tensor<1x4xf32>
  %p = weft.iota dim 0 : tensor<300x1xf32>
  %a = weft.mul %p, %f : (tensor<300x1xf32>, tensor<1x4xf32>) -> tensor<300x4xf32>
  %c = weft.cos %a : tensor<300x4xf32>
  %s = weft.sin %a : tensor<300x4xf32>
  %0 = weft.mul %x, %c : (tensor<2x300x4xf32>, tensor<300x4xf32>) -> tensor<2x300x4xf32>
  %1 = weft.mul %x, %s : (tensor<2x300x4xf32>, tensor<300x4xf32>) -> tensor<2x300x4xf32>
  %2 = weft.add %0, %1 : tensor<2x300x4xf32>
  %two = weft.constant dense<2.0> : tensor<4xf32>
  %3 = weft.mul %2, %two : (tensor<2x300x4xf32>, tensor<4xf32>) -> tensor<2x300x4xf32>
  return %3 : tensor<2x300x4xf32>
}

// -----

// BAD: error: -weft-convert-float-type: 'to' must be bf16 or f16, not 'f8'
func.func @bad(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}
