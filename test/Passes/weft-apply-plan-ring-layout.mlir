// RUN: weft-opt %s -split-input-file -weft-apply-plan="cp=2" | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-apply-plan="cp=2 load-balance=false" | FileCheck %s --check-prefix=OFF
// RUN: weft-opt %S/Inputs/ring-layout-errors.mlir -split-input-file -weft-apply-plan="cp=8" -verify-diagnostics

// The ring's layout: load-balanced (two mirrored chunks per rank) where a
// causal attention needs it, contiguous where every attention is a causal
// sliding window of at most an eighth of the sequence (each rank past the
// first then does the same work). load-balance=false keeps contiguous
// chunks everywhere.

// A window of 4 over 32 positions: contiguous.
// CHECK-LABEL: func.func @window_eighth
// CHECK-NOT: weft.load_balanced
// CHECK: weft.attention
// OFF-LABEL: func.func @window_eighth
// OFF-NOT: weft.load_balanced
func.func @window_eighth(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 4 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}

// -----

// A window of 5: the contiguous layout's last rank would do more than 1/15
// over the mean; load-balanced.
// CHECK-LABEL: func.func @window_longer
// CHECK-SAME: weft.load_balanced = ["cp"]
// OFF-LABEL: func.func @window_longer
// OFF-NOT: weft.load_balanced
func.func @window_longer(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 5 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}

// -----

// One attention of the two without a window (Gemma 2's global layers):
// load-balanced.
// CHECK-LABEL: func.func @mixed
// CHECK-SAME: weft.load_balanced = ["cp"]
func.func @mixed(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 4 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  %1 = weft.attention %0, %k, %v scale 5.000000e-01 causal : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %1 : tensor<1x2x32x4xf32>
}

// -----

// Without a causal mask: load-balanced, as before.
// CHECK-LABEL: func.func @bidirectional
// CHECK-SAME: weft.load_balanced = ["cp"]
func.func @bidirectional(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}
