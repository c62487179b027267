// RUN: weft-opt %s -weft-raise | FileCheck %s
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(3); [n.save('%t/' + a + '.npy', r.standard_normal((2, 2, 6, 4)).astype(n.float32)) for a in 'qkv']; n.save('%t/mask.npy', n.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0]], n.float32))"
// RUN: weft run %s -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/mask.npy -o %t/out --output-format npy > /dev/null
// RUN: %numpy_python -c "import numpy as n; q, k, v = (n.load('%t/' + a + '.npy').astype(n.float64) for a in 'qkv'); pad = n.load('%t/mask.npy')[:, None, None, :] > 0; s = 0.5 * q @ k.swapaxes(-1, -2); i, j = n.indices((6, 6)); w = n.where((j <= i) & pad, s, -n.inf); e = n.exp(w - w.max(-1, keepdims=True)); want = (e / e.sum(-1, keepdims=True)) @ v; d = float(abs(n.load('%t/out/output_0.npy') - want).max()); print('max difference from numpy %%.1e' %% d); assert d < 1e-5" | FileCheck %s --check-prefix=NUMPY
// NUMPY: max difference from numpy

// transformers' Llama `_update_causal_mask` (4.38 on): the causal bias
// (finfo.min above the diagonal) expanded over the batch, and finfo.min
// filled where causal + attention_mask is 0 (a key the causal bias keeps
// that is padding). It raises to causal attention with the padding as its
// mask, [b, 1, 1, s]: within the causal band the causal bias in
// causal + attention_mask is 0, so it is dropped there. Once: the mask that
// rewrite leaves, where(keep, 0, fill), holds a band that keeps every key
// (its 0), and until 2026-12-06 the raise factored that band out again and
// again, without end (weft import ran out of memory on such an export).

// CHECK-LABEL: func.func @main
// CHECK: %[[KEEP:.*]] = weft.compare eq, %{{.*}}, %{{.*}} : (tensor<2x1x1x6xi1>, tensor<i1>) -> tensor<2x1x1x6xi1>
// CHECK: %[[MASK:.*]] = weft.where %[[KEEP]], %{{.*}}, %{{.*}} : (tensor<2x1x1x6xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x6xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %[[MASK]] scale 5.000000e-01 causal : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>, tensor<2x1x1x6xf32>)
// CHECK-NOT: weft.softmax
func.func @main(%q: tensor<2x2x6x4xf32>, %k: tensor<2x2x6x4xf32>, %v: tensor<2x2x6x4xf32>, %mask: tensor<2x6xf32>) -> tensor<2x2x6x4xf32> {
  %scale = weft.constant dense<0.5> : tensor<f32>
  %min = weft.constant dense<0xFF7FFFFF> : tensor<f32>
  %zero = weft.constant dense<0.0> : tensor<f32>
  %fill = weft.constant dense<0xFF7FFFFF> : tensor<6x6xf32>
  %causal = weft.trilu %fill upper diagonal 1 : tensor<6x6xf32>
  %c4 = weft.reshape %causal : tensor<6x6xf32> -> tensor<1x1x6x6xf32>
  %cb = weft.broadcast_to %c4 : tensor<1x1x6x6xf32> -> tensor<2x1x6x6xf32>
  %m4 = weft.reshape %mask : tensor<2x6xf32> -> tensor<2x1x1x6xf32>
  %sum = weft.add %cb, %m4 : (tensor<2x1x6x6xf32>, tensor<2x1x1x6xf32>) -> tensor<2x1x6x6xf32>
  %padding = weft.compare eq, %sum, %zero : (tensor<2x1x6x6xf32>, tensor<f32>) -> tensor<2x1x6x6xi1>
  %bias = weft.where %padding, %min, %cb : (tensor<2x1x6x6xi1>, tensor<f32>, tensor<2x1x6x6xf32>) -> tensor<2x1x6x6xf32>
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x6x4xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x6xf32>
  %c = weft.mul %s, %scale : (tensor<2x2x6x6xf32>, tensor<f32>) -> tensor<2x2x6x6xf32>
  %w = weft.add %c, %bias : (tensor<2x2x6x6xf32>, tensor<2x1x6x6xf32>) -> tensor<2x2x6x6xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x6x6xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x6x6xf32>, tensor<2x2x6x4xf32>) -> tensor<2x2x6x4xf32>
  return %o : tensor<2x2x6x4xf32>
}
