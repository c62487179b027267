// RUN: weft-opt %s -split-input-file -weft-build-optimizer="rank-local=true stored-over=dp,cp" | FileCheck %s

// ZeRO-3 with pipeline stages: each pipeline rank's optimizer step takes
// and returns the stored blocks of its stages' weights (split over dp, as
// -weft-shard-parameters stores them). `e`'s gradient comes whole (reduced
// in the step): its block is gathered, updated whole and cut back.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, dp = 2)
  // CHECK-LABEL: func.func @optimizer_step_pp0
  // CHECK-SAME: tensor<4xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[dp]]>, weft.optimizer_slot = {parameter = "e", role = "param"}}
  // CHECK: weft.all_gather %{{.*}} over @mesh ["dp"] dim 0 : tensor<4xf32> -> tensor<8xf32>
  // CHECK: weft.all_slice %{{.*}} over @mesh ["dp"] dim 0 : tensor<8xf32> -> tensor<4xf32>
  // CHECK-LABEL: func.func @optimizer_step_pp1
  func.func @s0(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %ge : tensor<8xf32>
  }
  func.func @s1(%gf: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "f", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "backward", stage = 1 : i64}} {
    return %gf : tensor<8xf32>
  }
}

// -----

// Under a load-balanced ring (weft.load_balanced), a block stored over cp
// alone is in the ring's zigzag layout, as the runtime lays out a split led
// by cp: its gather and cut are zigzag ones.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, cp = 2)
  // CHECK-LABEL: func.func @optimizer_step_pp0
  // CHECK: weft.all_gather %{{.*}} over @mesh ["cp"] dim 0 zigzag : tensor<4xf32> -> tensor<8xf32>
  // CHECK: weft.all_slice %{{.*}} over @mesh ["cp"] dim 0 zigzag : tensor<8xf32> -> tensor<4xf32>
  func.func @s0(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.load_balanced = ["cp"],
                  weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %ge : tensor<8xf32>
  }
  func.func @s1(%gf: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "f", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.load_balanced = ["cp"],
                  weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "backward", stage = 1 : i64}} {
    return %gf : tensor<8xf32>
  }
}
