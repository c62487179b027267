// RUN: weft-opt %s -split-input-file -weft-optimize-collectives | FileCheck %s

weft.mesh @mesh(dp = 1, tp = 4)
// A sum that is then sliced is a reduce_scatter; a gather that is sliced back
// is its input; groups of one rank do nothing.
// CHECK-LABEL: func.func @fold
func.func @fold(%x: tensor<2x8xf32>, %y: tensor<2x2xf32>, %z: tensor<2x8xf32>) -> (tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x8xf32>) {
  // CHECK-NEXT: %[[RS:.*]] = weft.reduce_scatter sum %arg0 over @mesh ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  %0 = weft.all_reduce sum %x over @mesh ["tp"] : tensor<2x8xf32>
  %1 = weft.all_slice %0 over @mesh ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  %2 = weft.all_gather %y over @mesh ["tp"] dim 1 : tensor<2x2xf32> -> tensor<2x8xf32>
  %3 = weft.all_slice %2 over @mesh ["tp"] dim 1 : tensor<2x8xf32> -> tensor<2x2xf32>
  %4 = weft.all_reduce sum %z over @mesh ["dp"] : tensor<2x8xf32>
  // CHECK-NEXT: return %[[RS]], %arg1, %arg2
  return %1, %3, %4 : tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x8xf32>
}

// -----

weft.mesh @mesh(dp = 2)
// Independent all-reduces over one group are bucketed into one.
// CHECK-LABEL: func.func @bucket
func.func @bucket(%loss: tensor<f32>, %count: tensor<f32>, %g: tensor<2x3xf32>) -> (tensor<f32>, tensor<f32>, tensor<2x3xf32>) {
  // CHECK: %[[JOINED:.*]] = weft.concat {{.*}} axis 0 : (tensor<1xf32>, tensor<1xf32>, tensor<6xf32>) -> tensor<8xf32>
  // CHECK-NEXT: %[[SUM:.*]] = weft.all_reduce sum %[[JOINED]] over @mesh ["dp"] : tensor<8xf32>
  // CHECK-NEXT: weft.split %[[SUM]] axis 0 sizes [1, 1, 6]
  // CHECK-NOT: weft.all_reduce
  %0 = weft.all_reduce sum %loss over @mesh ["dp"] : tensor<f32>
  %1 = weft.all_reduce sum %count over @mesh ["dp"] : tensor<f32>
  %2 = weft.all_reduce sum %g over @mesh ["dp"] : tensor<2x3xf32>
  return %0, %1, %2 : tensor<f32>, tensor<f32>, tensor<2x3xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// A chain (the second reduces what the first produced) stays two.
// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<4xf32>) -> tensor<4xf32> {
  // CHECK-COUNT-2: weft.all_reduce
  %0 = weft.all_reduce sum %x over @mesh ["tp"] : tensor<4xf32>
  %1 = weft.exp %0 : tensor<4xf32>
  %2 = weft.all_reduce sum %1 over @mesh ["tp"] : tensor<4xf32>
  return %2 : tensor<4xf32>
}

// -----

