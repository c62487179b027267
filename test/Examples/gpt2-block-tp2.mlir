// RUN: weft-opt %weft_test_dir/../examples/gpt2_block_tp2.mlir -weft-canonicalize | FileCheck %s

// The README's bundled example stays valid, and canonicalization keeps the
// Megatron structure (one all_reduce per half-block) while dropping what the
// exporter left behind: the reshape pair collapses and `+ 0` disappears.

// CHECK-LABEL: func.func @gpt2_block
// CHECK: weft.layer "gpt2_block"
// CHECK-COUNT-3: weft.reshape %{{.*}} : tensor<2x128x384xf32> -> tensor<2x128x6x64xf32>
// CHECK: weft.attention
// CHECK: weft.reshape %{{.*}} : tensor<2x128x6x64xf32> -> tensor<2x128x384xf32>
// CHECK-NOT: weft.reshape
// CHECK: weft.all_reduce sum %{{.*}} over @world ["tp"]
// CHECK: weft.gelu
// CHECK: weft.all_reduce sum %{{.*}} over @world ["tp"]
// CHECK-NOT: weft.all_reduce
// CHECK-NOT: weft.constant
// CHECK: weft.yield
