// RUN: weft-opt -weft-differentiate -split-input-file -verify-diagnostics %s | FileCheck %s
// RUN: weft-opt -weft-differentiate=scale-loss=true -split-input-file -verify-diagnostics %s | FileCheck %s --check-prefix=SCALED

// A dense layer, GELU and the mean cross-entropy: each op's gradient is built
// from weft ops; the function returns the loss and one gradient per parameter.
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: -> (tensor<f32>, tensor<8x16xf32> {weft.gradient_of = "fc.weight"}, tensor<16xf32> {weft.gradient_of = "fc.bias"})
// CHECK: %[[LOSS:.*]] = weft.cross_entropy
// CHECK: %[[LSE:.*]] = weft.reduce_logsumexp %[[A:.*]] axes [1] keep_dims : tensor<4x16xf32> -> tensor<4x1xf32>
// CHECK: %[[SHIFT:.*]] = weft.sub %[[A]], %[[LSE]]
// CHECK: weft.exp %[[SHIFT]] : tensor<4x16xf32>
// CHECK: weft.iota dim 1 : tensor<4x16xi64>
// CHECK: weft.compare eq
// CHECK: weft.erf
// CHECK: %[[DW:.*]] = weft.matmul %arg0, %{{.*}} transpose_lhs : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// CHECK: %[[SUM:.*]] = weft.reduce_sum %{{.*}} axes [0] keep_dims
// CHECK: %[[DB:.*]] = weft.reshape %[[SUM]] : tensor<1x16xf32> -> tensor<16xf32>
// CHECK: return %[[LOSS]], %[[DW]], %[[DB]]
// Loss scaling: the loss's gradient starts from the step's new last
// argument, not from 1.
// SCALED-LABEL: func.func @mlp
// SCALED-SAME: %[[S:[^:]*]]: tensor<f32> {weft.loss_scale})
// SCALED: weft.cross_entropy
// SCALED-NOT: weft.constant dense<1.000000e+00> : tensor<f32>
// SCALED: %[[D:.*]] = weft.div %[[S]], %{{.*}} : tensor<f32>
// SCALED: weft.mul %{{.*}}, %[[D]]
func.func @mlp(%x: tensor<4x8xf32>, %labels: tensor<4xi64>) -> tensor<f32> {
  %w = weft.parameter "fc.weight" : tensor<8x16xf32> = dense<0.5>
  %b = weft.parameter "fc.bias" : tensor<16xf32> = dense<0.0>
  %h = weft.linear %x, %w, %b : (tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %a = weft.gelu %h : tensor<4x16xf32>
  %l = weft.cross_entropy %a, %labels reduction mean : (tensor<4x16xf32>, tensor<4xi64>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A weight read twice (tied) gets one gradient, the sum of both uses.
// CHECK-LABEL: func.func @tied
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32> {weft.gradient_of = "w"})
// CHECK: %[[A:.*]] = weft.mul
// CHECK: %[[B:.*]] = weft.mul
// CHECK: %[[G:.*]] = weft.add
// CHECK: return %{{.*}}, %[[G]]
func.func @tied(%x: tensor<4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<4xf32> = dense<2.0>
  %w2 = weft.parameter "w" : tensor<4xf32> = dense<2.0>
  %y = weft.mul %x, %w : tensor<4xf32>
  %z = weft.add %y, %w2 : tensor<4xf32>
  %s = weft.reduce_sum %z axes [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Rotary frequencies: d sin(x) = cos(x) dx and d cos(x) = -sin(x) dx.
// CHECK-LABEL: func.func @sin_cos
// CHECK-SAME: -> (tensor<f32>, tensor<4xf32> {weft.gradient_of = "f"})
// CHECK: %[[X:.*]] = weft.mul %arg0, %{{.*}} : tensor<4xf32>
// CHECK: %[[S:.*]] = weft.sin %[[X]] : tensor<4xf32>
// CHECK: %[[C:.*]] = weft.cos %[[X]] : tensor<4xf32>
// The backward, in reverse order: cos's, then sin's, summed into d(a).
// CHECK: %[[DC:.*]] = weft.sin %[[X]] : tensor<4xf32>
// CHECK-NEXT: %[[NEG:.*]] = weft.neg %[[DC]] : tensor<4xf32>
// CHECK-NEXT: %[[GC:.*]] = weft.mul %[[DY:.*]], %[[NEG]] : tensor<4xf32>
// CHECK-NEXT: %[[DS:.*]] = weft.cos %[[X]] : tensor<4xf32>
// CHECK-NEXT: %[[GS:.*]] = weft.mul %[[DY]], %[[DS]] : tensor<4xf32>
// CHECK-NEXT: %[[DA:.*]] = weft.add %[[GC]], %[[GS]] : tensor<4xf32>
// CHECK-NEXT: %[[DF:.*]] = weft.mul %[[DA]], %arg0 : tensor<4xf32>
// CHECK-NEXT: return %{{.*}}, %[[DF]]
func.func @sin_cos(%x: tensor<4xf32>) -> tensor<f32> {
  %f = weft.parameter "f" : tensor<4xf32> = dense<0.5>
  %a = weft.mul %x, %f : tensor<4xf32>
  %s = weft.sin %a : tensor<4xf32>
  %c = weft.cos %a : tensor<4xf32>
  %y = weft.add %s, %c : tensor<4xf32>
  %r = weft.reduce_sum %y axes [0] : tensor<4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// d |x| = sign(x) dx: the result's gradient where x > 0, minus it where
// x < 0, nothing at 0 (as torch's abs backward).
// CHECK-LABEL: func.func @abs
// CHECK: %[[X:.*]] = weft.sub %arg0, %{{.*}} : tensor<4xf32>
// CHECK: weft.abs %[[X]] : tensor<4xf32>
// CHECK: %[[GT:.*]] = weft.compare gt, %[[X]], %[[Z:.*]] :
// CHECK: %[[UP:.*]] = weft.where %[[GT]], %[[DY:.*]], %{{.*}} :
// CHECK: %[[LT:.*]] = weft.compare lt, %[[X]], %[[Z]] :
// CHECK: %[[DOWN:.*]] = weft.where %[[LT]], %[[DY]], %{{.*}} :
// CHECK: %[[DX:.*]] = weft.sub %[[UP]], %[[DOWN]] : tensor<4xf32>
// CHECK: weft.neg %[[DX]] : tensor<4xf32>
func.func @abs(%x: tensor<4xf32>) -> tensor<f32> {
  %c = weft.parameter "c" : tensor<4xf32> = dense<0.5>
  %d = weft.sub %x, %c : tensor<4xf32>
  %a = weft.abs %d : tensor<4xf32>
  %r = weft.reduce_sum %a axes [0] : tensor<4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// A running sum's gradient is the running sum of the result's gradient the
// other way, as exclusive as the forward.
// CHECK-LABEL: func.func @cumsum
// CHECK: weft.cumsum %{{.*}} axis 1 exclusive : tensor<2x4xf32>
// CHECK: weft.cumsum %{{.*}} axis 1 exclusive reverse : tensor<2x4xf32>
func.func @cumsum(%x: tensor<2x4xf32>) -> tensor<f32> {
  %c = weft.parameter "c" : tensor<2x4xf32> = dense<0.5>
  %d = weft.mul %x, %c : tensor<2x4xf32>
  %s = weft.cumsum %d axis 1 exclusive : tensor<2x4xf32>
  %q = weft.mul %s, %s : tensor<2x4xf32>
  %r = weft.reduce_sum %q axes [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %r : tensor<f32>
}

// -----

// A layer's gradient is a backward layer: it takes the layer's inputs and its
// result's gradient, recomputes the body, and yields the gradients of the
// inputs that need one (none here: %x is data) and of the body's parameters.
// CHECK-LABEL: func.func @layers
// CHECK: %[[L:.*]] = weft.layer "block"(%arg0) index 0
// CHECK: %[[B:.*]] = weft.layer "block.backward"(%arg0, %{{.*}}) index 0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4xf32>
// CHECK: weft.parameter "block.0.scale"
// CHECK: weft.rms_norm
// CHECK: weft.rsqrt
// CHECK: weft.yield
// CHECK: return %{{.*}}, %[[B]] :
func.func @layers(%x: tensor<2x4xf32>) -> tensor<f32> {
  %y = weft.layer "block"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%in: tensor<2x4xf32>):
    %g = weft.parameter "block.0.scale" : tensor<4xf32> = dense<1.5>
    %n = weft.rms_norm %in, %g axis 1 epsilon 1.0e-5 : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
    weft.yield %n : tensor<2x4xf32>
  }
  %s = weft.reduce_mean %y axes [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// Collectives differentiate to their transposes: an all-gather's gradient is
// a reduce-scatter of the result's gradient.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @gathered
// CHECK: weft.all_gather
// CHECK: weft.reduce_scatter sum %{{.*}} over @mesh ["tp"] dim 0 : tensor<4xf32> -> tensor<2xf32>
func.func @gathered(%x: tensor<4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<2xf32> = dense<1.0>
  %g = weft.all_gather %w over @mesh ["tp"] dim 0 : tensor<2xf32> -> tensor<4xf32>
  %p = weft.mul %g, %x : tensor<4xf32>
  %s = weft.reduce_sum %p axes [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// expected-error @+1 {{does not return a scalar loss first}}
func.func @not_a_loss(%x: tensor<4xf32>) -> tensor<4xf32> {
  %w = weft.parameter "w" : tensor<4xf32> = dense<1.0>
  %y = weft.mul %x, %w : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// expected-error @+1 {{the loss depends on no parameter}}
func.func @nothing_to_train(%x: tensor<4xf32>) -> tensor<f32> {
  %s = weft.reduce_sum %x axes [0] : tensor<4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// A strided slice's gradient: the result's gradient every `stride` places,
// zeros between (concatenated on a new axis and merged), cut to the input's
// places after the start and padded before it. Its values are checked in
// weft-differentiate-strided-slice.mlir.
// CHECK-LABEL: func.func @strided
// CHECK: %[[DZ:.*]] = weft.reshape %{{.*}} : tensor<2xf32> -> tensor<2x1xf32>
// CHECK: %[[SP:.*]] = weft.concat %[[DZ]], %{{.*}} axis 1 : (tensor<2x1xf32>, tensor<2x1xf32>) -> tensor<2x2xf32>
// CHECK: %[[FLAT:.*]] = weft.reshape %[[SP]] : tensor<2x2xf32> -> tensor<4xf32>
// CHECK: %[[CUT:.*]] = weft.slice %[[FLAT]] starts [0] limits [3] : tensor<4xf32> -> tensor<3xf32>
// CHECK: weft.concat %{{.*}}, %[[CUT]] axis 0 : (tensor<1xf32>, tensor<3xf32>) -> tensor<4xf32>
func.func @strided(%x: tensor<4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<4xf32> = dense<1.0>
  %y = weft.mul %x, %w : tensor<4xf32>
  %z = weft.slice %y starts [1] limits [4] strides [2] : tensor<4xf32> -> tensor<2xf32>
  %s = weft.reduce_sum %z axes [0] : tensor<2xf32> -> tensor<f32>
  return %s : tensor<f32>
}