weft.mesh @mesh(dp = 2, tp = 2)
// The input gradients of three column-parallel projections of one input (q, k
// and v) are partial over tp: summed first, then all-reduced once. A chain of
// sums is reduced at its end; a sum of reductions over different groups, one
// read elsewhere too, or one that would widen, is left as it is.
// CHECK-LABEL: func.func @sum_then_reduce
func.func @sum_then_reduce(%q: tensor<2x8x32xf32>, %k: tensor<2x8x32xf32>, %v: tensor<2x8x32xf32>,
                           %a: tensor<2x8x32xf32>, %b: tensor<2x8x32xf32>,
                           %c: tensor<2x8x32xf32>, %d: tensor<2x8x32xf32>,
                           %e: tensor<2x8x32xf32>, %f: tensor<1x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  // CHECK: %[[QK:.*]] = weft.add %arg0, %arg1 : tensor<2x8x32xf32>
  // CHECK-NEXT: %[[QKV:.*]] = weft.sub %[[QK]], %arg2 : tensor<2x8x32xf32>
  // CHECK-NEXT: weft.reshape %[[QKV]] : tensor<2x8x32xf32> -> tensor<512xf32>
  // One 512-element reduce for q, k and v, then a, c, d, e (512 each) and f
  // (256), bucketed: 2816 elements.
  // CHECK: %[[ALL:.*]] = weft.all_reduce sum {{.*}} over @mesh ["tp"] : tensor<2816xf32>
  // CHECK-NEXT: %[[PIECES:.*]]:6 = weft.split %[[ALL]]
  // CHECK-NEXT: %[[ONCE:.*]] = weft.reshape %[[PIECES]]#0
  // CHECK: weft.all_reduce sum %arg4 over @mesh ["dp"]
  // CHECK-NEXT: weft.add
  // CHECK-NEXT: weft.add
  // CHECK-NEXT: weft.add {{.*}} : (tensor<2x8x32xf32>, tensor<1x8x32xf32>) -> tensor<2x8x32xf32>
  %0 = weft.all_reduce sum %q over @mesh ["tp"] : tensor<2x8x32xf32>
  %1 = weft.all_reduce sum %k over @mesh ["tp"] : tensor<2x8x32xf32>
  %2 = weft.all_reduce sum %v over @mesh ["tp"] : tensor<2x8x32xf32>
  %3 = weft.add %0, %1 : tensor<2x8x32xf32>
  %4 = weft.sub %3, %2 : tensor<2x8x32xf32>
  // Different groups: each stays.
  %5 = weft.all_reduce sum %a over @mesh ["tp"] : tensor<2x8x32xf32>
  %6 = weft.all_reduce sum %b over @mesh ["dp"] : tensor<2x8x32xf32>
  %7 = weft.add %5, %6 : tensor<2x8x32xf32>
  // Read elsewhere too.
  %8 = weft.all_reduce sum %c over @mesh ["tp"] : tensor<2x8x32xf32>
  %9 = weft.all_reduce sum %d over @mesh ["tp"] : tensor<2x8x32xf32>
  %10 = weft.add %8, %9 : tensor<2x8x32xf32>
  // Broadcast: reducing the sum would send more.
  %11 = weft.all_reduce sum %e over @mesh ["tp"] : tensor<2x8x32xf32>
  %12 = weft.all_reduce sum %f over @mesh ["tp"] : tensor<1x8x32xf32>
  %13 = weft.add %11, %12 : (tensor<2x8x32xf32>, tensor<1x8x32xf32>) -> tensor<2x8x32xf32>
  // CHECK-NEXT: return %[[ONCE]]
  return %4, %7, %10, %8, %13 : tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// Under sequence parallelism the same gradients are reduce-scattered: summed
// first, then scattered once.
// CHECK-LABEL: func.func @sum_then_scatter
func.func @sum_then_scatter(%q: tensor<2x8x32xf32>, %k: tensor<2x8x32xf32>, %r: tensor<2x4x32xf32>) -> tensor<2x4x32xf32> {
  // CHECK-NEXT: %[[QK:.*]] = weft.add %arg0, %arg1 : tensor<2x8x32xf32>
  // CHECK-NEXT: %[[ONCE:.*]] = weft.reduce_scatter sum %[[QK]] over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  // CHECK-NEXT: %[[OUT:.*]] = weft.add %[[ONCE]], %arg2
  // CHECK-NEXT: return %[[OUT]]
  %0 = weft.reduce_scatter sum %q over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  %1 = weft.reduce_scatter sum %k over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  %2 = weft.add %0, %1 : tensor<2x4x32xf32>
  %3 = weft.add %2, %r : tensor<2x4x32xf32>
  return %3 : tensor<2x4x32xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// A post-LN layer's backward under SP adds the q, k and v projections' input
// gradients into the residual gradient one at a time: reassociated, they are
// summed first and reduce-scattered once (not three times).
// CHECK-LABEL: func.func @running_sum
func.func @running_sum(%r: tensor<2x4x32xbf16>, %q: tensor<2x8x32xbf16>, %k: tensor<2x8x32xbf16>, %v: tensor<2x8x32xbf16>) -> tensor<2x4x32xbf16> {
  // CHECK-NEXT: %[[VK:.*]] = weft.add %arg3, %arg2 : tensor<2x8x32xbf16>
  // CHECK-NEXT: %[[VKQ:.*]] = weft.add %[[VK]], %arg1 : tensor<2x8x32xbf16>
  // CHECK-NEXT: %[[ONCE:.*]] = weft.reduce_scatter sum %[[VKQ]] over @mesh ["tp"] dim 1 : tensor<2x8x32xbf16> -> tensor<2x4x32xbf16>
  // CHECK-NEXT: %[[OUT:.*]] = weft.add %arg0, %[[ONCE]]
  // CHECK-NEXT: return %[[OUT]]
  %0 = weft.reduce_scatter sum %v over @mesh ["tp"] dim 1 : tensor<2x8x32xbf16> -> tensor<2x4x32xbf16>
  %1 = weft.add %r, %0 : tensor<2x4x32xbf16>
  %2 = weft.reduce_scatter sum %k over @mesh ["tp"] dim 1 : tensor<2x8x32xbf16> -> tensor<2x4x32xbf16>
  %3 = weft.add %1, %2 : tensor<2x4x32xbf16>
  %4 = weft.reduce_scatter sum %q over @mesh ["tp"] dim 1 : tensor<2x8x32xbf16> -> tensor<2x4x32xbf16>
  %5 = weft.add %3, %4 : tensor<2x4x32xbf16>
  return %5 : tensor<2x4x32xbf16>
}

// -----

weft.mesh @mesh(tp = 2, dp = 2)
// Reductions over different groups, or a partial read twice, stay apart (the
// two over tp, independent, are bucketed into one launch).
// CHECK-LABEL: func.func @running_sum_kept
func.func @running_sum_kept(%r: tensor<2x8xf32>, %a: tensor<2x8xf32>, %b: tensor<2x8xf32>, %c: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<32xf32>
  // CHECK: %[[A:.*]] = weft.add %arg0, %{{.*}} : tensor<2x8xf32>
  // CHECK-NEXT: %[[B:.*]] = weft.all_reduce sum %arg2 over @mesh ["dp"] : tensor<2x8xf32>
  // CHECK-NEXT: weft.add %[[A]], %[[B]]
  // CHECK-NEXT: %[[C:.*]] = weft.add %arg0, %[[R:.*]] : tensor<2x8xf32>
  // CHECK-NEXT: weft.add %[[C]], %[[R]]
  %0 = weft.all_reduce sum %a over @mesh ["tp"] : tensor<2x8xf32>
  %1 = weft.add %r, %0 : tensor<2x8xf32>
  %2 = weft.all_reduce sum %b over @mesh ["dp"] : tensor<2x8xf32>
  %3 = weft.add %1, %2 : tensor<2x8xf32>
  %4 = weft.all_reduce sum %c over @mesh ["tp"] : tensor<2x8xf32>
  %5 = weft.add %r, %4 : tensor<2x8xf32>
  %6 = weft.add %5, %4 : tensor<2x8xf32>
  return %3, %6 : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// A sum over dimensions of an all-reduce read only there: the ranks sum
// their partial values, then reduce the smaller result.
// CHECK-LABEL: func.func @sum_before_all_reduce
func.func @sum_before_all_reduce(%g: tensor<2x8x32xf32>) -> tensor<1x1x32xf32> {
  // CHECK-NEXT: %[[S:.*]] = weft.reduce_sum %arg0 axes [0, 1] keep_dims : tensor<2x8x32xf32> -> tensor<1x1x32xf32>
  // CHECK-NEXT: %[[R:.*]] = weft.all_reduce sum %[[S]] over @mesh ["tp"] : tensor<1x1x32xf32>
  // CHECK-NEXT: return %[[R]]
  %0 = weft.all_reduce sum %g over @mesh ["tp"] : tensor<2x8x32xf32>
  %1 = weft.reduce_sum %0 axes [0, 1] keep_dims : tensor<2x8x32xf32> -> tensor<1x1x32xf32>
  return %1 : tensor<1x1x32xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// Megatron SP: the partial gradient is also reduce-scattered along the
// sequence (after the sum, in program order); each rank sums its block.
// CHECK-LABEL: func.func @sum_scattered_block
func.func @sum_scattered_block(%g: tensor<2x8x32xf32>, %w: tensor<32xf32>) -> (tensor<32xf32>, tensor<2x4x32xf32>) {
  // CHECK-NEXT: %[[RS:.*]] = weft.reduce_scatter sum %arg0 over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  // CHECK-NEXT: %[[S:.*]] = weft.reduce_sum %[[RS]] axes [0, 1] : tensor<2x4x32xf32> -> tensor<32xf32>
  // CHECK-NEXT: %[[R:.*]] = weft.all_reduce sum %[[S]] over @mesh ["tp"] : tensor<32xf32>
  // CHECK-NEXT: %[[M:.*]] = weft.mul %[[RS]], %arg1
  // CHECK-NEXT: return %[[R]], %[[M]]
  %0 = weft.all_reduce sum %g over @mesh ["tp"] : tensor<2x8x32xf32>
  %1 = weft.reduce_sum %0 axes [0, 1] : tensor<2x8x32xf32> -> tensor<32xf32>
  %2 = weft.reduce_scatter sum %g over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  %3 = weft.mul %2, %w : (tensor<2x4x32xf32>, tensor<32xf32>) -> tensor<2x4x32xf32>
  return %1, %3 : tensor<32xf32>, tensor<2x4x32xf32>
}

// -----

weft.mesh @mesh(tp = 2)
// Left alone: an all-reduce another op reads too (reducing the sum as well
// would add a collective), a lossy codec, and a scatter along a dimension
// the sum keeps.
// CHECK-LABEL: func.func @sum_kept
func.func @sum_kept(%g: tensor<2x8x32xf32>, %h: tensor<2x8x32xf32>) -> (tensor<1x1x32xf32>, tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x32xf32>, tensor<2x8x16xf32>) {
  // CHECK-NEXT: %[[A:.*]] = weft.all_reduce sum %arg0 over @mesh ["tp"] : tensor<2x8x32xf32>
  // CHECK-NEXT: weft.reduce_sum %[[A]] axes [0, 1] keep_dims
  // CHECK-NEXT: %[[C:.*]] = weft.all_reduce sum %arg1 over @mesh ["tp"] codec bf16 : tensor<2x8x32xf32>
  // CHECK-NEXT: weft.reduce_sum %[[C]] axes [0, 1] :
  // CHECK-NEXT: %[[RS:.*]] = weft.reduce_scatter sum %arg1 over @mesh ["tp"] dim 2
  // CHECK-NEXT: %[[S:.*]] = weft.reduce_sum %arg1 axes [1] :
  // CHECK-NEXT: weft.all_reduce sum %[[S]] over @mesh ["tp"] : tensor<2x32xf32>
  %0 = weft.all_reduce sum %g over @mesh ["tp"] : tensor<2x8x32xf32>
  %1 = weft.reduce_sum %0 axes [0, 1] keep_dims : tensor<2x8x32xf32> -> tensor<1x1x32xf32>
  %2 = weft.all_reduce sum %h over @mesh ["tp"] codec bf16 : tensor<2x8x32xf32>
  %3 = weft.reduce_sum %2 axes [0, 1] : tensor<2x8x32xf32> -> tensor<32xf32>
  %4 = weft.reduce_scatter sum %h over @mesh ["tp"] dim 2 : tensor<2x8x32xf32> -> tensor<2x8x16xf32>
  %5 = weft.all_reduce sum %h over @mesh ["tp"] : tensor<2x8x32xf32>
  %6 = weft.reduce_sum %5 axes [1] : tensor<2x8x32xf32> -> tensor<2x32xf32>
  return %1, %0, %3, %6, %4 : tensor<1x1x32xf32>, tensor<2x8x32xf32>, tensor<32xf32>, tensor<2x32xf32>, tensor<2x8x16xf32>
}

// -----

weft.mesh @mesh(tp = 2, sp = 2)
// The rule reads the op's interfaces, not its name: a sum that keeps its
// summed dimensions sums the scattered block too (dimension 1 is a reduction
// factor of its rule). Left alone: additive ops whose result is not smaller
// than their input (a widening cast, a reshape), which would only move the
// reduction. (The reshape's all-reduce is over another axis so that it is not
// bucketed with the sum's.)
// CHECK-LABEL: func.func @sum_by_rule
func.func @sum_by_rule(%g: tensor<2x8x32xf32>, %h: tensor<2x8x32xbf16>) -> (tensor<1x1x32xf32>, tensor<2x4x32xf32>, tensor<2x8x32xf32>, tensor<16x32xf32>) {
  // CHECK-NEXT: %[[RS:.*]] = weft.reduce_scatter sum %arg0 over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  // CHECK-NEXT: %[[S:.*]] = weft.reduce_sum %[[RS]] axes [0, 1] keep_dims : tensor<2x4x32xf32> -> tensor<1x1x32xf32>
  // CHECK-NEXT: %[[R:.*]] = weft.all_reduce sum %[[S]] over @mesh ["tp"] : tensor<1x1x32xf32>
  // CHECK-NEXT: %[[H:.*]] = weft.all_reduce sum %arg1 over @mesh ["tp"] : tensor<2x8x32xbf16>
  // CHECK-NEXT: weft.cast %[[H]] : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  // CHECK-NEXT: %[[G:.*]] = weft.all_reduce sum %arg0 over @mesh ["sp"] : tensor<2x8x32xf32>
  // CHECK-NEXT: weft.reshape %[[G]] : tensor<2x8x32xf32> -> tensor<16x32xf32>
  %0 = weft.all_reduce sum %g over @mesh ["tp"] : tensor<2x8x32xf32>
  %1 = weft.reduce_sum %0 axes [0, 1] keep_dims : tensor<2x8x32xf32> -> tensor<1x1x32xf32>
  %2 = weft.reduce_scatter sum %g over @mesh ["tp"] dim 1 : tensor<2x8x32xf32> -> tensor<2x4x32xf32>
  %3 = weft.all_reduce sum %h over @mesh ["tp"] : tensor<2x8x32xbf16>
  %4 = weft.cast %3 : tensor<2x8x32xbf16> -> tensor<2x8x32xf32>
  %5 = weft.all_reduce sum %g over @mesh ["sp"] : tensor<2x8x32xf32>
  %6 = weft.reshape %5 : tensor<2x8x32xf32> -> tensor<16x32xf32>
  return %1, %2, %4, %6 : tensor<1x1x32xf32>, tensor<2x4x32xf32>, tensor<2x8x32xf32>, tensor<16x32xf32>
}

// -----

// A ZeRO-3 weight stored in f32 blocks and read in bf16: its block is cast,
// then gathered (half the bytes, FSDP's mixed-precision gather), keeping
// the gather's `hold`. A gather that something reads in f32 too, or whose
// casts disagree, stays as it is.
weft.mesh @mesh(dp = 2)
// CHECK-LABEL: func.func @cast_before_gather
// CHECK: %[[W:.*]] = weft.parameter "w"
// CHECK: %[[B:.*]] = weft.all_slice %[[W]]
// CHECK: %[[C:.*]] = weft.cast %[[B]] : tensor<2x4xf32> -> tensor<2x4xbf16>
// CHECK: %[[G:.*]] = weft.all_gather %[[C]] over @mesh ["dp"] dim 0 hold 2 : tensor<2x4xbf16> -> tensor<4x4xbf16>
// CHECK: weft.add %[[G]], %[[G]]
// CHECK: %[[V:.*]] = weft.all_gather %{{.*}} over @mesh ["dp"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
// CHECK: weft.cast %[[V]] : tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK: %[[U:.*]] = weft.all_gather %{{.*}} over @mesh ["dp"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
// CHECK: weft.cast %[[U]] : tensor<4x4xf32> -> tensor<4x4xbf16>
// CHECK: weft.cast %[[U]] : tensor<4x4xf32> -> tensor<4x4xf16>
func.func @cast_before_gather() -> (tensor<4x4xbf16>, tensor<4x4xbf16>, tensor<4x4xf32>, tensor<4x4xbf16>, tensor<4x4xf16>) {
  %w = weft.parameter "w" {weft.stored_over = ["dp"]} : tensor<4x4xf32>
  %b = weft.all_slice %w over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
  %g = weft.all_gather %b over @mesh ["dp"] dim 0 hold 2 : tensor<2x4xf32> -> tensor<4x4xf32>
  %c1 = weft.cast %g : tensor<4x4xf32> -> tensor<4x4xbf16>
  %c2 = weft.cast %g : tensor<4x4xf32> -> tensor<4x4xbf16>
  %s = weft.add %c1, %c2 : tensor<4x4xbf16>
  %v = weft.parameter "v" {weft.stored_over = ["dp"]} : tensor<4x4xf32>
  %vb = weft.all_slice %v over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
  %vg = weft.all_gather %vb over @mesh ["dp"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %vc = weft.cast %vg : tensor<4x4xf32> -> tensor<4x4xbf16>
  %u = weft.parameter "u" {weft.stored_over = ["dp"]} : tensor<4x4xf32>
  %ub = weft.all_slice %u over @mesh ["dp"] dim 0 : tensor<4x4xf32> -> tensor<2x4xf32>
  %ug = weft.all_gather %ub over @mesh ["dp"] dim 0 : tensor<2x4xf32> -> tensor<4x4xf32>
  %uc = weft.cast %ug : tensor<4x4xf32> -> tensor<4x4xbf16>
  %uh = weft.cast %ug : tensor<4x4xf32> -> tensor<4x4xf16>
  return %s, %vc, %vg, %uc, %uh : tensor<4x4xbf16>, tensor<4x4xbf16>, tensor<4x4xf32>, tensor<4x4xbf16>, tensor<4x4xf16>
}
