// All-gather context parallelism takes a mask that varies over the queries
// (a document mask): every key is on the rank, so the mask is split with the
// queries (zigzag) and its keys stay whole. The ring refuses it, naming the
// way out. Both partitioned runs are compared with the unpartitioned one.
// RUN: weft-opt %S/Inputs/document-mask.mlir -weft-apply-plan="cp=2 cp-comm=all-gather" -weft-propagate-sharding \
// RUN:   -weft-partition | FileCheck %s
// CHECK: %[[MASK:.*]] = weft.all_slice %arg3 over @mesh ["cp"] dim 2 zigzag : tensor<1x1x8x8xi1> -> tensor<1x1x4x8xi1>
// CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} mask %[[MASK]] positions
// CHECK-SAME: (tensor<1x4x4x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x1x4x8xi1>, tensor<4xi64>, tensor<8xi64>)

// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; r = n.random.default_rng(5); [n.save('%t/' + a + '.npy', r.standard_normal(s).astype(n.float32)) for a, s in [('q', (1,4,8,4)), ('k', (1,2,8,4)), ('v', (1,2,8,4))]]; d = n.array([0,0,0,1,1,1,1,2]); n.save('%t/keep.npy', (d[:, None] == d[None, :]).reshape(1,1,8,8))"
// RUN: weft run %S/Inputs/document-mask.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy -o %t/whole --output-format npy
// RUN: weft run %S/Inputs/document-mask.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy --devices 2 \
// RUN:   --plan-spec "cp=2,cp-comm=all-gather" -o %t/gathered --output-format npy
// RUN: %numpy_python -c "import numpy as n; d = float(abs(n.load('%t/whole/output_0.npy') - n.load('%t/gathered/output_0.npy')).max()); print('max difference %%.1e' %% d); assert d < 1e-6" | FileCheck %s --check-prefix=SAME
// SAME: max difference
// RUN: not weft run %S/Inputs/document-mask.mlir -i %t/q.npy -i %t/k.npy -i %t/v.npy -i %t/keep.npy --devices 2 \
// RUN:   --plan-spec "cp=2" -o %t/ring 2>&1 | FileCheck %s --check-prefix=RING
// RING: document-mask.mlir:4:8: error: ring attention needs a mask that broadcasts over the queries (its query dimension is 8); use cp-comm=all-gather or ulysses
