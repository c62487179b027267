// RUN: weft-opt -weft-differentiate=recompute=full %s | FileCheck %s --check-prefix=FULL
// RUN: weft-opt -weft-differentiate=recompute=none %s | FileCheck %s --check-prefix=NONE
// RUN: weft-opt -weft-differentiate=recompute=selective %s | FileCheck %s --check-prefix=SEL
// RUN: not weft-opt -weft-differentiate=recompute=some %s 2>&1 | FileCheck %s --check-prefix=BAD

// full: the backward layer recomputes the forward from the layer's input.
// FULL: %[[F:.*]] = weft.layer "block"(%arg0) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32>
// FULL: weft.layer "block.backward"(%arg0, %{{.*}}) index 0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
// FULL: weft.linear
// FULL: weft.softmax

// none: the forward layer also yields what backward reads of it (the
// softmax's output), and the backward layer takes it instead of recomputing.
// NONE: %[[F:.*]]:2 = weft.layer "block"(%arg0) index 0 : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// NONE: %[[P:.*]] = weft.softmax
// NONE: weft.yield %{{.*}}, %[[P]] : tensor<2x4xf32>, tensor<2x4xf32>
// NONE: weft.layer "block.backward"(%arg0, %{{.*}}, %[[F]]#1)
// NONE-NOT: weft.softmax
// NONE-NOT: weft.linear
// NONE: weft.yield

// selective: the attention core (marked) is recomputed from the kept
// linear output; nothing else is.
// SEL: %[[F:.*]]:2 = weft.layer "block"(%arg0) index 0 : (tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>)
// SEL: %[[H:.*]] = weft.linear
// SEL: weft.yield %{{.*}}, %[[H]] : tensor<2x4xf32>, tensor<2x4xf32>
// SEL: weft.layer "block.backward"(%arg0, %{{.*}}, %[[F]]#1)
// SEL-NEXT: ^bb0(%{{.*}}: tensor<2x4xf32>, %{{.*}}: tensor<2x4xf32>, %[[KEPT:.*]]: tensor<2x4xf32>):
// SEL-NEXT: weft.softmax %[[KEPT]] axis 1 {weft.attention_core}

// BAD: recompute 'some' is not full, selective, op or none
func.func @layer(%x: tensor<2x4xf32>) -> tensor<f32> {
  %y = weft.layer "block"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%in: tensor<2x4xf32>):
    %w = weft.parameter "block.0.w" : tensor<4x4xf32> = dense<0.25>
    %h = weft.linear %in, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %p = weft.softmax %h axis 1 {weft.attention_core} : tensor<2x4xf32>
    %o = weft.mul %p, %in : tensor<2x4xf32>
    weft.yield %o : tensor<2x4xf32>
  }
  %s = weft.reduce_sum %y axes [0, 1] : tensor<2x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
