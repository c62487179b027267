// RUN: weft-opt %s -split-input-file -weft-defer-gradient-reduction | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-defer-gradient-reduction=scatter=true | FileCheck %s --check-prefix=SCATTER
// RUN: weft-opt %s -split-input-file -weft-defer-gradient-reduction="scatter=true every-micro-batch=true" | FileCheck %s --check-prefix=EVERY

// A partitioned training step: the gradient of `w` is all-reduced over dp in
// the backward layer that computes it; the tied embedding's two gradients are
// each all-reduced and then summed, one of them transposed. Both reductions
// move to @step_reduce_gradients, which the runner calls once per step; the
// step returns the partial sums. The loss is not a gradient: its all-reduce
// stays.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @step
// CHECK-SAME: -> (tensor<f32>, tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], []], partial = [dp]>}, tensor<8x4xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], []], partial = [dp]>})
// CHECK-SAME: attributes {weft.gradient_reduction = @step_reduce_gradients}
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<f32>
// CHECK: weft.layer "h.backward"
// CHECK-NOT: weft.all_reduce
// CHECK: weft.yield
// CHECK: %[[T:.*]] = weft.transpose
// CHECK: %[[S:.*]] = weft.add %{{.*}}, %[[T]]
// CHECK-NOT: weft.all_reduce
// CHECK: return %{{.*}}, %{{.*}}, %[[S]] :
// CHECK-LABEL: func.func @step_reduce_gradients
// CHECK-SAME: (%[[A:.*]]: tensor<4x4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], []], partial = [dp]>}, %[[B:.*]]: tensor<8x4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], []], partial = [dp]>})
// CHECK-SAME: -> (tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], []]>}, tensor<8x4xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], []]>})
// CHECK: %[[RA:.*]] = weft.all_reduce sum %[[A]] over @mesh ["dp"] : tensor<4x4xf32>
// CHECK: %[[RB:.*]] = weft.all_reduce sum %[[B]] over @mesh ["dp"] : tensor<8x4xf32>
// CHECK: return %[[RA]], %[[RB]]
func.func @step(%x: tensor<2x4xf32>, %loss: tensor<f32>, %ge: tensor<8x4xf32>, %gt: tensor<4x8xf32>)
    -> (tensor<f32>, tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []]>},
        tensor<8x4xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[], []]>}) {
  %l = weft.all_reduce sum %loss over @mesh ["dp"] : tensor<f32>
  %g = weft.layer "h.backward"(%x) index 0 : (tensor<2x4xf32>) -> tensor<4x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    %p = weft.matmul %a, %a transpose_lhs : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
    %r = weft.all_reduce sum %p over @mesh ["dp"] : tensor<4x4xf32>
    weft.yield %r : tensor<4x4xf32>
  }
  %e1 = weft.all_reduce sum %ge over @mesh ["dp"] : tensor<8x4xf32>
  %e2 = weft.all_reduce sum %gt over @mesh ["dp"] : tensor<4x8xf32>
  %t = weft.transpose %e2 permutation [1, 0] : tensor<4x8xf32> -> tensor<8x4xf32>
  %sum = weft.add %e1, %t : tensor<8x4xf32>
  return %l, %g, %sum : tensor<f32>, tensor<4x4xf32>, tensor<8x4xf32>
}

// -----

// What cannot move stays: a reduced gradient that something else reads, a
// max all-reduce, and a sum of reductions over different groups (one of the
// summands would be added dp times over).
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @kept
// CHECK-NOT: weft.gradient_reduction
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<4xf32>
// CHECK: weft.all_reduce max
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<8xf32>
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<8xf32>
// CHECK-NOT: func.func @kept_reduce_gradients
func.func @kept(%a: tensor<4xf32>, %b: tensor<4xf32>, %c: tensor<8xf32>, %d: tensor<8xf32>)
    -> (tensor<4xf32> {weft.gradient_of = "a"}, tensor<4xf32>, tensor<4xf32> {weft.gradient_of = "b"},
        tensor<8xf32> {weft.gradient_of = "c"}) {
  %ra = weft.all_reduce sum %a over @mesh ["dp"] : tensor<4xf32>
  %rb = weft.all_reduce max %b over @mesh ["dp"] : tensor<4xf32>
  %rc = weft.all_reduce sum %c over @mesh ["dp"] : tensor<8xf32>
  %rd = weft.all_reduce sum %d over @mesh ["tp"] : tensor<8xf32>
  %s = weft.add %rc, %rd : tensor<8xf32>
  return %ra, %ra, %rb, %s : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<8xf32>
}

// -----

