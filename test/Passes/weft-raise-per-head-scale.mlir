// RUN: weft-opt %s -split-input-file -weft-raise | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-raise=explain=true -verify-diagnostics -o /dev/null
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(5); [n.save('%t/' + a + '.npy', r.standard_normal((2, 2, 6, 4)).astype(n.float32)) for a in 'qkv']; n.save('%t/t.npy', n.array([3.0, 0.5], n.float32).reshape(1, 2, 1, 1))"
// RUN: sed -n '/^func.func @learned_temperature/,/^}/p' %s > %t/learned.mlir
// RUN: weft run %t/learned.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/t.npy -o %t/out --output-format npy > /dev/null
// RUN: %numpy_python -c "import numpy as n; q, k, v, t = (n.load('%t/' + a + '.npy').astype(n.float64) for a in 'qkvt'); s = t * (q @ k.swapaxes(-1, -2)); i, j = n.indices((6, 6)); w = n.where(j <= i, s, -n.inf); e = n.exp(w - w.max(-1, keepdims=True)); want = (e / e.sum(-1, keepdims=True)) @ v; d = float(abs(n.load('%t/out/output_0.npy') - want).max()); print('max difference from numpy %%.1e' %% d); assert d < 1e-5" | FileCheck %s --check-prefix=NUMPY
// NUMPY: max difference from numpy

// Scores scaled by a tensor that is the same for every query and key of a
// head ([..., 1, 1]: cosine attention's learned temperature, as Swin v2 and
// nGPT write it, here an input) raise to weft.attention on q times that
// scale: softmax(t q·kᵀ) = softmax((t q)·kᵀ). The heads and the sequence
// can then be split as any attention's.

// CHECK-LABEL: func.func @learned_temperature
// CHECK: %[[Q:.*]] = weft.mul %arg0, %arg3 : (tensor<2x2x6x4xf32>, tensor<1x2x1x1xf32>) -> tensor<2x2x6x4xf32>
// CHECK: weft.attention %[[Q]], %arg1, %arg2 scale 1.000000e+00 causal
// CHECK-NOT: weft.softmax
func.func @learned_temperature(%q: tensor<2x2x6x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>, %t: tensor<1x2x1x1xf32>) -> tensor<2x2x6x4xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x6xf32>
  %scaled = weft.mul %s, %t : (tensor<2x2x6x6xf32>, tensor<1x2x1x1xf32>) -> tensor<2x2x6x6xf32>
  %ones = weft.constant dense<true> : tensor<6x6xi1>
  %lower = weft.trilu %ones : tensor<6x6xi1>
  %inf = weft.constant dense<0xFF800000> : tensor<f32>
  %w = weft.where %lower, %scaled, %inf : (tensor<6x6xi1>, tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x6x6xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>
  return %o : tensor<2x2x6x4xf32>
}

// -----

// Divided by a per-head tensor of rank 3 ([h, 1, 1]), with a constant scale
// too: q is divided, the constant stays the scale.
// CHECK-LABEL: func.func @divided
// CHECK: %[[Q:.*]] = weft.div %arg0, %arg3 : (tensor<2x2x6x4xf32>, tensor<2x1x1xf32>) -> tensor<2x2x6x4xf32>
// CHECK: weft.attention %[[Q]], %arg1, %arg2 scale 5.000000e-01 :
func.func @divided(%q: tensor<2x2x6x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>, %t: tensor<2x1x1xf32>) -> tensor<2x2x6x4xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x6xf32>
  %half = weft.constant dense<0.5> : tensor<f32>
  %c = weft.mul %s, %half : (tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>
  %d = weft.div %c, %t : (tensor<2x2x6x6xf32>, tensor<2x1x1xf32>) -> tensor<2x2x6x6xf32>
  %p = weft.softmax %d axis 3 : tensor<2x2x6x6xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>
  return %o : tensor<2x2x6x4xf32>
}

// -----

// The scores' own statistic ([..., 1, 1] from a reduction of the scores) is
// no per-head scale: not raised.
// CHECK-LABEL: func.func @own_statistic
// CHECK: weft.softmax
func.func @own_statistic(%q: tensor<2x2x6x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x6xf32>
  %m = weft.reduce_max %s axes [2, 3] keep_dims : tensor<2x2x6x6xf32> -> tensor<2x2x1x1xf32>
  %d = weft.div %s, %m : (tensor<2x2x6x6xf32>, tensor<2x2x1x1xf32>) -> tensor<2x2x6x6xf32>
  // expected-remark @below {{not raised to weft.attention: the scores come from 'weft.div', which is neither q·kᵀ, a scale (constant, or per head: [..., 1, 1]) nor a mask}}
  %p = weft.softmax %d axis 3 : tensor<2x2x6x6xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>
  return %o : tensor<2x2x6x4xf32>
}

// -----

// A per-head scale of soft-capped scores (t · c · tanh(s / c)) scales the
// cap's output, which q cannot carry: not raised.
// CHECK-LABEL: func.func @scaled_after_cap
// CHECK: weft.softmax
func.func @scaled_after_cap(%q: tensor<2x2x6x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>, %t: tensor<1x2x1x1xf32>) -> tensor<2x2x6x4xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x6xf32>
  %cap = weft.constant dense<30.0> : tensor<f32>
  %d = weft.div %s, %cap : (tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>
  %h = weft.tanh %d : tensor<2x2x6x6xf32>
  %c = weft.mul %h, %cap : (tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>
  %scaled = weft.mul %c, %t : (tensor<2x2x6x6xf32>, tensor<1x2x1x1xf32>) -> tensor<2x2x6x6xf32>
  // expected-remark @below {{not raised to weft.attention: 'weft.mul' soft-caps scores that a learned scale multiplies after the cap}}
  %p = weft.softmax %scaled axis 3 : tensor<2x2x6x6xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>
  return %o : tensor<2x2x6x4xf32>
}
