// Run by weft-split-backward.mlir.

// expected-error@+1 {{-weft-split-backward: the module is not cut into pipeline stages; run -weft-split-stages and -weft-differentiate first}}
module {
}

// -----

// expected-error@+1 {{-weft-split-backward: no pipeline stage returns gradients; run -weft-differentiate on the split module first}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64}} {
  func.func @f_stage0(%x: tensor<2xf32> {weft.model_input = 0 : i64}) -> (tensor<2xf32> {weft.sent_to = 1 : i64}) attributes {weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64}} {
    return %x : tensor<2xf32>
  }
}

// -----

module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64}} {
  // expected-error@+1 {{-weft-split-backward: @f_stage0 is already split (it has a role)}}
  func.func @f_stage0(%x: tensor<2xf32> {weft.model_input = 0 : i64}) -> (tensor<2xf32> {weft.gradient_of = "w"}) attributes {weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64, role = "backward"}} {
    return %x : tensor<2xf32>
  }
}
