// RUN: weft-opt %s -split-input-file -weft-hold-gathered-weights=block=4 | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-hold-gathered-weights=block=1 | FileCheck %s --check-prefix=ONE
// RUN: not weft-opt %s -split-input-file -weft-hold-gathered-weights=block=0 -o /dev/null 2>&1 | FileCheck %s --check-prefix=ZERO

// ZeroPP's blocks of micro-batches: in a pipeline stage's functions, each
// gather of a weight's stored block (a weft.parameter through all_slices)
// is held over a block of 4; a gather of an activation is not (it changes
// every micro-batch), nor is a gather outside the pipeline's stages. The
// backward, which reduces its partial gradients after each micro-batch
// (ZeRO-3), reduces them once per block.
weft.mesh @mesh(pp = 2, dp = 2)
// CHECK-LABEL: func.func @stage0(
// CHECK: %[[W:.*]] = weft.parameter "w"
// CHECK: %[[B:.*]] = weft.all_slice %[[W]]
// CHECK: weft.all_gather %[[B]] over @mesh ["dp"] dim 0 hold 4 :
// CHECK: weft.all_gather %arg0 over @mesh ["dp"] dim 0 :
// ONE-NOT: hold
// ONE-NOT: weft.micro_batch_block
func.func @stage0(%x: tensor<2x4xf32>) -> tensor<4x4xf32> attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "forward", stage = 0 : i64}} {
  %w = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<8x4xf32>
  %b = weft.all_slice %w over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %g = weft.all_gather %b over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<8x4xf32>
  %a = weft.all_gather %x over @mesh ["dp"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %h = weft.all_slice %g over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %y = weft.add %a, %h : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}
// The backward: its weight gathers held, its reduction once per block.
// CHECK-LABEL: func.func @stage0_backward(
// CHECK-SAME: weft.micro_batch_block = 4 : i64
// CHECK: weft.all_gather %{{.*}} over @mesh ["dp"] dim 0 hold 4 :
func.func @stage0_backward(%dy: tensor<8x4xf32>) -> (tensor<8x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = [dp]>}) attributes {weft.gradient_reduction = @stage0_backward_reduce_gradients, weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}, weft.reduce_every_micro_batch} {
  %w = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<8x4xf32>
  %b = weft.all_slice %w over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %g = weft.all_gather %b over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<8x4xf32>
  %s = weft.add %dy, %g : tensor<8x4xf32>
  return %s : tensor<8x4xf32>
}
// The reduction itself is no stage's function: its gather (none here) and
// attributes stay.
// CHECK-LABEL: func.func @stage0_backward_reduce_gradients(
// CHECK-NOT: weft.micro_batch_block
// CHECK: weft.reduce_scatter
func.func @stage0_backward_reduce_gradients(%g: tensor<8x4xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = [dp]>}) -> (tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[dp], []]>}) {
  %r = weft.reduce_scatter sum %g over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}
// Outside a pipeline stage a weight's gather is left alone.
// CHECK-LABEL: func.func @other(
// CHECK-NOT: hold
func.func @other() -> tensor<8x4xf32> {
  %w = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<8x4xf32>
  %b = weft.all_slice %w over @mesh ["dp"] dim 0 : tensor<8x4xf32> -> tensor<4x4xf32>
  %g = weft.all_gather %b over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<8x4xf32>
  return %g : tensor<8x4xf32>
}

// -----

// A 16-bit copy of the weight gathered (-weft-mixed-precision casts before
// the partitioner cuts it) is still the weight's block.
weft.mesh @mesh(pp = 2, dp = 2)
// CHECK-LABEL: func.func @cast(
// CHECK: weft.all_gather %{{.*}} over @mesh ["dp"] dim 0 hold 4 : tensor<4x4xbf16>
func.func @cast() -> tensor<8x4xbf16> attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "forward", stage = 1 : i64}} {
  %w = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<8x4xf32>
  %c = weft.cast %w : tensor<8x4xf32> -> tensor<8x4xbf16>
  %b = weft.all_slice %c over @mesh ["dp"] dim 0 : tensor<8x4xbf16> -> tensor<4x4xbf16>
  %g = weft.all_gather %b over @mesh ["dp"] dim 0 : tensor<4x4xbf16> -> tensor<8x4xbf16>
  return %g : tensor<8x4xbf16>
}

// -----

// ZERO: error: -weft-hold-gathered-weights: block must be at least 1, got 0
weft.mesh @mesh(pp = 2, dp = 2)
