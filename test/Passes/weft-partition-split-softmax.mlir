// RUN: weft-opt %s -split-input-file -weft-propagate-sharding -weft-partition | FileCheck %s

// The cross-entropy's backward on a vocabulary-parallel head's logits: the
// softmax normalizes each rank's columns with the rows' max and sum
// all-reduced over tp (no rank gathers the logits), and the one-hot's iota
// counts each rank's block of the vocabulary from its first index.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @cross_entropy_backward
func.func @cross_entropy_backward(%logits: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>},
                    %labels: tensor<4x8xi64>,
                    %w: tensor<16x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp]]>}) -> tensor<4x8x16xf32> {
  // CHECK-NOT: weft.all_gather
  // CHECK: %[[MAX:.*]] = weft.reduce_max %arg0 axes [2] keep_dims : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
  // CHECK: %[[GMAX:.*]] = weft.all_reduce max %[[MAX]] over @mesh ["tp"] codec none : tensor<4x8x1xf32>
  // CHECK: %[[SHIFT:.*]] = weft.sub %arg0, %[[GMAX]]
  // CHECK: %[[EXP:.*]] = weft.exp %[[SHIFT]] : tensor<4x8x16xf32>
  // CHECK: %[[SUM:.*]] = weft.reduce_sum %[[EXP]] axes [2] keep_dims
  // CHECK: %[[GSUM:.*]] = weft.all_reduce sum %[[SUM]] over @mesh ["tp"] codec none : tensor<4x8x1xf32>
  // CHECK: %[[P:.*]] = weft.div %[[EXP]], %[[GSUM]]
  // CHECK: %[[IOTA:.*]] = weft.iota dim 2 : tensor<4x8x16xi64>
  // CHECK: %[[FIRST:.*]] = weft.constant dense<[0, 16]> : tensor<2xi64>
  // CHECK: %[[MINE:.*]] = weft.all_slice %[[FIRST]] over @mesh ["tp"] dim 0
  // CHECK: %[[COUNT:.*]] = weft.add %[[IOTA]], %[[MINE]]
  // CHECK: weft.compare eq, %{{.*}}, %[[COUNT]]
  // CHECK: weft.sub %[[P]],
  // CHECK: weft.linear {{.*}} transpose_weight : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  // CHECK: weft.all_reduce sum {{.*}} over @mesh ["tp"] : tensor<4x8x16xf32>
  // CHECK-NOT: weft.all_gather
  %p = weft.softmax %logits axis 2 : tensor<4x8x32xf32>
  %iota = weft.iota dim 2 : tensor<4x8x32xi64>
  %col = weft.reshape %labels : tensor<4x8xi64> -> tensor<4x8x1xi64>
  %hit = weft.compare eq, %col, %iota : (tensor<4x8x1xi64>, tensor<4x8x32xi64>) -> tensor<4x8x32xi1>
  %hot = weft.cast %hit : tensor<4x8x32xi1> -> tensor<4x8x32xf32>
  %d = weft.sub %p, %hot : tensor<4x8x32xf32>
  %dx = weft.linear %d, %w transpose_weight : (tensor<4x8x32xf32>, tensor<16x32xf32>) -> tensor<4x8x16xf32>
  return %dx : tensor<4x8x16xf32>
}

// -----

// A scaled log-softmax over a split axis, marked as an attention core: the
// scale is applied first, the log of the all-reduced sum subtracted, and
// every op it became keeps the mark.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @log_softmax
func.func @log_softmax(%x: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], [], [tp]]>},
                       %w: tensor<16x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp]]>}) -> tensor<4x8x16xf32> {
  // CHECK-NOT: weft.all_gather
  // CHECK: %[[S:.*]] = weft.mul %arg0, %{{.*}} {weft.attention_core} : (tensor<2x8x16xf32>, tensor<f32>)
  // CHECK: weft.reduce_max %[[S]] axes [2] keep_dims {weft.attention_core}
  // CHECK: %[[GMAX:.*]] = weft.all_reduce max {{.*}} over @mesh ["tp"] codec none {weft.attention_core} : tensor<2x8x1xf32>
  // CHECK: %[[SHIFT:.*]] = weft.sub %[[S]], %[[GMAX]] {weft.attention_core}
  // CHECK: %[[GSUM:.*]] = weft.all_reduce sum {{.*}} over @mesh ["tp"] codec none {weft.attention_core}
  // CHECK: %[[LOG:.*]] = weft.log %[[GSUM]] {weft.attention_core}
  // CHECK: weft.sub %[[SHIFT]], %[[LOG]] {weft.attention_core}
  // CHECK-NOT: weft.log_softmax
  %l = weft.log_softmax %x axis 2 scale 0.5 {weft.attention_core} : tensor<4x8x32xf32>
  %y = weft.linear %l, %w transpose_weight : (tensor<4x8x32xf32>, tensor<16x32xf32>) -> tensor<4x8x16xf32>
  return %y : tensor<4x8x16xf32>
}

// -----

// A causal softmax needs the positions of its columns: its split axis is
// gathered first (the generic rule).
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @causal
func.func @causal(%x: tensor<2x8x8xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>}) -> tensor<2x8x8xf32> {
  // CHECK: weft.all_gather %arg0 over @mesh ["tp"] dim 2 : tensor<2x8x4xf32> -> tensor<2x8x8xf32>
  // CHECK: weft.softmax {{.*}} axis 2 causal : tensor<2x8x8xf32>
  // CHECK-NOT: weft.all_reduce
  %p = weft.softmax %x axis 2 causal : tensor<2x8x8xf32>
  return %p : tensor<2x8x8xf32>
}

