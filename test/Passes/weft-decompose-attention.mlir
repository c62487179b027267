// RUN: weft-opt %S/Inputs/attention-forms.mlir -weft-decompose-attention | FileCheck %s

// Megatron's unfused attention: KV heads repeated to the query heads, the
// scores, the scaled causal softmax in one op, dropout on the probabilities,
// the weighted values. Every op is part of the attention core.
// CHECK-LABEL: func.func @main
// CHECK-NOT: weft.attention %
// CHECK: %[[K5:.*]] = weft.reshape %arg1 {weft.attention_core} : tensor<2x2x6x3xf32> -> tensor<2x2x1x6x3xf32>
// CHECK-NEXT: %[[KB:.*]] = weft.broadcast_to %[[K5]] {weft.attention_core} : tensor<2x2x1x6x3xf32> -> tensor<2x2x2x6x3xf32>
// CHECK-NEXT: %[[K:.*]] = weft.reshape %[[KB]] {weft.attention_core} : tensor<2x2x2x6x3xf32> -> tensor<2x4x6x3xf32>
// CHECK: %[[S:.*]] = weft.matmul %arg0, %[[K]] transpose_rhs {weft.attention_core} : (tensor<2x4x6x3xf32>, tensor<2x4x6x3xf32>) -> tensor<2x4x6x6xf32>
// CHECK-NEXT: %[[P:.*]] = weft.softmax %[[S]] axis 3 scale 5.773500e-01 causal {weft.attention_core} : tensor<2x4x6x6xf32>
// CHECK-NEXT: %[[D:.*]] = weft.dropout %[[P]] ratio 1.000000e-01 {weft.attention_core} : tensor<2x4x6x6xf32>
// CHECK-NEXT: weft.matmul %[[D]], %{{.*}} {weft.attention_core} : (tensor<2x4x6x6xf32>, tensor<2x4x6x5xf32>) -> tensor<2x4x6x5xf32>
// A boolean mask selects after scaling; the softmax has no scale of its own.
// CHECK: weft.mul %{{.*}}, %{{.*}} {weft.attention_core}
// CHECK: weft.where %arg3, %{{.*}}, %{{.*}} {weft.attention_core}
// CHECK-NEXT: weft.softmax %{{.*}} axis 3 {weft.attention_core} : tensor<2x4x6x6xf32>
// A cap: 0.4 · tanh(s / 0.4) of the scaled scores, before the mask; the
// softmax keeps causal.
// CHECK: %[[SC:.*]] = weft.mul %{{.*}}, %{{.*}} {weft.attention_core}
// CHECK: %[[IN:.*]] = weft.mul %[[SC]], %{{.*}} {weft.attention_core}
// CHECK-NEXT: %[[T:.*]] = weft.tanh %[[IN]] {weft.attention_core}
// CHECK: %[[CAP:.*]] = weft.mul %[[T]], %{{.*}} {weft.attention_core}
// CHECK: weft.where %arg3, %[[CAP]], %{{.*}} {weft.attention_core}
// CHECK-NEXT: weft.softmax %{{.*}} axis 3 causal {weft.attention_core} : tensor<2x4x6x6xf32>
// A sliding window of 3: the keys 3 or more before each query hidden by a
// constant band, causal by the softmax.
// CHECK: %[[BAND:.*]] = weft.constant dense<{{\[\[}}true, true, true, true, true, true], [true, true, true, true, true, true], [true, true, true, true, true, true], [false, true, true, true, true, true], [false, false, true, true, true, true], [false, false, false, true, true, true]]> : tensor<6x6xi1>
// CHECK: weft.where %[[BAND]], %{{.*}}, %{{.*}} {weft.attention_core}
// CHECK-NEXT: weft.softmax %{{.*}} axis 3 causal {weft.attention_core} : tensor<2x4x6x6xf32>
// ALiBi alone: -m |i - j| / scale from two iotas of the scores' shape and
// the slopes broadcast to it, added to the unscaled scores; the softmax
// keeps the scale and causal.
// CHECK: weft.iota dim 2 {weft.attention_core} : tensor<2x4x6x6xf32>
// CHECK-NEXT: weft.iota dim 3 {weft.attention_core} : tensor<2x4x6x6xf32>
// CHECK: weft.broadcast_to %{{.*}} {weft.attention_core} : tensor<1x4x1x1xf32> -> tensor<2x4x6x6xf32>
// CHECK: weft.constant dense<-2.000000e+00> : tensor<f32>
// CHECK: weft.add
// CHECK-NEXT: weft.softmax %{{.*}} axis 3 scale 5.000000e-01 causal {weft.attention_core} : tensor<2x4x6x6xf32>
// With a mask: the biases on the scaled scores, then the mask.
// CHECK: weft.constant dense<-1.000000e+00> : tensor<f32>
// CHECK: weft.where %arg3, %{{.*}}, %{{.*}} {weft.attention_core}
// CHECK-NEXT: weft.softmax %{{.*}} axis 3 {weft.attention_core} : tensor<2x4x6x6xf32>

// Both forms compute the same values (dropout keeps every element in a
// forward program).
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(3); [n.save('%t/' + a + '.npy', r.standard_normal(s).astype(n.float32)) for a, s in [('q', (2,4,6,3)), ('k', (2,2,6,3)), ('v', (2,2,6,5))]]; n.save('%t/keep.npy', n.array([1,1,1,0,0,1] * 2, dtype=bool).reshape(2,1,1,6))"
// RUN: weft run %S/Inputs/attention-forms.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy -o %t/fused --output-format npy
// RUN: weft-opt %S/Inputs/attention-forms.mlir -weft-decompose-attention -o %t/unfused.mlir
// RUN: weft run %t/unfused.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy -o %t/unfused --output-format npy
// RUN: %numpy_python -c "import numpy as n; d = max(float(abs(n.load('%t/fused/output_%%d.npy' %% i) - n.load('%t/unfused/output_%%d.npy' %% i)).max()) for i in range(6)); print('max difference %%.1e' %% d); assert d < 1e-5" | FileCheck %s --check-prefix=SAME
// SAME: max difference