// A gradient without a local sharding (a replicated step) gets one: whole in
// the reduction, partial in the step.
weft.mesh @mesh(dp = 4)
// CHECK-LABEL: func.func @unannotated
// CHECK-SAME: -> (tensor<3xf32> {weft.gradient_of = "v", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]], partial = [dp]>})
// CHECK: return %arg0
// CHECK-LABEL: func.func @unannotated_reduce_gradients
// CHECK-SAME: -> (tensor<3xf32> {weft.gradient_of = "v", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]]>})
// CHECK: weft.all_reduce sum %arg0 over @mesh ["dp"] codec int8 : tensor<3xf32>
func.func @unannotated(%v: tensor<3xf32>) -> (tensor<3xf32> {weft.gradient_of = "v"}) {
  %r = weft.all_reduce sum %v over @mesh ["dp"] codec int8 : tensor<3xf32>
  return %r : tensor<3xf32>
}

// -----

// The partitioner reduces a gradient partial over ulysses (the sequence) and
// dp (the batch) in two steps, a sum over the batch between them: once per
// step it is one all-reduce over both axes, in the mesh's order.
weft.mesh @mesh(dp = 2, ulysses = 2)
// CHECK-LABEL: func.func @nested
// CHECK-SAME: partial = [dp, ulysses]
// CHECK-NOT: weft.all_reduce
// CHECK: %[[S:.*]] = weft.reduce_sum %arg0
// CHECK: return %[[S]]
// CHECK-LABEL: func.func @nested_reduce_gradients
// CHECK: weft.all_reduce sum %arg0 over @mesh ["dp", "ulysses"] : tensor<1x4xf32>
func.func @nested(%g: tensor<2x4xf32>) -> (tensor<1x4xf32> {weft.gradient_of = "w"}) {
  %u = weft.all_reduce sum %g over @mesh ["ulysses"] : tensor<2x4xf32>
  %s = weft.reduce_sum %u axes [0] keep_dims : tensor<2x4xf32> -> tensor<1x4xf32>
  %d = weft.all_reduce sum %s over @mesh ["dp"] : tensor<1x4xf32>
  return %d : tensor<1x4xf32>
}

// -----

// ZeRO (scatter=true): each gradient is reduce-scattered over its group along
// its first dimension the group divides, and its reduced layout names the
// group on that dimension, minor to the axes already there; a gradient no
// dimension of which the group divides is all-reduced whole.
weft.mesh @mesh(dp = 2, tp = 2)
// SCATTER-LABEL: func.func @zero_reduce_gradients
// SCATTER-SAME: -> (tensor<3x2xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [tp, dp]]>}, tensor<3xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]]>})
// SCATTER: weft.reduce_scatter sum %arg0 over @mesh ["dp"] dim 1 : tensor<3x4xf32> -> tensor<3x2xf32>
// SCATTER: weft.all_reduce sum %arg1 over @mesh ["dp"] : tensor<3xf32>
func.func @zero(%w: tensor<3x4xf32>, %b: tensor<3xf32>)
    -> (tensor<3x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], ["tp"]]>},
        tensor<3xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, [[]]>}) {
  %rw = weft.all_reduce sum %w over @mesh ["dp"] : tensor<3x4xf32>
  %rb = weft.all_reduce sum %b over @mesh ["dp"] : tensor<3xf32>
  return %rw, %rb : tensor<3x4xf32>, tensor<3xf32>
}

// -----

