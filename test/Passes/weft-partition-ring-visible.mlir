// RUN: weft-opt %s -split-input-file -weft-apply-plan="cp=4" -weft-propagate-sharding -weft-partition | FileCheck %s
// RUN: weft-opt %S/Inputs/visible-pairs-errors.mlir -split-input-file -verify-diagnostics

// Each step of a causal ring carries the (query, key) pairs per batch and
// head that the most loaded rank's positions leave visible at that step
// (`visible`), which its cost counts: the layout's chunks, the step and the
// window decide them, not a share of the block.

// 32 positions on cp=4 with a window of 4 keys: contiguous chunks of 8.
// Step 0, each rank's own chunk: 4 x 5 / 2 + (8 - 4) x 4 = 26 pairs; step 1,
// the previous rank's chunk: the 4 x 3 / 2 = 6 pairs the window reaches.
// CHECK-LABEL: func.func @contiguous
// CHECK: weft.attention_block {{.*}} causal window 4 visible 26
// CHECK: weft.attention_block {{.*}} causal window 4 visible 6
// CHECK-NOT: weft.attention_block
func.func @contiguous(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 4 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}

// -----

// A window of 5: the load-balanced chunks of 4 (rank r holds chunks r and
// 7 - r). Step 0: 2 x 10 on each chunk's diagonal and the 10 its back chunk
// sees of rank 3's front chunk (7 - r = 4 next to chunk 3); steps 1 and 3
// the 10 pairs one chunk's window reaches into the next; step 2 is skipped.
// CHECK-LABEL: func.func @zigzag_window
// CHECK: weft.attention_block {{.*}} causal window 5 visible 30
// CHECK: weft.attention_block {{.*}} causal window 5 visible 10
// CHECK: weft.attention_block {{.*}} causal window 5 visible 10
// CHECK-NOT: weft.attention_block
func.func @zigzag_window(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 5 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}

// -----

// Causal without a window: the load-balanced layout gives every rank half
// of each later step's 8 x 8 block (32 pairs), and step 0 the two diagonals'
// 2 x 10 and the 16 its back chunk sees of its front one.
// CHECK-LABEL: func.func @zigzag_causal
// CHECK: weft.attention_block {{.*}} causal visible 36
// CHECK: weft.attention_block {{.*}} causal visible 32
// CHECK: weft.attention_block {{.*}} causal visible 32
// CHECK: weft.attention_block {{.*}} causal visible 32
func.func @zigzag_causal(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}

// -----

// Without a causal mask every pair counts: no `visible`.
// CHECK-LABEL: func.func @full
// CHECK-NOT: visible
func.func @full(%q: tensor<1x2x32x4xf32>, %k: tensor<1x2x32x4xf32>, %v: tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 : (tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>, tensor<1x2x32x4xf32>) -> tensor<1x2x32x4xf32>
  return %0 : tensor<1x2x32x4xf32>
}
