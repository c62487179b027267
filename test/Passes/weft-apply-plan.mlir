// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-apply-plan="tp=2 sp=1" | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-apply-plan="tp=2 ulysses=2" -verify-diagnostics

// The plan's shardings on a transformer: Megatron's column-parallel Q/K/V and
// MLP up projection, row-parallel attention output and MLP down projection,
// heads over tp, the residual stream's sequence over tp (SP), a vocabulary-
// parallel embedding and a column-parallel output layer. The layer stays a
// region; its residual stream is annotated at its boundary.
// CHECK: weft.mesh @mesh(dp = 1, cp = 1, ulysses = 1, tp = 2)
// CHECK: weft.parameter "embed" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}tp], []]>]}
// CHECK: weft.embedding {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>]}
// CHECK: weft.layer "h"(%{{.*}}) index 0 {weft.input_shardings = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>], weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>]}
// CHECK: weft.parameter "q" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]}
// CHECK: weft.parameter "k" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]}
// CHECK: weft.parameter "v" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]}
// CHECK: weft.attention {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], [], []]>]}
// CHECK: weft.parameter "o" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}tp], []]>]}
// CHECK: weft.parameter "up" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]}
// CHECK: weft.parameter "down" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}tp], []]>]}
// CHECK: weft.add {{.*}} {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp], []]>]}
// CHECK-NEXT: weft.yield
// CHECK: weft.parameter "output" {weft.sharding = [#weft.sharding<@mesh, {{\[\[}}], [tp]]>]}

func.func @heads(%q: tensor<1x6x8x4xf32>, %k: tensor<1x6x8x4xf32>, %v: tensor<1x6x8x4xf32>) -> tensor<1x6x8x4xf32> {
  // expected-error @+1 {{plan: the 6 attention heads are not divisible by tp x ulysses (4)}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x6x8x4xf32>, tensor<1x6x8x4xf32>, tensor<1x6x8x4xf32>) -> tensor<1x6x8x4xf32>
  return %0 : tensor<1x6x8x4xf32>
}

// -----

// (Two KV heads under tp x ulysses = 4 are repeated:
// weft-apply-plan-repeat-kv.mlir. Six neither divide nor are divided.)
func.func @kv_heads(%q: tensor<1x12x8x4xf32>, %k: tensor<1x6x8x4xf32>, %v: tensor<1x6x8x4xf32>) -> tensor<1x12x8x4xf32> {
  // expected-error @+1 {{plan: the 6 KV heads and tp x ulysses (4) do not divide one another}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x12x8x4xf32>, tensor<1x6x8x4xf32>, tensor<1x6x8x4xf32>) -> tensor<1x12x8x4xf32>
  return %0 : tensor<1x12x8x4xf32>
}

// -----

func.func @sequence(%q: tensor<1x8x5x4xf32>, %k: tensor<1x8x5x4xf32>, %v: tensor<1x8x5x4xf32>) -> tensor<1x8x5x4xf32> {
  // expected-error @+1 {{plan: the sequence (5) is not divisible by cp x ulysses (2)}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x8x5x4xf32>, tensor<1x8x5x4xf32>, tensor<1x8x5x4xf32>) -> tensor<1x8x5x4xf32>
  return %0 : tensor<1x8x5x4xf32>
}

// -----

// Cross-attention (8 queries, 12 keys) under a plan that splits the sequence.
func.func @cross_attention(%q: tensor<1x8x8x4xf32>, %k: tensor<1x8x12x4xf32>, %v: tensor<1x8x12x4xf32>) -> tensor<1x8x8x4xf32> {
  // expected-error @+1 {{plan: the attention's queries (8) and keys (12) differ in length (cross-attention, as an encoder-decoder's decoder has); context parallelism and Ulysses split the sequence of self-attention only: choose cp=1 and ulysses=1 (Megatron's sequence parallelism, sp, applies)}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x8x8x4xf32>, tensor<1x8x12x4xf32>, tensor<1x8x12x4xf32>) -> tensor<1x8x8x4xf32>
  return %0 : tensor<1x8x8x4xf32>
}

// -----

// An attention the import did not raise (scores through a bare tanh, which
// is no cap c · tanh(s / c)) stays matmuls and a softmax: heads cannot be
// split.
// expected-error @+1 {{the plan splits heads or the sequence, but the model has no weft.attention: the import raised none of its attentions (one written in a form it does not recognize, such as scores through a function other than a scale, a soft cap or a mask, stays matmuls and a softmax, which only data and pipeline parallelism split). `weft import --explain-raise MODEL` names the op that stopped each match; plan with tp=1, cp=1 and ulysses=1, or write the attention as softmax(q k^T * scale + mask) v}}
func.func @soft_capped(%q: tensor<1x8x8x4xf32>, %kt: tensor<1x8x4x8xf32>, %v: tensor<1x8x8x4xf32>) -> tensor<1x8x8x4xf32> {
  %s = weft.matmul %q, %kt : (tensor<1x8x8x4xf32>, tensor<1x8x4x8xf32>) -> tensor<1x8x8x8xf32>
  %t = weft.tanh %s : tensor<1x8x8x8xf32>
  %p = weft.softmax %t axis 3 : tensor<1x8x8x8xf32>
  %o = weft.matmul %p, %v : (tensor<1x8x8x8xf32>, tensor<1x8x8x4xf32>) -> tensor<1x8x8x4xf32>
  return %o : tensor<1x8x8x4xf32>
}

// -----

// expected-error @+1 {{the module already has a weft.mesh; apply a plan to an unpartitioned model}}
module {
  weft.mesh @mesh(tp = 2)
  func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}