// ZeRO-2 (every-micro-batch=true): the step says that its runner reduces
// after every micro-batch.
weft.mesh @mesh(dp = 2)
// EVERY-LABEL: func.func @stage2
// EVERY-SAME: attributes {weft.gradient_reduction = @stage2_reduce_gradients, weft.reduce_every_micro_batch}
// EVERY: func.func @stage2_reduce_gradients
// EVERY: weft.reduce_scatter sum %arg0 over @mesh ["dp"] dim 0 : tensor<4xf32> -> tensor<2xf32>
func.func @stage2(%w: tensor<4xf32>) -> (tensor<4xf32> {weft.gradient_of = "w"}) {
  %r = weft.all_reduce sum %w over @mesh ["dp"] : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// Mixed precision: a 16-bit gradient widened to f32 where it leaves its
// weight's cast. The widening is additive, so the sum moves past it and runs
// once per step in f32; a narrowing cast is not, and its all-reduce stays.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @widened
// CHECK-SAME: -> (tensor<4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]], partial = [dp]>}, tensor<4xbf16> {weft.gradient_of = "n"})
// CHECK: %[[W:.*]] = weft.cast %arg0 : tensor<4xbf16> -> tensor<4xf32>
// CHECK: %[[N:.*]] = weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<4xf32>
// CHECK: %[[C:.*]] = weft.cast %[[N]] : tensor<4xf32> -> tensor<4xbf16>
// CHECK: return %[[W]], %[[C]]
// CHECK-LABEL: func.func @widened_reduce_gradients
// CHECK-SAME: (%arg0: tensor<4xf32> {{.*}}partial = [dp]>})
// CHECK: weft.all_reduce sum %arg0 over @mesh ["dp"] : tensor<4xf32>
func.func @widened(%g: tensor<4xbf16>, %h: tensor<4xf32>)
    -> (tensor<4xf32> {weft.gradient_of = "w"}, tensor<4xbf16> {weft.gradient_of = "n"}) {
  %r = weft.all_reduce sum %g over @mesh ["dp"] : tensor<4xbf16>
  %w = weft.cast %r : tensor<4xbf16> -> tensor<4xf32>
  %s = weft.all_reduce sum %h over @mesh ["dp"] : tensor<4xf32>
  %n = weft.cast %s : tensor<4xf32> -> tensor<4xbf16>
  return %w, %n : tensor<4xf32>, tensor<4xbf16>
}

// -----

// A position embedding's gradient: the batch-summed gradient of its output is
// a partial sum over dp, which the one-hot matrix product of the embedding's
// backward carries to the table's gradient. The product's other operand (the
// positions' one-hot, from iotas) is the same on every dp rank, so the
// reduction moves past it (`Multilinear`) and runs once per step. A product
// whose other operand depends on the step's dp-split input keeps its
// reduction: summed after the product, each rank's own one-hot would weigh
// the others' gradients.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @positions
// CHECK-SAME: tensor<1x16x4xf32> {weft.gradient_of = "wpe", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[], [], []], partial = [dp]>}
// CHECK-SAME: attributes {weft.gradient_reduction = @positions_reduce_gradients}
// CHECK: %[[S:.*]] = weft.reduce_sum
// CHECK-NOT: weft.all_reduce
// CHECK: weft.matmul %{{.*}}, %[[S]] transpose_lhs
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<2x8x4xf32>
// CHECK: weft.matmul
// CHECK-LABEL: func.func @positions_reduce_gradients
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<1x16x4xf32>
// CHECK-NOT: weft.all_reduce
// CHECK: return
func.func @positions(%dy: tensor<2x8x4xf32>, %ids: tensor<2x8xi64> {weft.local_sharding = #weft.sharding<@mesh, [[dp], []]>})
    -> (tensor<1x16x4xf32> {weft.gradient_of = "wpe", weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>},
        tensor<2x16x4xf32> {weft.gradient_of = "other", weft.local_sharding = #weft.sharding<@mesh, [[], [], []]>}) {
  %s = weft.reduce_sum %dy axes [0] keep_dims : tensor<2x8x4xf32> -> tensor<1x8x4xf32>
  %r = weft.all_reduce sum %s over @mesh ["dp"] : tensor<1x8x4xf32>
  %pos = weft.iota dim 1 : tensor<1x8x1xi64>
  %cols = weft.iota dim 2 : tensor<1x8x16xi64>
  %eq = weft.compare eq, %pos, %cols : (tensor<1x8x1xi64>, tensor<1x8x16xi64>) -> tensor<1x8x16xi1>
  %hot = weft.cast %eq : tensor<1x8x16xi1> -> tensor<1x8x16xf32>
  %g = weft.matmul %hot, %r transpose_lhs : (tensor<1x8x16xf32>, tensor<1x8x4xf32>) -> tensor<1x16x4xf32>
  %r2 = weft.all_reduce sum %dy over @mesh ["dp"] : tensor<2x8x4xf32>
  %ids3 = weft.reshape %ids : tensor<2x8xi64> -> tensor<2x8x1xi64>
  %cols2 = weft.iota dim 2 : tensor<2x8x16xi64>
  %eq2 = weft.compare eq, %ids3, %cols2 : (tensor<2x8x1xi64>, tensor<2x8x16xi64>) -> tensor<2x8x16xi1>
  %hot2 = weft.cast %eq2 : tensor<2x8x16xi1> -> tensor<2x8x16xf32>
  %g2 = weft.matmul %hot2, %r2 transpose_lhs : (tensor<2x8x16xf32>, tensor<2x8x4xf32>) -> tensor<2x16x4xf32>
  return %g, %g2 : tensor<1x16x4xf32>, tensor<2x16x4xf32>
}

// -----

// On a load-balanced ring's step (weft.load_balanced), a block whose
// dimension the reduction's axes lead with cp is in the ring's zigzag layout,
// as the runtime lays such a split out: the reduce-scatter is a zigzag one,
// on a dimension that divides by twice the group (2 rows of `t` do not over
// cp = 2, so its 4 columns are cut). Led by dp, the block is a plain one.
weft.mesh @mesh(dp = 2, cp = 2)
// SCATTER-LABEL: func.func @ring_reduce_gradients
// SCATTER: weft.reduce_scatter sum %{{.*}} over @mesh ["cp"] dim 0 zigzag : tensor<8x4xf32> -> tensor<4x4xf32>
// SCATTER: weft.reduce_scatter sum %{{.*}} over @mesh ["cp"] dim 1 zigzag : tensor<2x4xf32> -> tensor<2x2xf32>
// SCATTER-LABEL: func.func @grid_reduce_gradients
// SCATTER: weft.reduce_scatter sum %{{.*}} over @mesh ["dp", "cp"] dim 0 : tensor<8x4xf32> -> tensor<2x4xf32>
func.func @ring(%a: tensor<8x4xf32>, %b: tensor<2x4xf32>)
    -> (tensor<8x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []]>},
        tensor<2x4xf32> {weft.gradient_of = "t", weft.local_sharding = #weft.sharding<@mesh, [[], []]>})
    attributes {weft.load_balanced = ["cp"]} {
  %r = weft.all_reduce sum %a over @mesh ["cp"] : tensor<8x4xf32>
  %s = weft.all_reduce sum %b over @mesh ["cp"] : tensor<2x4xf32>
  return %r, %s : tensor<8x4xf32>, tensor<2x4xf32>
}
func.func @grid(%a: tensor<8x4xf32>) -> (tensor<8x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []]>})
    attributes {weft.load_balanced = ["cp"]} {
  %r = weft.all_reduce sum %a over @mesh ["dp", "cp"] : tensor<8x4xf32>
  return %r : tensor<8x4xf32>
}

// -----

// Without ZeRO, a weight the step stores in blocks beyond its layout
// (weft.stored_over, AxoNN's depth axis gz) gets its gradient reduce-scattered
// into that block, the rest of its group (dp) all-reduced; a gradient with
// nothing left to all-reduce (`w`) makes the step reduce after every
// micro-batch, as AxoNN's backward does, so a rank accumulates its block.
weft.mesh @mesh(dp = 2, gz = 2)
// CHECK-LABEL: func.func @depth
// CHECK-SAME: weft.reduce_every_micro_batch
// CHECK-LABEL: func.func @depth_reduce_gradients
// CHECK-SAME: -> (tensor<2x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[gz], []]>}, tensor<4xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]]>})
// CHECK: weft.reduce_scatter sum %{{.*}} over @mesh ["gz"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK-NOT: weft.all_reduce sum %{{.*}} : tensor<2x4xf32>
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["gz"] : tensor<4xf32>
// CHECK-LABEL: func.func @grid
// CHECK-NOT: weft.reduce_every_micro_batch
// CHECK-LABEL: func.func @grid_reduce_gradients
// CHECK: %[[S:.*]] = weft.reduce_scatter sum %{{.*}} over @mesh ["gz"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
// CHECK: weft.all_reduce sum %[[S]] over @mesh ["dp"] : tensor<2x4xf32>
func.func @depth(%x: tensor<4x4xf32>, %y: tensor<4xf32>)
    -> (tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []]>},
        tensor<4xf32> {weft.gradient_of = "b", weft.local_sharding = #weft.sharding<@mesh, [[]]>}) {
  %w = weft.parameter "w" {weft.stored_over = ["gz"]} : tensor<4x4xf32>
  %r = weft.all_reduce sum %x over @mesh ["gz"] : tensor<4x4xf32>
  %s = weft.all_reduce sum %y over @mesh ["gz"] : tensor<4xf32>
  return %r, %s : tensor<4x4xf32>, tensor<4xf32>
}
func.func @grid(%x: tensor<4x4xf32>) -> (tensor<4x4xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []]>}) {
  %r = weft.all_reduce sum %x over @mesh ["dp", "gz"] : tensor<4x4xf32>
  return %r : tensor<4x4xf32>
}

