// RUN: weft-opt %s -weft-apply-plan="tp=2" | FileCheck %s
// RUN: weft-opt %s -weft-apply-plan="tp=2 sp=1" | FileCheck %s --check-prefix=SP
// RUN: weft-opt %s -weft-apply-plan="gx=2 gy=2" | FileCheck %s --check-prefix=GRID

// A [batch, sequence, hidden] value a forward layer keeps for its backward
// that a row-parallel linear reads (the attention's output, the output
// projection's input) is kept split over tp in its last dimension: the
// forward layer's result, and the backward layer's input that takes it. The
// layer's output, the residual stream, stays whole in the hidden dimension.
// Under Megatron SP the residual stream is split along the sequence, and the
// kept value is still split over tp in its last dimension, as the attention
// computes it (following the residual stream's split, it was all-to-all'd to
// the sequence split in every forward layer and back in the backward).
// Under AxoNN's 3-D grid the row linears contract over gy: the kept value is
// split over gy (it was gathered over gy in every forward layer).

// CHECK: weft.layer "h"(%arg0) index 0 {{.*}}weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], []]>, #weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]}
// CHECK: weft.layer "h.backward"(%arg0, %0#0, %0#1) index 0 {weft.input_shardings = [#weft.sharding<@mesh, {{\[\[}}], [], []]>, #weft.sharding<@mesh, {{\[\[}}], [], []]>, #weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]
// SP: weft.layer "h"(%arg0) index 0 {{.*}}weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>, #weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]}
// SP: weft.layer "h.backward"(%arg0, %0#0, %0#1) index 0 {weft.input_shardings = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>, #weft.sharding<@mesh, {{\[\[}}], [tp], []]>, #weft.sharding<@mesh, {{\[\[}}], [], [tp]]>]
// GRID: weft.layer "h"(%arg0) index 0 {{.*}}weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [], []]>, #weft.sharding<@mesh, {{\[\[}}], [], [gy]]>]}
// GRID: weft.layer "h.backward"(%arg0, %0#0, %0#1) index 0 {weft.input_shardings = [#weft.sharding<@mesh, {{\[\[}}], [], []]>, #weft.sharding<@mesh, {{\[\[}}], [], []]>, #weft.sharding<@mesh, {{\[\[}}], [], [gy]]>]
func.func @step(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %y:2 = weft.layer "h"(%x) index 0 : (tensor<2x8x32xf32>) -> (tensor<2x8x32xf32>, tensor<2x8x32xf32>) {
  ^bb0(%in: tensor<2x8x32xf32>):
    %wq = weft.parameter "h.0.q.weight" : tensor<32x32xf32>
    %wk = weft.parameter "h.0.k.weight" : tensor<32x32xf32>
    %wv = weft.parameter "h.0.v.weight" : tensor<32x32xf32>
    %wo = weft.parameter "h.0.o.weight" : tensor<32x32xf32>
    %q = weft.linear %in, %wq : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %k = weft.linear %in, %wk : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %v = weft.linear %in, %wv : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %q4 = weft.reshape %q : tensor<2x8x32xf32> -> tensor<2x8x4x8xf32>
    %k4 = weft.reshape %k : tensor<2x8x32xf32> -> tensor<2x8x4x8xf32>
    %v4 = weft.reshape %v : tensor<2x8x32xf32> -> tensor<2x8x4x8xf32>
    %qt = weft.transpose %q4 permutation [0, 2, 1, 3] : tensor<2x8x4x8xf32> -> tensor<2x4x8x8xf32>
    %kt = weft.transpose %k4 permutation [0, 2, 1, 3] : tensor<2x8x4x8xf32> -> tensor<2x4x8x8xf32>
    %vt = weft.transpose %v4 permutation [0, 2, 1, 3] : tensor<2x8x4x8xf32> -> tensor<2x4x8x8xf32>
    %a = weft.attention %qt, %kt, %vt scale 0.35 causal : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
    %at = weft.transpose %a permutation [0, 2, 1, 3] : tensor<2x4x8x8xf32> -> tensor<2x8x4x8xf32>
    %ar = weft.reshape %at : tensor<2x8x4x8xf32> -> tensor<2x8x32xf32>
    %o = weft.linear %ar, %wo : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %r = weft.add %in, %o : tensor<2x8x32xf32>
    weft.yield %r, %ar : tensor<2x8x32xf32>, tensor<2x8x32xf32>
  }
  %g = weft.layer "h.backward"(%x, %y#0, %y#1) index 0 : (tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  ^bb0(%in: tensor<2x8x32xf32>, %dy: tensor<2x8x32xf32>, %kept: tensor<2x8x32xf32>):
    %s = weft.add %dy, %kept : tensor<2x8x32xf32>
    weft.yield %s : tensor<2x8x32xf32>
  }
  return %g : tensor<2x8x32xf32>
}
