// RUN: weft-opt %s -weft-unfuse-projections -weft-apply-plan="tp=2" | FileCheck %s
// RUN: weft-opt %s -weft-partition-with-plan="tp=2" | FileCheck %s --check-prefix=RANK

// DeepSeek's multi-head latent attention (transformers' DeepseekV3Attention
// as test/raising/corpus.py writes it, imported): q from the hidden states;
// kv_a down to a latent of 16 and a rotary key of 4 that all heads share
// (broadcast over the heads); the latent normalized and projected up by kv_b
// to each head's key part and value. Megatron-Core's split: q, kv_b and the
// MLP's up and gate column-parallel, o and the MLP's down row-parallel, kv_a
// and its norm whole. Before, kv_a was split over its columns: the latent
// and the rotary tables gathered, and the rotary queries re-laid.

// CHECK-LABEL: weft.layer "blocks"
// CHECK: weft.parameter "q.weight" {weft.sharding = [#weft.sharding<@mesh, {{\[}}[], [tp]]>]}
// CHECK: weft.parameter "kv_norm.weight" : tensor<16xf32>
// CHECK: weft.parameter "kv_b.weight" {weft.sharding = [#weft.sharding<@mesh, {{\[}}[], [tp]]>]}
// CHECK: weft.parameter "o.weight" {weft.sharding = [#weft.sharding<@mesh, {{\[}}[tp], []]>]}
// CHECK: weft.parameter "kv_a.weight.part0" : tensor<32x16xf32>
// CHECK: weft.parameter "kv_a.weight.part1" : tensor<32x4xf32>

