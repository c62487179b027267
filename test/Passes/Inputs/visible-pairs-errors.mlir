func.func @too_many(%q: tensor<1x2x4x4xf32>, %p: tensor<4xi64>) {
  // expected-error @+1 {{'weft.attention_block' op visible pairs must be in [0, 16] (seq x kv_seq), got 17}}
  %o, %l = weft.attention_block %q, %q, %q positions %p, %p scale 5.000000e-01 causal visible 17 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<4xi64>, tensor<4xi64>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>)
  return
}

// -----

func.func @no_positions(%q: tensor<1x2x4x4xf32>) {
  // expected-error @+1 {{'weft.attention_block' op visible pairs are counted for a causal block with positions}}
  %o, %l = weft.attention_block %q, %q, %q scale 5.000000e-01 causal visible 8 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x1xf32>)
  return
}

// -----

func.func @grad_not_causal(%q: tensor<1x2x4x4xf32>, %p: tensor<4xi64>) {
  // expected-error @+1 {{'weft.attention_grad' op visible pairs are counted for a causal block with positions}}
  %dq, %dk, %dv = weft.attention_grad %q, %q, %q grad %q positions %p, %p scale 5.000000e-01 visible 8 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<4xi64>, tensor<4xi64>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>)
  return
}

// -----

func.func @grad_negative(%q: tensor<1x2x4x4xf32>, %p: tensor<4xi64>) {
  // expected-error @+1 {{'weft.attention_grad' op visible pairs must be in [0, 16] (seq x kv_seq), got -1}}
  %dq, %dk, %dv = weft.attention_grad %q, %q, %q grad %q positions %p, %p scale 5.000000e-01 causal visible -1 : (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<4xi64>, tensor<4xi64>) -> (tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>)
  return
}
