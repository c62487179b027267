// Training: two stages of the two-block GPT under tp=2 without SP (the
// partition pipeline runs -weft-split-stage-sends last).
// RUN: weft-opt %S/Inputs/gpt_two_blocks.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-partition-with-plan="tp=2" | FileCheck %s --check-prefix=TRAIN
// A forward program cut into stages (weft run).
// RUN: weft-opt %S/Inputs/gpt_two_blocks.mlir -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-partition-with-plan="tp=2" | FileCheck %s --check-prefix=FORWARD
// Under Megatron SP the residual stream is already cut over tp: nothing to do.
// RUN: weft-opt %S/Inputs/gpt_two_blocks.mlir -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-apply-plan="tp=2 sp" -weft-propagate-sharding -weft-partition > %t.sp
// RUN: weft-opt %t.sp -weft-split-stage-sends > %t.sp.after
// RUN: weft-opt %t.sp > %t.sp.before
// RUN: diff %t.sp.before %t.sp.after
// Without pipeline stages: nothing to do.
// RUN: weft-opt %S/Inputs/gpt_two_blocks.mlir -weft-apply-plan="tp=2" -weft-propagate-sharding -weft-partition > %t.flat
// RUN: weft-opt %t.flat -weft-split-stage-sends > %t.flat.after
// RUN: weft-opt %t.flat > %t.flat.before
// RUN: diff %t.flat.before %t.flat.after
// Values tp does not divide, already cut over tp, or partial: sent whole.
// RUN: weft-opt %s -split-input-file -weft-split-stage-sends | FileCheck %s

// Stage 0 sends its half of the sequence and gathers the gradient's half it
// gets back; stage 1 gathers the activation's half and sends its half of
// the gradient.
// TRAIN-LABEL: func.func @main_stage0
// TRAIN-SAME: %[[COT:[^:]*]]: tensor<2x4x16xf32> {weft.cotangent_of = 0 : i64, weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>}
// TRAIN-SAME: -> (tensor<2x4x16xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>, weft.sent_to = 1 : i64}
// TRAIN-NEXT: weft.all_gather %[[COT]] over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// TRAIN: %[[SENT:.*]] = weft.all_slice %{{.*}} over @mesh ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// TRAIN-NEXT: return %[[SENT]],
// TRAIN-LABEL: func.func @main_stage1
// TRAIN-SAME: %[[IN:[^:]*]]: tensor<2x4x16xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>, weft.received_from = 0 : i64}
// TRAIN-SAME: tensor<2x4x16xf32> {weft.gradient_to = 0 : i64, weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>}
// TRAIN-NEXT: weft.all_gather %[[IN]] over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// TRAIN: %[[GRAD:.*]] = weft.all_slice %{{.*}} over @mesh ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// TRAIN-NEXT: return %{{.*}}, %[[GRAD]],

// FORWARD-LABEL: func.func @main_stage0
// FORWARD-SAME: -> (tensor<2x4x16xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>, weft.sent_to = 1 : i64})
// FORWARD: %[[SENT:.*]] = weft.all_slice %{{.*}} over @mesh ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x4x16xf32>
// FORWARD-NEXT: return %[[SENT]] : tensor<2x4x16xf32>
// FORWARD-LABEL: func.func @main_stage1
// FORWARD-SAME: (%[[IN:[^:]*]]: tensor<2x4x16xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>, weft.received_from = 0 : i64})
// FORWARD-NEXT: weft.all_gather %[[IN]] over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>

