// RUN: weft-opt %s -split-input-file -weft-fuse-elementwise | FileCheck %s

// A GEMM whose only user is a tanh GELU: one cuBLASLt call with the GELU in
// its epilogue. Then add (of a broadcast vector), exp and mul: a chain of
// single-use elementwise ops of one shape, one kernel reading the three
// values from outside in the order it reads them.
// CHECK-LABEL: func.func @epilogue_and_chain
// CHECK-SAME: (%[[X:.*]]: tensor<4x64xf32>, %[[W:.*]]: tensor<64x64xf32>, %[[B:.*]]: tensor<64xf32>, %[[C:.*]]: tensor<64xf32>, %[[Z:.*]]: tensor<4x64xf32>)
// CHECK: %[[H:.*]] = weft.fusion epilogue(%[[X]], %[[W]], %[[B]])
// CHECK-NEXT: ^bb0(%[[A0:.*]]: tensor<4x64xf32>, %[[A1:.*]]: tensor<64x64xf32>, %[[A2:.*]]: tensor<64xf32>):
// CHECK-NEXT: %[[L:.*]] = weft.linear %[[A0]], %[[A1]], %[[A2]]
// CHECK-NEXT: %[[G:.*]] = weft.gelu %[[L]] approximation tanh
// CHECK-NEXT: weft.yield %[[G]]
// CHECK: %[[K:.*]] = weft.fusion elementwise(%[[H]], %[[C]], %[[Z]])
// CHECK: weft.add
// CHECK-NEXT: weft.exp
// CHECK-NEXT: weft.mul
// CHECK-NEXT: weft.yield
// CHECK: return %[[K]]
func.func @epilogue_and_chain(%x: tensor<4x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>,
                %c: tensor<64xf32>, %z: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = weft.linear %x, %w, %b : (tensor<4x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %1 = weft.gelu %0 approximation tanh : tensor<4x64xf32>
  %2 = weft.add %1, %c : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %3 = weft.exp %2 : tensor<4x64xf32>
  %4 = weft.mul %3, %z : tensor<4x64xf32>
  return %4 : tensor<4x64xf32>
}

// -----

// What stays apart: an exact (erf) GELU is not a cuBLASLt epilogue (it is
// computed in a generated kernel with what follows); a value read twice is
// stored, and ends its chain; a reduction is not elementwise.
// CHECK-LABEL: func.func @apart
// CHECK: %[[L:.*]] = weft.linear
// CHECK-NEXT: %[[E:.*]] = weft.fusion elementwise(%[[L]])
// CHECK-NEXT: ^bb0
// CHECK-NEXT: weft.gelu %{{.*}} : tensor
// CHECK-NEXT: weft.exp
// CHECK-NEXT: weft.yield
// CHECK: %[[S:.*]] = weft.fusion elementwise(%[[E]])
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4x64xf32>)
// CHECK-NEXT: weft.add %[[A]], %[[A]]
// CHECK-NEXT: weft.neg
// CHECK-NEXT: weft.sqrt
// CHECK-NEXT: weft.yield
// CHECK: weft.reduce_sum %[[S]]
func.func @apart(%x: tensor<4x64xf32>, %w: tensor<64x64xf32>) -> (tensor<4x64xf32>, tensor<4xf32>) {
  %0 = weft.linear %x, %w : (tensor<4x64xf32>, tensor<64x64xf32>) -> tensor<4x64xf32>
  %1 = weft.gelu %0 approximation erf : tensor<4x64xf32>
  %2 = weft.exp %1 : tensor<4x64xf32>
  %3 = weft.add %2, %2 : tensor<4x64xf32>
  %4 = weft.neg %3 : tensor<4x64xf32>
  %5 = weft.sqrt %4 : tensor<4x64xf32>
  %6 = weft.reduce_sum %5 axes [1] : tensor<4x64xf32> -> tensor<4xf32>
  return %5, %6 : tensor<4x64xf32>, tensor<4xf32>
}

// -----

// A chain whose last op computes a larger (broadcast) shape: the smaller op
// is not computed inside it (its kernel would compute each element many
// times).
// CHECK-LABEL: func.func @shapes
// CHECK: weft.exp
// CHECK-NEXT: weft.add
// CHECK-NOT: weft.fusion
func.func @shapes(%v: tensor<64xf32>, %x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = weft.exp %v : tensor<64xf32>
  %1 = weft.add %x, %0 : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  return %1 : tensor<4x64xf32>
}

// -----

// Fusions stay inside their layer: the layer is the unit of pipeline stages.
// CHECK-LABEL: func.func @in_layer
// CHECK: weft.layer
// CHECK: weft.fusion elementwise
// CHECK: weft.neg
// CHECK: weft.tanh
// CHECK: weft.yield
// CHECK: weft.yield
// CHECK-NEXT: }
// CHECK-NEXT: weft.exp
func.func @in_layer(%x: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = weft.layer "block"(%x) index 0 : (tensor<4x64xf32>) -> tensor<4x64xf32> {
  ^bb0(%a: tensor<4x64xf32>):
    %1 = weft.neg %a : tensor<4x64xf32>
    %2 = weft.tanh %1 : tensor<4x64xf32>
    weft.yield %2 : tensor<4x64xf32>
  }
  %3 = weft.exp %0 : tensor<4x64xf32>
  return %3 : tensor<4x64xf32>
}

// -----

// Chains that read chains: each residual sum is read twice (it ends its
// chain) and the next chain reads it. Every chain reads the fusion that
// replaced the one before (a regression test: the chains were once found
// while fusing, and a new fusion at an erased op's address joined a chain).
// CHECK-LABEL: func.func @chains_of_chains
// CHECK: %[[F0:.*]] = weft.fusion elementwise(%{{.*}}, %{{.*}})
// CHECK: %[[F1:.*]] = weft.fusion elementwise(%[[F0]])
// CHECK: %[[F2:.*]] = weft.fusion elementwise(%[[F1]])
// CHECK: %[[F3:.*]] = weft.fusion elementwise(%[[F2]])
// CHECK: return %[[F3]]
func.func @chains_of_chains(%x: tensor<4x64xf32>, %y: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = weft.exp %x : tensor<4x64xf32>
  %1 = weft.add %0, %y : tensor<4x64xf32>
  %2 = weft.neg %1 : tensor<4x64xf32>
  %3 = weft.add %2, %1 : tensor<4x64xf32>
  %4 = weft.neg %3 : tensor<4x64xf32>
  %5 = weft.add %4, %3 : tensor<4x64xf32>
  %6 = weft.neg %5 : tensor<4x64xf32>
  %7 = weft.add %6, %5 : tensor<4x64xf32>
  return %7 : tensor<4x64xf32>
}
