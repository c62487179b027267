// RUN: weft-opt -weft-differentiate=recompute=op %s | FileCheck %s

// recompute=op (torchtitan's selective per-op checkpointing): the forward
// layer keeps the attention's output and the 1st and 3rd of the four weight
// GEMMs' (%q, as the reshape to heads that alone reads it, and %u); the
// backward layer recomputes the 2nd GEMM (%k), the norm and the SiLU from
// those and the layer's input. What no backward op reads is not kept nor
// recomputed: the 4th GEMM's output feeds only the residual add, whose
// gradient reads neither operand.
// CHECK: %[[F:.*]]:4 = weft.layer "block"(%arg0) index 0
// CHECK: %[[N:.*]] = weft.rms_norm
// CHECK: %[[Q:.*]] = weft.linear %[[N]], %{{.*}} : (tensor<1x8x16xf32>
// CHECK: %[[K:.*]] = weft.linear %[[N]], %{{.*}} : (tensor<1x8x16xf32>
// CHECK: %[[QH:.*]] = weft.reshape %[[Q]]
// CHECK: %[[A:.*]] = weft.attention
// CHECK: %[[U:.*]] = weft.linear
// CHECK: weft.silu %[[U]]
// CHECK: weft.linear
// CHECK: weft.yield %{{.*}}, %[[U]], %[[A]], %[[QH]] :
// CHECK: weft.layer "block.backward"(%arg0, %{{.*}}, %[[F]]#1, %[[F]]#2, %[[F]]#3)
// CHECK-NEXT: ^bb0(%[[IN:.*]]: tensor<1x8x16xf32>, %{{.*}}: tensor<1x8x16xf32>, %[[KU:.*]]: tensor<1x8x16xf32>, %[[KA:.*]]: tensor<1x1x8x16xf32>, %[[KQ:.*]]: tensor<1x1x8x16xf32>):
// CHECK: %[[RN:.*]] = weft.rms_norm %[[IN]]
// CHECK-NEXT: %[[RK:.*]] = weft.linear %[[RN]]
// CHECK-NEXT: %[[RKH:.*]] = weft.reshape %[[RK]]
// CHECK-NEXT: weft.reshape %[[KA]]
// CHECK-NEXT: weft.silu %[[KU]]
// CHECK-NOT: weft.attention %
// CHECK: weft.attention_grad %[[KQ]], %[[RKH]], %[[RKH]]
// CHECK: weft.yield

func.func @layer(%x: tensor<1x8x16xf32>) -> tensor<f32> {
  %y = weft.layer "block"(%x) index 0 : (tensor<1x8x16xf32>) -> tensor<1x8x16xf32> {
  ^bb0(%in: tensor<1x8x16xf32>):
    %g = weft.parameter "block.0.norm" : tensor<16xf32> = dense<1.0>
    %wq = weft.parameter "block.0.wq" : tensor<16x16xf32> = dense<0.05>
    %wk = weft.parameter "block.0.wk" : tensor<16x16xf32> = dense<0.04>
    %wu = weft.parameter "block.0.wu" : tensor<16x16xf32> = dense<0.03>
    %wd = weft.parameter "block.0.wd" : tensor<16x16xf32> = dense<0.02>
    %n = weft.rms_norm %in, %g axis 2 epsilon 1.0e-05 : (tensor<1x8x16xf32>, tensor<16xf32>) -> tensor<1x8x16xf32>
    %q = weft.linear %n, %wq : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %k = weft.linear %n, %wk : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %q4 = weft.reshape %q : tensor<1x8x16xf32> -> tensor<1x1x8x16xf32>
    %k4 = weft.reshape %k : tensor<1x8x16xf32> -> tensor<1x1x8x16xf32>
    %a4 = weft.attention %q4, %k4, %k4 scale 0.25 causal : (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<1x1x8x16xf32>
    %a = weft.reshape %a4 : tensor<1x1x8x16xf32> -> tensor<1x8x16xf32>
    %u = weft.linear %a, %wu : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %s = weft.silu %u : tensor<1x8x16xf32>
    %d = weft.linear %s, %wd : (tensor<1x8x16xf32>, tensor<16x16xf32>) -> tensor<1x8x16xf32>
    %o = weft.add %d, %in : tensor<1x8x16xf32>
    weft.yield %o : tensor<1x8x16xf32>
  }
  %t = weft.reduce_sum %y axes [0, 1, 2] : tensor<1x8x16xf32> -> tensor<f32>
  return %t : tensor<f32>
}
