// RUN: weft-opt %s -weft-split-stages="stages=2" | FileCheck %s

// A rotary table gathered from a cached buffer (a parameter) by the position
// ids is read by the layers of both stages. It depends on no activation, so
// each stage that reads it rebuilds it (as Megatron computes rotary
// embeddings on every stage) instead of stage 0 sending it, and its gradient
// back, every micro-batch: the residual stream is the only value sent.
// CHECK-LABEL: func.func @rope_stage0(
// CHECK-SAME: -> (tensor<2x8x16xf32> {weft.sent_to = 1 : i64})
// CHECK: weft.parameter "cos_cached"
// CHECK: weft.iota
// CHECK: weft.embedding
// CHECK: weft.layer "h"({{.*}}) index 0
// CHECK-LABEL: func.func @rope_stage1(
// CHECK-SAME: %arg0: tensor<2x8x16xf32> {weft.received_from = 0 : i64})
// CHECK-SAME: -> (tensor<2x8x16xf32> {weft.model_output = 0 : i64})
// CHECK: weft.parameter "cos_cached"
// CHECK: weft.iota
// CHECK: %[[COS:.*]] = weft.embedding
// CHECK: weft.layer "h"(%arg0, %[[COS]]) index 1

func.func @rope(%ids: tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  %wte = weft.parameter "wte" : tensor<32x16xf32>
  %tok = weft.embedding %wte[%ids] : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %cached = weft.parameter "cos_cached" : tensor<16x16xf32>
  %pos = weft.iota dim 1 : tensor<2x8xi64>
  %cos = weft.embedding %cached[%pos] : (tensor<16x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %h0 = weft.layer "h"(%tok, %cos) index 0 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>, %c: tensor<2x8x16xf32>):
    %r = weft.mul %a, %c : tensor<2x8x16xf32>
    %s = weft.add %a, %r : tensor<2x8x16xf32>
    weft.yield %s : tensor<2x8x16xf32>
  }
  %h1 = weft.layer "h"(%h0, %cos) index 1 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>, %c: tensor<2x8x16xf32>):
    %r = weft.mul %a, %c : tensor<2x8x16xf32>
    %s = weft.add %a, %r : tensor<2x8x16xf32>
    weft.yield %s : tensor<2x8x16xf32>
  }
  return %h1 : tensor<2x8x16xf32>
}
