// Attention's gradient is one fused op, weft.attention_grad: no S x S scores
// in the backward layer. Under cp it is ring attention's backward: the
// forward layer hands its ring's output and log-sum-exps over (two more
// results) to the backward layer, whose K/V blocks travel the ring again,
// each with the running sums of its gradients, which go home after the last
// step; each step is the block's attention_grad with the saved statistics.
// Nothing is gathered or reduce-scattered.

// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   | FileCheck %s --check-prefix=VJP
// VJP: weft.layer "h.backward"
// VJP-NOT: weft.softmax
// VJP: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} scale 5.000000e-01 causal : (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>) -> (tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>, tensor<2x4x8x4xf32>)
// VJP-NOT: weft.softmax
// VJP: weft.transpose %[[DV]]
// VJP-NOT: weft.softmax
// VJP: weft.yield

// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="cp=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   -weft-canonicalize | FileCheck %s --check-prefix=RING
// RING: weft.layer "h"
// RING: weft.attention_block
// RING: %{{.*}}, %[[L:.*]] = weft.attention_block
// RING: %[[MAX:.*]] = weft.maximum %{{.*}}, %[[L]] {weft.decomposed} : tensor<2x4x4x1xf32>
// RING: %[[LSE:.*]] = weft.add %[[MAX]], %{{.*}} {weft.decomposed} : tensor<2x4x4x1xf32>
// RING: %[[OUT:.*]] = weft.add %{{.*}}, %{{.*}} {weft.decomposed} : tensor<2x4x4x4xf32>
// RING-NEXT: %[[T:.*]] = weft.transpose %[[OUT]] permutation [0, 2, 1, 3]
// RING-NEXT: %[[PROJ:.*]] = weft.reshape %[[T]] : tensor<2x4x4x4xf32> -> tensor<2x4x16xf32>
// The output goes over once, as the output projection's input, which the
// layer keeps anyway: the layer's 10 results and the log-sum-exps.
// RING: weft.yield %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[PROJ]], %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[LSE]] :
// RING: weft.layer "h.backward"
// RING-SAME: -> (tensor<2x4x16xf32>,
// RING-NOT: weft.all_gather
// RING: %[[R:.*]] = weft.reshape %arg{{[0-9]+}} : tensor<2x4x16xf32> -> tensor<2x4x4x4xf32>
// RING-NEXT: %[[SAVEDOUT:.*]] = weft.transpose %[[R]] permutation [0, 2, 1, 3]
// RING-NOT: weft.all_gather
// RING: %[[QPOS:.*]] = weft.all_slice %{{.*}} over @mesh ["cp"] dim 0 zigzag : tensor<8xi64> -> tensor<4xi64>
// RING-NEXT: %[[K1:.*]] = weft.collective_permute %[[K0:[^ ]*]] over @mesh ["cp"] shift 1 : tensor<2x4x4x4xf32>
// RING-NEXT: %[[V1:.*]] = weft.collective_permute %[[V0:[^ ]*]] over @mesh ["cp"] shift 1 : tensor<2x4x4x4xf32>
// RING-NEXT: %[[KPOS:.*]] = weft.collective_permute %[[QPOS]] over @mesh ["cp"] shift 1 : tensor<4xi64>
// RING-NEXT: %[[DQ0:.*]], %[[DK0:.*]], %[[DV0:.*]] = weft.attention_grad %[[Q:[^,]*]], %[[K0]], %[[V0]] grad %[[DO:[^ ]*]] positions %[[QPOS]], %[[QPOS]] saved %[[SAVEDOUT]], %[[SL:[^ ]*]] scale 5.000000e-01 causal visible 10 : (tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>, tensor<2x4x4x4xf32>, tensor<4xi64>, tensor<4xi64>, tensor<2x4x4x4xf32>, tensor<2x4x4x1xf32>)
// RING-NEXT: %[[DKIN:.*]] = weft.collective_permute %[[DK0]] over @mesh ["cp"] shift 1
// RING-NEXT: %[[DVIN:.*]] = weft.collective_permute %[[DV0]] over @mesh ["cp"] shift 1
// RING-NEXT: %[[DQ1:.*]], %[[DK1:.*]], %[[DV1:.*]] = weft.attention_grad %[[Q]], %[[K1]], %[[V1]] grad %[[DO]] positions %[[QPOS]], %[[KPOS]] saved %[[SAVEDOUT]], %[[SL]] scale 5.000000e-01 causal visible 8 :
// RING-NEXT: weft.add %[[DQ0]], %[[DQ1]]
// RING-NEXT: %[[DK:.*]] = weft.add %[[DKIN]], %[[DK1]]
// RING-NEXT: %[[DV:.*]] = weft.add %[[DVIN]], %[[DV1]]
// RING-NEXT: weft.collective_permute %[[DK]] over @mesh ["cp"] shift 1
// RING-NEXT: weft.collective_permute %[[DV]] over @mesh ["cp"] shift 1
// RING-NOT: weft.reduce_scatter
// RING-NOT: weft.all_gather
// RING: weft.yield

