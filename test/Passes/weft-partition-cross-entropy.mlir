// RUN: weft-opt %s -weft-propagate-sharding -weft-partition | FileCheck %s

// Vocabulary-parallel cross-entropy (Megatron): logits split over classes stay
// split; the log-sum-exp takes an all-reduce of the max and one of the sum, the
// label's logit one more; a mean over a batch split over dp sums the loss and
// the count of positions that are not ignored. Each op the rule builds is
// marked weft.decomposed: a training step's backward is the cross-entropy's
// (differentiated before partitioning), and the cost model keeps what it
// reads, the logits block and the labels, not what these ops would keep.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @loss
func.func @loss(%logits: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], [], [tp]]>},
                %labels: tensor<4x8xi64> {weft.sharding = #weft.sharding<@mesh, [[dp], []]>}) -> tensor<f32> {
  // CHECK-NOT: weft.all_gather
  // CHECK: weft.all_reduce max {{.*}} over @mesh ["tp"] codec none {weft.decomposed} : tensor<2x8x1xf32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["tp"] codec none {weft.decomposed} : tensor<2x8x1xf32>
  // CHECK: weft.all_slice {{.*}} over @mesh ["tp"] dim 0 {weft.decomposed} : tensor<2xi64> -> tensor<1xi64>
  // CHECK: weft.iota dim 2 {weft.decomposed} : tensor<2x8x16xi64>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["tp"] codec none {weft.decomposed} : tensor<2x8xf32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["dp"] codec none {weft.decomposed} : tensor<f32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["dp"] codec none {weft.decomposed} : tensor<f32>
  // CHECK: weft.div {{.*}} {weft.decomposed}
  // CHECK-NOT: weft.cross_entropy
  %0 = weft.cross_entropy %logits, %labels reduction mean ignore_index -100 : (tensor<4x8x32xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %0 : tensor<f32>
}
