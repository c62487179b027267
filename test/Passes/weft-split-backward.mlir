// The training step of a model cut into pipeline stages: -weft-differentiate
// gives each stage its backward (the gradient of what it sends comes back as
// an argument, the gradient of what it received goes back as a result), the
// schedule then holds backward steps and gradient transfers, and
// -weft-split-backward cuts each stage into the functions of its steps.
// RUN: weft-opt %S/weft-split-stages.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate | FileCheck %s --check-prefix=VJP
// RUN: weft-opt %S/weft-split-stages.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-split-backward | FileCheck %s
// RUN: weft-opt %S/weft-split-stages.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline="schedule=zb-h1 micro-batches=2" -weft-split-backward | FileCheck %s --check-prefix=ZB
// RUN: weft-opt %S/weft-split-stages.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-apply-plan="dp=2" -weft-propagate-sharding -weft-partition -weft-split-backward | FileCheck %s --check-prefix=DP
// RUN: weft-opt %S/weft-split-stages.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2 stage-layers=2/2" -weft-differentiate -weft-schedule-pipeline="schedule=zb-h1 micro-batches=2" -weft-split-backward | FileCheck %s --check-prefix=ZBLAYER
// RUN: weft-opt %S/Inputs/split-backward-swiglu.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate=recompute=full -weft-schedule-pipeline="schedule=zb-h1 micro-batches=2" -weft-split-backward | FileCheck %s --check-prefix=SWIGLU
// RUN: weft-opt %S/Inputs/gpt_two_blocks.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-apply-plan="tp=2 sp" -weft-propagate-sharding -weft-partition -weft-split-backward | FileCheck %s --check-prefix=SPHEAD
// RUN: weft-opt %S/Inputs/gpt_two_blocks.mlir -weft-append-loss=reduction=mean -weft-split-stages="stages=2" -weft-differentiate -weft-schedule-pipeline="schedule=zb-h1 micro-batches=2" -weft-apply-plan="tp=2 sp" -weft-propagate-sharding -weft-partition -weft-optimize-collectives -weft-split-backward | FileCheck %s --check-prefix=SPZB
// RUN: weft-opt %S/Inputs/split-backward-errors.mlir -split-input-file -weft-split-backward -verify-diagnostics
// RUN: weft-opt %S/Inputs/differentiate-stage-errors.mlir -split-input-file -weft-differentiate -verify-diagnostics

// VJP-LABEL: func.func @lm_stage0(
// VJP-SAME: %arg0: tensor<2x8xi64> {weft.model_input = 0 : i64}, %arg1: tensor<2x8x16xf32> {weft.cotangent_of = 0 : i64})
// VJP-SAME: -> (tensor<2x8x16xf32> {weft.sent_to = 1 : i64}, tensor<16x16xf32> {weft.gradient_of = "h.1.w"}, tensor<16x16xf32> {weft.gradient_of = "h.0.w"}, tensor<32x16xf32> {weft.gradient_of = "wte"})
// VJP-LABEL: func.func @lm_stage1(
// VJP-SAME: %arg2: tensor<2x8x16xf32> {weft.received_from = 0 : i64})
// VJP-SAME: -> (tensor<f32> {weft.model_output = 0 : i64}, tensor<2x8x16xf32> {weft.gradient_to = 0 : i64}, tensor<32x16xf32> {weft.gradient_of = "wte"}
// The loss is seeded with 1 on the last stage.
// VJP: weft.constant dense<1.000000e+00> : tensor<f32>

