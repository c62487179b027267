// RUN: weft-opt %s -split-input-file -weft-mark-layers | FileCheck %s

// Two repetitions of "/layers.N/": each becomes a weft.layer; its own weights
// move inside, the shared constant is copied in, and the residual stream is
// the input and the result.

// CHECK-LABEL: func.func @two_layers
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK: %[[L0:.*]] = weft.layer "layers"(%[[X]]) index 0 : (tensor<2x8xf32>) -> tensor<2x8xf32> {
// CHECK-NEXT: ^bb0(%[[A0:.*]]: tensor<2x8xf32>):
// CHECK-DAG: weft.constant dense<5.000000e-01>
// CHECK-DAG: weft.parameter "layers.0.fc.weight"
// CHECK: weft.linear %[[A0]]
// CHECK: weft.yield
// CHECK: %[[L1:.*]] = weft.layer "layers"(%[[L0]]) index 1
// CHECK: weft.parameter "layers.1.fc.weight"
// CHECK: weft.yield
// CHECK: %[[OUT:.*]] = weft.mul %[[L1]], %{{.*}}
// CHECK: return %[[OUT]]
func.func @two_layers(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %half = weft.constant dense<0.5> : tensor<f32> loc("shared")
  %w0 = weft.parameter "layers.0.fc.weight" : tensor<8x8xf32> loc("layers.0.fc.weight")
  %w1 = weft.parameter "layers.1.fc.weight" : tensor<8x8xf32> loc("layers.1.fc.weight")
  %a = weft.linear %x, %w0 : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("/layers.0/fc/MatMul")
  %b = weft.mul %a, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32> loc("/layers.0/Mul")
  %c = weft.add %x, %b : tensor<2x8xf32> loc("/layers.0/Add")
  %d = weft.linear %c, %w1 : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("/layers.1/fc/MatMul")
  %e = weft.mul %d, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32> loc("/layers.1/Mul")
  %f = weft.add %c, %e : tensor<2x8xf32> loc("/layers.1/Add")
  %out = weft.mul %f, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32> loc("/final/Mul")
  return %out : tensor<2x8xf32>
}

// -----

// One repetition is no repeated structure: nothing changes.
// CHECK-LABEL: func.func @one_layer
// CHECK-NOT: weft.layer
func.func @one_layer(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %a = weft.exp %x : tensor<2x8xf32> loc("/h.0/Exp")
  return %a : tensor<2x8xf32>
}

// -----

// Interleaved repetitions cannot be cut into layers: nothing changes.
// CHECK-LABEL: func.func @interleaved
// CHECK-NOT: weft.layer
func.func @interleaved(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %a = weft.exp %x : tensor<2x8xf32> loc("/h.0/Exp")
  %b = weft.exp %a : tensor<2x8xf32> loc("/h.1/Exp")
  %c = weft.exp %b : tensor<2x8xf32> loc("/h.0/Exp_1")
  %d = weft.exp %c : tensor<2x8xf32> loc("/h.1/Exp_1")
  return %d : tensor<2x8xf32>
}

// -----

// A table both layers read, gathered at the positions inside the first (as
// CSE leaves a rotary table each layer gathered): it reads only the inputs
// and a constant, so it and the gather it reads move before the first layer,
// and the layers still form a chain. The first layer's output, which only the
// second reads, stays the chain.
// CHECK-LABEL: func.func @shared_table
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>, %[[POS:.*]]: tensor<2xi64>)
// CHECK: %[[TABLE:.*]] = weft.constant
// CHECK: %[[ROWS:.*]] = weft.embedding %[[TABLE]][%[[POS]]]
// CHECK: %[[COS:.*]] = weft.reshape %[[ROWS]]
// CHECK: %[[L0:.*]] = weft.layer "layers"(%[[X]], %[[COS]]) index 0
// CHECK: %{{.*}} = weft.layer "layers"(%[[L0]], %[[COS]]) index 1
func.func @shared_table(%x: tensor<2x8xf32>, %pos: tensor<2xi64>) -> tensor<2x8xf32> {
  %w0 = weft.parameter "layers.0.fc.weight" : tensor<8x8xf32> loc("layers.0.fc.weight")
  %w1 = weft.parameter "layers.1.fc.weight" : tensor<8x8xf32> loc("layers.1.fc.weight")
  %a = weft.linear %x, %w0 : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("layers.0.q_proj")
  %table = weft.constant dense<0.5> : tensor<16x8xf32> loc("layers.0.rope_q")
  %rows = weft.embedding %table[%pos] : (tensor<16x8xf32>, tensor<2xi64>) -> tensor<2x8xf32> loc("layers.0.rope_q")
  %cos = weft.reshape %rows : tensor<2x8xf32> -> tensor<2x8xf32> loc("layers.0.rope_q")
  %b = weft.mul %a, %cos : tensor<2x8xf32> loc("layers.0.rope_q")
  %c = weft.add %x, %b : tensor<2x8xf32> loc("layers.0.Add")
  %d = weft.linear %c, %w1 : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32> loc("layers.1.q_proj")
  %e = weft.mul %d, %cos : tensor<2x8xf32> loc("layers.1.rope_q")
  %f = weft.add %c, %e : tensor<2x8xf32> loc("layers.1.Add")
  return %f : tensor<2x8xf32>
}