// The layer communicates what Megatron's does: the all-reduces after o and
// the MLP's down projection, nothing for the latent or the rotary key.
// RANK-LABEL: weft.layer "blocks"
// RANK-NOT: weft.all_gather
// RANK-NOT: weft.all_to_all
// RANK: weft.all_reduce
// RANK-NOT: weft.all_gather
// RANK-NOT: weft.all_to_all
// RANK: weft.all_reduce
// RANK-NOT: weft.all_
// RANK: weft.yield
module {
  func.func @main(%arg0: tensor<2x8xi64> {onnx.name = "input_ids"}) -> tensor<2x8x64xf32> {
    %0 = weft.constant dense<[[0, 1, 2, 3, 4, 5, 6, 7]]> : tensor<1x8xi64>
    %1 = weft.parameter "embed.weight" : tensor<64x32xf32>
    %2 = weft.parameter "pos.weight" : tensor<16x32xf32>
    %3 = weft.parameter "norm.weight" : tensor<32xf32>
    %4 = weft.parameter "cos" : tensor<8x4xf32>
    %5 = weft.parameter "sin" : tensor<8x4xf32>
    %6 = weft.parameter "head.weight" : tensor<32x64xf32>
    %7 = weft.embedding %1[%arg0] : (tensor<64x32xf32>, tensor<2x8xi64>) -> tensor<2x8x32xf32>
    %8 = weft.embedding %2[%0] : (tensor<16x32xf32>, tensor<1x8xi64>) -> tensor<1x8x32xf32>
    %9 = weft.add %7, %8 : (tensor<2x8x32xf32>, tensor<1x8x32xf32>) -> tensor<2x8x32xf32>
    %10 = weft.layer "blocks"(%9, %4, %5) index 0 : (tensor<2x8x32xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<2x8x32xf32> {
    ^bb0(%arg1: tensor<2x8x32xf32>, %arg2: tensor<8x4xf32>, %arg3: tensor<8x4xf32>):
      %14 = weft.parameter "blocks.0.norm1.weight" : tensor<32xf32>
      %15 = weft.parameter "q.weight" : tensor<32x48xf32>
      %16 = weft.parameter "kv_a.weight" : tensor<32x20xf32>
      %17 = weft.parameter "kv_norm.weight" : tensor<16xf32>
      %18 = weft.parameter "kv_b.weight" : tensor<16x56xf32>
      %19 = weft.parameter "o.weight" : tensor<24x32xf32>
      %20 = weft.parameter "blocks.0.norm2.weight" : tensor<32xf32>
      %21 = weft.parameter "gate.weight" : tensor<32x128xf32>
      %22 = weft.parameter "up.weight" : tensor<32x128xf32>
      %23 = weft.parameter "down.weight" : tensor<128x32xf32>
      %24 = weft.rms_norm %arg1, %14 axis 2 epsilon 9.99999974E-6 : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
      %25 = weft.linear %24, %15 : (tensor<2x8x32xf32>, tensor<32x48xf32>) -> tensor<2x8x48xf32>
      %26 = weft.reshape %25 : tensor<2x8x48xf32> -> tensor<2x8x4x12xf32>
      %27 = weft.transpose %26 permutation [0, 2, 1, 3] : tensor<2x8x4x12xf32> -> tensor<2x4x8x12xf32>
      %28:2 = weft.split %27 axis 3 sizes [8, 4] : tensor<2x4x8x12xf32> -> (tensor<2x4x8x8xf32>, tensor<2x4x8x4xf32>)
      %29 = weft.linear %24, %16 : (tensor<2x8x32xf32>, tensor<32x20xf32>) -> tensor<2x8x20xf32>
      %30:2 = weft.split %29 axis 2 sizes [16, 4] : tensor<2x8x20xf32> -> (tensor<2x8x16xf32>, tensor<2x8x4xf32>)
      %31 = weft.rms_norm %30#0, %17 axis 2 epsilon 9.99999974E-6 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
      %32 = weft.linear %31, %18 : (tensor<2x8x16xf32>, tensor<16x56xf32>) -> tensor<2x8x56xf32>
      %33 = weft.reshape %32 : tensor<2x8x56xf32> -> tensor<2x8x4x14xf32>
      %34 = weft.transpose %33 permutation [0, 2, 1, 3] : tensor<2x8x4x14xf32> -> tensor<2x4x8x14xf32>
      %35:2 = weft.split %34 axis 3 sizes [8, 6] : tensor<2x4x8x14xf32> -> (tensor<2x4x8x8xf32>, tensor<2x4x8x6xf32>)
      %36 = weft.reshape %30#1 : tensor<2x8x4xf32> -> tensor<2x1x8x4xf32>
      %37 = weft.mul %28#1, %arg2 : (tensor<2x4x8x4xf32>, tensor<8x4xf32>) -> tensor<2x4x8x4xf32>
      %38 = weft.slice %28#1 starts [0, 0, 0, 0] limits [2, 4, 8, 2] : tensor<2x4x8x4xf32> -> tensor<2x4x8x2xf32>
      %39 = weft.slice %28#1 starts [0, 0, 0, 2] limits [2, 4, 8, 4] : tensor<2x4x8x4xf32> -> tensor<2x4x8x2xf32>
      %40 = weft.neg %39 : tensor<2x4x8x2xf32>
      %41 = weft.concat %40, %38 axis 3 : (tensor<2x4x8x2xf32>, tensor<2x4x8x2xf32>) -> tensor<2x4x8x4xf32>
      %42 = weft.mul %41, %arg3 : (tensor<2x4x8x4xf32>, tensor<8x4xf32>) -> tensor<2x4x8x4xf32>
      %43 = weft.add %37, %42 : tensor<2x4x8x4xf32>
      %44 = weft.mul %36, %arg2 : (tensor<2x1x8x4xf32>, tensor<8x4xf32>) -> tensor<2x1x8x4xf32>
      %45 = weft.slice %36 starts [0, 0, 0, 0] limits [2, 1, 8, 2] : tensor<2x1x8x4xf32> -> tensor<2x1x8x2xf32>
      %46 = weft.slice %36 starts [0, 0, 0, 2] limits [2, 1, 8, 4] : tensor<2x1x8x4xf32> -> tensor<2x1x8x2xf32>
      %47 = weft.neg %46 : tensor<2x1x8x2xf32>
      %48 = weft.concat %47, %45 axis 3 : (tensor<2x1x8x2xf32>, tensor<2x1x8x2xf32>) -> tensor<2x1x8x4xf32>
      %49 = weft.mul %48, %arg3 : (tensor<2x1x8x4xf32>, tensor<8x4xf32>) -> tensor<2x1x8x4xf32>
      %50 = weft.add %44, %49 : tensor<2x1x8x4xf32>
      %51 = weft.broadcast_to %50 : tensor<2x1x8x4xf32> -> tensor<2x4x8x4xf32>
      %52 = weft.concat %28#0, %43 axis 3 : (tensor<2x4x8x8xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x12xf32>
      %53 = weft.concat %35#0, %51 axis 3 : (tensor<2x4x8x8xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x8x12xf32>
      %54 = weft.attention %52, %53, %35#1 scale 0.288675129 causal : (tensor<2x4x8x12xf32>, tensor<2x4x8x12xf32>, tensor<2x4x8x6xf32>) -> tensor<2x4x8x6xf32>
      %55 = weft.transpose %54 permutation [0, 2, 1, 3] : tensor<2x4x8x6xf32> -> tensor<2x8x4x6xf32>
      %56 = weft.reshape %55 : tensor<2x8x4x6xf32> -> tensor<2x8x24xf32>
      %57 = weft.linear %56, %19 : (tensor<2x8x24xf32>, tensor<24x32xf32>) -> tensor<2x8x32xf32>
      %58 = weft.add %arg1, %57 : tensor<2x8x32xf32>
      %59 = weft.rms_norm %58, %20 axis 2 epsilon 9.99999974E-6 : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
      %60 = weft.linear %59, %21 : (tensor<2x8x32xf32>, tensor<32x128xf32>) -> tensor<2x8x128xf32>
      %61 = weft.silu %60 : tensor<2x8x128xf32>
      %62 = weft.linear %59, %22 : (tensor<2x8x32xf32>, tensor<32x128xf32>) -> tensor<2x8x128xf32>
      %63 = weft.mul %61, %62 : tensor<2x8x128xf32>
      %64 = weft.linear %63, %23 : (tensor<2x8x128xf32>, tensor<128x32xf32>) -> tensor<2x8x32xf32>
      %65 = weft.add %58, %64 : tensor<2x8x32xf32>
      weft.yield %65 : tensor<2x8x32xf32>
    }
    %12 = weft.rms_norm %10, %3 axis 2 epsilon 9.99999974E-6 : (tensor<2x8x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
    %13 = weft.linear %12, %6 : (tensor<2x8x32xf32>, tensor<32x64xf32>) -> tensor<2x8x64xf32>
    return %13 : tensor<2x8x64xf32>
  }
}
