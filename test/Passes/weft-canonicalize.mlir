// RUN: weft-opt %s -split-input-file -weft-canonicalize | FileCheck %s

// CHECK-LABEL: func.func @reshape_of_reshape
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>)
// CHECK-NEXT: %[[R:.*]] = weft.reshape %[[X]] : tensor<2x8x16xf32> -> tensor<16x16xf32>
// CHECK-NEXT: return %[[R]]
func.func @reshape_of_reshape(%x: tensor<2x8x16xf32>) -> tensor<16x16xf32> {
  %0 = weft.reshape %x : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %1 = weft.reshape %0 : tensor<2x8x4x4xf32> -> tensor<16x16xf32>
  return %1 : tensor<16x16xf32>
}

// -----

// CHECK-LABEL: func.func @reshape_round_trip
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x16xf32>)
// CHECK-NEXT: return %[[X]]
func.func @reshape_round_trip(%x: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  %0 = weft.reshape %x : tensor<2x8x16xf32> -> tensor<16x16xf32>
  %1 = weft.reshape %0 : tensor<16x16xf32> -> tensor<2x8x16xf32>
  return %1 : tensor<2x8x16xf32>
}

// -----

// The head split and merge around attention cancel out.
// CHECK-LABEL: func.func @transpose_of_transpose_identity
// CHECK-SAME: (%[[X:.*]]: tensor<2x8x4x4xf32>)
// CHECK-NEXT: return %[[X]]
func.func @transpose_of_transpose_identity(%x: tensor<2x8x4x4xf32>) -> tensor<2x8x4x4xf32> {
  %0 = weft.transpose %x permutation [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %1 = weft.transpose %0 permutation [0, 2, 1, 3] : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
  return %1 : tensor<2x8x4x4xf32>
}

// -----

// CHECK-LABEL: func.func @transpose_of_transpose_composes
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x5xf32>)
// CHECK-NEXT: %[[T:.*]] = weft.transpose %[[X]] permutation [2, 1, 0] : tensor<2x3x5xf32> -> tensor<5x3x2xf32>
// CHECK-NEXT: return %[[T]]
func.func @transpose_of_transpose_composes(%x: tensor<2x3x5xf32>) -> tensor<5x3x2xf32> {
  %0 = weft.transpose %x permutation [1, 0, 2] : tensor<2x3x5xf32> -> tensor<3x2x5xf32>
  %1 = weft.transpose %0 permutation [2, 0, 1] : tensor<3x2x5xf32> -> tensor<5x3x2xf32>
  return %1 : tensor<5x3x2xf32>
}

// -----

