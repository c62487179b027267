// RUN: weft-opt %s -weft-build-optimizer="rank-local=true stored-over=dp" -verify-diagnostics

// ZeRO-3's stored blocks are not built for pipeline stages: refused.
// expected-error @+1 {{-weft-build-optimizer: stored-over (ZeRO-3) on a module cut into pipeline stages: a pipeline's weights are not stored in blocks (give zero=1)}}
module attributes {weft.pipeline = {chunks = 1 : i64, stages = 2 : i64}} {
  weft.mesh @mesh(pp = 2, dp = 2)
  func.func @s0(%ge: tensor<8xf32>) -> (tensor<8xf32> {weft.gradient_of = "e", weft.local_sharding = #weft.sharding<@mesh, [[]]>})
      attributes {weft.pipeline_stage = {chunk = 0 : i64, rank = 0 : i64, role = "backward", stage = 0 : i64}} {
    return %ge : tensor<8xf32>
  }
}
