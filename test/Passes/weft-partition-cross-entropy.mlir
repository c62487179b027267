// RUN: weft-opt %s -weft-propagate-sharding -weft-partition | FileCheck %s

// Vocabulary-parallel cross-entropy (Megatron): logits split over classes stay
// split; each rank takes its block's log-sum-exp in one pass, and the blocks
// combine with an all-reduce of their max and one of the sum; the label's
// logit is one element per row, gathered from the block flattened (no
// full-width one-hot), and one more all-reduce; a mean over a batch split over dp sums the loss and
// the count of positions that are not ignored. Each op the rule builds is
// marked weft.decomposed: a training step's backward is the cross-entropy's
// (differentiated before partitioning), and the cost model keeps what it
// reads, the logits block and the labels, not what these ops would keep.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], [], [tp]]>},
                %labels: tensor<4x8xi64> {weft.sharding = #weft.sharding<@mesh, [[dp], []]>}) -> tensor<f32> {
  // CHECK-NOT: weft.all_gather
  // CHECK: weft.reduce_logsumexp %{{.*}} axes [2] keep_dims {weft.decomposed} : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  // CHECK: weft.all_reduce max {{.*}} over @mesh ["tp"] codec none {weft.decomposed} : tensor<2x8x1xf32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["tp"] codec none {weft.decomposed} : tensor<2x8x1xf32>
  // CHECK: weft.all_slice {{.*}} over @mesh ["tp"] dim 0 {weft.decomposed} : tensor<2xi64> -> tensor<1xi64>
  // CHECK-NOT: weft.iota dim 2
  // CHECK: %[[ROW:.*]] = weft.iota dim 0 {weft.decomposed} : tensor<16xi64>
  // CHECK: %[[FIRST:.*]] = weft.mul %[[ROW]], %{{.*}} {weft.decomposed} : (tensor<16xi64>, tensor<i64>) -> tensor<16xi64>
  // CHECK: %[[AT:.*]] = weft.add %[[FIRST]], %{{.*}} {weft.decomposed} : tensor<16xi64>
  // CHECK: %[[FLAT:.*]] = weft.reshape %{{.*}} {weft.decomposed} : tensor<2x8x16xf32> -> tensor<256xf32>
  // CHECK: weft.gather %[[FLAT]][%[[AT]]] axis 0 {weft.decomposed} : (tensor<256xf32>, tensor<16xi64>) -> tensor<16xf32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["tp"] codec none {weft.decomposed} : tensor<2x8xf32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["dp"] codec none {weft.decomposed} : tensor<f32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["dp"] codec none {weft.decomposed} : tensor<f32>
  // CHECK: weft.div {{.*}} {weft.decomposed}
  // CHECK-NOT: weft.cross_entropy
  %0 = weft.cross_entropy %logits, %labels reduction mean ignore_index -100 : (tensor<4x8x32xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}

// Labels of i32 index the flattened block in i64 (a rank's block can hold
// more than 2^31 elements).
// CHECK-LABEL: func.func @loss_i32
func.func @loss_i32(%logits: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], [], [tp]]>},
                    %labels: tensor<4x8xi32> {weft.sharding = #weft.sharding<@mesh, [[dp], []]>}) -> tensor<2x8xf32> {
  // CHECK: %[[AT:.*]] = weft.cast %{{.*}} {weft.decomposed} : tensor<2x8xi32> -> tensor<2x8xi64>
  // CHECK: weft.iota dim 0 {weft.decomposed} : tensor<16xi64>
  // CHECK: weft.gather %{{.*}}[%{{.*}}] axis 0 {weft.decomposed} : (tensor<256xf32>, tensor<16xi64>) -> tensor<16xf32>
  %0 = weft.cross_entropy %logits, %labels reduction none : (tensor<4x8x32xf32>, tensor<4x8xi32>) -> tensor<4x8xf32>
  %1 = weft.slice %0 starts [0, 0] limits [2, 8] : tensor<4x8xf32> -> tensor<2x8xf32>
  return %1 : tensor<2x8xf32>
}