// CHECK: weft.pipeline = {chunks = 1 : i64, micro_batches = 2 : i64, schedule = "1F1B", stages = 2 : i64, steps = {{\[}}["F0", ">a1:0", "F1", ">a1:1", "<g1:0", "B0", "<g1:1", "B1"], ["<a0:0", "F0", "B0", ">g0:0", "<a0:1", "F1", "B1", ">g0:1"]]}
// The forward returns what it sends and keeps what its backward reads.
// CHECK-LABEL: func.func @lm_stage0(
// CHECK-SAME: %arg0: tensor<2x8xi64> {weft.model_input = 0 : i64})
// CHECK-SAME: -> (tensor<2x8x16xf32> {weft.sent_to = 1 : i64}, tensor<2x8x16xf32> {weft.saved = 0 : i64},
// CHECK-SAME: role = "forward", stage = 0
// CHECK: return
// CHECK-LABEL: func.func @lm_stage0_backward(
// CHECK-SAME: {weft.cotangent_of = 0 : i64}, %arg2: tensor<2x8x16xf32> {weft.saved = 0 : i64}
// CHECK-SAME: -> (tensor<16x16xf32> {weft.gradient_of = "h.1.w"}, tensor<16x16xf32> {weft.gradient_of = "h.0.w"}, tensor<32x16xf32> {weft.gradient_of = "wte"})
// CHECK-SAME: role = "backward", stage = 0
// A received value the backward reads is kept by the forward.
// CHECK-LABEL: func.func @lm_stage1(
// CHECK-SAME: %arg2: tensor<2x8x16xf32> {weft.received_from = 0 : i64})
// CHECK-SAME: -> (tensor<f32> {weft.model_output = 0 : i64}
// CHECK: return %{{.*}}, %arg2 :
// CHECK-LABEL: func.func @lm_stage1_backward(
// CHECK-SAME: -> (tensor<2x8x16xf32> {weft.gradient_to = 0 : i64}, tensor<32x16xf32> {weft.gradient_of = "wte"}
// CHECK-NOT: func.func @lm_stage1_weight

// ZB-H1: weight gradients are their own step (W). The first stage sends no
// gradient back, yet its B step computes the input gradients down to the
// embedding's (no weight-gradient GEMM) and keeps them; its W step computes
// the weight gradients from them, the embedding's included.
// ZB: "<g1:0", "B0", "W0"
// ZB-LABEL: func.func @lm_stage0_backward(
// ZB-SAME: {weft.cotangent_of = 0 : i64}
// ZB-SAME: -> (tensor<2x8x16xf32> {weft.saved = 3 : i64}, tensor<2x8x16xf32> {weft.saved = 4 : i64})
// ZB-SAME: role = "backward"
// ZB: %[[B1:.*]] = weft.layer "h.backward"({{.*}}) index 1
// ZB-NOT: transpose_lhs
// ZB: %[[B0:.*]] = weft.layer "h.backward"(%{{.*}}, %{{.*}}, %[[B1]]) index 0
// ZB-NOT: transpose_lhs
// ZB: return %[[B1]], %[[B0]]
// ZB-LABEL: func.func @lm_stage0_weight(
// ZB-SAME: {weft.cotangent_of = 0 : i64}
// ZB-SAME: %[[DX:[^:]*]]: tensor<2x8x16xf32> {weft.saved = 4 : i64}
// ZB-SAME: -> (tensor<16x16xf32> {weft.gradient_of = "h.1.w"}
// ZB-SAME: role = "weight"
// ZB: weft.layer "h.backward.weight"({{.*}}) index 1
// ZB: weft.layer "h.backward.weight"({{.*}}) index 0
// ZB: weft.matmul %{{.*}}, %[[DX]] transpose_lhs
// ZB-LABEL: func.func @lm_stage1_backward(
// ZB-SAME: -> (tensor<2x8x16xf32> {weft.gradient_to = 0 : i64}, {{[^{]*}}{weft.saved =
// ZB-NOT: gradient_of
// ZB-LABEL: func.func @lm_stage1_weight(
// ZB-SAME: {weft.gradient_of = "wte"

// Partitioned first, cut after: the kept values are per-rank blocks, and the
// gradient of what a stage sent comes back split like it.
// DP: weft.mesh @mesh(pp = 2, dp = 2, cp = 1, ulysses = 1, tp = 1)
// DP-LABEL: func.func @lm_stage0(
// DP-SAME: -> (tensor<1x8x16xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[dp], [], []]>, weft.sent_to = 1 : i64}, tensor<1x8x16xf32> {weft.saved = 0 : i64}
// DP-LABEL: func.func @lm_stage0_backward(
// DP-SAME: %arg1: tensor<1x8x16xf32> {weft.cotangent_of = 0 : i64, weft.local_sharding = #weft.sharding<@mesh, {{\[}}[dp], [], []]>}

