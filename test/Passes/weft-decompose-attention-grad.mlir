// RUN: weft-opt %S/Inputs/attention-grad-forms.mlir -weft-decompose-attention | FileCheck %s

// Megatron's unfused backward: the attention recomputed as the forward's
// decomposition (KV heads repeated, scores, the scaled causal softmax,
// dropout), then dV = Pᵀ dO, dP = dO Vᵀ, dS = P (dP - rowsum(P dP)) scaled,
// dQ = dS K, dK = dSᵀ Q, the grouped heads' dK and dV summed back. The
// recomputed P V is not built.
// CHECK-LABEL: func.func @main
// CHECK-NOT: weft.attention_grad
// CHECK: %[[S:.*]] = weft.matmul %arg0, %[[K:.*]] transpose_rhs {weft.attention_core} : (tensor<2x4x6x3xf32>, tensor<2x4x6x3xf32>) -> tensor<2x4x6x6xf32>
// CHECK-NEXT: %[[P:.*]] = weft.softmax %[[S]] axis 3 scale 5.773500e-01 causal {weft.attention_core}
// CHECK-NEXT: %[[D:.*]] = weft.dropout %[[P]] ratio 1.000000e-01 {weft.attention_core}
// CHECK-NEXT: %[[DP:.*]] = weft.matmul %arg4, %{{.*}} transpose_rhs : (tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>) -> tensor<2x4x6x6xf32>
// CHECK-NEXT: %[[DV:.*]] = weft.matmul %[[D]], %arg4 transpose_lhs : (tensor<2x4x6x6xf32>, tensor<2x4x6x5xf32>) -> tensor<2x4x6x5xf32>
// CHECK: weft.reduce_sum %{{.*}} axes [3] keep_dims
// CHECK: %[[DQ:.*]] = weft.matmul %[[DS:.*]], %[[K]] : (tensor<2x4x6x6xf32>, tensor<2x4x6x3xf32>) -> tensor<2x4x6x3xf32>
// CHECK-NEXT: weft.matmul %[[DS]], %arg0 transpose_lhs
// CHECK: weft.reduce_sum %{{.*}} axes [2] keep_dims : tensor<2x2x2x6x5xf32> -> tensor<2x2x1x6x5xf32>
// The padding mask: hidden scores take no gradient.
// CHECK: weft.where %arg3, %{{.*}}, %{{.*}} {weft.attention_core}
// CHECK: weft.where %arg3, %{{.*}}, %{{.*}} : (tensor<2x1x1x6xi1>, tensor<2x4x6x6xf32>, tensor<f32>)
// Keys that are also the values: differentiated as two values, so that dK
// and dV are each their own.
// CHECK: %[[KV:.*]] = weft.reshape %arg1 : tensor<2x2x6x3xf32> -> tensor<2x2x6x3xf32>
// CHECK: return %[[DQ]],

// A ring's partition of the gradient (with positions) stays fused.
// RUN: weft-opt %s -weft-decompose-attention | FileCheck %s --check-prefix=RING
// RING-LABEL: func.func @ring
// RING: weft.attention_grad {{.*}} positions
func.func @ring(%q: tensor<1x2x4x4xf32>, %k: tensor<1x2x8x4xf32>, %do: tensor<1x2x4x4xf32>, %qp: tensor<4xi64>, %kp: tensor<8xi64>) -> tensor<1x2x4x4xf32> {
  %0:3 = weft.attention_grad %q, %k, %k grad %do positions %qp, %kp scale 0.5 causal : (tensor<1x2x4x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x4x4xf32>, tensor<4xi64>, tensor<8xi64>) -> (tensor<1x2x4x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>)
  return %0#0 : tensor<1x2x4x4xf32>
}

// Both forms compute the same gradients (dropout keeps every element; the
// cap's slope 1 - tanh² in the fused kernel, the tanh's gradient in the
// decomposition), and with one tensor as keys and values dK and dV differ.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(5); [n.save('%t/' + a + '.npy', r.standard_normal(s).astype(n.float32)) for a, s in [('q', (2,4,6,3)), ('k', (2,2,6,3)), ('v', (2,2,6,5)), ('do', (2,4,6,5)), ('do3', (2,4,6,3))]]; n.save('%t/keep.npy', n.array([1,1,1,0,0,1] * 2, dtype=bool).reshape(2,1,1,6))"
// RUN: weft run %S/Inputs/attention-grad-forms.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy -i %t/do.npy -i %t/do3.npy -o %t/fused --output-format npy
// RUN: weft-opt %S/Inputs/attention-grad-forms.mlir -weft-decompose-attention -o %t/unfused.mlir
// RUN: weft run %t/unfused.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy -i %t/do.npy -i %t/do3.npy -o %t/unfused --output-format npy
// RUN: %numpy_python -c "import numpy as n; d = max(float(abs(n.load('%t/fused/output_%%d.npy' %% i) - n.load('%t/unfused/output_%%d.npy' %% i)).max()) for i in range(21)); s = min(float(abs(n.load('%t/fused/output_%%d.npy' %% i)).max()) for i in range(21)); e = float(abs(n.load('%t/unfused/output_7.npy') - n.load('%t/unfused/output_8.npy')).max()); print('max difference %%.1e, smallest gradient %%.1e, dK - dV %%.1e' %% (d, s, e)); assert d < 1e-5 and s > 0.1 and e > 0.1" | FileCheck %s --check-prefix=SAME
// SAME: max difference
