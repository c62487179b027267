// RUN: weft-opt -split-input-file -weft-keep-attention-statistics=recompute-attention %s | FileCheck %s

// Selective recomputation: the backward layer runs the attention again from
// the q, k, v and mask its gradient reads (which the forward layer keeps),
// just before the gradient; the forward layer is left as it was.
// CHECK-LABEL: func.func @selective
// CHECK: %[[F:.*]]:5 = weft.layer "block"(%{{.*}}, %{{.*}}) index 0
// CHECK: weft.attention %
// CHECK-NOT: weft.attention_block
// CHECK: weft.layer "block.backward"(%{{.*}}, %[[F]]#1, %[[F]]#2, %[[F]]#3, %[[F]]#4) index 0
// CHECK-NEXT: ^bb0(%[[D:.*]]: tensor<1x2x8x8xf32>, %[[Q:.*]]: tensor<1x2x8x8xf32>, %[[K:.*]]: tensor<1x2x8x8xf32>, %[[V:.*]]: tensor<1x2x8x8xf32>, %[[M:.*]]: tensor<1x1x8x8xi1>):
// CHECK-NEXT: %[[O:.*]], %[[L:.*]] = weft.attention_block %[[Q]], %[[K]], %[[V]] mask %[[M]] scale 2.500000e-01 causal
// CHECK-NEXT: weft.attention_grad %[[Q]], %[[K]], %[[V]] grad %[[D]] mask %[[M]] saved %[[O]], %[[L]] scale 2.500000e-01 causal
func.func @selective(%x: tensor<1x2x8x8xf32>, %m: tensor<1x1x8x8xi1>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %f:5 = weft.layer "block"(%x, %m) index 0 : (tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) {
  ^bb0(%in: tensor<1x2x8x8xf32>, %mask: tensor<1x1x8x8xi1>):
    %q = weft.neg %in : tensor<1x2x8x8xf32>
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %v = weft.tanh %in : tensor<1x2x8x8xf32>
    %a = weft.attention %q, %k, %v mask %mask scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> tensor<1x2x8x8xf32>
    weft.yield %a, %q, %k, %v, %mask : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>
  }
  %g = weft.layer "block.backward"(%d, %f#1, %f#2, %f#3, %f#4) index 0 : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> tensor<1x2x8x8xf32> {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %mask: tensor<1x1x8x8xi1>):
    %dq, %dk, %dv = weft.attention_grad %q, %k, %v grad %dy mask %mask scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    weft.yield %dq : tensor<1x2x8x8xf32>
  }
  return %f#0, %g : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// An attention in the gradient's block (full recomputation) is used as it is.
// CHECK-LABEL: func.func @full
// CHECK: %[[O:.*]], %[[L:.*]] = weft.attention_block
// CHECK-NOT: weft.attention_block
// CHECK: weft.attention_grad {{.*}} saved %[[O]], %[[L]]
func.func @full(%q: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %a = weft.attention %q, %q, %q scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %dq, %dk, %dv = weft.attention_grad %q, %q, %q grad %d scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  return %a, %dq : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}
