// Context parallelism takes a mask that varies over the queries and the keys
// (a document mask: each token sees only its own document's tokens).
//
// All-gather: every key is on the rank, so the mask is split with the
// queries (zigzag) and its keys stay whole.
// RUN: weft-opt %S/Inputs/document-mask.mlir -weft-apply-plan="cp=2 cp-comm=all-gather" -weft-propagate-sharding \
// RUN:   -weft-partition | FileCheck %s
// CHECK: %[[MASK:.*]] = weft.all_slice %arg3 over @mesh ["cp"] dim 2 zigzag : tensor<1x1x8x8xi1> -> tensor<1x1x4x8xi1>
// CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} mask %[[MASK]] positions
// CHECK-SAME: (tensor<1x4x4x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x1x4x8xi1>, tensor<4xi64>, tensor<8xi64>)
//
// Ring: the mask's rows are split with the queries and its keys stay whole;
// the K/V block's positions travel the ring with it, and each step gathers
// the block's columns at them.
// RUN: weft-opt %S/Inputs/document-mask.mlir -weft-apply-plan="cp=2" -weft-propagate-sharding \
// RUN:   -weft-partition | FileCheck %s --check-prefix=RINGIR
// RINGIR: %[[ROWS:.*]] = weft.all_slice %arg3 over @mesh ["cp"] dim 2 zigzag : tensor<1x1x8x8xi1> -> tensor<1x1x4x8xi1>
// RINGIR: %[[OWN:.*]] = weft.all_slice %{{.*}} over @mesh ["cp"] dim 0 zigzag {{.*}}: tensor<8xi64> -> tensor<4xi64>
// RINGIR: %[[NEXT:.*]] = weft.collective_permute %[[OWN]] over @mesh ["cp"] shift 1
// RINGIR: %[[M0:.*]] = weft.gather %[[ROWS]][%[[OWN]]] axis 3 {{.*}}: (tensor<1x1x4x8xi1>, tensor<4xi64>) -> tensor<1x1x4x4xi1>
// RINGIR: weft.attention_block %{{.*}} mask %[[M0]] positions %[[OWN]], %[[OWN]]
// RINGIR: %[[M1:.*]] = weft.gather %[[ROWS]][%[[NEXT]]] axis 3
// RINGIR: weft.attention_block %{{.*}} mask %[[M1]] positions %[[OWN]], %[[NEXT]]
// RINGIR-NOT: weft.collective_permute %[[ROWS]]

// Both partitioned runs are compared with the unpartitioned one, and so are
// the gradients of a training step's loss under the ring.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(5); [n.save('%t/' + a + '.npy', r.standard_normal(s).astype(n.float32)) for a, s in [('q', (1,4,8,4)), ('k', (1,2,8,4)), ('v', (1,2,8,4))]]; d = n.array([0,0,0,1,1,1,1,2]); n.save('%t/keep.npy', (d[:, None] == d[None, :]).reshape(1,1,8,8))"
// RUN: weft run %S/Inputs/document-mask.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy -o %t/whole --output-format npy
// RUN: weft run %S/Inputs/document-mask.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy --devices 2 \
// RUN:   --plan-spec "cp=2,cp-comm=all-gather" -o %t/gathered --output-format npy
// RUN: weft run %S/Inputs/document-mask.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy --devices 2 \
// RUN:   --plan-spec "cp=2" -o %t/ring --output-format npy
// RUN: %numpy_python -c "import numpy as n; w = n.load('%t/whole/output_0.npy'); d = [float(abs(w - n.load('%t/' + f + '/output_0.npy')).max()) for f in ('gathered', 'ring')]; print('max difference %%.1e %%.1e' %% tuple(d)); assert max(d) < 1e-6" | FileCheck %s --check-prefix=SAME
// SAME: max difference