// Under recompute=op (torchtitan's per-op policy) the backward layer
// recomputes K from the K projection it keeps (here a reshape and transpose;
// LLaMA's rotary K, 9 ops) instead of taking the forward's. The forward
// layer's ring is found by what the gradient reads
// (weft::attentionInForwardLayer), so its statistics still go over and the
// backward is a ring over the recomputed K: nothing is gathered. The output,
// which the layer keeps for the output projection anyway, is yielded once.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=op \
// RUN:   -weft-apply-plan="cp=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   -weft-canonicalize | FileCheck %s --check-prefix=OPRING
// OPRING: weft.layer "h"
// OPRING: %[[MAX:.*]] = weft.maximum %{{.*}}, %{{.*}} {weft.decomposed} : tensor<2x4x4x1xf32>
// OPRING: %[[LSE:.*]] = weft.add %[[MAX]], %{{.*}} {weft.decomposed} : tensor<2x4x4x1xf32>
// OPRING: %[[OUT:.*]] = weft.add %{{.*}}, %{{.*}} {weft.decomposed} : tensor<2x4x4x4xf32>
// OPRING: weft.yield %{{[0-9]+}}, %{{[0-9]+}}, %[[OUT]], %{{[0-9]+}}, %{{[0-9]+}}, %[[LSE]] :
// OPRING: weft.layer "h.backward"
// OPRING-NOT: weft.all_gather
// OPRING: %[[KP:.*]] = weft.reshape %{{.*}} : tensor<2x4x16xf32> -> tensor<2x4x4x4xf32>
// OPRING-NEXT: %[[K:.*]] = weft.transpose %[[KP]] permutation [0, 2, 1, 3]
// OPRING-NOT: weft.all_gather
// OPRING: weft.collective_permute %[[K]] over @mesh ["cp"] shift 1
// OPRING-NOT: weft.all_gather
// OPRING: weft.attention_grad %{{.*}}, %[[K]], %{{.*}} grad %{{.*}} positions %{{.*}}, %{{.*}} saved
// OPRING-NOT: weft.reduce_scatter
// OPRING-NOT: weft.all_gather
// OPRING: weft.yield

