// RUN: weft-opt %s -weft-print-op-facts -verify-diagnostics -split-input-file -mlir-print-op-on-diagnostic=false

// The facts the planner reads: factor rules in Shardy's notation (a factor
// missing from the results is a reduction) and FLOPs / bytes at these shapes.

func.func @matmul(%a: tensor<4x16xf32>, %b: tensor<16x8xf32>) -> tensor<4x8xf32> {
  // expected-remark @+1 {{sharding rule ([i, j], [j, k]) -> ([i, k]) {i=4, j=16, k=8} reduction={j}; cost: 1024 flops, 768 bytes read, 128 bytes written}}
  %0 = weft.matmul %a, %b : (tensor<4x16xf32>, tensor<16x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Q Kᵀ per head: batch and heads are parallel, the head dimension reduces.
func.func @batched_transposed(%q: tensor<2x4x16x8xbf16>, %k: tensor<2x4x32x8xbf16>) -> tensor<2x4x16x32xbf16> {
  // expected-remark @+1 {{sharding rule ([i, j, k, l], [i, j, m, l]) -> ([i, j, k, m]) {i=2, j=4, k=16, l=8, m=32} reduction={l}; cost: 65536 flops, 6144 bytes read, 8192 bytes written}}
  %0 = weft.matmul %q, %k transpose_rhs : (tensor<2x4x16x8xbf16>, tensor<2x4x32x8xbf16>) -> tensor<2x4x16x32xbf16>
  return %0 : tensor<2x4x16x32xbf16>
}

// -----

// A broadcast batch dimension of size 1 has no factor.
func.func @broadcast_batch(%a: tensor<3x1x5x7xf32>, %b: tensor<4x7x9xf32>) -> tensor<3x4x5x9xf32> {
  // expected-remark @+1 {{sharding rule ([i, 1, j, k], [l, k, m]) -> ([i, l, j, m]) {i=3, j=5, k=7, l=4, m=9} reduction={k}; cost: 7560 flops, 1428 bytes read, 2160 bytes written}}
  %0 = weft.matmul %a, %b : (tensor<3x1x5x7xf32>, tensor<4x7x9xf32>) -> tensor<3x4x5x9xf32>
  return %0 : tensor<3x4x5x9xf32>
}

// -----

// Megatron's column- and row-parallel splits are the n and k factors.
func.func @linear(%x: tensor<2x8x32xf32>, %w: tensor<32x64xf32>, %b: tensor<64xf32>, %wt: tensor<64x32xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>) {
  // expected-remark @+1 {{sharding rule ([i, j, k], [k, l], [l]) -> ([i, j, l]) {i=2, j=8, k=32, l=64} reduction={k}; cost: 66560 flops, 10496 bytes read, 4096 bytes written}}
  %0 = weft.linear %x, %w, %b : (tensor<2x8x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // expected-remark @+1 {{sharding rule ([i, j, k], [l, k]) -> ([i, j, l]) {i=2, j=8, k=32, l=64} reduction={k}; cost: 65536 flops, 10240 bytes read, 4096 bytes written}}
  %1 = weft.linear %x, %wt transpose_weight : (tensor<2x8x32xf32>, tensor<64x32xf32>) -> tensor<2x8x64xf32>
  return %0, %1 : tensor<2x8x64xf32>, tensor<2x8x64xf32>
}

// -----

// Attention's gradient over grouped heads (4 query heads, 2 KV heads: j*k):
// dK and dV sum over the queries (l) and the group (k) that dQ keeps, so a
// split of either leaves them partial sums; its cost is 2.5 x the causal
// forward's FLOPs (4 heads x 36 visible pairs x 21 = 3024).
func.func @attention_grad(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>, %do: tensor<1x4x8x4xf32>) -> tensor<1x2x8x4xf32> {
  // expected-remark @+1 {{sharding rule ([i, j*k, l, m], [i, j, n, m], [i, j, n, o], [i, j*k, l, o]) -> ([i, j*k, l, m], [i, j, n, m], [i, j, n, o]) {i=1, j=2, k=2, l=8, m=4, n=8, o=4} sums={1: l*k, 2: l*k} blocked={l, m, n, o}; cost: 7560 flops, 1536 bytes read, 1024 bytes written}}
  %0:3 = weft.attention_grad %q, %k, %v grad %do scale 0.5 causal : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x4x8x4xf32>) -> (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  return %0#1 : tensor<1x2x8x4xf32>
}

// -----

func.func @elementwise(%x: tensor<4x8xf32>, %b: tensor<8xf32>, %h: tensor<4x8xbf16>) -> (tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>) {
  // expected-remark @+1 {{sharding rule ([i, j], [j]) -> ([i, j]) {i=4, j=8}; cost: 32 flops, 160 bytes read, 128 bytes written}}
  %0 = weft.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // expected-remark @+1 {{sharding rule ([i, j]) -> ([i, j]) {i=4, j=8}; cost: 128 flops, 64 bytes read, 64 bytes written}}
  %1 = weft.silu %h : tensor<4x8xbf16>
  // expected-remark @+1 {{cost: 160 flops, 128 bytes read, 128 bytes written}}
  %2 = weft.gelu %x : tensor<4x8xf32>
  // expected-remark @+1 {{cost: 288 flops, 128 bytes read, 128 bytes written}}
  %3 = weft.gelu %x approximation tanh : tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Elementwise ops say so (they chain into one generated kernel).
func.func @elementwise(%x: tensor<4x8xf32>, %y: tensor<8xf32>) -> tensor<4x8xf32> {
  // expected-remark @+1 {{cost: 32 flops, 160 bytes read, 128 bytes written; elementwise}}
  %0 = weft.add %x, %y : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // expected-remark @+1 {{bytes written; elementwise}}
  %1 = weft.gelu %0 approximation tanh : tensor<4x8xf32>
  return %1 : tensor<4x8xf32>
}

// -----

// Collectives: the group's size on the mesh and the bytes each rank puts on
// the wire, counted like NCCL's ring algorithms (what the communicators count).
// expected-remark @+1 {{cost: 0 flops}}
weft.mesh @mesh(dp = 2, tp = 4)
func.func @collectives(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<16x8xf32>, tensor<1x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>, tensor<1x32xf32>) {
  // expected-remark @+1 {{all_reduce over a group of 4: 192 bytes sent per rank}}
  %0 = weft.all_reduce sum %x over @mesh ["tp"] : tensor<4x8xf32>
  // expected-remark @+1 {{all_gather over a group of 4: 384 bytes sent per rank}}
  %1 = weft.all_gather %x over @mesh ["tp"] dim 0 : tensor<4x8xf32> -> tensor<16x8xf32>
  // expected-remark @+1 {{reduce_scatter over a group of 4: 96 bytes sent per rank}}
  %2 = weft.reduce_scatter sum %x over @mesh ["tp"] dim 0 : tensor<4x8xf32> -> tensor<1x8xf32>
  // expected-remark @+1 {{collective_permute over a group of 8: 128 bytes sent per rank}}
  %3 = weft.collective_permute %x over @mesh ["dp", "tp"] shift 1 : tensor<4x8xf32>
  // expected-remark @+1 {{all_slice over a group of 4: 0 bytes sent per rank}}
  %4 = weft.all_slice %x over @mesh ["tp"] dim 0 : tensor<4x8xf32> -> tensor<1x8xf32>
  // expected-remark @+1 {{all_to_all over a group of 4: 96 bytes sent per rank}}
  %5 = weft.all_to_all %x over @mesh ["tp"] split_dim 0 concat_dim 1 : tensor<4x8xf32> -> tensor<1x32xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<4x8xf32>, tensor<16x8xf32>, tensor<1x8xf32>, tensor<4x8xf32>, tensor<1x8xf32>, tensor<1x32xf32>
}

// -----

// What backward reads and costs: a linear keeps its input (and weight), and
// its gradients are two GEMMs of its size; a product by a constant keeps
// only the constant (which costs no memory); dropout keeps a 1-byte mask;
// attention is the attention core, its backward reads q, k, v, the output
// and each query row's log-sum-exp (FlashAttention-2's) and is 2.5 times its
// forward.
func.func @backward(%x: tensor<2x8x32xf32>, %w: tensor<32x64xf32>, %q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> (tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<1x2x8x4xf32>) {
  // expected-remark @+1 {{backward saves operand #0, operand #1, costs 65536 flops for inputs and 65536 for weights}}
  %0 = weft.linear %x, %w : (tensor<2x8x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
  // expected-remark @+1 {{backward saves nothing}}
  %c = weft.constant dense<2.0> : tensor<f32>
  // expected-remark @+1 {{backward saves operand #1, costs 1024 flops for inputs and 0 for weights}}
  %1 = weft.mul %0, %c : (tensor<2x8x64xf32>, tensor<f32>) -> tensor<2x8x64xf32>
  // expected-remark @+1 {{backward saves result #0 (a 1-byte mask)}}
  %2 = weft.dropout %1 ratio 0.1 : tensor<2x8x64xf32>
  // expected-remark @+1 {{backward saves operand #0, operand #1, operand #2, result #0, result #0 (an f32 per row), costs 3780 flops for inputs and 0 for weights; attention core}}
  %3 = weft.attention %q, %k, %v scale 0.5 causal : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return %0, %2, %3 : tensor<2x8x64xf32>, tensor<2x8x64xf32>, tensor<1x2x8x4xf32>
}

// -----

// What each operand's gradient reads: for a weight, what a weight-gradient
// step (ZB-H1's W) reads, and so keeps from the B step. A linear's weight
// reads its input and its result's gradient, its bias the gradient alone; a
// norm's scale reads the normalized input, which the backward computes
// again (a tensor like its result); a bias add (Additive) reads the
// gradient alone, a product (Multilinear) also the other operand; an
// embedding's table reads the indices; a fused epilogue's weight reads the
// GEMM's result's gradient inside it.
func.func @gradient_reads(%x: tensor<2x8x32xf32>, %w: tensor<64x32xf32>, %b: tensor<64xf32>, %s: tensor<32xf32>, %t: tensor<16x32xf32>, %ids: tensor<2x8xi64>) -> (tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>) {
  // expected-remark @+1 {{gradient of operand #0 reads the gradient of result #0, operand #1; of operand #1 reads the gradient of result #0, operand #0; of operand #2 reads the gradient of result #0}}
  %0 = weft.linear %x, %w, %b transpose_weight : (tensor<2x8x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  // expected-remark @+1 {{gradient of operand #0 reads the gradient of result #0, operand #0, operand #1; of operand #1 reads the gradient of result #0, a tensor it computes like result #0; of operand #2 reads the gradient of result #0}}
  %1 = weft.layer_norm %x, %s, %s axis 2 epsilon 1.0e-05 : (tensor<2x8x32xf32>, tensor<32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{gradient of operand #0 reads the gradient of result #0; of operand #1 reads the gradient of result #0}}
  %2 = weft.add %1, %s : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{gradient of operand #0 reads the gradient of result #0, operand #1; of operand #1 reads the gradient of result #0, operand #0}}
  %3 = weft.mul %2, %s : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{gradient of operand #0 reads the gradient of result #0, operand #1}}
  %4 = weft.embedding %t[%ids] : (tensor<16x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
  // expected-remark @+1 {{gradient of operand #0 reads a tensor it computes like a value inside, operand #1; of operand #1 reads a tensor it computes like a value inside, operand #0; of operand #2 reads a tensor it computes like a value inside}}
  %5 = weft.fusion epilogue(%x, %w, %b) : (tensor<2x8x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<2x8x64xf32> {
  ^bb0(%a0: tensor<2x8x32xf32>, %a1: tensor<64x32xf32>, %a2: tensor<64xf32>):
    // expected-remark @+1 {{cost}}
    %l = weft.linear %a0, %a1, %a2 transpose_weight : (tensor<2x8x32xf32>, tensor<64x32xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
    // expected-remark @+1 {{cost}}
    %g = weft.gelu %l approximation tanh : tensor<2x8x64xf32>
    // expected-remark @+1 {{cost: 0 flops}}
    weft.yield %g : tensor<2x8x64xf32>
  }
  return %0, %1, %2, %3, %4, %5 : tensor<2x8x64xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x32xf32>, tensor<2x8x64xf32>
}