// -----

// An iota split along another dimension than the one it counts is only
// shorter: nothing added, nothing sliced.
weft.mesh @mesh(cp = 2, tp = 2)
// CHECK-LABEL: func.func @positions
func.func @positions(%x: tensor<2x8x4xi64> {weft.sharding = #weft.sharding<@mesh, [[tp], [], []]>}) -> tensor<2x8x4xi64> {
  // CHECK: weft.iota dim 1 : tensor<1x8x4xi64>
  // CHECK-NOT: weft.all_slice
  // CHECK: weft.add
  %i = weft.iota dim 1 : tensor<2x8x4xi64>
  %y = weft.add %x, %i : tensor<2x8x4xi64>
  return %y : tensor<2x8x4xi64>
}

// -----

// The cross-entropy's backward as weft-differentiate builds it, the softmax as
// exp(logits - logsumexp): each rank reduces its block of the vocabulary in
// one pass, and the blocks combine as m + log(sum(exp(l - m))) with the
// rows' m and sum all-reduced over tp (no rank gathers the logits).
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @logsumexp_backward
func.func @logsumexp_backward(%logits: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [], [tp]]>},
                    %labels: tensor<4x8xi64>,
                    %w: tensor<16x32xf32> {weft.sharding = #weft.sharding<@mesh, [[], [tp]]>}) -> tensor<4x8x16xf32> {
  // CHECK-NOT: weft.all_gather
  // CHECK: %[[L:.*]] = weft.reduce_logsumexp %arg0 axes [2] keep_dims : tensor<4x8x16xf32> -> tensor<4x8x1xf32>
  // CHECK: %[[M:.*]] = weft.all_reduce max %[[L]] over @mesh ["tp"] codec none : tensor<4x8x1xf32>
  // CHECK: %[[D:.*]] = weft.sub %[[L]], %[[M]] : tensor<4x8x1xf32>
  // CHECK: %[[E:.*]] = weft.exp %[[D]] : tensor<4x8x1xf32>
  // CHECK: %[[S:.*]] = weft.all_reduce sum %[[E]] over @mesh ["tp"] codec none : tensor<4x8x1xf32>
  // CHECK: %[[LOG:.*]] = weft.log %[[S]] : tensor<4x8x1xf32>
  // CHECK: %[[LSE:.*]] = weft.add %[[LOG]], %[[M]] : tensor<4x8x1xf32>
  // CHECK: weft.sub %arg0, %[[LSE]] : (tensor<4x8x16xf32>, tensor<4x8x1xf32>) -> tensor<4x8x16xf32>
  // CHECK: weft.iota dim 2 : tensor<4x8x16xi64>
  // CHECK: weft.linear {{.*}} transpose_weight : (tensor<4x8x16xf32>, tensor<16x16xf32>) -> tensor<4x8x16xf32>
  // CHECK-NOT: weft.all_gather
  %lse = weft.reduce_logsumexp %logits axes [2] keep_dims : tensor<4x8x32xf32> -> tensor<4x8x1xf32>
  %shifted = weft.sub %logits, %lse : (tensor<4x8x32xf32>, tensor<4x8x1xf32>) -> tensor<4x8x32xf32>
  %p = weft.exp %shifted : tensor<4x8x32xf32>
  %iota = weft.iota dim 2 : tensor<4x8x32xi64>
  %col = weft.reshape %labels : tensor<4x8xi64> -> tensor<4x8x1xi64>
  %hit = weft.compare eq, %col, %iota : (tensor<4x8x1xi64>, tensor<4x8x32xi64>) -> tensor<4x8x32xi1>
  %hot = weft.cast %hit : tensor<4x8x32xi1> -> tensor<4x8x32xf32>
  %d = weft.sub %p, %hot : tensor<4x8x32xf32>
  %dx = weft.linear %d, %w transpose_weight : (tensor<4x8x32xf32>, tensor<16x32xf32>) -> tensor<4x8x16xf32>
  return %dx : tensor<4x8x16xf32>
}

// -----

// Without keep_dims the combined value loses the reduced dimension; other
// dimensions keep their split. A reduction over dimensions that are not
// split is the op itself, on each rank's block.
weft.mesh @mesh(dp = 2, tp = 2)
// CHECK-LABEL: func.func @logsumexp_dropped
func.func @logsumexp_dropped(%x: tensor<4x8x32xf32> {weft.sharding = #weft.sharding<@mesh, [[dp], [], [tp]]>}) -> (tensor<4x8xf32>, tensor<4x32xf32>) {
  // CHECK: %[[L:.*]] = weft.reduce_logsumexp %arg0 axes [2] keep_dims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  // CHECK: weft.all_reduce max %[[L]] over @mesh ["tp"]
  // CHECK: %[[LSE:.*]] = weft.add
  // CHECK: weft.reshape %[[LSE]] : tensor<2x8x1xf32> -> tensor<2x8xf32>
  // CHECK-NOT: weft.all_gather
  // CHECK: weft.reduce_logsumexp %arg0 axes [1] : tensor<2x8x16xf32> -> tensor<2x16xf32>
  %a = weft.reduce_logsumexp %x axes [2] : tensor<4x8x32xf32> -> tensor<4x8xf32>
  %b = weft.reduce_logsumexp %x axes [1] : tensor<4x8x32xf32> -> tensor<4x32xf32>
  return %a, %b : tensor<4x8xf32>, tensor<4x32xf32>
}