// ZB-H1 with layers on a stage that sends gradients back: each backward layer
// is cut in two. The B step's part computes the input gradient only (no
// weight-gradient GEMM) and keeps the layer's output gradient; the W step's
// part (`h.backward.weight`) computes the weight's gradient from it and the
// kept activation.
// ZBLAYER-LABEL: func.func @lm_stage1_backward(
// ZBLAYER: weft.layer "h.backward"({{.*}}) index 3
// ZBLAYER-NOT: transpose_lhs
// ZBLAYER: weft.yield
// ZBLAYER: weft.layer "h.backward"({{.*}}) index 2
// ZBLAYER-NOT: transpose_lhs
// ZBLAYER: return
// ZBLAYER-LABEL: func.func @lm_stage1_weight(
// ZBLAYER-SAME: -> (tensor<32x16xf32> {weft.gradient_of = "wte"}, tensor<16xf32> {weft.gradient_of = "ln_f.weight"}, tensor<16x16xf32> {weft.gradient_of = "h.3.w"}, tensor<16x16xf32> {weft.gradient_of = "h.2.w"})
// ZBLAYER: weft.layer "h.backward.weight"({{.*}}) index 3 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>) -> tensor<16x16xf32>
// ZBLAYER-NEXT: ^bb0
// ZBLAYER-NEXT: weft.matmul {{.*}} transpose_lhs
// ZBLAYER: weft.layer "h.backward.weight"({{.*}}) index 2

// With full recomputation the backward layer recomputes its forward first.
// That recomputation is the B part's, as a framework does it: the W part
// reads the SwiGLU product (the down projection's input), recomputed in B,
// not the gate and up projections it is computed from, which would keep one
// FFN-wide tensor more per micro-batch between B and W.
// SWIGLU-LABEL: func.func @lm_stage1_backward(
// SWIGLU: weft.layer "h.backward"
// SWIGLU: %[[S:.*]] = weft.silu
// SWIGLU-NEXT: %[[P:.*]] = weft.mul %[[S]], %{{.*}} : tensor<2x8x32xf32>
// SWIGLU: weft.yield {{.*}}, %[[P]] :
// SWIGLU-LABEL: func.func @lm_stage1_weight(
// SWIGLU: weft.layer "h.backward.weight"({{.*}}) index 1 : (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>)
// SWIGLU-NOT: weft.silu
// SWIGLU-NOT: weft.mul
// SWIGLU: weft.yield

// Under SP the output layer's input is gathered over the sequence. The
// forward step keeps the gathered block, not the whole input, and the
// backward step gathers it again, as Megatron's sequence-parallel linears do
// (and as the cost model counts the head's memory).
// SPHEAD-LABEL: func.func @main_stage1(
// SPHEAD: weft.parameter "output"
// SPHEAD: %[[G:.*]] = weft.all_gather %[[N:[0-9]+]] over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// SPHEAD-NEXT: weft.linear %[[G]]
// SPHEAD: return {{.*}}, %[[N]] : tensor<f32>, tensor<2x8x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>, tensor<2x4x16xf32>
// SPHEAD-LABEL: func.func @main_stage1_backward(
// SPHEAD-SAME: %[[KEPT:arg[0-9]+]]: tensor<2x4x16xf32> {weft.saved = 3 : i64}
// SPHEAD: weft.all_gather %[[KEPT]] over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>

// Under SP with W steps, the weight part of a backward layer takes the
// blocks its linears' inputs and output gradients were gathered from, and
// gathers them again, instead of keeping them gathered over the sequence
// between the B and W steps. The final norm's bias gradient is summed over
// the sequence block its input gradient was reduce-scattered to
// (-weft-optimize-collectives), so the W step keeps that block too.
// SPZB-LABEL: func.func @main_stage1_weight(
// SPZB: weft.reduce_sum %{{.*}} axes [0, 1] keep_dims : tensor<2x4x16xf32> -> tensor<1x1x16xf32>
// SPZB-NEXT: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<1x1x16xf32>
// SPZB: weft.layer "h.backward.weight"
// SPZB-NEXT: ^bb0
// SPZB-NEXT: weft.all_gather %arg{{[0-9]+}} over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// SPZB-NEXT: weft.all_gather %arg{{[0-9]+}} over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
// SPZB-NEXT: weft.all_gather %arg{{[0-9]+}} over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
