// RUN: weft-opt %s -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=2" | FileCheck %s
// RUN: weft-opt %s -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=gpipe micro-batches=3" | FileCheck %s --check-prefix=GPIPE
// RUN: weft-opt %s -weft-split-stages="stages=2 chunks=2" -weft-schedule-pipeline="schedule=interleaved micro-batches=2" | FileCheck %s --check-prefix=V2
// RUN: weft-opt %s -weft-split-stages="stages=2 chunks=2" -weft-schedule-pipeline="schedule=zeropp micro-batches=2" | FileCheck %s --check-prefix=ZEROPP
// RUN: weft-opt %s -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=zb-h1 micro-batches=1" | weft-opt | FileCheck %s --check-prefix=ROUND
// RUN: weft-opt %S/Inputs/schedule-pipeline-errors.mlir -split-input-file -weft-schedule-pipeline="schedule=interleaved micro-batches=3" -verify-diagnostics
// RUN: not weft-opt %s -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=fast" 2>&1 | FileCheck %s --check-prefix=NAME
// RUN: not weft-opt %s -weft-split-stages="stages=2 chunks=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=2" 2>&1 | FileCheck %s --check-prefix=CHUNKS
// RUN: not weft-opt %s -weft-split-stages="stages=2" -weft-schedule-pipeline="micro-batches=0" 2>&1 | FileCheck %s --check-prefix=ZERO

// The forward steps of each pipeline rank in the schedule's order (what
// planner::buildPipelineSchedule lists and weft plan --print-schedule prints),
// with the activations' sends and receives.
// CHECK: module attributes {weft.pipeline = {chunks = 1 : i64, micro_batches = 2 : i64, schedule = "1F1B", stages = 2 : i64,
// CHECK-SAME: steps = {{\[}}["F0", ">a1:0", "F1", ">a1:1"], ["<a0:0", "F0", "<a0:1", "F1"]]}}
// GPIPE: schedule = "GPipe", stages = 2 : i64, steps = {{\[}}["F0", ">a1:0", "F1", ">a1:1", "F2", ">a1:2"], ["<a0:0", "F0", "<a0:1", "F1", "<a0:2", "F2"]]
// Interleaved: rank 0 runs chunks 0 and 1 (virtual stages 0 and 2), and the
// last virtual stage's chunk sends nothing on.
// V2: schedule = "interleaved", stages = 2 : i64, steps = {{\[}}["F0.0", ">a1:0.0", "F1.0", ">a1:1.0", "<a1:0.1", "F0.1", ">a1:0.1", "<a1:1.1", "F1.1", ">a1:1.1"], ["<a0:0.0", "F0.0", ">a0:0.0", "<a0:1.0", "F1.0", ">a0:1.0", "<a0:0.1", "F0.1", "<a0:1.1", "F1.1"]]
// ZeroPP with chunks runs the interleaved order (as the cost model
// simulates it).
// ZEROPP: schedule = "ZeroPP", stages = 2 : i64, steps = {{\[}}["F0.0", ">a1:0.0", "F1.0", ">a1:1.0", "<a1:0.1", "F0.1", ">a1:0.1", "<a1:1.1", "F1.1", ">a1:1.1"], ["<a0:0.0", "F0.0", ">a0:0.0", "<a0:1.0", "F1.0", ">a0:1.0", "<a0:0.1", "F0.1", "<a0:1.1", "F1.1"]]
// The attribute is printed and parsed back (the verifier accepts it).
// ROUND: schedule = "ZB-H1", stages = 2 : i64, steps = {{\[}}["F0", ">a1:0"], ["<a0:0", "F0"]]

// NAME: error: -weft-schedule-pipeline: unknown schedule 'fast'; use gpipe, 1f1b, interleaved, zb-h1 or zeropp
// CHUNKS: error: -weft-schedule-pipeline: the stages have 2 chunks per rank, which only the interleaved and ZeroPP schedules run; use schedule=interleaved
// ZERO: error: -weft-schedule-pipeline: micro-batches=0 must be at least 1

func.func @lm(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.layer "h"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %t = weft.tanh %a : tensor<2x4xf32>
    weft.yield %t : tensor<2x4xf32>
  }
  %1 = weft.layer "h"(%0) index 1 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %t = weft.tanh %a : tensor<2x4xf32>
    weft.yield %t : tensor<2x4xf32>
  }
  %2 = weft.layer "h"(%1) index 2 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %t = weft.tanh %a : tensor<2x4xf32>
    weft.yield %t : tensor<2x4xf32>
  }
  %3 = weft.layer "h"(%2) index 3 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %t = weft.tanh %a : tensor<2x4xf32>
    weft.yield %t : tensor<2x4xf32>
  }
  return %3 : tensor<2x4xf32>
}
