// RUN: weft-opt %s -split-input-file -weft-raise | FileCheck %s
// RUN: rm -rf %t && mkdir -p %t
// RUN: sed -n '/^func.func @mpt_bias/,/^}/p' %s > %t/mpt.mlir
// RUN: weft-opt -weft-raise %t/mpt.mlir -o %t/raised.mlir
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(3); [n.save('%t/' + a + '.npy', r.standard_normal((2, 2, 4, 8)).astype(n.float32)) for a in 'qkv']"
// RUN: weft run %t/raised.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -o %t/out --output-format npy > /dev/null
// RUN: %numpy_python -c "import numpy as n; q, k, v = (n.load('%t/' + a + '.npy').astype(n.float64) for a in 'qkv'); \
// RUN:   bias = n.array([0.25, 0.0625]).reshape(1, 2, 1, 1) * n.arange(-3, 1).reshape(1, 1, 1, 4); \
// RUN:   s = 0.5 * (q @ k.swapaxes(-1, -2)) + bias; i, j = n.indices((4, 4)); w = n.where(j <= i, s, -n.inf); \
// RUN:   e = n.exp(w - w.max(-1, keepdims=True)); want = (e / e.sum(-1, keepdims=True)) @ v; \
// RUN:   d = float(abs(n.load('%t/out/output_0.npy') - want).max()); print('max difference from numpy %%.1e' %% d); assert d < 1e-5" \
// RUN:   | FileCheck %s --check-prefix=NUMPY
// NUMPY: max difference from numpy

// ALiBi written as a constant bias on a causal attention becomes the
// attention's slopes: MPT's build_attn_bias, each head's slope times the
// key's distance to the last key ([1, h, 1, s]), is c_h + m_h j over the
// keys, which under the causal mask is -m_h |i - j| plus a constant of each
// row. The bias is not kept; the result is the masked attention's (numpy
// above, on the raised function).

// CHECK-LABEL: func.func @mpt_bias
// CHECK: %[[SLOPES:.*]] = weft.constant dense<[2.500000e-01, 6.250000e-02]> : tensor<2xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 alibi %[[SLOPES]] scale 5.000000e-01 causal
// CHECK-NOT: mask
func.func @mpt_bias(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32> {
  %bias = weft.constant dense<[[[[-0.75, -0.5, -0.25, 0.0]], [[-0.1875, -0.125, -0.0625, 0.0]]]]> : tensor<1x2x1x4xf32>
  %0 = weft.attention %q, %k, %v mask %bias scale 0.5 causal : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<1x2x1x4xf32>) -> tensor<2x2x4x8xf32>
  return %0 : tensor<2x2x4x8xf32>
}

// -----

// One slope for every head ([s]), and the same bias on every query row
// ([s, s] with each row c + m j): the slope of each head.
// CHECK-LABEL: func.func @shared_slope
// CHECK: %[[SLOPES:.*]] = weft.constant dense<5.000000e-01> : tensor<2xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 alibi %[[SLOPES]] scale 5.000000e-01 causal
// CHECK-LABEL: func.func @rows
// CHECK: weft.constant dense<[1.000000e+00, 2.500000e-01]> : tensor<2xf32>
// CHECK: weft.attention %arg0, %arg0, %arg0 alibi
func.func @shared_slope(%q: tensor<1x2x3x4xf32>, %k: tensor<1x2x3x4xf32>, %v: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %bias = weft.constant dense<[1.0, 1.5, 2.0]> : tensor<3xf32>
  %0 = weft.attention %q, %k, %v mask %bias scale 0.5 causal : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<3xf32>) -> tensor<1x2x3x4xf32>
  return %0 : tensor<1x2x3x4xf32>
}
func.func @rows(%q: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %bias = weft.constant dense<[[[-2.0, -1.0, 0.0], [-1.0, 0.0, 1.0], [5.0, 6.0, 7.0]], [[-0.5, -0.25, 0.0], [0.0, 0.25, 0.5], [1.0, 1.25, 1.5]]]> : tensor<2x3x3xf32>
  %0 = weft.attention %q, %q, %q mask %bias scale 0.5 causal : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<2x3x3xf32>) -> tensor<1x2x3x4xf32>
  return %0 : tensor<1x2x3x4xf32>
}

// -----

// Not ALiBi: a bias over keys that is not affine, rows of one head with
// different slopes, a bias per batch, and an attention that is not causal
// (where -m |i - j| is not m j plus a constant) keep their masks.
// CHECK-LABEL: func.func @not_affine
// CHECK: weft.attention %arg0, %arg0, %arg0 mask
// CHECK-LABEL: func.func @slopes_differ
// CHECK: weft.attention %arg0, %arg0, %arg0 mask
// CHECK-LABEL: func.func @per_batch
// CHECK: weft.attention %arg0, %arg0, %arg0 mask
// CHECK-LABEL: func.func @not_causal
// CHECK: weft.attention %arg0, %arg0, %arg0 mask
func.func @not_affine(%q: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %bias = weft.constant dense<[0.0, 1.0, 4.0]> : tensor<3xf32>
  %0 = weft.attention %q, %q, %q mask %bias scale 0.5 causal : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<3xf32>) -> tensor<1x2x3x4xf32>
  return %0 : tensor<1x2x3x4xf32>
}
func.func @slopes_differ(%q: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %bias = weft.constant dense<[[0.0, 1.0, 2.0], [0.0, 2.0, 4.0], [0.0, 1.0, 2.0]]> : tensor<3x3xf32>
  %0 = weft.attention %q, %q, %q mask %bias scale 0.5 causal : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<3x3xf32>) -> tensor<1x2x3x4xf32>
  return %0 : tensor<1x2x3x4xf32>
}
func.func @per_batch(%q: tensor<2x2x3x4xf32>) -> tensor<2x2x3x4xf32> {
  %bias = weft.constant dense<[[[[0.0, 1.0, 2.0]]], [[[0.0, 2.0, 4.0]]]]> : tensor<2x1x1x3xf32>
  %0 = weft.attention %q, %q, %q mask %bias scale 0.5 causal : (tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>, tensor<2x2x3x4xf32>, tensor<2x1x1x3xf32>) -> tensor<2x2x3x4xf32>
  return %0 : tensor<2x2x3x4xf32>
}
func.func @not_causal(%q: tensor<1x2x3x4xf32>) -> tensor<1x2x3x4xf32> {
  %bias = weft.constant dense<[0.0, 1.0, 2.0]> : tensor<3xf32>
  %0 = weft.attention %q, %q, %q mask %bias scale 0.5 : (tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<1x2x3x4xf32>, tensor<3xf32>) -> tensor<1x2x3x4xf32>
  return %0 : tensor<1x2x3x4xf32>
}
