// RUN: weft-opt %s -weft-split-stages="stages=2" | FileCheck %s
// RUN: weft-opt %s -weft-split-stages="stages=2 chunks=2" | FileCheck %s --check-prefix=V2
// RUN: weft-opt %s -weft-split-stages="stages=2 stage-layers=3/1" | FileCheck %s --check-prefix=UNEVEN
// RUN: weft-opt %s -weft-split-stages="stages=2" -weft-apply-plan="dp=2" | FileCheck %s --check-prefix=DP
// RUN: not weft-opt %s -weft-split-stages="stages=2 stage-layers=2/1" 2>&1 | FileCheck %s --check-prefix=SUM
// RUN: not weft-opt %s -weft-split-stages="stages=2 stage-layers=3/x" 2>&1 | FileCheck %s --check-prefix=TEXT
// RUN: not weft-opt %s -weft-split-stages="stages=2 chunks=3 stage-layers=3/1" 2>&1 | FileCheck %s --check-prefix=CHUNKS
// RUN: weft-opt %s -weft-split-stages="stages=2 chunks=3" | FileCheck %s --check-prefix=EDGES
// RUN: weft-opt %s -weft-split-stages="stages=2 chunks=2 stage-layers=3/1" | FileCheck %s --check-prefix=UNEVEN2
// RUN: weft-opt %S/Inputs/split-stages-errors.mlir -split-input-file -weft-split-stages="stages=2 chunks=2" -verify-diagnostics

// SUM: error: -weft-split-stages: stage-layers holds 3 layers but @lm has 4 (weft.layer ops)
// TEXT: error: -weft-split-stages: stage-layers '3/x' is not layer counts (each at least 1) separated by '/'
// CHUNKS: error: -weft-split-stages: pipeline rank 1 holds 1 layers for its 3 chunks, so chunk 1 has none; a rank needs at least one layer per chunk (the first and last rank one fewer: their edge chunk may hold only the embedding or the output layer), so give it 2 or more, or use a smaller v

// Four layers on two pipeline ranks: the embedding runs on stage 0, the final
// norm and the tied output layer on stage 1, which reads the embedding table by
// name again. The position ids come from the input alone: each stage that
// reads them rebuilds them. The residual stream is the only value sent.
// CHECK: module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}}
// CHECK-LABEL: func.func @lm_stage0(
// CHECK-SAME: %arg0: tensor<2x8xi64> {weft.model_input = 0 : i64})
// CHECK-SAME: -> (tensor<2x8x16xf32> {weft.sent_to = 1 : i64})
// CHECK-SAME: weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, stage = 0 : i64}
// CHECK: weft.parameter "wte"
// CHECK: weft.embedding
// CHECK: weft.iota
// CHECK: weft.layer "h"({{.*}}) index 0
// CHECK: weft.layer "h"({{.*}}) index 1
// CHECK-NOT: weft.layer
// CHECK: return
// CHECK-LABEL: func.func @lm_stage1(
// CHECK-SAME: %arg0: tensor<2x8xi64> {weft.model_input = 0 : i64}, %arg1: tensor<2x8x16xf32> {weft.received_from = 0 : i64})
// CHECK-SAME: -> (tensor<2x8x32xf32> {weft.model_output = 0 : i64})
// CHECK-SAME: weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, stage = 1 : i64}
// CHECK-NOT: weft.embedding
// CHECK: weft.iota
// CHECK: weft.layer "h"(%arg1, {{.*}}) index 2
// CHECK: weft.layer "h"({{.*}}) index 3
// CHECK: weft.layer_norm
// CHECK: weft.parameter "wte"
// CHECK: weft.linear
// CHECK-NOT: func.func

// Interleaved (v = 2): virtual stages 0..3 in model order, on ranks 0, 1, 0, 1.
// V2-LABEL: func.func @lm_stage0(
// V2-SAME: weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, stage = 0 : i64}
// V2: weft.layer "h"({{.*}}) index 0
// V2-NOT: weft.layer
// V2-LABEL: func.func @lm_stage1(
// V2-SAME: weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, stage = 1 : i64}
// V2: weft.layer "h"({{.*}}) index 1
// V2-LABEL: func.func @lm_stage2(
// V2-SAME: weft.pipeline_stage = {chunk = 1 : i64, rank = 0 : i64, stage = 2 : i64}
// V2: weft.layer "h"({{.*}}) index 2
// V2-LABEL: func.func @lm_stage3(
// V2-SAME: weft.pipeline_stage = {chunk = 1 : i64, rank = 1 : i64, stage = 3 : i64}
// V2: weft.layer "h"({{.*}}) index 3