// The sequence (5) is odd: the hidden dimension (6) is cut; nothing of
// [3, 5, 7] divides by 2, so it is sent whole.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, tp = 2)
  // CHECK-LABEL: func.func @first
  // CHECK-SAME: -> (tensor<1x5x3xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], [tp]]>, weft.sent_to = 1 : i64}, tensor<3x5x7xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], []]>, weft.sent_to = 1 : i64})
  // CHECK: %[[CUT:.*]] = weft.all_slice %arg0 over @mesh ["tp"] dim 2 : tensor<1x5x6xf32> -> tensor<1x5x3xf32>
  // CHECK-NEXT: return %[[CUT]], %arg1
  func.func @first(%a: tensor<1x5x6xf32>, %b: tensor<3x5x7xf32>) -> (tensor<1x5x6xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.sent_to = 1 : i64}, tensor<3x5x7xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.sent_to = 1 : i64}) attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, stage = 0 : i64}} {
    return %a, %b : tensor<1x5x6xf32>, tensor<3x5x7xf32>
  }
  // CHECK-LABEL: func.func @second
  // CHECK-SAME: (%[[A:[^:]*]]: tensor<1x5x3xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], [tp]]>, weft.received_from = 0 : i64}, %[[B:[^:]*]]: tensor<3x5x7xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], []]>, weft.received_from = 0 : i64})
  // CHECK-NEXT: %[[WHOLE:.*]] = weft.all_gather %[[A]] over @mesh ["tp"] dim 2 : tensor<1x5x3xf32> -> tensor<1x5x6xf32>
  // CHECK-NEXT: %[[SUM:.*]] = weft.reduce_sum %[[WHOLE]]
  // CHECK-NEXT: return %[[SUM]], %[[B]]
  func.func @second(%a: tensor<1x5x6xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.received_from = 0 : i64}, %b: tensor<3x5x7xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.received_from = 0 : i64}) -> (tensor<1x5xf32>, tensor<3x5x7xf32>) attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, stage = 1 : i64}} {
    %s = weft.reduce_sum %a axes [2] : tensor<1x5x6xf32> -> tensor<1x5xf32>
    return %s, %b : tensor<1x5xf32>, tensor<3x5x7xf32>
  }
}

// -----

// A middle stage passes a value on as it came (an encoder's output that a
// later stage reads): it sends the block it received, without gathering and
// cutting it again.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 3 : i64}} {
  weft.mesh @mesh(pp = 3, tp = 2)
  // CHECK-LABEL: func.func @middle
  // CHECK-SAME: (%[[X:[^:]*]]: tensor<2x4x8xf32> {{.*}}, %[[E:[^:]*]]: tensor<2x4x8xf32>
  // CHECK-NEXT: %[[XW:.*]] = weft.all_gather %[[X]]
  // CHECK-NEXT: %[[EW:.*]] = weft.all_gather %[[E]]
  // CHECK-NEXT: %[[Y:.*]] = weft.add %[[XW]], %[[EW]]
  // CHECK-NEXT: %[[YB:.*]] = weft.all_slice %[[Y]] over @mesh ["tp"] dim 1
  // CHECK-NEXT: return %[[YB]], %[[E]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  func.func @middle(%x: tensor<2x8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.received_from = 0 : i64}, %e: tensor<2x8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.received_from = 0 : i64}) -> (tensor<2x8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.sent_to = 2 : i64}, tensor<2x8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.sent_to = 2 : i64}) attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, stage = 1 : i64}} {
    %y = weft.add %x, %e : tensor<2x8x8xf32>
    return %y, %e : tensor<2x8x8xf32>, tensor<2x8x8xf32>
  }
}

// -----

// Already cut over tp (Megatron SP's residual stream), or a partial sum
// over tp: left as they are.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, tp = 2)
  // CHECK-LABEL: func.func @sp
  // CHECK-SAME: -> (tensor<2x4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp], []]>, weft.sent_to = 1 : i64}, tensor<2x8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], []], partial = [tp]>, weft.sent_to = 1 : i64})
  // CHECK-NEXT: return %arg0, %arg1
  func.func @sp(%a: tensor<2x4x8xf32>, %b: tensor<2x8x8xf32>) -> (tensor<2x4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [tp], []]>, weft.sent_to = 1 : i64}, tensor<2x8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []], partial = [tp]>, weft.sent_to = 1 : i64}) attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, stage = 0 : i64}} {
    return %a, %b : tensor<2x4x8xf32>, tensor<2x8x8xf32>
  }
}

// -----

// A mesh whose tp is 1: nothing to cut.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, tp = 1)
  // CHECK-LABEL: func.func @one
  // CHECK-SAME: -> (tensor<2x4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], []]>, weft.sent_to = 1 : i64})
  // CHECK-NEXT: return %arg0
  func.func @one(%a: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>, weft.sent_to = 1 : i64}) attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, stage = 0 : i64}} {
    return %a : tensor<2x4x8xf32>
  }
}
