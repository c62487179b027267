// RUN: weft-opt %s -split-input-file -weft-schedule-collectives | FileCheck %s

// The gather runs on the communication stream while the norm computes; the
// computation waits for it right before the linear, its first reader, and
// every reader reads the wait.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @overlap
// CHECK: %[[G:.*]] = weft.all_gather
// CHECK-NEXT: %[[N:.*]] = weft.rms_norm
// CHECK-NEXT: %[[W:.*]] = weft.wait %[[G]] : tensor<2x8x16xf32>
// CHECK-NEXT: weft.linear %[[W]]
// CHECK-NEXT: weft.add %[[W]], %[[N]]
func.func @overlap(%x: tensor<2x4x16xf32>, %y: tensor<2x8x16xf32>, %s: tensor<16xf32>, %w: tensor<16x16xf32>) -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  %g = weft.all_gather %x over @mesh ["tp"] dim 1 : tensor<2x4x16xf32> -> tensor<2x8x16xf32>
  %n = weft.rms_norm %y, %s axis 2 epsilon 1.0E-5 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %l = weft.linear %g, %w : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  %a = weft.add %g, %n : tensor<2x8x16xf32>
  return %l, %a : tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// -----

// Read only by the return: waited for before it. Never read: waited for
// before the terminator all the same. An all_slice communicates nothing:
// no wait.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @ends
// CHECK: %[[R:.*]] = weft.all_reduce sum
// CHECK-NEXT: %[[U:.*]] = weft.all_reduce sum
// CHECK-NEXT: %[[S:.*]] = weft.all_slice
// CHECK-NEXT: %[[WR:.*]] = weft.wait %[[R]]
// CHECK-NEXT: weft.wait %[[U]]
// CHECK-NEXT: return %[[WR]], %[[S]]
func.func @ends(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<2xf32>) {
  %r = weft.all_reduce sum %x over @mesh ["tp"] : tensor<4xf32>
  %u = weft.all_reduce sum %x over @mesh ["tp"] : tensor<4xf32>
  %s = weft.all_slice %x over @mesh ["tp"] dim 0 : tensor<4xf32> -> tensor<2xf32>
  return %r, %s : tensor<4xf32>, tensor<2xf32>
}

// -----

// Inside a layer, the wait stays in the layer's body.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @layer
// CHECK: weft.layer
// CHECK: weft.all_reduce
// CHECK-NEXT: weft.wait
// CHECK-NEXT: weft.yield
func.func @layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = weft.layer "block"(%x) index 0 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %r = weft.all_reduce sum %a over @mesh ["tp"] : tensor<4xf32>
    weft.yield %r : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

// Weights stored in shards are gathered one weight ahead: the second
// weight's slice and gather move up before the first weight's linear, which
// they overlap; its wait stays before its own linear. The first weight has
// nothing before it to hide behind.
weft.mesh @mesh(gz = 2)
// CHECK-LABEL: func.func @prefetch
// CHECK: %[[G1:.*]] = weft.all_gather %{{.*}} over @mesh ["gz"]
// CHECK-NEXT: weft.parameter "w2"
// CHECK-NEXT: weft.all_slice
// CHECK-NEXT: %[[G2:.*]] = weft.all_gather %{{.*}} over @mesh ["gz"]
// CHECK-NEXT: %[[W1:.*]] = weft.wait %[[G1]]
// CHECK-NEXT: %[[A:.*]] = weft.linear %{{.*}}, %[[W1]]
// CHECK-NEXT: %[[R:.*]] = weft.relu %[[A]]
// CHECK-NEXT: %[[W2:.*]] = weft.wait %[[G2]]
// CHECK-NEXT: weft.linear %[[R]], %[[W2]]
func.func @prefetch(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %p1 = weft.parameter "w1" : tensor<16x16xf32>
  %s1 = weft.all_slice %p1 over @mesh ["gz"] dim 0 : tensor<16x16xf32> -> tensor<8x16xf32>
  %g1 = weft.all_gather %s1 over @mesh ["gz"] dim 0 : tensor<8x16xf32> -> tensor<16x16xf32>
  %a = weft.linear %x, %g1 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r = weft.relu %a : tensor<4x16xf32>
  %p2 = weft.parameter "w2" : tensor<16x16xf32>
  %s2 = weft.all_slice %p2 over @mesh ["gz"] dim 0 : tensor<16x16xf32> -> tensor<8x16xf32>
  %g2 = weft.all_gather %s2 over @mesh ["gz"] dim 0 : tensor<8x16xf32> -> tensor<16x16xf32>
  %b = weft.linear %r, %g2 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  return %b : tensor<4x16xf32>
}

// -----

// A gather of an activation is not moved: only weights are known before
// the step.
weft.mesh @mesh(gz = 2)
// CHECK-LABEL: func.func @activation
// CHECK: weft.linear
// CHECK-NEXT: weft.relu
// CHECK-NEXT: weft.all_gather %{{.*}} over @mesh ["gz"]
func.func @activation(%x: tensor<4x16xf32>, %y: tensor<2x16xf32>) -> tensor<4x16xf32> {
  %p1 = weft.parameter "w1" : tensor<16x16xf32>
  %s1 = weft.all_slice %p1 over @mesh ["gz"] dim 0 : tensor<16x16xf32> -> tensor<8x16xf32>
  %g1 = weft.all_gather %s1 over @mesh ["gz"] dim 0 : tensor<8x16xf32> -> tensor<16x16xf32>
  %a = weft.linear %x, %g1 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %r = weft.relu %y : tensor<2x16xf32>
  %g2 = weft.all_gather %r over @mesh ["gz"] dim 0 : tensor<2x16xf32> -> tensor<4x16xf32>
  %b = weft.add %a, %g2 : tensor<4x16xf32>
  return %b : tensor<4x16xf32>
}