// Two layers per rank in three chunks (Llama 3's layout): the first rank's
// first chunk holds only the embedding, computed once and sent on; the last
// rank's last chunk only the final norm and the output layer.
// EDGES-LABEL: func.func @lm_stage0(
// EDGES-SAME: -> (tensor<2x8x16xf32> {weft.sent_to = 1 : i64})
// EDGES-SAME: rank = 0 : i64, stage = 0 : i64
// EDGES: weft.embedding
// EDGES-NOT: weft.layer
// EDGES: return
// EDGES-LABEL: func.func @lm_stage1(
// EDGES: weft.iota
// EDGES: weft.layer "h"(%arg1, {{.*}}) index 0
// EDGES-NOT: weft.layer
// EDGES-LABEL: func.func @lm_stage2(
// EDGES: index 1
// EDGES-LABEL: func.func @lm_stage3(
// EDGES: index 2
// EDGES-LABEL: func.func @lm_stage4(
// EDGES: index 3
// EDGES-NOT: weft.layer_norm
// EDGES-LABEL: func.func @lm_stage5(
// EDGES-SAME: %arg0: tensor<2x8x16xf32> {weft.received_from = 4 : i64}
// EDGES-SAME: weft.model_output = 0
// EDGES-SAME: chunk = 2 : i64, rank = 1 : i64, stage = 5 : i64
// EDGES-NOT: weft.layer "h"
// EDGES: weft.layer_norm
// EDGES: weft.linear

// Uneven stages and chunks: rank 0's three layers as 1 + 2, rank 1's one
// layer in its first chunk and the output layer alone in its second.
// UNEVEN2-LABEL: func.func @lm_stage0(
// UNEVEN2: index 0
// UNEVEN2-NOT: weft.layer "h"
// UNEVEN2-LABEL: func.func @lm_stage1(
// UNEVEN2: index 1
// UNEVEN2-NOT: weft.layer "h"
// UNEVEN2-LABEL: func.func @lm_stage2(
// UNEVEN2: index 2
// UNEVEN2: index 3
// UNEVEN2-LABEL: func.func @lm_stage3(
// UNEVEN2-NOT: weft.layer "h"
// UNEVEN2: weft.layer_norm

// Uneven stages: three layers on rank 0, one on rank 1.
// UNEVEN-LABEL: func.func @lm_stage0(
// UNEVEN: index 0
// UNEVEN: index 1
// UNEVEN: index 2
// UNEVEN-LABEL: func.func @lm_stage1(
// UNEVEN: index 3

// Each stage is annotated over a mesh with pp first, which splits no tensor:
// the values between stages are split over dp like the inputs. (With Megatron
// SP they are also split over tp: pipeline_differential.py runs that.)
// DP: weft.mesh @mesh(pp = 2, dp = 2, cp = 1, ulysses = 1, tp = 1)
// DP-LABEL: func.func @lm_stage0(
// DP-SAME: -> (tensor<2x8x16xf32> {weft.sent_to = 1 : i64, weft.sharding = #weft.sharding<@mesh, {{\[}}[dp], [], []]>})
// DP-LABEL: func.func @lm_stage1(
// DP-SAME: %arg1: tensor<2x8x16xf32> {weft.received_from = 0 : i64, weft.sharding = #weft.sharding<@mesh, {{\[}}[dp], [], []]>}

func.func @lm(%ids: tensor<2x8xi64>) -> tensor<2x8x32xf32> {
  %wte = weft.parameter "wte" : tensor<32x16xf32>
  %tok = weft.embedding %wte[%ids] : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %pos = weft.iota dim 1 : tensor<2x8xi64>
  %p2 = weft.add %pos, %ids : tensor<2x8xi64>
  %h0 = weft.layer "h"(%tok, %p2) index 0 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>, %q: tensor<2x8xi64>):
    %w = weft.parameter "h.0.w" : tensor<16x16xf32>
    %y = weft.linear %a, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %s = weft.add %a, %y : tensor<2x8x16xf32>
    weft.yield %s : tensor<2x8x16xf32>
  }
  %h1 = weft.layer "h"(%h0, %p2) index 1 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>, %q: tensor<2x8xi64>):
    %w = weft.parameter "h.1.w" : tensor<16x16xf32>
    %y = weft.linear %a, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %s = weft.add %a, %y : tensor<2x8x16xf32>
    weft.yield %s : tensor<2x8x16xf32>
  }
  %h2 = weft.layer "h"(%h1, %p2) index 2 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>, %q: tensor<2x8xi64>):
    %w = weft.parameter "h.2.w" : tensor<16x16xf32>
    %y = weft.linear %a, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %s = weft.add %a, %y : tensor<2x8x16xf32>
    weft.yield %s : tensor<2x8x16xf32>
  }
  %h3 = weft.layer "h"(%h2, %p2) index 3 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>, %q: tensor<2x8xi64>):
    %w = weft.parameter "h.3.w" : tensor<16x16xf32>
    %y = weft.linear %a, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %s = weft.add %a, %y : tensor<2x8x16xf32>
    weft.yield %s : tensor<2x8x16xf32>
  }
  %g = weft.parameter "ln_f.weight" : tensor<16xf32>
  %n = weft.layer_norm %h3, %g axis 2 epsilon 1.0e-5 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %wte2 = weft.parameter "wte" : tensor<32x16xf32>
  %logits = weft.linear %n, %wte2 transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  return %logits : tensor<2x8x32xf32>
}