// All-gather context parallelism: the forward layer yields its attention's
// output and log-sum-exps; the backward layer gathers K and V again, runs one
// attention_grad with them, and reduce-scatters dK and dV back to the blocks.
// (The output goes over once, as the output projection's input, as the
// ring's does.)
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="cp=2 cp-comm=all-gather" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   -weft-canonicalize | FileCheck %s --check-prefix=GATHER
// GATHER: weft.layer "h"
// GATHER: %[[O:.*]], %[[L:.*]] = weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} positions
// GATHER-NEXT: %[[T:.*]] = weft.transpose %[[O]] permutation [0, 2, 1, 3]
// GATHER-NEXT: %[[PROJ:.*]] = weft.reshape %[[T]] : tensor<2x4x4x4xf32> -> tensor<2x4x16xf32>
// GATHER: weft.yield %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[PROJ]], %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %{{[0-9]+}}, %[[L]] :
// GATHER: weft.layer "h.backward"
// GATHER-NOT: weft.collective_permute
// GATHER: %[[QPOS:.*]] = weft.all_slice %{{.*}} over @mesh ["cp"] dim 0 zigzag : tensor<8xi64> -> tensor<4xi64>
// GATHER-NEXT: %[[K:.*]] = weft.all_gather %{{.*}} over @mesh ["cp"] dim 2 zigzag : tensor<2x4x4x4xf32> -> tensor<2x4x8x4xf32>
// GATHER-NEXT: %[[V:.*]] = weft.all_gather %{{.*}} over @mesh ["cp"] dim 2 zigzag : tensor<2x4x4x4xf32> -> tensor<2x4x8x4xf32>
// GATHER-NEXT: %[[KPOS:.*]] = weft.iota dim 0 : tensor<8xi64>
// GATHER-NEXT: %{{.*}}, %[[DK:.*]], %[[DV:.*]] = weft.attention_grad %{{.*}}, %[[K]], %[[V]] grad %{{.*}} positions %[[QPOS]], %[[KPOS]] saved %{{.*}}, %{{.*}} scale 5.000000e-01 causal
// GATHER-DAG: weft.reduce_scatter sum %[[DV]] over @mesh ["cp"] dim 2 zigzag : tensor<2x4x8x4xf32> -> tensor<2x4x4x4xf32>
// GATHER-DAG: weft.reduce_scatter sum %[[DK]] over @mesh ["cp"] dim 2 zigzag : tensor<2x4x8x4xf32> -> tensor<2x4x4x4xf32>
// GATHER-NOT: weft.collective_permute
// GATHER: weft.yield

// Under tensor parallelism each rank's op takes its heads, and nothing is
// gathered for it.
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="tp=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   | FileCheck %s --check-prefix=TP
// TP: weft.layer "h.backward"
// TP-NOT: weft.all_gather
// TP: weft.attention_grad {{.*}} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>)

// Under Ulysses each rank's op takes its heads over the whole sequence, as
// the forward's: q, k, v and the output's gradient come by all-to-all (the
// heads split, the sequence gathered), nothing is all-gathered, and the
// gradients go back by all-to-all. (Until 2026-12-04 every rank gathered
// them over the sequence and ran the backward of all the heads.)
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="ulysses=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   | FileCheck %s --check-prefix=ULYSSES
// ULYSSES: weft.layer "h.backward"
// ULYSSES-NOT: weft.all_gather
// ULYSSES-COUNT-4: weft.all_to_all {{.*}} : tensor<2x4x4x4xf32> -> tensor<2x2x8x4xf32>
// ULYSSES-NOT: weft.all_gather
// ULYSSES: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = weft.attention_grad {{.*}} : (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>) -> (tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>, tensor<2x2x8x4xf32>)
// ULYSSES-DAG: weft.all_to_all %[[DQ]] over @mesh ["ulysses"] split_dim 2 concat_dim 1 : tensor<2x2x8x4xf32> -> tensor<2x4x4x4xf32>
// ULYSSES-DAG: weft.all_to_all %[[DK]] over @mesh ["ulysses"] split_dim 2 concat_dim 1
// ULYSSES-DAG: weft.all_to_all %[[DV]] over @mesh ["ulysses"] split_dim 2 concat_dim 1
// ULYSSES-NOT: weft.all_gather

