// RUN: weft-opt %s -weft-compress-collectives="policy=dp:int8,tp:bf16" | FileCheck %s
// RUN: weft-opt %s -weft-compress-collectives="policy=tp:fp8/cp:bf16" | FileCheck %s --check-prefix=FP8
// RUN: weft-opt %s -weft-compress-collectives="policy=dp:topk,tp:int8" | FileCheck %s --check-prefix=TOPK
// RUN: not weft-opt %s -weft-compress-collectives="policy=ep:int8" 2>&1 | FileCheck %s --check-prefix=BADAXIS
// RUN: not weft-opt %s -weft-compress-collectives="policy=pp:topk" 2>&1 | FileCheck %s --check-prefix=PPTOPK
// A pipeline's sends (pp) take their codec in the module's weft.pipeline;
// a policy without pp leaves it out, and a module without stages ignores pp.
// RUN: weft-opt %S/weft-schedule-pipeline.mlir -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-compress-collectives="policy=pp:int8,tp:bf16" | FileCheck %s --check-prefix=PIPE
// RUN: weft-opt %S/weft-schedule-pipeline.mlir -weft-split-stages="stages=2" -weft-schedule-pipeline="schedule=1f1b micro-batches=2" -weft-compress-collectives="policy=tp:bf16" | FileCheck %s --check-prefix=NOPIPE
// RUN: weft-opt %s -weft-compress-collectives="policy=pp:bf16,tp:int8" | FileCheck %s --check-prefix=NOSTAGES
// RUN: not weft-opt %s -weft-compress-collectives="policy=dp:int4" 2>&1 | FileCheck %s --check-prefix=BADCODEC

// Each float collective gets the codec of its axes (the mildest of several);
// integer collectives, all_slice and codecs already set stay as they are.
weft.mesh @mesh(dp = 2, cp = 2, tp = 2)
// CHECK-LABEL: func.func @policy
// FP8-LABEL: func.func @policy
func.func @policy(%x: tensor<4x8xf32>, %n: tensor<4xi64>) -> tensor<4x8xf32> {
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] codec int8 : tensor<4x8xf32>
  // FP8: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<4x8xf32>
  // Top-k goes on summing all-reduces only: over dp and tp the milder int8.
  // TOPK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] codec topk : tensor<4x8xf32>
  // TOPK: weft.reduce_scatter sum %{{.*}} over @mesh ["dp", "tp"] dim 1 codec int8 :
  // TOPK: weft.all_gather %{{.*}} over @mesh ["dp", "cp"] dim 1 :
  // TOPK: weft.all_slice
  %0 = weft.all_reduce sum %x over @mesh ["dp"] : tensor<4x8xf32>
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["tp"] codec bf16 : tensor<4x8xf32>
  // FP8: weft.all_reduce sum %{{.*}} over @mesh ["tp"] codec fp8 : tensor<4x8xf32>
  %1 = weft.all_reduce sum %0 over @mesh ["tp"] : tensor<4x8xf32>
  // CHECK: weft.reduce_scatter sum %{{.*}} over @mesh ["dp", "tp"] dim 1 codec bf16 :
  // FP8: weft.reduce_scatter sum %{{.*}} over @mesh ["dp", "tp"] dim 1 :
  %2 = weft.reduce_scatter sum %1 over @mesh ["dp", "tp"] dim 1 : tensor<4x8xf32> -> tensor<4x2xf32>
  // CHECK: weft.all_gather %{{.*}} over @mesh ["dp", "cp"] dim 1 :
  // FP8: weft.all_gather %{{.*}} over @mesh ["tp", "cp"] dim 1 codec bf16 :
  %3 = weft.all_gather %2 over @mesh ["dp", "cp"] dim 1 : tensor<4x2xf32> -> tensor<4x8xf32>
  %4 = weft.all_gather %2 over @mesh ["tp", "cp"] dim 1 : tensor<4x2xf32> -> tensor<4x8xf32>
  // CHECK: weft.all_to_all %{{.*}} over @mesh ["tp"] split_dim 1 concat_dim 0 codec bf16 :
  %5 = weft.all_to_all %3 over @mesh ["tp"] split_dim 1 concat_dim 0 : tensor<4x8xf32> -> tensor<8x4xf32>
  // CHECK: weft.collective_permute %{{.*}} over @mesh ["cp"] shift 1 :
  // FP8: weft.collective_permute %{{.*}} over @mesh ["cp"] shift 1 codec bf16 :
  %6 = weft.collective_permute %4 over @mesh ["cp"] shift 1 : tensor<4x8xf32>
  // A codec already set (the partitioner pins the loss's statistics) stays.
  // CHECK: weft.all_reduce max %{{.*}} over @mesh ["tp"] codec none :
  // FP8: weft.all_reduce max %{{.*}} over @mesh ["tp"] codec none :
  %7 = weft.all_reduce max %6 over @mesh ["tp"] codec none : tensor<4x8xf32>
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<4xi64>
  %8 = weft.all_reduce sum %n over @mesh ["dp"] : tensor<4xi64>
  // CHECK: weft.all_slice %{{.*}} over @mesh ["dp"] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  %9 = weft.all_slice %7 over @mesh ["dp"] dim 0 : tensor<4x8xf32> -> tensor<2x8xf32>
  return %7 : tensor<4x8xf32>
}

// A codec that would not narrow the message is not set: a scalar (the loss
// summed over dp, a squared gradient norm) is smaller than int8's block
// scale or top-k's index and value, and bf16 data under bf16 is as it was.
// CHECK-LABEL: func.func @narrowing
// TOPK-LABEL: func.func @narrowing
func.func @narrowing(%loss: tensor<f32>, %h: tensor<4x8xbf16>) -> (tensor<f32>, tensor<4x8xbf16>) {
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<f32>
  // TOPK: weft.all_reduce sum %{{.*}} over @mesh ["dp"] : tensor<f32>
  %0 = weft.all_reduce sum %loss over @mesh ["dp"] : tensor<f32>
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["tp"] : tensor<4x8xbf16>
  // TOPK: weft.all_reduce sum %{{.*}} over @mesh ["tp"] codec int8 : tensor<4x8xbf16>
  %1 = weft.all_reduce sum %h over @mesh ["tp"] : tensor<4x8xbf16>
  return %0, %1 : tensor<f32>, tensor<4x8xbf16>
}

// BADAXIS: error: -weft-compress-collectives: compression policy "ep:int8": 'ep:int8' names no mesh axis; use axis:codec with axis dp, tp, pp, cp, ulysses, or the 3-D grid's gx, gy, gz
// PPTOPK: error: -weft-compress-collectives: compression policy "pp:topk": top-k sends a summed gradient's largest elements: it compresses data-parallel gradients (dp) only, not pp
// PIPE: module attributes {weft.pipeline = {chunks = 1 : i64, codec = "int8", micro_batches = 2 : i64, schedule = "1F1B", stages = 2 : i64,
// NOPIPE: module attributes {weft.pipeline = {chunks = 1 : i64, micro_batches = 2 : i64, schedule = "1F1B", stages = 2 : i64,
// NOSTAGES-NOT: weft.pipeline
// NOSTAGES: weft.all_reduce sum %{{.*}} over @mesh ["tp"] codec int8 : tensor<4x8xf32>
// BADCODEC: error: -weft-compress-collectives: compression policy "dp:int4": unknown codec 'int4' for dp; use bf16, fp8, int8, topk, topk_noef or none

