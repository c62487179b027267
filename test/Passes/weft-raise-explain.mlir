// RUN: weft-opt %s -split-input-file -weft-raise=explain=true -verify-diagnostics

// Each softmax that is almost attention but not quite says which op stopped
// the match (`weft import --explain-raise` prints the same, with node names).

func.func @fill_not_negative(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x4x4xi1>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %zero = weft.constant dense<0.0> : tensor<f32>
  %w = weft.where %m, %s, %zero : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: 'weft.where' selects between values neither of which is a constant fill of -1e4 or less, so it is not a mask}}
  %p = weft.softmax %w axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

func.func @probabilities_escape(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: the probabilities have 2 uses, not one product with V}}
  %p = weft.softmax %s axis 3 : tensor<1x1x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %p : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

func.func @scaled_after_mask(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %m: tensor<2x1x1x4xf32>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %w = weft.add %s, %m : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %c = weft.constant dense<0.125> : tensor<f32>
  %sc = weft.mul %w, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: 'weft.add' adds a mask that a later scale multiplies}}
  %p = weft.softmax %sc axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// The same with a boolean mask made a bias (where(m, -1e4, 0)): a later scale
// would scale its fill too.
func.func @scaled_after_boolean_bias(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %m: tensor<2x1x1x4xi1>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %fill = weft.constant dense<-1.0e4> : tensor<f32>
  %zero = weft.constant dense<0.0> : tensor<f32>
  %bias = weft.where %m, %fill, %zero : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x4xf32>
  %w = weft.add %s, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %c = weft.constant dense<0.125> : tensor<f32>
  %sc = weft.mul %w, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: 'weft.add' adds a mask that a later scale multiplies}}
  %p = weft.softmax %sc axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

func.func @softmax_over_queries(%s: tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32> {
  // expected-remark @below {{not raised to weft.attention: the softmax is not over the last (key) dimension}}
  %p = weft.softmax %s axis 2 : tensor<1x2x4x4xf32>
  return %p : tensor<1x2x4x4xf32>
}

// -----

func.func @three_masks(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %m: tensor<2x1x1x4xf32>, %n: tensor<2x1x4x1xf32>, %o3: tensor<1x2x1x1xf32>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %w = weft.add %s, %m : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %w2 = weft.add %w, %n : (tensor<2x2x4x4xf32>, tensor<2x1x4x1xf32>) -> tensor<2x2x4x4xf32>
  %w3 = weft.add %w2, %o3 : (tensor<2x2x4x4xf32>, tensor<1x2x1x1xf32>) -> tensor<2x2x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: the scores carry three masks that are not causal (a function argument, a function argument and a function argument)}}
  %p = weft.softmax %w3 axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// A cap over masked scores (ONNX Attention's first opset-23 order) leaves a
// hidden key at -cap, not -inf: not weft.attention's soft-capping.
func.func @masked_then_capped(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>, %m: tensor<1x1x4x4xf32>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %w = weft.add %s, %m : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xf32>) -> tensor<1x2x4x4xf32>
  %cap = weft.constant dense<30.0> : tensor<f32>
  %d = weft.div %w, %cap : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %t = weft.tanh %d : tensor<1x2x4x4xf32>
  %c = weft.mul %t, %cap : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: 'weft.add' masks the scores before they are soft-capped; weft.attention caps them before any mask}}
  %p = weft.softmax %c axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Two different constants around the tanh (30 · tanh(s / 50)) are no cap.
func.func @mismatched_cap(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %in = weft.constant dense<50.0> : tensor<f32>
  %out = weft.constant dense<30.0> : tensor<f32>
  %d = weft.div %s, %in : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %t = weft.tanh %d : tensor<1x2x4x4xf32>
  %c = weft.mul %t, %out : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  // expected-remark @below {{not raised to weft.attention: the scores come from 'weft.tanh', which is neither q·kᵀ, a scale (constant, or per head: [..., 1, 1]) nor a mask}}
  %p = weft.softmax %c axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}
