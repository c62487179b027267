// RUN: weft-opt -split-input-file -weft-keep-attention-statistics %s | FileCheck %s

// In one block (a backward layer that recomputes the attention): the
// attention becomes a block over all keys, and its gradient reads the
// output and log-sum-exp instead of recomputing the softmax statistics.
// CHECK-LABEL: func.func @same_block
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x8x8xf32>, %[[K:.*]]: tensor<1x2x8x8xf32>, %[[V:.*]]: tensor<1x2x8x8xf32>, %[[M:.*]]: tensor<1x1x8x8xi1>, %[[D:.*]]: tensor<1x2x8x8xf32>)
// CHECK: %[[O:.*]], %[[L:.*]] = weft.attention_block %[[Q]], %[[K]], %[[V]] mask %[[M]] scale 2.500000e-01 causal
// CHECK-SAME: -> (tensor<1x2x8x8xf32>, tensor<1x2x8x1xf32>)
// CHECK-NOT: weft.attention %
// CHECK: weft.attention_grad %[[Q]], %[[K]], %[[V]] grad %[[D]] mask %[[M]] saved %[[O]], %[[L]] scale 2.500000e-01 causal
// CHECK: return %[[O]]
func.func @same_block(%q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %m: tensor<1x1x8x8xi1>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %a = weft.attention %q, %k, %v mask %m scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> tensor<1x2x8x8xf32>
  %dq, %dk, %dv = weft.attention_grad %q, %k, %v grad %d mask %m scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  return %a, %dq, %dk, %dv : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// Not the gradient of this attention (another scale, another mask, no
// causal mask): both stay as they are.
// CHECK-LABEL: func.func @not_its_gradient
// CHECK-COUNT-3: weft.attention %
// CHECK-NOT: weft.attention_block
// CHECK-NOT: saved
func.func @not_its_gradient(%q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %m: tensor<1x1x8x8xi1>, %n: tensor<1x1x8x8xi1>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %a = weft.attention %q, %k, %v scale 0.5 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %b = weft.attention %q, %k, %v mask %n scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> tensor<1x2x8x8xf32>
  %c = weft.attention %q, %k, %v mask %m scale 0.25 : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> tensor<1x2x8x8xf32>
  %dq, %dk, %dv = weft.attention_grad %q, %k, %v grad %d mask %m scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x1x8x8xi1>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  return %a, %b, %c, %dq, %dk : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// A gradient that already reads saved statistics, or one with positions (a
// ring's step, whose statistics are the whole ring's): left alone.
// CHECK-LABEL: func.func @ring_step
// CHECK: weft.attention %
// CHECK: weft.attention_grad {{.*}} positions
// CHECK-NOT: weft.attention_block
func.func @ring_step(%q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>, %p: tensor<8xi64>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %a = weft.attention %q, %k, %v scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %dq, %dk, %dv = weft.attention_grad %q, %k, %v grad %d positions %p, %p scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<8xi64>, tensor<8xi64>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
  return %a, %dq : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// Without recomputation: the backward layer reads q, k and v that the
// forward layer yields. The forward layer's attention becomes the block; it
// yields the log-sum-exp too (and its output once: it is yielded already),
// and the backward layer takes both as two more inputs.
// CHECK-LABEL: func.func @across_layers
// CHECK: %[[F:.*]]:5 = weft.layer "block"(%{{.*}}) index 0 : (tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x1xf32>)
// CHECK: %[[O:.*]], %[[L:.*]] = weft.attention_block
// CHECK: weft.yield %[[O]], %{{.*}}, %{{.*}}, %{{.*}}, %[[L]] :
// CHECK: weft.layer "block.backward"(%{{.*}}, %[[F]]#1, %[[F]]#2, %[[F]]#3, %[[F]]#0, %[[F]]#4) index 0
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<1x2x8x8xf32>, %[[Q:.*]]: tensor<1x2x8x8xf32>, %[[K:.*]]: tensor<1x2x8x8xf32>, %[[V:.*]]: tensor<1x2x8x8xf32>, %[[SO:.*]]: tensor<1x2x8x8xf32>, %[[SL:.*]]: tensor<1x2x8x1xf32>):
// CHECK-NEXT: weft.attention_grad %[[Q]], %[[K]], %[[V]] grad %{{.*}} saved %[[SO]], %[[SL]] scale
func.func @across_layers(%x: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %f:4 = weft.layer "block"(%x) index 0 : (tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%in: tensor<1x2x8x8xf32>):
    %q = weft.neg %in : tensor<1x2x8x8xf32>
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %v = weft.tanh %in : tensor<1x2x8x8xf32>
    %a = weft.attention %q, %k, %v scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    weft.yield %a, %q, %k, %v : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
  }
  %g = weft.layer "block.backward"(%d, %f#1, %f#2, %f#3) index 0 : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32> {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>, %v: tensor<1x2x8x8xf32>):
    %dq, %dk, %dv = weft.attention_grad %q, %k, %v grad %dy scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    weft.yield %dq : tensor<1x2x8x8xf32>
  }
  return %f#0, %g : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// The backward layer's k is recomputed there from the layer's input
// (torchtitan's per-op recomputation): the same op on the same input as the
// forward's, so the forward layer's attention is this gradient's. Its
// output is yielded already; the log-sum-exp is new.
// CHECK-LABEL: func.func @recomputed_operand
// CHECK: %[[F:.*]]:4 = weft.layer "block"
// CHECK: %[[O:.*]], %[[L:.*]] = weft.attention_block
// CHECK: weft.yield %[[O]], %{{.*}}, %{{.*}}, %[[L]] :
// CHECK: weft.layer "block.backward"(%{{.*}}, %[[F]]#1, %{{.*}}, %[[F]]#0, %[[F]]#3) index 0
// CHECK: weft.attention_grad {{.*}} saved
func.func @recomputed_operand(%x: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %f:3 = weft.layer "block"(%x) index 0 : (tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%in: tensor<1x2x8x8xf32>):
    %q = weft.neg %in : tensor<1x2x8x8xf32>
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %a = weft.attention %q, %k, %k scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    weft.yield %a, %q, %in : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
  }
  %g = weft.layer "block.backward"(%d, %f#1, %x) index 0 : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32> {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %q: tensor<1x2x8x8xf32>, %in: tensor<1x2x8x8xf32>):
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %dq, %dk, %dv = weft.attention_grad %q, %k, %k grad %dy scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    weft.yield %dq : tensor<1x2x8x8xf32>
  }
  return %f#0, %g : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// The backward layer's k is another op of the input than the forward's: not
// this attention's gradient, left as it is. So is a backward layer with no
// forward layer of its kind and index.
// CHECK-LABEL: func.func @other_operand
// CHECK: weft.attention %
// CHECK-NOT: saved
// CHECK: weft.attention_grad
// CHECK-NOT: saved
func.func @other_operand(%x: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  %f:3 = weft.layer "block"(%x) index 0 : (tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%in: tensor<1x2x8x8xf32>):
    %q = weft.neg %in : tensor<1x2x8x8xf32>
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %a = weft.attention %q, %k, %k scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    weft.yield %a, %q, %in : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
  }
  %g = weft.layer "block.backward"(%d, %f#1, %x) index 0 : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32> {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %q: tensor<1x2x8x8xf32>, %in: tensor<1x2x8x8xf32>):
    %k = weft.tanh %in : tensor<1x2x8x8xf32>
    %dq, %dk, %dv = weft.attention_grad %q, %k, %k grad %dy scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    weft.yield %dq : tensor<1x2x8x8xf32>
  }
  %h = weft.layer "block.backward"(%d, %f#1, %x) index 1 : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32> {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %q: tensor<1x2x8x8xf32>, %in: tensor<1x2x8x8xf32>):
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %dq, %dk, %dv = weft.attention_grad %q, %k, %k grad %dy scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    weft.yield %dq : tensor<1x2x8x8xf32>
  }
  return %f#0, %g, %h : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
}

// -----

// The forward layer yields the output only as the output projection reads
// it (a reshape: the same elements), which the backward layer takes
// already: that is what carries the output, reshaped back where the
// gradient reads it, so the layer does not keep it twice; only the
// log-sum-exp is new.
// CHECK-LABEL: func.func @across_layers_reshaped
// CHECK: %[[F:.*]]:5 = weft.layer "block"
// CHECK: %[[O:.*]], %[[L:.*]] = weft.attention_block
// CHECK: %[[R:.*]] = weft.reshape %[[O]] : tensor<1x2x8x8xf32> -> tensor<1x8x16xf32>
// CHECK: weft.yield %{{.*}}, %[[R]], %{{.*}}, %{{.*}}, %[[L]] :
// CHECK: weft.layer "block.backward"(%{{.*}}, %[[F]]#1, %[[F]]#2, %[[F]]#3, %[[F]]#4) index 0
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<1x2x8x8xf32>, %[[A:.*]]: tensor<1x8x16xf32>, %[[Q:.*]]: tensor<1x2x8x8xf32>, %[[K:.*]]: tensor<1x2x8x8xf32>, %[[SL:.*]]: tensor<1x2x8x1xf32>):
// CHECK-NEXT: %[[SO:.*]] = weft.reshape %[[A]] : tensor<1x8x16xf32> -> tensor<1x2x8x8xf32>
// CHECK-NEXT: weft.attention_grad %[[Q]], %[[K]], %[[K]] grad %{{.*}} saved %[[SO]], %[[SL]] scale
func.func @across_layers_reshaped(%x: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x8x16xf32>, tensor<1x2x8x8xf32>, tensor<1x8x16xf32>) {
  %f:4 = weft.layer "block"(%x) index 0 : (tensor<1x2x8x8xf32>) -> (tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%in: tensor<1x2x8x8xf32>):
    %q = weft.neg %in : tensor<1x2x8x8xf32>
    %k = weft.exp %in : tensor<1x2x8x8xf32>
    %a = weft.attention %q, %k, %k scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %r = weft.reshape %a : tensor<1x2x8x8xf32> -> tensor<1x8x16xf32>
    %o = weft.exp %r : tensor<1x8x16xf32>
    weft.yield %o, %r, %q, %k : tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
  }
  %g:2 = weft.layer "block.backward"(%d, %f#1, %f#2, %f#3) index 0 : (tensor<1x2x8x8xf32>, tensor<1x8x16xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x8x16xf32>) {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %ar: tensor<1x8x16xf32>, %q: tensor<1x2x8x8xf32>, %k: tensor<1x2x8x8xf32>):
    %dq, %dk, %dv = weft.attention_grad %q, %k, %k grad %dy scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    %w = weft.neg %ar : tensor<1x8x16xf32>
    weft.yield %dq, %w : tensor<1x2x8x8xf32>, tensor<1x8x16xf32>
  }
  return %f#0, %g#0, %g#1 : tensor<1x8x16xf32>, tensor<1x2x8x8xf32>, tensor<1x8x16xf32>
}

