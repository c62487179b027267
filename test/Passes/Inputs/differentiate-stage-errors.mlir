// Run by weft-split-backward.mlir: -weft-differentiate on modules cut into
// pipeline stages.

module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64}} {
  // expected-error@+1 {{@f_stage1 neither sends a float value on nor returns the scalar loss as model output #0: run -weft-append-loss=reduction=mean before -weft-split-stages}}
  func.func @f_stage1(%x: tensor<2xf32> {weft.received_from = 0 : i64}) -> (tensor<2xf32> {weft.model_output = 0 : i64}) attributes {weft.pipeline_stage = {stage = 1 : i64, rank = 1 : i64, chunk = 0 : i64}} {
    return %x : tensor<2xf32>
  }
}

// -----

module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64}} {
  // expected-error@+1 {{@f is not a pipeline stage of the split module (no weft.pipeline_stage)}}
  func.func @f(%x: tensor<2xf32>) -> tensor<f32> {
    %w = weft.parameter "w" : tensor<2xf32>
    %y = weft.mul %x, %w : tensor<2xf32>
    %s = weft.reduce_sum %y axes [0] : tensor<2xf32> -> tensor<f32>
    return %s : tensor<f32>
  }
}

// -----

module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64}} {
  // expected-error@+1 {{@f_stage0 is already differentiated}}
  func.func @f_stage0(%x: tensor<2xf32> {weft.model_input = 0 : i64}) -> (tensor<2xf32> {weft.sent_to = 1 : i64}, tensor<2xf32> {weft.gradient_of = "w"}) attributes {weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64}} {
    return %x, %x : tensor<2xf32>, tensor<2xf32>
  }
}