// CHECK-LABEL: func.func @identity_transpose
// CHECK-NEXT: return %arg0
func.func @identity_transpose(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = weft.transpose %x permutation [0, 1] : tensor<2x3xf32> -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// CHECK-LABEL: func.func @arithmetic_identities
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NOT: weft.
// CHECK: return %[[X]], %[[X]], %[[X]], %[[X]], %[[X]]
func.func @arithmetic_identities(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %zero = weft.constant dense<0.0> : tensor<8xf32>
  %one = weft.constant dense<1.0> : tensor<4x8xf32>
  %0 = weft.add %x, %zero : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = weft.add %zero, %x : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = weft.sub %x, %zero : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = weft.mul %one, %x : tensor<4x8xf32>
  %4 = weft.div %x, %one : tensor<4x8xf32>
  return %0, %1, %2, %3, %4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Integer identities fold too.
// CHECK-LABEL: func.func @integer_identity
// CHECK-NEXT: return %arg0
func.func @integer_identity(%x: tensor<4xi64>) -> tensor<4xi64> {
  %zero = weft.constant dense<0> : tensor<4xi64>
  %0 = weft.add %x, %zero : tensor<4xi64>
  return %0 : tensor<4xi64>
}

// -----

// An identity whose broadcast grows x is not an identity: the add stays.
// CHECK-LABEL: func.func @broadcasting_zero_stays
// CHECK: weft.add
func.func @broadcasting_zero_stays(%x: tensor<8xf32>) -> tensor<4x8xf32> {
  %zero = weft.constant dense<0.0> : tensor<4x8xf32>
  %0 = weft.add %x, %zero : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0 : tensor<4x8xf32>
}

// -----

// Non-identities stay: x - 0 folds, 0 - x does not; x * 0 is not x.
// CHECK-LABEL: func.func @not_identities
// CHECK: weft.sub
// CHECK: weft.mul
// CHECK: weft.div
func.func @not_identities(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %zero = weft.constant dense<0.0> : tensor<4xf32>
  %one = weft.constant dense<1.0> : tensor<4xf32>
  %0 = weft.sub %zero, %x : tensor<4xf32>
  %1 = weft.mul %x, %zero : tensor<4xf32>
  %2 = weft.div %one, %x : tensor<4xf32>
  return %0, %1, %2 : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @same_type_no_ops
// CHECK-NEXT: return %arg0, %arg0, %arg0, %arg0
func.func @same_type_no_ops(%x: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = weft.cast %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %1 = weft.slice %x starts [0, 0] limits [4, 8] : tensor<4x8xf32> -> tensor<4x8xf32>
  %2 = weft.broadcast_to %x : tensor<4x8xf32> -> tensor<4x8xf32>
  %3 = weft.concat %x axis 1 : (tensor<4x8xf32>) -> tensor<4x8xf32>
  return %0, %1, %2, %3 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Collectives are kept even when their results are unused; pure ops are not.
weft.mesh @world(tp = 2)
// CHECK-LABEL: func.func @collectives_are_kept
// CHECK-NOT: weft.exp
// CHECK: weft.all_reduce
func.func @collectives_are_kept(%x: tensor<4xf32>) {
  %0 = weft.exp %x : tensor<4xf32>
  %1 = weft.all_reduce sum %x over @world ["tp"] : tensor<4xf32>
  return
}

// -----

// Folding reaches inside layers.
// CHECK-LABEL: func.func @inside_layer
// CHECK: weft.layer
// CHECK-NEXT: ^bb0(%[[A:.*]]: tensor<4xf32>):
// CHECK-NEXT: weft.yield %[[A]]
func.func @inside_layer(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = weft.layer "block"(%x) index 0 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %b = weft.reshape %a : tensor<4xf32> -> tensor<2x2xf32>
    %c = weft.reshape %b : tensor<2x2xf32> -> tensor<4xf32>
    weft.yield %c : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

// onnxscript's key transposition ([b, h, s, d] -> [b*h, s, d], a static
// Transpose, and back to [b, h, d, s]) is one transpose of the key.
// CHECK-LABEL: func.func @merged_leading_transpose
// CHECK-SAME: (%[[K:.*]]: tensor<2x4x8x16xf32>)
// CHECK-NEXT: %[[T:.*]] = weft.transpose %[[K]] permutation [0, 1, 3, 2] : tensor<2x4x8x16xf32> -> tensor<2x4x16x8xf32>
// CHECK-NEXT: return %[[T]]
func.func @merged_leading_transpose(%k: tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32> {
  %0 = weft.reshape %k : tensor<2x4x8x16xf32> -> tensor<8x8x16xf32>
  %1 = weft.transpose %0 permutation [0, 2, 1] : tensor<8x8x16xf32> -> tensor<8x16x8xf32>
  %2 = weft.reshape %1 : tensor<8x16x8xf32> -> tensor<2x4x16x8xf32>
  return %2 : tensor<2x4x16x8xf32>
}

// -----

// Splitting the merged dimension otherwise ([8] into [4, 2], not [2, 4]) is
// not the inverse: the three ops stay.
// CHECK-LABEL: func.func @merged_leading_transpose_other_split
// CHECK-NEXT: weft.reshape
// CHECK-NEXT: weft.transpose
// CHECK-NEXT: weft.reshape
func.func @merged_leading_transpose_other_split(%k: tensor<2x4x8x16xf32>) -> tensor<4x2x16x8xf32> {
  %0 = weft.reshape %k : tensor<2x4x8x16xf32> -> tensor<8x8x16xf32>
  %1 = weft.transpose %0 permutation [0, 2, 1] : tensor<8x8x16xf32> -> tensor<8x16x8xf32>
  %2 = weft.reshape %1 : tensor<8x16x8xf32> -> tensor<4x2x16x8xf32>
  return %2 : tensor<4x2x16x8xf32>
}

// -----

// A transpose that moves the merged dimension is not one of x's either.
// CHECK-LABEL: func.func @merged_dimension_moved
// CHECK-NEXT: weft.reshape
// CHECK-NEXT: weft.transpose
// CHECK-NEXT: weft.reshape
func.func @merged_dimension_moved(%k: tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32> {
  %0 = weft.reshape %k : tensor<2x4x8x8xf32> -> tensor<8x8x8xf32>
  %1 = weft.transpose %0 permutation [1, 0, 2] : tensor<8x8x8xf32> -> tensor<8x8x8xf32>
  %2 = weft.reshape %1 : tensor<8x8x8xf32> -> tensor<2x4x8x8xf32>
  return %2 : tensor<2x4x8x8xf32>
}

// -----

// nn.MultiheadAttention's output projection: the attention's [s, b, heads,
// d] is flattened to [s * b, h] rows, projected and unflattened. The rows
// are kept apart instead: [s, b, h] in and out, so data parallelism's split
// of b survives.
// CHECK-LABEL: func.func @flattened_linear
// CHECK-SAME: (%[[X:.*]]: tensor<8x2x4x8xf32>, %[[W:.*]]: tensor<32x32xf32>, %[[B:.*]]: tensor<32xf32>)
// CHECK-NEXT: %[[R:.*]] = weft.reshape %[[X]] : tensor<8x2x4x8xf32> -> tensor<8x2x32xf32>
// CHECK-NEXT: %[[L:.*]] = weft.linear %[[R]], %[[W]], %[[B]] transpose_weight : (tensor<8x2x32xf32>, tensor<32x32xf32>, tensor<32xf32>) -> tensor<8x2x32xf32>
// CHECK-NEXT: return %[[L]]
func.func @flattened_linear(%x: tensor<8x2x4x8xf32>, %w: tensor<32x32xf32>, %b: tensor<32xf32>) -> tensor<8x2x32xf32> {
  %0 = weft.reshape %x : tensor<8x2x4x8xf32> -> tensor<16x32xf32>
  %1 = weft.linear %0, %w, %b transpose_weight : (tensor<16x32xf32>, tensor<32x32xf32>, tensor<32xf32>) -> tensor<16x32xf32>
  %2 = weft.reshape %1 : tensor<16x32xf32> -> tensor<8x2x32xf32>
  return %2 : tensor<8x2x32xf32>
}

// -----

// Hugging Face's Conv1D (GPT-2): x.view(-1, h), addmm, view back.
// CHECK-LABEL: func.func @conv1d_rows
// CHECK-NEXT: %[[L:.*]] = weft.linear %arg0, %arg1 : (tensor<2x8x32xf32>, tensor<32x96xf32>) -> tensor<2x8x96xf32>
// CHECK-NEXT: return %[[L]]
func.func @conv1d_rows(%x: tensor<2x8x32xf32>, %w: tensor<32x96xf32>) -> tensor<2x8x96xf32> {
  %0 = weft.reshape %x : tensor<2x8x32xf32> -> tensor<16x32xf32>
  %1 = weft.linear %0, %w : (tensor<16x32xf32>, tensor<32x96xf32>) -> tensor<16x96xf32>
  %2 = weft.reshape %1 : tensor<16x96xf32> -> tensor<2x8x96xf32>
  return %2 : tensor<2x8x96xf32>
}

// -----

// The flat result read elsewhere too: kept.
// CHECK-LABEL: func.func @flattened_linear_shared
// CHECK-NEXT: weft.reshape
// CHECK-NEXT: weft.linear
// CHECK-NEXT: weft.reshape
func.func @flattened_linear_shared(%x: tensor<2x8x32xf32>, %w: tensor<32x96xf32>) -> (tensor<2x8x96xf32>, tensor<16x96xf32>) {
  %0 = weft.reshape %x : tensor<2x8x32xf32> -> tensor<16x32xf32>
  %1 = weft.linear %0, %w : (tensor<16x32xf32>, tensor<32x96xf32>) -> tensor<16x96xf32>
  %2 = weft.reshape %1 : tensor<16x96xf32> -> tensor<2x8x96xf32>
  return %2, %1 : tensor<2x8x96xf32>, tensor<16x96xf32>
}
