// RUN: weft-opt %s -weft-raise | FileCheck %s
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(2); [n.save('%t/' + a + '.npy', r.standard_normal((2, 2, 6, 4)).astype(n.float32)) for a in 'qkv']; n.save('%t/mask.npy', n.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]], n.float32))"
// RUN: weft run %s -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/mask.npy -o %t/out --output-format npy > /dev/null
// RUN: %numpy_python -c "import numpy as n; q, k, v = (n.load('%t/' + a + '.npy').astype(n.float64) for a in 'qkv'); pad = n.load('%t/mask.npy')[:, None, None, :] > 0; s = 0.5 * q @ k.swapaxes(-1, -2); i, j = n.indices((6, 6)); keep = (j <= i) & (j > i - 3) & pad; w = n.where(keep, s, -n.inf); e = n.exp(w - w.max(-1, keepdims=True)); want = (e / e.sum(-1, keepdims=True)) @ v; d = max(float(abs(n.load('%t/out/output_%%d.npy' %% o) - want).max()) for o in range(4)); print('max difference from numpy %%.1e' %% d); assert d < 1e-5" | FileCheck %s --check-prefix=NUMPY
// NUMPY: max difference from numpy

// A sliding window of 3 keys combined with the padding of an attention_mask
// input (the second sequence's last key is padding), computed at run time
// as exports with dynamic axes write it, or filled over a causal-and-padding
// mask by a constant (Gemma 2's local layers). Each form raises to causal
// attention with the window, and the padding alone stays a mask: [b, 1, 1,
// s], which broadcasts over the queries (the ring passes its columns, and
// nothing of [s, s] is stored).