// Ulysses with a ring (cp=2, ulysses=2): the ring's backward takes its
// queries, keys and values as the hybrid's forward does, by all-to-all to the
// rank's heads, and runs the ring over those heads; nothing is gathered.
// (Until 2026-12-05 the queries' positions were, and before that q, k, v, dO, the
// output and the statistics were gathered over ulysses and every rank ran
// the backward of all four heads.)
// RUN: weft-opt %S/Inputs/gpt_block.mlir -weft-append-loss=reduction=mean -weft-differentiate=recompute=none \
// RUN:   -weft-apply-plan="cp=2 ulysses=2" -weft-propagate-sharding -weft-partition -weft-optimize-collectives \
// RUN:   -weft-canonicalize | FileCheck %s --check-prefix=HYBRID
// HYBRID: weft.layer "h.backward"
// HYBRID-NOT: weft.all_gather
// HYBRID-COUNT-4: weft.all_to_all {{.*}} over @mesh ["ulysses"] split_dim 1 concat_dim 2 : tensor<2x4x2x4xf32> -> tensor<2x2x4x4xf32>
// The queries' positions are the rank's own (its ring block of 0, 1, ...):
// nothing is gathered over ulysses for them, and the slice of the given
// positions over the sequence, which nothing reads, is gone.
// HYBRID-NEXT: %[[ALL:.*]] = weft.iota dim 0 : tensor<8xi64>
// HYBRID-NEXT: weft.all_slice %[[ALL]] over @mesh ["cp"] dim 0 zigzag : tensor<8xi64> -> tensor<4xi64>
// HYBRID-NOT: weft.all_slice {{.*}} ["cp", "ulysses"] {{.*}} : tensor<8xi64>
// HYBRID-NOT: weft.all_gather
// HYBRID: %[[DQ0:.*]], %[[DK0:.*]], %[[DV0:.*]] = weft.attention_grad {{.*}} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<4xi64>, tensor<4xi64>, tensor<2x2x4x4xf32>, tensor<2x2x4x1xf32>)
// HYBRID: weft.attention_grad {{.*}} : (tensor<2x2x4x4xf32>,
// HYBRID-NOT: weft.all_gather
// HYBRID-COUNT-3: weft.all_to_all {{.*}} over @mesh ["ulysses"] split_dim 2 concat_dim 1 : tensor<2x2x4x4xf32> -> tensor<2x4x2x4xf32>
// HYBRID-NOT: weft.all_gather

// Attention with dropout takes the fused gradient too, with the forward's
// dropout: no decomposed scores in its backward.
// RUN: weft-opt %s -weft-differentiate -split-input-file -verify-diagnostics | FileCheck %s --check-prefix=DROPOUT
// DROPOUT-LABEL: func.func @dropout
// DROPOUT-NOT: weft.softmax
// DROPOUT-NOT: weft.dropout
// DROPOUT: weft.attention_grad {{.*}} scale 5.000000e-01 causal dropout 1.000000e-01 :
// DROPOUT-NOT: weft.softmax
// DROPOUT: return
func.func @dropout(%x: tensor<1x2x8x4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<1x2x8x4xf32>
  %q = weft.mul %x, %w : tensor<1x2x8x4xf32>
  %o = weft.attention %q, %q, %q scale 0.5 causal dropout 0.1 : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  %s = weft.reduce_sum %o axes [0, 1, 2, 3] : tensor<1x2x8x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// There are no second derivatives: the gradient op has none.
func.func @twice(%q: tensor<1x2x8x4xf32>, %do: tensor<1x2x8x4xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<1x2x8x4xf32>
  %x = weft.mul %q, %w : tensor<1x2x8x4xf32>
  // expected-error @+1 {{'weft.attention_grad' has no gradient: a training step cannot pass through it}}
  %g:3 = weft.attention_grad %x, %x, %x grad %do scale 0.5 causal : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  %s = weft.reduce_sum %g#0 axes [0, 1, 2, 3] : tensor<1x2x8x4xf32> -> tensor<f32>
  return %s : tensor<f32>
}
