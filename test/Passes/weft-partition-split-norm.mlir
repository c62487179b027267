// RUN: weft-opt %s -split-input-file -weft-propagate-sharding -weft-partition | FileCheck %s

// A norm over a dimension its input arrives split in (OLMo 2's QK norm over
// every head's features, after a column-parallel projection): each rank sums
// the squares of its block, one f32 per row is all-reduced over tp, and each
// rank normalizes and scales its own block with its slice of the weight; no
// rank gathers the rows, and the result stays split.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @rms
func.func @rms(%x: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>},
               %g: tensor<32xf32>) -> (tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>}) {
  // CHECK-NOT: weft.all_gather
  // CHECK: %[[G:.*]] = weft.all_slice %arg1 over @mesh ["tp"] dim 0 {weft.decomposed} : tensor<32xf32> -> tensor<16xf32>
  // CHECK: %[[SQ:.*]] = weft.mul %arg0, %arg0 {weft.decomposed} : tensor<4x8x16xf32>
  // CHECK: %[[SUM:.*]] = weft.reduce_sum %[[SQ]] axes [2] keep_dims {weft.decomposed} : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
  // CHECK: %[[ALL:.*]] = weft.all_reduce sum %[[SUM]] over @mesh ["tp"] codec none {weft.decomposed} : tensor<4x8x1xf32>
  // CHECK: %[[MEAN:.*]] = weft.mul %[[ALL]], %{{.*}} {weft.decomposed}
  // CHECK: %[[VAR:.*]] = weft.add %[[MEAN]], %{{.*}} {weft.decomposed}
  // CHECK: %[[R:.*]] = weft.rsqrt %[[VAR]] {weft.decomposed} : tensor<4x8x1xf32>
  // CHECK: %[[N:.*]] = weft.mul %arg0, %[[R]] {weft.decomposed}
  // CHECK: %[[Y:.*]] = weft.mul %[[N]], %[[G]] {weft.decomposed}
  // CHECK-NOT: weft.all_gather
  // CHECK: return %[[Y]] : tensor<4x8x16xf32>
  %y = weft.rms_norm %x, %g axis 2 epsilon 1.0e-06 : (tensor<4x8x32xf32>, tensor<32xf32>) -> tensor<4x8x32xf32>
  return %y : tensor<4x8x32xf32>
}

// -----

// LayerNorm: the mean first (one all-reduce of the sums), then the centered
// squares' (a second), as a numerically stable two-pass norm; the bias is
// sliced like the scale. A 16-bit input is normed in f32 and rounded back.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @layer
func.func @layer(%x: tensor<4x8x32xbf16> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>},
                 %g: tensor<32xbf16>, %b: tensor<32xbf16>) -> (tensor<4x8x32xbf16> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>}) {
  // CHECK-NOT: weft.all_gather
  // CHECK: %[[X:.*]] = weft.cast %arg0 {weft.decomposed} : tensor<4x8x16xbf16> -> tensor<4x8x16xf32>
  // CHECK: %[[S:.*]] = weft.reduce_sum %[[X]] axes [2] keep_dims {weft.decomposed} : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
  // CHECK: weft.all_reduce sum %[[S]] over @mesh ["tp"] codec none {weft.decomposed} : tensor<4x8x1xf32>
  // CHECK: %[[C:.*]] = weft.sub %[[X]], %{{.*}} {weft.decomposed}
  // CHECK: %[[SQ:.*]] = weft.mul %[[C]], %[[C]] {weft.decomposed}
  // CHECK: %[[V:.*]] = weft.reduce_sum %[[SQ]] axes [2] keep_dims {weft.decomposed}
  // CHECK: weft.all_reduce sum %[[V]] over @mesh ["tp"] codec none {weft.decomposed} : tensor<4x8x1xf32>
  // CHECK: weft.cast %{{.*}} {weft.decomposed} : tensor<4x8x16xf32> -> tensor<4x8x16xbf16>
  // CHECK: weft.mul {{.*}} : (tensor<4x8x16xbf16>, tensor<16xbf16>)
  // CHECK: weft.add {{.*}} : (tensor<4x8x16xbf16>, tensor<16xbf16>)
  // CHECK-NOT: weft.all_gather
  %y = weft.layer_norm %x, %g, %b axis 2 epsilon 1.0e-05 : (tensor<4x8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>) -> tensor<4x8x32xbf16>
  return %y : tensor<4x8x32xbf16>
}

// -----

// A norm whose normalized dimension arrives whole takes the factor rule:
// the rows split (Megatron's sequence parallelism), each rank norms its own.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @rows
func.func @rows(%x: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp], []]>},
                %g: tensor<32xf32>) -> (tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp], []]>}) {
  // CHECK-NOT: weft.all_reduce
  // CHECK: weft.rms_norm %arg0, %arg1 axis 2 epsilon 9.99999997E-7 : (tensor<4x4x32xf32>, tensor<32xf32>) -> tensor<4x4x32xf32>
  %y = weft.rms_norm %x, %g axis 2 epsilon 1.0e-06 : (tensor<4x8x32xf32>, tensor<32xf32>) -> tensor<4x8x32xf32>
  return %y : tensor<4x8x32xf32>
}
