// RUN: weft-opt %s -weft-raise | FileCheck %s
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(1); [n.save('%t/' + a + '.npy', r.standard_normal((1, 2, 6, 4)).astype(n.float32)) for a in 'qkv']"
// RUN: weft run %s -i %t/q.npy -i %t/k.npy -i %t/v.npy -o %t/out --output-format npy > /dev/null
// RUN: %numpy_python -c "import numpy as n; q, k, v = (n.load('%t/' + a + '.npy').astype(n.float64) for a in 'qkv'); s = 0.5 * q @ k.swapaxes(-1, -2); i, j = n.indices((6, 6)); ref = lambda keep: (lambda e: (e / e.sum(-1, keepdims=True)) @ v)(n.exp(n.where(keep, s, -n.inf) - n.where(keep, s, -n.inf).max(-1, keepdims=True))); want = [ref(j <= i), ref((j <= i) & (j > i - 3)), ref((j <= i) & (j > i - 3))]; d = max(float(abs(n.load('%t/out/output_%%d.npy' %% o) - w).max()) for o, w in enumerate(want)); print('max difference from numpy %%.1e' %% d); assert d < 1e-5" | FileCheck %s --check-prefix=NUMPY
// NUMPY: max difference from numpy

// CHECK-LABEL: func.func @main
// CHECK-NOT: weft.trilu
// CHECK: weft.attention %arg0, %arg1, %arg2 scale 5.000000e-01 causal : (tensor<1x2x6x4xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 scale 5.000000e-01 causal window 3 : (tensor<1x2x6x4xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 scale 5.000000e-01 causal window 3 : (tensor<1x2x6x4xf32>
// CHECK-NOT: weft.softmax

// Causal and sliding-window masks computed from triangles at run time (as
// exports with dynamic axes write them, too large to fold at long
// sequences): each raises to causal attention, with its window.
func.func @main(%q: tensor<1x2x6x4xf32>, %k: tensor<1x2x6x4xf32>, %v: tensor<1x2x6x4xf32>) -> (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) {
  %scale = weft.constant dense<0.5> : tensor<f32>
  %inf = weft.constant dense<0xFF800000> : tensor<f32>
  %zero = weft.constant dense<0.0> : tensor<f32>
  %false = weft.constant dense<false> : tensor<i1>
  %fill = weft.constant dense<0xFF800000> : tensor<6x6xf32>
  %ones = weft.constant dense<true> : tensor<6x6xi1>
  // torch.triu(torch.full((s, s), -inf), 1): an additive causal mask.
  %triu = weft.trilu %fill upper diagonal 1 : tensor<6x6xf32>
  %s0 = weft.matmul %q, %k transpose_rhs : (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x6xf32>
  %c0 = weft.mul %s0, %scale : (tensor<1x2x6x6xf32>, tensor<f32>) -> tensor<1x2x6x6xf32>
  %w0 = weft.add %c0, %triu : (tensor<1x2x6x6xf32>, tensor<6x6xf32>) -> tensor<1x2x6x6xf32>
  %p0 = weft.softmax %w0 axis 3 : tensor<1x2x6x6xf32>
  %o0 = weft.matmul %p0, %v : (tensor<1x2x6x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
  // Mistral's: tril(ones) & triu(ones, 1 - 3), Not, as a 0 / -inf bias.
  %lower = weft.trilu %ones : tensor<6x6xi1>
  %band = weft.trilu %ones upper diagonal -2 : tensor<6x6xi1>
  %keep = weft.where %lower, %band, %lower : tensor<6x6xi1>
  %drop = weft.compare eq, %keep, %false : (tensor<6x6xi1>, tensor<i1>) -> tensor<6x6xi1>
  %bias = weft.where %drop, %inf, %zero : (tensor<6x6xi1>, tensor<f32>, tensor<f32>) -> tensor<6x6xf32>
  %s1 = weft.matmul %q, %k transpose_rhs : (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x6xf32>
  %c1 = weft.mul %s1, %scale : (tensor<1x2x6x6xf32>, tensor<f32>) -> tensor<1x2x6x6xf32>
  %w1 = weft.add %c1, %bias : (tensor<1x2x6x6xf32>, tensor<6x6xf32>) -> tensor<1x2x6x6xf32>
  %p1 = weft.softmax %w1 axis 3 : tensor<1x2x6x6xf32>
  %o1 = weft.matmul %p1, %v : (tensor<1x2x6x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
  // The same keep mask as a boolean: where(keep, s, -inf).
  %s2 = weft.matmul %q, %k transpose_rhs : (tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x6xf32>
  %c2 = weft.mul %s2, %scale : (tensor<1x2x6x6xf32>, tensor<f32>) -> tensor<1x2x6x6xf32>
  %w2 = weft.where %keep, %c2, %inf : (tensor<6x6xi1>, tensor<1x2x6x6xf32>, tensor<f32>) -> tensor<1x2x6x6xf32>
  %p2 = weft.softmax %w2 axis 3 : tensor<1x2x6x6xf32>
  %o2 = weft.matmul %p2, %v : (tensor<1x2x6x6xf32>, tensor<1x2x6x4xf32>) -> tensor<1x2x6x4xf32>
  return %o0, %o1, %o2 : tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>
}
