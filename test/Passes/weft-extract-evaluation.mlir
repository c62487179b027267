// RUN: weft-opt %s -split-input-file -weft-extract-evaluation -verify-diagnostics | FileCheck %s

// A partitioned training step: the forward layer reads its weight, drops
// out and all-reduces over tp; the loss is all-reduced over dp; the backward
// layer computes the weight's gradient with an all-reduce of its own. The
// evaluation step keeps the step's arguments and the forward to the loss:
// the forward's collectives stay, dropout is gone, and the backward, its
// all-reduce and the gradient are erased. The step is unchanged, and the
// optimizer step is left alone.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @step(
// CHECK-SAME: attributes {weft.gradient_reduction = @step_reduce}
// CHECK: weft.dropout
// CHECK: weft.layer "h.backward"
// CHECK-LABEL: func.func @step_evaluation(
// CHECK-SAME: %[[IDS:.*]]: tensor<2x4xf32>, %[[LABELS:.*]]: tensor<2x4xf32>, %[[SCALE:.*]]: tensor<f32> {weft.loss_scale})
// CHECK-SAME: -> (tensor<f32> {weft.local_sharding = #weft.sharding<@mesh, []>})
// CHECK-SAME: attributes {weft.evaluation_step}
// CHECK-NOT: weft.dropout
// CHECK: %[[H:.*]] = weft.layer "h"(%[[IDS]])
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["tp"]
// CHECK: weft.yield
// CHECK: %[[D:.*]] = weft.sub %[[H]], %[[LABELS]]
// CHECK: %[[L:.*]] = weft.reduce_sum
// CHECK: %[[R:.*]] = weft.all_reduce sum %[[L]] over @mesh ["dp"] : tensor<f32>
// CHECK-NOT: weft.layer
// CHECK-NOT: weft.all_reduce
// CHECK: return %[[R]] : tensor<f32>
// CHECK-LABEL: func.func @step_reduce(
// CHECK-LABEL: func.func @optimizer(
func.func @step(%ids: tensor<2x4xf32>, %labels: tensor<2x4xf32>, %scale: tensor<f32> {weft.loss_scale})
    -> (tensor<f32> {weft.local_sharding = #weft.sharding<@mesh, []>},
        tensor<4x4xf32> {weft.gradient_of = "w"})
    attributes {weft.gradient_reduction = @step_reduce} {
  %h = weft.layer "h"(%ids) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %w = weft.parameter "w" : tensor<4x4xf32>
    %m = weft.matmul %a, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %d = weft.dropout %m ratio 1.000000e-01 : tensor<2x4xf32>
    %r = weft.all_reduce sum %d over @mesh ["tp"] : tensor<2x4xf32>
    weft.yield %r : tensor<2x4xf32>
  }
  %diff = weft.sub %h, %labels : tensor<2x4xf32>
  %sq = weft.mul %diff, %diff : tensor<2x4xf32>
  %sum = weft.reduce_sum %sq axes [0, 1] : tensor<2x4xf32> -> tensor<f32>
  %loss = weft.all_reduce sum %sum over @mesh ["dp"] : tensor<f32>
  %seed = weft.mul %diff, %diff : tensor<2x4xf32>
  %g = weft.layer "h.backward"(%ids, %seed) index 0 : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<2x4xf32>, %s: tensor<2x4xf32>):
    %p = weft.matmul %a, %s transpose_lhs : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    %gr = weft.all_reduce sum %p over @mesh ["tp"] : tensor<4x4xf32>
    weft.yield %gr : tensor<4x4xf32>
  }
  return %loss, %g : tensor<f32>, tensor<4x4xf32>
}
func.func @step_reduce(%g: tensor<4x4xf32>) -> tensor<4x4xf32> {
  %r = weft.all_reduce sum %g over @mesh ["dp"] : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
func.func @optimizer(%w: tensor<4x4xf32>, %g: tensor<4x4xf32>) -> tensor<4x4xf32>
    attributes {weft.optimizer = "sgd"} {
  %n = weft.sub %w, %g : tensor<4x4xf32>
  return %n : tensor<4x4xf32>
}

// -----

// A step whose first result is not a scalar loss has no evaluation step.
// expected-error @below {{the evaluation step returns the training step's loss, its first result, a float scalar; this step's first result is 'tensor<4xf32>'}}
func.func @step(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @below {{-weft-extract-evaluation needs a training step}}
module {
  func.func private @external(tensor<4xf32>) -> tensor<f32>
}

// -----

// A pipeline's stages are refused.
// expected-error @below {{a pipeline's stages have no evaluation step yet}}
module attributes {weft.pipeline = {stages = 2, chunks = 1}} {
  func.func @step(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}
