// RUN: weft-opt %s -split-input-file -weft-build-optimizer="rank-local=true optimizer=sgd" -verify-diagnostics | FileCheck %s

// A module cut into two pipeline stages over pp x dp: each pipeline rank
// gets its own optimizer step on the parameters its stages return the
// gradients of. `w` (rank 0) comes reduce-scattered over dp from its stage's
// reduction (ZeRO-1): its state is the rank's block, and the update is
// gathered back. `u` is rank 1's. `e` is read by both stages (a tied
// embedding): its gradient is all-reduced over pp on both ranks, in the same
// place, so the copies stay the same, and its squares count on rank 0 only.
// Each rank's squares are then all-reduced over pp.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, dp = 2)

  // CHECK-LABEL: func.func @optimizer_step_pp0
  // CHECK-SAME: %[[GW:[^:]*]]: tensor<4x8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[dp], []]>, weft.optimizer_slot = {parameter = "w", role = "grad"}}
  // CHECK-SAME: %[[GE:[^:]*]]: tensor<8xf32> {weft.local_sharding = #weft.sharding<@mesh, {{\[}}[]]>, weft.optimizer_slot = {parameter = "e", role = "grad"}}
  // CHECK-SAME: weft.optimizer = "sgd", weft.pipeline_rank = 0 : i64
  // CHECK: %[[E:.*]] = weft.all_reduce sum %[[GE]] over @mesh ["pp"] : tensor<8xf32>
  // CHECK: weft.div %[[GW]]
  // CHECK: %[[SW:.*]] = weft.reduce_sum %{{.*}} axes [0, 1]
  // CHECK: weft.div %[[E]]
  // CHECK: %[[SE:.*]] = weft.reduce_sum %{{.*}} axes [0]
  // CHECK: %[[RW:.*]] = weft.all_reduce sum %[[SW]] over @mesh ["dp"] : tensor<f32>
  // CHECK: %[[T:.*]] = weft.add %[[SE]], %[[RW]]
  // CHECK: %[[ALL:.*]] = weft.all_reduce sum %[[T]] over @mesh ["pp"] : tensor<f32>
  // CHECK: weft.sqrt %[[ALL]]
  // CHECK: weft.all_slice %{{.*}} over @mesh ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
  // CHECK: weft.all_gather %{{.*}} over @mesh ["dp"] dim 0 : tensor<4x8xf32> -> tensor<8x8xf32>

  // CHECK-LABEL: func.func @optimizer_step_pp1
  // CHECK-SAME: weft.optimizer = "sgd", weft.pipeline_rank = 1 : i64
  // CHECK: %[[E1:.*]] = weft.all_reduce sum %{{.*}} over @mesh ["pp"] : tensor<8xf32>
  // CHECK: weft.div %[[E1]]
  // CHECK: %[[SU:.*]] = weft.reduce_sum
  // CHECK-NOT: weft.reduce_sum
  // CHECK: %[[ALL1:.*]] = weft.all_reduce sum %[[SU]] over @mesh ["pp"] : tensor<f32>
  // CHECK: weft.sqrt %[[ALL1]]
  func.func @s0_backward(%gw: tensor<8x8xf32>, %ge: tensor<8xf32>)
      -> (tensor<8x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["dp"]>},
          tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.gradient_reduction = @s0_backward_reduce_gradients,
                  weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %gw, %ge : tensor<8x8xf32>, tensor<8xf32>
  }
  func.func @s0_backward_reduce_gradients(
      %gw: tensor<8x8xf32> {weft.local_sharding = #weft.sharding<@mesh, [[], []], partial = ["dp"]>})
      -> (tensor<4x8xf32> {weft.gradient_of = "w", weft.local_sharding = #weft.sharding<@mesh, [["dp"], []]>}) {
    %r = weft.reduce_scatter sum %gw over @mesh ["dp"] dim 0 : tensor<8x8xf32> -> tensor<4x8xf32>
    return %r : tensor<4x8xf32>
  }
  func.func @s1_backward(%ge: tensor<8xf32>, %gu: tensor<4xf32>)
      -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>},
          tensor<4xf32> {weft.gradient_of = "u", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "backward", stage = 1 : i64}} {
    return %ge, %gu : tensor<8xf32>, tensor<4xf32>
  }
}

// -----

// A tied parameter's gradient is summed over the pipeline ranks that hold
// it (Megatron-LM's embedding group of the first and last stages): an
// all-reduce over those members of pp. A rank that holds no copy takes no
// part; every rank joins the norm's all-reduce over all of pp.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 3 : i64}} {
  weft.mesh @mesh(pp = 3, tp = 1)
  // CHECK-LABEL: func.func @optimizer_step_pp0
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["pp"] members [0, 2] : tensor<8xf32>
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["pp"] : tensor<f32>
  // CHECK-LABEL: func.func @optimizer_step_pp1
  // CHECK-NOT: members
  // CHECK-NOT: tensor<8xf32>
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["pp"] : tensor<f32>
  // CHECK-LABEL: func.func @optimizer_step_pp2
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["pp"] members [0, 2] : tensor<8xf32>
  // CHECK: weft.all_reduce sum %{{.*}} over @mesh ["pp"] : tensor<f32>
  func.func @s0(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %ge : tensor<8xf32>
  }
  func.func @s1(%g: tensor<2xf32>) -> (tensor<2xf32> {weft.gradient_of = "mid", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "backward", stage = 1 : i64}} {
    return %g : tensor<2xf32>
  }
  func.func @s2(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 2 : i64, role = "backward", stage = 2 : i64}} {
    return %ge : tensor<8xf32>
  }
}

// -----

// A tied parameter must be the same block on every stage that reads it.
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, tp = 2)
  func.func @s0(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %ge : tensor<8xf32>
  }
  // expected-error @+1 {{'e' is trained on pipeline ranks 0 and 1 in different blocks ([[]] and [[tp]]): a tied weight needs the same layout on every stage that reads it}}
  func.func @s1(%ge: tensor<4xf32>) -> (tensor<4xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [["tp"]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 1 : i64, role = "backward", stage = 1 : i64}} {
    return %ge : tensor<4xf32>
  }
}

// -----

// The mesh of a pipelined module begins with pp.
// expected-error @+1 {{-weft-build-optimizer: the module is cut into pipeline stages but its weft.mesh does not begin with the axis pp}}
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(dp = 2, pp = 2)
  func.func @s0(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %ge : tensor<8xf32>
  }
}