// -----

// The output on its way to the output projection as exports write it: a
// transpose to [batch, seq, heads, dim], then a reshape. The forward layer
// hands over the projection's input it keeps anyway; the backward layer
// reshapes and transposes it back.
// CHECK-LABEL: func.func @across_layers_transposed
// CHECK: %[[F:.*]]:4 = weft.layer "block"
// CHECK: %[[O:.*]], %[[L:.*]] = weft.attention_block
// CHECK: %[[T:.*]] = weft.transpose %[[O]] permutation [0, 2, 1, 3]
// CHECK: %[[R:.*]] = weft.reshape %[[T]] : tensor<1x8x2x8xf32> -> tensor<1x8x16xf32>
// CHECK: weft.yield %{{.*}}, %[[R]], %{{.*}}, %[[L]] :
// CHECK: weft.layer "block.backward"(%{{.*}}, %[[F]]#1, %[[F]]#2, %[[F]]#3) index 0
// CHECK-NEXT: ^bb0(%{{.*}}: tensor<1x2x8x8xf32>, %[[A:.*]]: tensor<1x8x16xf32>, %[[Q:.*]]: tensor<1x2x8x8xf32>, %[[SL:.*]]: tensor<1x2x8x1xf32>):
// CHECK-NEXT: %[[U:.*]] = weft.reshape %[[A]] : tensor<1x8x16xf32> -> tensor<1x8x2x8xf32>
// CHECK-NEXT: %[[SO:.*]] = weft.transpose %[[U]] permutation [0, 2, 1, 3] : tensor<1x8x2x8xf32> -> tensor<1x2x8x8xf32>
// CHECK-NEXT: weft.attention_grad %[[Q]], %[[Q]], %[[Q]] grad %{{.*}} saved %[[SO]], %[[SL]] scale
func.func @across_layers_transposed(%x: tensor<1x2x8x8xf32>, %d: tensor<1x2x8x8xf32>) -> (tensor<1x8x16xf32>, tensor<1x2x8x8xf32>) {
  %f:3 = weft.layer "block"(%x) index 0 : (tensor<1x2x8x8xf32>) -> (tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x2x8x8xf32>) {
  ^bb0(%in: tensor<1x2x8x8xf32>):
    %q = weft.neg %in : tensor<1x2x8x8xf32>
    %a = weft.attention %q, %q, %q scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
    %t = weft.transpose %a permutation [0, 2, 1, 3] : tensor<1x2x8x8xf32> -> tensor<1x8x2x8xf32>
    %r = weft.reshape %t : tensor<1x8x2x8xf32> -> tensor<1x8x16xf32>
    %o = weft.exp %r : tensor<1x8x16xf32>
    weft.yield %o, %r, %q : tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x2x8x8xf32>
  }
  %g = weft.layer "block.backward"(%d, %f#1, %f#2) index 0 : (tensor<1x2x8x8xf32>, tensor<1x8x16xf32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32> {
  ^bb0(%dy: tensor<1x2x8x8xf32>, %ar: tensor<1x8x16xf32>, %q: tensor<1x2x8x8xf32>):
    %dq, %dk, %dv = weft.attention_grad %q, %q, %q grad %dy scale 0.25 causal : (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>) -> (tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>)
    weft.yield %dq : tensor<1x2x8x8xf32>
  }
  return %f#0, %g : tensor<1x8x16xf32>, tensor<1x2x8x8xf32>
}