// CHECK-LABEL: func.func @main
// CHECK-NOT: weft.trilu
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %{{.*}} scale 5.000000e-01 causal window 3 : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x1x1x6xf32>)
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %{{.*}} scale 5.000000e-01 causal window 3 : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x1x1x6xi1>)
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %{{.*}} scale 5.000000e-01 causal window 3 : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x1x1x6xf32>)
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %{{.*}} scale 5.000000e-01 causal window 3 : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x1x1x6xf32>)
// CHECK-NOT: weft.softmax
func.func @main(%q: tensor<2x2x6x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>, %mask: tensor<2x6xf32>) -> (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) {
  %scale = weft.constant dense<0.5> : tensor<f32>
  %min = weft.constant dense<0xFF7FFFFF> : tensor<f32>
  %inf = weft.constant dense<0xFF800000> : tensor<f32>
  %zero = weft.constant dense<0.0> : tensor<f32>
  %fill = weft.constant dense<0xFF7FFFFF> : tensor<6x6xf32>
  %ones = weft.constant dense<true> : tensor<6x6xi1>
  %false = weft.constant dense<false> : tensor<i1>
  %m4 = weft.reshape %mask : tensor<2x6xf32> -> tensor<2x1x1x6xf32>
  %padded = weft.compare eq, %m4, %zero : (tensor<2x1x1x6xf32>, tensor<f32>) -> tensor<2x1x1x6xi1>
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x6xf32>
  %c = weft.mul %s, %scale : (tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>

  // transformers' AttentionMaskConverter: the causal bias (finfo.min above
  // the diagonal), filled with finfo.min 3 keys and more before the query,
  // expanded to [b, 1, s, s], then filled where the padding masks.
  %causal = weft.trilu %fill upper diagonal 1 : tensor<6x6xf32>
  %far = weft.trilu %ones diagonal -3 : tensor<6x6xi1>
  %windowed = weft.where %far, %min, %causal : (tensor<6x6xi1>, tensor<f32>, tensor<6x6xf32>) -> tensor<6x6xf32>
  %w4 = weft.reshape %windowed : tensor<6x6xf32> -> tensor<1x1x6x6xf32>
  %wb = weft.broadcast_to %w4 : tensor<1x1x6x6xf32> -> tensor<2x1x6x6xf32>
  %bias0 = weft.where %padded, %min, %wb : (tensor<2x1x1x6xi1>, tensor<f32>, tensor<2x1x6x6xf32>) -> tensor<2x1x6x6xf32>
  %w0 = weft.add %c, %bias0 : (tensor<2x2x6x6xf32>, tensor<2x1x6x6xf32>) -> tensor<2x2x6x6xf32>
  %p0 = weft.softmax %w0 axis 3 : tensor<2x2x6x6xf32>
  %o0 = weft.matmul %p0, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>

  // Booleans: tril(ones) & triu(ones, 1 - 3) & the padding's keep, then
  // where(keep, s, -inf).
  %lower = weft.trilu %ones : tensor<6x6xi1>
  %upper = weft.trilu %ones upper diagonal -2 : tensor<6x6xi1>
  %band = weft.where %lower, %upper, %lower : tensor<6x6xi1>
  %kept = weft.compare eq, %padded, %false : (tensor<2x1x1x6xi1>, tensor<i1>) -> tensor<2x1x1x6xi1>
  %band4 = weft.reshape %band : tensor<6x6xi1> -> tensor<1x1x6x6xi1>
  %bandb = weft.broadcast_to %band4 : tensor<1x1x6x6xi1> -> tensor<2x1x6x6xi1>
  %keep = weft.where %bandb, %kept, %bandb : (tensor<2x1x6x6xi1>, tensor<2x1x1x6xi1>, tensor<2x1x6x6xi1>) -> tensor<2x1x6x6xi1>
  %w1 = weft.where %keep, %c, %inf : (tensor<2x1x6x6xi1>, tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>
  %p1 = weft.softmax %w1 axis 3 : tensor<2x2x6x6xf32>
  %o1 = weft.matmul %p1, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>

  // Sums of biases: the window's (0 / -inf) plus the padding's (0 /
  // finfo.min), clamped at finfo.min.
  %drop = weft.compare eq, %band, %false : (tensor<6x6xi1>, tensor<i1>) -> tensor<6x6xi1>
  %bandBias = weft.where %drop, %inf, %zero : (tensor<6x6xi1>, tensor<f32>, tensor<f32>) -> tensor<6x6xf32>
  %padBias = weft.where %padded, %min, %zero : (tensor<2x1x1x6xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x6xf32>
  %sum = weft.add %bandBias, %padBias : (tensor<6x6xf32>, tensor<2x1x1x6xf32>) -> tensor<2x1x6x6xf32>
  %clamped = weft.maximum %sum, %min : (tensor<2x1x6x6xf32>, tensor<f32>) -> tensor<2x1x6x6xf32>
  %w2 = weft.add %c, %clamped : (tensor<2x2x6x6xf32>, tensor<2x1x6x6xf32>) -> tensor<2x2x6x6xf32>
  %p2 = weft.softmax %w2 axis 3 : tensor<2x2x6x6xf32>
  %o2 = weft.matmul %p2, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>

  // transformers' Gemma 2 eager attention: a local layer fills finfo.min
  // where tril(ones, -3) (a constant: the keys 3 and more before each
  // query) over the model's causal-and-padding mask.
  %farConst = weft.constant dense<[[false, false, false, false, false, false], [false, false, false, false, false, false], [false, false, false, false, false, false], [true, false, false, false, false, false], [true, true, false, false, false, false], [true, true, true, false, false, false]]> : tensor<6x6xi1>
  %c4 = weft.reshape %causal : tensor<6x6xf32> -> tensor<1x1x6x6xf32>
  %cb = weft.broadcast_to %c4 : tensor<1x1x6x6xf32> -> tensor<2x1x6x6xf32>
  %model = weft.where %padded, %min, %cb : (tensor<2x1x1x6xi1>, tensor<f32>, tensor<2x1x6x6xf32>) -> tensor<2x1x6x6xf32>
  %local = weft.where %farConst, %min, %model : (tensor<6x6xi1>, tensor<f32>, tensor<2x1x6x6xf32>) -> tensor<2x1x6x6xf32>
  %w3 = weft.add %c, %local : (tensor<2x2x6x6xf32>, tensor<2x1x6x6xf32>) -> tensor<2x2x6x6xf32>
  %p3 = weft.softmax %w3 axis 3 : tensor<2x2x6x6xf32>
  %o3 = weft.matmul %p3, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>
  return %o0, %o1, %o2, %o3 : tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>
}
