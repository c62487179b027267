// RUN: weft-opt %s -split-input-file -verify-diagnostics -weft-assign-buffers | FileCheck %s

// The CUDA backend's memory plan, worked out by hand (256-byte aligned,
// first fit among the live buffers): the five arguments (1024, 16384, 256,
// 256 and 1024 bytes) from 0 to 18944; the GEMM's result after them; the
// kernel's result at 0, where x, w and b were (the GEMM read them last):
// an arena of 19968 bytes, against 20992 with one buffer per value.
// CHECK-LABEL: func.func @arena
// CHECK-SAME: weft.buffer_offset = 0
// CHECK-SAME: weft.buffer_offset = 1024
// CHECK-SAME: weft.buffer_offset = 17408
// CHECK-SAME: weft.buffer_offset = 17664
// CHECK-SAME: weft.buffer_offset = 17920
// CHECK-SAME: weft.arena_bytes = 19968 : i64, weft.buffers = 7 : i64, weft.unshared_bytes = 20992 : i64
// CHECK: weft.fusion epilogue{{.*}}weft.buffer_offsets = array<i64: 18944>
// CHECK: weft.fusion elementwise{{.*}}weft.buffer_offsets = array<i64: 0>
func.func @arena(%x: tensor<4x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>,
                 %c: tensor<64xf32>, %z: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = weft.fusion epilogue(%x, %w, %b) : (tensor<4x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<4x64xf32> {
  ^bb0(%a0: tensor<4x64xf32>, %a1: tensor<64x64xf32>, %a2: tensor<64xf32>):
    %l = weft.linear %a0, %a1, %a2 : (tensor<4x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
    %g = weft.gelu %l approximation tanh : tensor<4x64xf32>
    weft.yield %g : tensor<4x64xf32>
  }
  %1 = weft.fusion elementwise(%0, %c, %z) : (tensor<4x64xf32>, tensor<64xf32>, tensor<4x64xf32>) -> tensor<4x64xf32> {
  ^bb0(%a0: tensor<4x64xf32>, %a1: tensor<64xf32>, %a2: tensor<4x64xf32>):
    %s = weft.add %a0, %a1 : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
    %e = weft.exp %s : tensor<4x64xf32>
    %m = weft.mul %e, %a2 : tensor<4x64xf32>
    weft.yield %m : tensor<4x64xf32>
  }
  return %1 : tensor<4x64xf32>
}

// -----

// A reshape is a view: no buffer, and it keeps its source alive. A
// collective reads its operand until its wait: the exp, defined before the
// wait, does not take %x's place at 0 and goes after the gather's result
// (at 3328); the add, after the wait, may reuse what is free by then but
// needs 2048 bytes, more than the 1280 below the gather, and goes to 3328.
// A weight whose only user is an all_slice has no buffer: each rank reads
// its shard into the slice's.
weft.mesh @mesh(tp = 2)
// CHECK-LABEL: func.func @views
// CHECK-SAME: weft.buffer_offset = 0
// CHECK-SAME: weft.arena_bytes = 5376 : i64, weft.buffers = 5 : i64, weft.unshared_bytes = 5632 : i64
// CHECK: weft.parameter {{.*}}weft.buffer_offsets = array<i64: -1>
// CHECK: weft.all_slice {{.*}}weft.buffer_offsets = array<i64: 1024>
// CHECK: weft.all_gather {{.*}}weft.buffer_offsets = array<i64: 1280>
// CHECK: weft.exp {{.*}}weft.buffer_offsets = array<i64: 3328>
// CHECK: weft.wait {{.*}}weft.buffer_offsets = array<i64: -1>
// CHECK: weft.reshape {{.*}}weft.buffer_offsets = array<i64: -1>
// CHECK: weft.add {{.*}}weft.buffer_offsets = array<i64: 3328>
func.func @views(%x: tensor<4x64xf32>) -> tensor<512xf32> {
  %p = weft.parameter "w" : tensor<64xf32>
  %s = weft.all_slice %p over @mesh ["tp"] dim 0 : tensor<64xf32> -> tensor<32xf32>
  %g = weft.all_gather %x over @mesh ["tp"] dim 0 : tensor<4x64xf32> -> tensor<8x64xf32>
  %e = weft.exp %s : tensor<32xf32>
  %w = weft.wait %g : tensor<8x64xf32>
  %r = weft.reshape %w : tensor<8x64xf32> -> tensor<512xf32>
  %a = weft.add %r, %r : tensor<512xf32>
  return %a : tensor<512xf32>
}

// -----

func.func @layered(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{-weft-assign-buffers needs a flat function: run -weft-inline-layers first}}
  %0 = weft.layer "block"(%x) index 0 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    weft.yield %a : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}
