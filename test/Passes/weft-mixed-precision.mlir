// RUN: weft-opt %s -split-input-file -weft-mixed-precision | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-mixed-precision=compute=f16 | FileCheck %s --check-prefix=F16
// RUN: not weft-opt %s -split-input-file -weft-mixed-precision=compute=f8 2>&1 | FileCheck %s --check-prefix=BAD

// The signature stays f32; inside, every f32 tensor is bf16. The f32 weight
// keeps its value (1.00390625 is no bf16) and is read through one cast; the
// argument is narrowed where the body starts, the result widened where it is
// returned; constants are rounded; integers stay.
// CHECK-LABEL: func.func @main(%arg0: tensor<2x4xf32>, %arg1: tensor<2xi64>) -> (tensor<2x4xf32>, tensor<2xi64>)
// CHECK: %[[X:.*]] = weft.cast %arg0 : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: weft.constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]> : tensor<4xbf16>
// CHECK: %[[W:.*]] = weft.parameter "scale" : tensor<4xf32> = dense<1.00390625>
// CHECK: %[[W16:.*]] = weft.cast %[[W]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK: %[[A:.*]] = weft.add %[[X]], %{{.*}} : (tensor<2x4xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[N:.*]] = weft.layer_norm %[[A]], %[[W16]] {{.*}}tensor<2x4xbf16>
// CHECK: %[[M:.*]] = weft.mul %[[N]], %[[W16]]
// CHECK: weft.add {{.*}} : tensor<2xi64>
// CHECK: %[[R:.*]] = weft.cast %[[M]] : tensor<2x4xbf16> -> tensor<2x4xf32>
// CHECK: return %[[R]], %{{.*}} : tensor<2x4xf32>, tensor<2xi64>
// F16-LABEL: func.func @main(%arg0: tensor<2x4xf32>, %arg1: tensor<2xi64>) -> (tensor<2x4xf32>, tensor<2xi64>)
// F16: weft.cast %{{.*}} : tensor<4xf32> -> tensor<4xf16>
func.func @main(%x: tensor<2x4xf32>, %i: tensor<2xi64>) -> (tensor<2x4xf32>, tensor<2xi64>) {
  %c = weft.constant dense<[1.00390625, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %s = weft.parameter "scale" : tensor<4xf32> = dense<1.00390625>
  %0 = weft.add %x, %c : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %1 = weft.layer_norm %0, %s axis 1 epsilon 1.0e-5 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %2 = weft.mul %1, %s : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %3 = weft.add %i, %i : tensor<2xi64>
  return %2, %3 : tensor<2x4xf32>, tensor<2xi64>
}

// -----

// A layer's weights are read inside it: the cast is there too, and the
// layer's body computes in bf16.
// CHECK-LABEL: func.func @layer
// CHECK: weft.layer "block"(%{{.*}}) index 0 : (tensor<2x4xbf16>) -> tensor<2x4xbf16> {
// CHECK: ^bb0(%{{.*}}: tensor<2x4xbf16>):
// CHECK: %[[W:.*]] = weft.parameter "w" : tensor<4x4xf32>
// CHECK: %[[W16:.*]] = weft.cast %[[W]] : tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK: weft.matmul %{{.*}}, %[[W16]] : (tensor<2x4xbf16>, tensor<4x4xbf16>) -> tensor<2x4xbf16>

func.func @layer(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.layer "block"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %w = weft.parameter "w" : tensor<4x4xf32> = dense<0.25>
    %y = weft.matmul %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    weft.yield %y : tensor<2x4xf32>
  }
  return %0 : tensor<2x4xf32>
}

// -----

// BAD: error: -weft-mixed-precision: 'compute' must be bf16 or f16, not 'f8'
func.func @bad(%x: tensor<2xf32>) -> tensor<2xf32> {
  return %x : tensor<2xf32>
}

// -----

// Inside a layer, the rotary tables computed in the forward pass keep f32
// (positions past 256 have no bf16) and reach the 16-bit query through a
// cast; the query and the weight's read are bf16.
// CHECK-LABEL: func.func @rotary
// CHECK: weft.layer "block"
// CHECK: weft.parameter "w" : tensor<8x8xf32>
// CHECK: weft.iota dim 0 : tensor<300x1xf32>
// CHECK: %[[C:.*]] = weft.cos {{.*}} : tensor<300x8xf32>
// CHECK: %[[N:.*]] = weft.cast %[[C]] : tensor<300x8xf32> -> tensor<300x8xbf16>
// CHECK: weft.mul {{.*}}, %[[N]] : (tensor<1x300x8xbf16>, tensor<300x8xbf16>) -> tensor<1x300x8xbf16>
func.func @rotary(%x: tensor<1x300x8xf32>) -> tensor<1x300x8xf32> {
  %0 = weft.layer "block"(%x) index 0 : (tensor<1x300x8xf32>) -> tensor<1x300x8xf32> {
  ^bb0(%h: tensor<1x300x8xf32>):
    %w = weft.parameter "w" : tensor<8x8xf32>
    %q = weft.linear %h, %w : (tensor<1x300x8xf32>, tensor<8x8xf32>) -> tensor<1x300x8xf32>
    %f = weft.constant dense<0.5> : tensor<1x8xf32>
    %p = weft.iota dim 0 : tensor<300x1xf32>
    %a = weft.mul %p, %f : (tensor<300x1xf32>, tensor<1x8xf32>) -> tensor<300x8xf32>
    %c = weft.cos %a : tensor<300x8xf32>
    %r = weft.mul %q, %c : (tensor<1x300x8xf32>, tensor<300x8xf32>) -> tensor<1x300x8xf32>
    weft.yield %r : tensor<1x300x8xf32>
  }
  return %0 : tensor<1x300x8xf32>
}
