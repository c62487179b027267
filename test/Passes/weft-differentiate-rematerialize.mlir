// RUN: weft-opt -weft-differentiate=recompute=none -split-input-file %s | FileCheck %s
// RUN: weft-opt -weft-differentiate=recompute=selective -split-input-file %s | FileCheck %s --check-prefix=SEL

// SwiGLU without recomputation: the forward layer keeps the gate (its SiLU's
// gradient reads it), the up projection and the product (the down GEMM's
// input), but not silu(gate), which only the product's elementwise gradient
// reads: the backward layer recomputes it from the kept gate, as
// Megatron-Core's fused SwiGLU does.
// CHECK-LABEL: func.func @swiglu
// CHECK: %[[F:.*]]:4 = weft.layer "mlp"(%arg0) index 0
// CHECK: %[[G:.*]] = weft.linear
// CHECK: %[[U:.*]] = weft.linear
// CHECK: %[[S:.*]] = weft.silu %[[G]]
// CHECK: %[[P:.*]] = weft.mul %[[S]], %[[U]]
// CHECK: weft.yield %{{.*}}, %[[P]], %[[U]], %[[G]] :
// CHECK: weft.layer "mlp.backward"(%arg0, %{{.*}}, %[[F]]#1, %[[F]]#2, %[[F]]#3)
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<1x8x16xf32>, %{{.*}}: tensor<1x8x16xf32>, %{{.*}}: tensor<1x8x32xf32>, %[[KU:.*]]: tensor<1x8x32xf32>, %[[KG:.*]]: tensor<1x8x32xf32>):
// CHECK: %[[RS:.*]] = weft.silu %[[KG]]
// CHECK: weft.mul %{{.*}}, %[[RS]]
// CHECK: weft.yield
// SEL-LABEL: func.func @swiglu
// SEL: weft.yield %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<1x8x16xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>, tensor<1x8x32xf32>
// SEL: weft.layer "mlp.backward"
// SEL: weft.silu %

func.func @swiglu(%x: tensor<1x8x16xf32>) -> tensor<f32> {
  %y = weft.layer "mlp"(%x) index 0 : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  ^bb0(%in: tensor<1x8x16xf32>):
    %wg = weft.parameter "mlp.0.gate" : tensor<16x32xf32> = dense<0.05>
    %wu = weft.parameter "mlp.0.up" : tensor<16x32xf32> = dense<0.04>
    %wd = weft.parameter "mlp.0.down" : tensor<32x16xf32> = dense<0.03>
    %g = weft.linear %in, %wg : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    %u = weft.linear %in, %wu : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    %s = weft.silu %g : tensor<1x8x32xf32>
    %p = weft.mul %s, %u : tensor<1x8x32xf32>
    %d = weft.linear %p, %wd : (tensor<1x8x32xf32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    %o = weft.add %d, %in : tensor<1x8x16xf32>
    weft.yield %o : tensor<1x8x16xf32>
  }
  %t = weft.reduce_sum %y axes [0, 1, 2] : tensor<1x8x16xf32> -> tensor<f32>
  return %t : tensor<f32>
}

// -----

// GELU: its result is the down GEMM's input, which a GEMM's gradient reads:
// kept, with the GELU's input, as Megatron keeps both.
// CHECK-LABEL: func.func @gelu
// CHECK: %[[F:.*]]:3 = weft.layer "mlp"(%arg0) index 0
// CHECK: %[[H:.*]] = weft.linear
// CHECK: %[[A:.*]] = weft.gelu %[[H]]
// CHECK: weft.yield %{{.*}}, %[[A]], %[[H]] :
// CHECK: weft.layer "mlp.backward"
// CHECK-NOT: weft.gelu %
// CHECK: weft.yield
// SEL-LABEL: func.func @gelu
// SEL: weft.layer "mlp.backward"
// SEL-NOT: weft.gelu %
// SEL: weft.yield

func.func @gelu(%x: tensor<1x8x16xf32>) -> tensor<f32> {
  %y = weft.layer "mlp"(%x) index 0 : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  ^bb0(%in: tensor<1x8x16xf32>):
    %w1 = weft.parameter "mlp.0.fc1" : tensor<16x32xf32> = dense<0.05>
    %w2 = weft.parameter "mlp.0.fc2" : tensor<32x16xf32> = dense<0.03>
    %h = weft.linear %in, %w1 : (tensor<1x8x16xf32>, tensor<16x32xf32>) -> tensor<1x8x32xf32>
    %a = weft.gelu %h : tensor<1x8x32xf32>
    %d = weft.linear %a, %w2 : (tensor<1x8x32xf32>, tensor<32x16xf32>) -> tensor<1x8x16xf32>
    %o = weft.add %d, %in : tensor<1x8x16xf32>
    weft.yield %o : tensor<1x8x16xf32>
  }
  %t = weft.reduce_sum %y axes [0, 1, 2] : tensor<1x8x16xf32> -> tensor<f32>
  return %t : tensor<f32>
}