// -----

// A rotary embedding's trained frequencies (Hugging Face's inv_freq, tables
// computed in the forward pass): the tables' gradient is summed over the
// batch and all-reduced over dp where the tables broadcast over it, then
// read twice, its two halves sliced and added. Every value on the way is read
// only on the way, so the reduction moves to the end of the step, and ZeRO
// reduce-scatters the frequencies' gradient as any other. A value on the way
// that something else reads (`@shared`'s %h, also returned) keeps its
// all-reduce where it is.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @rotary
// CHECK-SAME: tensor<4xf32> {weft.gradient_of = "inv_freq", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]], partial = [dp]>}
// CHECK-NOT: weft.all_reduce
// CHECK: return
// CHECK-LABEL: func.func @rotary_reduce_gradients
// CHECK: weft.all_reduce sum %arg0 over @mesh ["dp"] : tensor<4xf32>
// SCATTER-LABEL: func.func @rotary_reduce_gradients
// SCATTER-SAME: -> (tensor<2xf32> {weft.gradient_of = "inv_freq", weft.local_sharding = #weft.sharding<@mesh, {{\[}}[dp]]>})
// SCATTER: weft.reduce_scatter sum %arg0 over @mesh ["dp"] dim 0 : tensor<4xf32> -> tensor<2xf32>
func.func @rotary(%dtable: tensor<2x8x8xf32>, %freqs: tensor<1x8x8xf32>, %pos: tensor<1x1x8xf32>)
    -> (tensor<4xf32> {weft.gradient_of = "inv_freq", weft.local_sharding = #weft.sharding<@mesh, [[]]>}) {
  %s = weft.reduce_sum %dtable axes [0] keep_dims : tensor<2x8x8xf32> -> tensor<1x8x8xf32>
  %r = weft.all_reduce sum %s over @mesh ["dp"] : tensor<1x8x8xf32>
  %sin = weft.sin %freqs : tensor<1x8x8xf32>
  %d = weft.mul %r, %sin : tensor<1x8x8xf32>
  %lo = weft.slice %d starts [0, 0, 0] limits [1, 8, 4] : tensor<1x8x8xf32> -> tensor<1x8x4xf32>
  %hi = weft.slice %d starts [0, 0, 4] limits [1, 8, 8] : tensor<1x8x8xf32> -> tensor<1x8x4xf32>
  %sum = weft.add %lo, %hi : tensor<1x8x4xf32>
  %t = weft.transpose %sum permutation [0, 2, 1] : tensor<1x8x4xf32> -> tensor<1x4x8xf32>
  %m = weft.matmul %t, %pos transpose_rhs : (tensor<1x4x8xf32>, tensor<1x1x8xf32>) -> tensor<1x4x1xf32>
  %g = weft.reshape %m : tensor<1x4x1xf32> -> tensor<4xf32>
  return %g : tensor<4xf32>
}

// -----

weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @shared
// CHECK-NOT: weft.gradient_reduction
// CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<8xf32>
// CHECK-NOT: func.func @shared_reduce_gradients
func.func @shared(%a: tensor<8xf32>) -> (tensor<4xf32> {weft.gradient_of = "w"}, tensor<8xf32>) {
  %r = weft.all_reduce sum %a over @mesh ["dp"] : tensor<8xf32>
  %h = weft.neg %r : tensor<8xf32>
  %lo = weft.slice %h starts [0] limits [4] : tensor<8xf32> -> tensor<4xf32>
  %hi = weft.slice %h starts [4] limits [8] : tensor<8xf32> -> tensor<4xf32>
  %g = weft.add %lo, %hi : tensor<4xf32>
  return %g, %h : tensor<4xf32>, tensor<8xf32>
}

// -----

// A tensor-parallel all-reduce of an activation's gradient, read by the
// layer norm's weight gradient and by the rest of the backward: the weight's
// gradient sums over the batch and is all-reduced over dp. Only the dp
// reduction moves; the tp one, which other ops read, is not folded into it.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @norm
// CHECK-SAME: partial = [dp]>
// CHECK: weft.all_reduce sum %arg0 over @mesh ["tp"] : tensor<2x4xf32>
// CHECK-NOT: weft.all_reduce
// CHECK-LABEL: func.func @norm_reduce_gradients
// CHECK: weft.all_reduce sum %arg0 over @mesh ["dp"] : tensor<1x4xf32>
func.func @norm(%dy: tensor<2x4xf32>, %x: tensor<2x4xf32>)
    -> (tensor<1x4xf32> {weft.gradient_of = "ln.weight"}, tensor<2x4xf32>) {
  %t = weft.all_reduce sum %dy over @mesh ["tp"] : tensor<2x4xf32>
  %p = weft.mul %t, %x : tensor<2x4xf32>
  %s = weft.reduce_sum %p axes [0] keep_dims : tensor<2x4xf32> -> tensor<1x4xf32>
  %d = weft.all_reduce sum %s over @mesh ["dp"] : tensor<1x4xf32>
  %dx = weft.mul %t, %x : tensor<2x4xf32>
  return %d, %dx : tensor<1x4xf32>, tensor<2x4xf32>
}
