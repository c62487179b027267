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

// A step cut into pipeline stages: each stage's forward gets an evaluation
// function (role "evaluation") that returns what it sends and the model's
// outputs, not what it keeps for the backward, in eval mode; the backward
// functions are left alone. The evaluation's schedule is each rank's
// forward steps of the 1F1B schedule, in its order.
// CHECK-LABEL: module attributes
// CHECK-SAME: evaluation_steps = {{\[}}["F0", ">a1:0", "F1", ">a1:1"], ["<a0:0", "F0", "<a0:1", "F1"]]
// CHECK-SAME: steps = {{\[}}["F0", ">a1:0", "F1", ">a1:1", "<g1:0", "B0", "<g1:1", "B1"], ["<a0:0", "F0", "B0", ">g0:0", "<a0:1", "F1", "B1", ">g0:1"]]
// CHECK-LABEL: func.func @main_stage0(
// CHECK: weft.dropout
// CHECK-LABEL: func.func @main_stage0_evaluation(
// CHECK-SAME: %[[X:.*]]: tensor<2x4xf32> {weft.model_input = 0 : i64})
// CHECK-SAME: -> (tensor<2x4xf32> {weft.sent_to = 1 : i64})
// CHECK-SAME: attributes {weft.load_balanced = ["cp"], weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "evaluation", stage = 0 : i64}}
// CHECK-NEXT: %[[W:.*]] = weft.parameter "w0"
// CHECK-NEXT: %[[M:.*]] = weft.matmul %[[X]], %[[W]]
// CHECK-NEXT: return %[[M]] : tensor<2x4xf32>
// CHECK-LABEL: func.func @main_stage0_backward(
// CHECK-LABEL: func.func @main_stage1(
// CHECK-LABEL: func.func @main_stage1_evaluation(
// CHECK-SAME: %[[LABELS:.*]]: tensor<2x4xf32> {weft.model_input = 1 : i64}, %[[H:.*]]: tensor<2x4xf32> {weft.received_from = 0 : i64})
// CHECK-SAME: -> (tensor<f32> {weft.model_output = 0 : i64})
// CHECK-SAME: attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "evaluation", stage = 1 : i64}}
// CHECK-NEXT: %[[D:.*]] = weft.sub %[[H]], %[[LABELS]]
// CHECK-NEXT: %[[S:.*]] = weft.mul %[[D]], %[[D]]
// CHECK-NEXT: %[[L:.*]] = weft.reduce_sum %[[S]]
// CHECK-NEXT: return %[[L]] : tensor<f32>
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 2 : i64,
    steps = [["F0", ">a1:0", "F1", ">a1:1", "<g1:0", "B0", "<g1:1", "B1"], ["<a0:0", "F0", "B0", ">g0:0", "<a0:1", "F1", "B1", ">g0:1"]]}} {
  weft.mesh @mesh(pp = 2, cp = 1)
  func.func @main_stage0(%x: tensor<2x4xf32> {weft.model_input = 0 : i64})
      -> (tensor<2x4xf32> {weft.sent_to = 1 : i64}, tensor<2x4xf32> {weft.saved = 0 : i64})
      attributes {weft.load_balanced = ["cp"], weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64, role = "forward"}} {
    %w = weft.parameter "w0" : tensor<4x4xf32>
    %m = weft.matmul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %d = weft.dropout %m ratio 1.000000e-01 : tensor<2x4xf32>
    %kept = weft.mul %x, %x : tensor<2x4xf32>
    return %d, %kept : tensor<2x4xf32>, tensor<2x4xf32>
  }
  func.func @main_stage0_backward(%x: tensor<2x4xf32> {weft.saved = 0 : i64}, %g: tensor<2x4xf32> {weft.cotangent_of = 0 : i64})
      -> (tensor<4x4xf32> {weft.gradient_of = "w0"})
      attributes {weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64, role = "backward"}} {
    %p = weft.matmul %x, %g transpose_lhs : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    return %p : tensor<4x4xf32>
  }
  func.func @main_stage1(%labels: tensor<2x4xf32> {weft.model_input = 1 : i64}, %h: tensor<2x4xf32> {weft.received_from = 0 : i64})
      -> (tensor<f32> {weft.model_output = 0 : i64}, tensor<2x4xf32> {weft.saved = 0 : i64})
      attributes {weft.pipeline_stage = {stage = 1 : i64, rank = 1 : i64, chunk = 0 : i64, role = "forward"}} {
    %diff = weft.sub %h, %labels : tensor<2x4xf32>
    %sq = weft.mul %diff, %diff : tensor<2x4xf32>
    %sum = weft.reduce_sum %sq axes [0, 1] : tensor<2x4xf32> -> tensor<f32>
    return %sum, %diff : tensor<f32>, tensor<2x4xf32>
  }
  func.func @main_stage1_backward(%diff: tensor<2x4xf32> {weft.saved = 0 : i64})
      -> (tensor<2x4xf32> {weft.gradient_to = 0 : i64})
      attributes {weft.pipeline_stage = {stage = 1 : i64, rank = 1 : i64, chunk = 0 : i64, role = "backward"}} {
    %two = weft.add %diff, %diff : tensor<2x4xf32>
    return %two : tensor<2x4xf32>
  }
}

// -----

// A pipeline without a schedule is refused.
// expected-error @below {{-weft-extract-evaluation: the pipeline has no schedule; run -weft-schedule-pipeline first}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64}} {
  func.func @step(%x: tensor<f32>) -> tensor<f32> {
    return %x : tensor<f32>
  }
}

// -----

// So is a forward pipeline (no stage returns a gradient).
// expected-error @below {{-weft-extract-evaluation needs a training step: no stage of this pipeline returns a gradient}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "GPipe", micro_batches = 1 : i64, steps = [["F0", ">a1:0"], ["<a0:0", "F0"]]}} {
  func.func @main_stage0(%x: tensor<f32> {weft.model_input = 0 : i64}) -> (tensor<f32> {weft.sent_to = 1 : i64})
      attributes {weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64}} {
    return %x : tensor<f32>
  }
  func.func @main_stage1(%x: tensor<f32> {weft.received_from = 0 : i64}) -> (tensor<f32> {weft.model_output = 0 : i64})
      attributes {weft.pipeline_stage = {stage = 1 : i64, rank = 1 : i64, chunk = 0 : i64}} {
    return %x : tensor<f32>
  }
}
