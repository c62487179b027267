// RUN: not weft-opt -split-input-file %s 2>&1 | FileCheck %s

// Malformed input gets a diagnostic with file:line:col and weft-opt exits
// non-zero (`not` fails the test on a crash, since a signal is no exit 1).

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 2]]:8: error: custom op 'weft.bogus' is unknown
func.func @unknown_op(%x: tensor<4xf32>) {
  %0 = weft.bogus %x : tensor<4xf32>
  return
}

// -----

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 3]]:24: error: custom op 'weft.all_reduce' expected string or keyword containing one of the following enum values for attribute 'kind' [sum, max, min, avg]
weft.mesh @world(tp = 2)
func.func @bad_enum(%x: tensor<4xf32>) {
  %0 = weft.all_reduce product %x over @world ["tp"] : tensor<4xf32>
  return
}

// -----

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 1]]:20: error: expected '='
weft.mesh @world(tp)

// -----

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 1]]:82: error: expected '['
func.func @bad_sharding(%x: tensor<4xf32> {weft.sharding = #weft.sharding<@world, tp>}) {
  return
}

// -----

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 2]]:17: error: use of undeclared SSA value name
func.func @undefined_value() {
  %0 = weft.exp %nothing : tensor<4xf32>
  return
}

// -----

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 2]]:17: error: use of value '%x' expects different type than prior uses: 'tensor<8xf32>' vs 'tensor<4xf32>'
func.func @type_mismatch(%x: tensor<4xf32>) {
  %0 = weft.exp %x : tensor<8xf32>
  return
}

// -----

// CHECK: weft-opt-malformed.mlir:[[# @LINE + 2]]:35: error: expected non-function type
func.func @truncated(%x: tensor<4xf32>) {
  %0 = weft.add %x, %x : tensor<4x
}
