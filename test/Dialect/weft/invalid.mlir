// RUN: weft-opt %s -split-input-file -verify-diagnostics

// Every constraint in the Constraints list of every weft op fails here once.

//===--- types shared by all ops ---===//

func.func @dynamic_shape(%x: tensor<?x8xf32>) {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = weft.exp %x : tensor<?x8xf32>
  return
}

// -----

func.func @unsupported_element_type(%x: tensor<4xi8>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values}}
  %0 = weft.exp %x : tensor<4xi8>
  return
}

// -----

//===--- weft.parameter ---===//

func.func @parameter_empty_name() {
  // expected-error @+1 {{needs a non-empty name}}
  %0 = weft.parameter "" : tensor<4xf32>
  return
}

// -----

func.func @parameter_value_and_external() {
  // expected-error @+1 {{has both an inline value and external data}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 16> : tensor<4xf32> = dense<0.0>
  return
}

// -----

func.func @parameter_value_type() {
  // expected-error @+1 {{inline value of type 'tensor<4xf16>' does not match the result type 'tensor<4xf32>'}}
  %0 = "weft.parameter"() <{name = "w", value = dense<0.0> : tensor<4xf16>}> : () -> tensor<4xf32>
  return
}

// -----

func.func @parameter_external_length() {
  // expected-error @+1 {{external data is 10 bytes but 'tensor<4xbf16>' needs 8}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 10> : tensor<4xbf16>
  return
}

// -----

func.func @parameter_external_stored_length() {
  // expected-error @+1 {{external data is 8 bytes but 'tensor<4xf32>' needs 16}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 8, stored = f32> : tensor<4xbf16>
  return
}

// -----

func.func @external_stored_type() {
  // expected-error @+1 {{external data stored as 'i1': the file's elements are f32, f64, f16, bf16, i64 or i32}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 4, stored = i1> : tensor<4xbf16>
  return
}

// -----

func.func @external_stored_before_columns() {
  // expected-error @+1 {{expected 'columns = S of W' or 'stored = TYPE', in that order}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 16, stored = f32, columns = 0 of 4> : tensor<4xbf16>
  return
}

// -----

func.func @external_empty_location() {
  // expected-error @+1 {{external data needs a file location}}
  %0 = weft.parameter "w" external <"", offset = 0, length = 16> : tensor<4xf32>
  return
}

// -----

func.func @external_negative_offset() {
  // expected-error @+1 {{external data offset must not be negative, got -4}}
  %0 = weft.parameter "w" external <"w.bin", offset = -4, length = 16> : tensor<4xf32>
  return
}

// -----

func.func @external_negative_length() {
  // expected-error @+1 {{external data length must not be negative, got -1}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = -1> : tensor<4xf32>
  return
}

// -----

func.func @external_columns_too_wide() {
  // expected-error @+1 {{external data columns 2 of 3 cannot hold 'tensor<2x2xbf16>'}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 12, columns = 2 of 3> : tensor<2x2xbf16>
  return
}

// -----

func.func @external_columns_length() {
  // expected-error @+1 {{external data is 8 bytes but 'tensor<2x2xbf16>' needs 12}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 8, columns = 1 of 3> : tensor<2x2xbf16>
  return
}

// -----

func.func @external_columns_negative() {
  // expected-error @+1 {{external data columns -1 of 3: the row width must be positive and the first column not negative}}
  %0 = weft.parameter "w" external <"w.bin", offset = 0, length = 12, columns = -1 of 3> : tensor<2x2xbf16>
  return
}

// -----

//===--- weft.constant ---===//

func.func @constant_type() {
  // expected-error @+1 {{failed to verify that all of {value, result} have same type}}
  %0 = "weft.constant"() <{value = dense<0.0> : tensor<2xf32>}> : () -> tensor<3xf32>
  return
}

// -----

//===--- weft.iota ---===//

func.func @iota_dim_range() {
  // expected-error @+1 {{dim 2 is out of range for 'tensor<2x4xi64>'}}
  %0 = weft.iota dim 2 : tensor<2x4xi64>
  return
}

// -----

func.func @iota_negative_dim() {
  // expected-error @+1 {{attribute 'dim' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = weft.iota dim -1 : tensor<2x4xi64>
  return
}

// -----

func.func @iota_bool() {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer values}}
  %0 = weft.iota dim 0 : tensor<4xi1>
  return
}

// -----

//===--- elementwise ---===//

func.func @binary_no_broadcast(%a: tensor<4x8xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{operand shapes do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.add %a, %b : (tensor<4x8xf32>, tensor<3xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @binary_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.mul %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

func.func @binary_result_shape(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x8xf32>' are incompatible with return type(s) of operation 'tensor<8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.sub %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @pow_bool(%a: tensor<4xi1>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type or 64-bit signless integer or 32-bit signless integer values}}
  %0 = weft.pow %a, %a : tensor<4xi1>
  return
}

// -----

func.func @compare_result(%a: tensor<4xf32>) {
  // expected-error @+1 {{must be statically shaped tensor of 1-bit signless integer values}}
  %0 = weft.compare eq, %a, %a : tensor<4xf32>
  return
}

// -----

func.func @compare_operand_types(%a: tensor<4xf32>, %b: tensor<4xi32>) {
  // expected-error @+1 {{requires the same element type for all operands}}
  %0 = weft.compare eq, %a, %b : (tensor<4xf32>, tensor<4xi32>) -> tensor<4xi1>
  return
}

// -----

func.func @compare_broadcast(%a: tensor<4xf32>, %b: tensor<5xf32>) {
  // expected-error @+2 {{operand shapes do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.compare eq, %a, %b : (tensor<4xf32>, tensor<5xf32>) -> tensor<4xi1>
  return
}

// -----

func.func @where_condition(%c: tensor<4xf32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{operand #0 must be statically shaped tensor of 1-bit signless integer values}}
  %0 = weft.where %c, %a, %a : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @where_element_types(%c: tensor<4xi1>, %a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{failed to verify that all of {lhs, rhs, result} have same element type}}
  %0 = weft.where %c, %a, %b : (tensor<4xi1>, tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

func.func @where_broadcast(%c: tensor<3xi1>, %a: tensor<4xf32>) {
  // expected-error @+2 {{operand shapes do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.where %c, %a, %a : (tensor<3xi1>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @unary_result_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.exp"(%a) : (tensor<4xf32>) -> tensor<4xf16>
  return
}

// -----

func.func @gelu_result_type(%a: tensor<4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.gelu"(%a) : (tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @cast_shape(%a: tensor<4xf32>) {
  // expected-error @+1 {{requires the same shape for all operands and results}}
  %0 = weft.cast %a : tensor<4xf32> -> tensor<5xbf16>
  return
}

// -----

//===--- reductions and normalizations ---===//

func.func @reduce_no_axes(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{needs at least one axis to reduce}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.reduce_sum %x axes [] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @reduce_axis_range(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.reduce_max %x axes [2] : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @reduce_logsumexp_integers(%x: tensor<4x8xi64>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values}}
  %0 = weft.reduce_logsumexp %x axes [1] : tensor<4x8xi64> -> tensor<4xi64>
  return
}

// -----

func.func @reduce_logsumexp_shape(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.reduce_logsumexp %x axes [1] : tensor<4x8xf32> -> tensor<8xf32>
  return
}

// -----

func.func @reduce_axis_twice(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{axis 1 is listed twice}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.reduce_mean %x axes [1, 1] : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @reduce_result(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x1xf32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.reduce_sum %x axes [1] keep_dims : tensor<4x8xf32> -> tensor<4xf32>
  return
}

// -----

func.func @reduce_mean_int(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values}}
  %0 = weft.reduce_mean %x axes [1] : tensor<4x8xi32> -> tensor<4xi32>
  return
}

// -----

func.func @softmax_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = weft.softmax %x axis 2 : tensor<4x8xf32>
  return
}

// -----

func.func @log_softmax_negative_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{attribute 'axis' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = weft.log_softmax %x axis -1 : tensor<4x8xf32>
  return
}

// -----

func.func @softmax_scale(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{scale must be positive and finite}}
  %0 = weft.softmax %x axis 1 scale -1.0 : tensor<4x8xf32>
  return
}

// -----

func.func @softmax_causal_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{a causal softmax runs along the last dimension (1) of a tensor of rank at least 2, not axis 0}}
  %0 = weft.softmax %x axis 0 causal : tensor<4x8xf32>
  return
}

// -----

func.func @softmax_causal_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{a causal softmax runs along the last dimension (0) of a tensor of rank at least 2, not axis 0}}
  %0 = weft.log_softmax %x axis 0 causal : tensor<8xf32>
  return
}

// -----

func.func @dropout_ratio(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{ratio must be in [0, 1), got 1}}
  %0 = weft.dropout %x ratio 1.0 : tensor<4x8xf32>
  return
}

// -----

func.func @dropout_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.dropout"(%x) {ratio = 0.1 : f64} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  return
}

// -----

func.func @layer_norm_axis(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{axis 3 is out of range for rank 2}}
  %0 = weft.layer_norm %x, %g axis 3 epsilon 1.0e-05 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_epsilon(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive}}
  %0 = weft.layer_norm %x, %g axis 1 epsilon 0.0 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_epsilon_infinite(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive and finite}}
  %0 = weft.layer_norm %x, %g axis 1 epsilon 0x7F800000 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_scale_shape(%x: tensor<4x8xf32>, %g: tensor<4x8xf32>) {
  // expected-error @+1 {{scale and bias must have the normalized shape [8] (input dimensions from axis 1 on), got 'tensor<4x8xf32>'}}
  %0 = weft.layer_norm %x, %g axis 1 epsilon 1.0e-05 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_bias_shape(%x: tensor<4x8xf32>, %g: tensor<8xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{scale and bias must have the normalized shape [8]}}
  %0 = weft.layer_norm %x, %g, %b axis 1 epsilon 1.0e-05 : (tensor<4x8xf32>, tensor<8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_element_type(%x: tensor<4x8xf32>, %g: tensor<8xbf16>) {
  // expected-error @+1 {{scale and bias must have the input's element type 'f32', got 'tensor<8xbf16>'}}
  %0 = weft.layer_norm %x, %g axis 1 epsilon 1.0e-05 : (tensor<4x8xf32>, tensor<8xbf16>) -> tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_result(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{result type 'tensor<4x8xf16>' must equal the input type 'tensor<4x8xf32>'}}
  %0 = weft.layer_norm %x, %g axis 1 epsilon 1.0e-05 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf16>
  return
}

// -----

func.func @rms_norm_axis(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = weft.rms_norm %x, %g axis 2 epsilon 1.0e-06 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_epsilon(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{epsilon must be positive}}
  %0 = weft.rms_norm %x, %g axis 1 epsilon -1.0e-06 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_scale(%x: tensor<4x8xf32>, %g: tensor<4xf32>) {
  // expected-error @+1 {{scale and bias must have the normalized shape [8]}}
  %0 = weft.rms_norm %x, %g axis 1 epsilon 1.0e-06 : (tensor<4x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @rms_norm_element_type(%x: tensor<4x8xbf16>, %g: tensor<8xf32>) {
  // expected-error @+1 {{scale and bias must have the input's element type 'bf16'}}
  %0 = weft.rms_norm %x, %g axis 1 epsilon 1.0e-06 : (tensor<4x8xbf16>, tensor<8xf32>) -> tensor<4x8xbf16>
  return
}

// -----

func.func @rms_norm_result(%x: tensor<4x8xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{must equal the input type}}
  %0 = weft.rms_norm %x, %g axis 1 epsilon 1.0e-06 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x4xf32>
  return
}

// -----

//===--- linear algebra and attention ---===//

func.func @matmul_rank(%a: tensor<8xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+2 {{lhs must have rank at least 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.matmul %a, %b : (tensor<8xf32>, tensor<8x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @matmul_contracting(%a: tensor<2x8xf32>, %b: tensor<4x8xf32>) {
  // expected-error @+2 {{contracting dimensions differ: lhs has 8, rhs has 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.matmul %a, %b : (tensor<2x8xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @matmul_batch(%a: tensor<3x2x8xf32>, %b: tensor<4x8x5xf32>) {
  // expected-error @+2 {{batch dimensions do not broadcast}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.matmul %a, %b : (tensor<3x2x8xf32>, tensor<4x8x5xf32>) -> tensor<3x2x5xf32>
  return
}

// -----

func.func @matmul_element_type(%a: tensor<2x8xf32>, %b: tensor<8x4xbf16>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.matmul %a, %b : (tensor<2x8xf32>, tensor<8x4xbf16>) -> tensor<2x4xf32>
  return
}

// -----

func.func @matmul_result(%a: tensor<2x8xf32>, %b: tensor<8x4xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4xf32>' are incompatible with return type(s) of operation 'tensor<4x2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.matmul %a, %b : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<4x2xf32>
  return
}

// -----

func.func @linear_input_rank(%x: tensor<f32>, %w: tensor<8x4xf32>) {
  // expected-error @+2 {{input must have rank at least 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.linear %x, %w : (tensor<f32>, tensor<8x4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @linear_weight_rank(%x: tensor<2x8xf32>, %w: tensor<8xf32>) {
  // expected-error @+2 {{weight must have rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.linear %x, %w : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @linear_contracting(%x: tensor<2x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+2 {{input's last dimension (8) must equal the weight's contracting dimension (4)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.linear %x, %w transpose_weight : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @linear_bias_rank(%x: tensor<2x8xf32>, %w: tensor<8x4xf32>, %b: tensor<1x4xf32>) {
  // expected-error @+2 {{bias must have rank 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.linear %x, %w, %b : (tensor<2x8xf32>, tensor<8x4xf32>, tensor<1x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @linear_bias_size(%x: tensor<2x8xf32>, %w: tensor<8x4xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{bias has 8 elements but the layer has 4 outputs}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.linear %x, %w, %b : (tensor<2x8xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @linear_element_type(%x: tensor<2x8xbf16>, %w: tensor<8x4xf32>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.linear %x, %w : (tensor<2x8xbf16>, tensor<8x4xf32>) -> tensor<2x4xbf16>
  return
}

// -----

func.func @linear_result(%x: tensor<2x8xf32>, %w: tensor<8x4xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.linear %x, %w : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x8xf32>
  return
}

// -----

func.func @attention_rank(%q: tensor<2x16x8xf32>, %k: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{q must be [batch, heads, seq, head_dim] (rank 4)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %k, %k scale 0.125 : (tensor<2x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_element_type(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xbf16>) {
  // expected-error @+2 {{q, k and v must have one element type}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %k, %k scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xbf16>, tensor<2x4x16x8xbf16>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_batch(%q: tensor<2x4x16x8xf32>, %k: tensor<1x4x16x8xf32>) {
  // expected-error @+2 {{k and v must have q's batch size 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %k, %k scale 0.125 : (tensor<2x4x16x8xf32>, tensor<1x4x16x8xf32>, tensor<1x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_kv_agree(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x8xf32>, %v: tensor<2x4x12x8xf32>) {
  // expected-error @+2 {{k and v must agree on heads and sequence length}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %k, %v scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x12x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x4xf32>) {
  // expected-error @+2 {{q and k must have one head dimension, got 8 and 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %k, %k scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>) -> tensor<2x4x16x4xf32>
  return
}

// -----

func.func @attention_gqa(%q: tensor<2x6x16x8xf32>, %k: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{query heads (6) must be a positive multiple of KV heads (4)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %k, %k scale 0.125 : (tensor<2x6x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x6x16x8xf32>
  return
}

// -----

func.func @attention_mask_rank(%q: tensor<2x4x16x8xf32>, %m: tensor<1x1x1x16x16xi1>) {
  // expected-error @+2 {{mask must have rank at most 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q mask %m scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<1x1x1x16x16xi1>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_mask_type(%q: tensor<2x4x16x8xf32>, %m: tensor<16x16xi32>) {
  // expected-error @+2 {{mask must be i1 or q's element type 'f32'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q mask %m scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<16x16xi32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_mask_shape(%q: tensor<2x4x16x8xf32>, %m: tensor<16x8xi1>) {
  // expected-error @+2 {{does not broadcast to the scores [2, 4, 16, 16]}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q mask %m scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<16x8xi1>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_scale(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{scale must be positive}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q scale 0.0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_softcap(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{softcap must be positive (leave it out for no soft-capping), got -5}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q scale 0.125 softcap -5.0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_block_softcap(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{softcap must be positive (leave it out for no soft-capping), got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.attention_block %q, %q, %q scale 0.125 softcap 0.0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x1xf32>)
  return
}

// -----

func.func @attention_grad_softcap(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{softcap must be positive (leave it out for no soft-capping), got -1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q scale 0.125 softcap -1.0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_alibi_heads(%q: tensor<2x4x16x8xf32>, %slopes: tensor<2xf32>) {
  // expected-error @+2 {{alibi must be a vector of 4 slopes, one per query head, got 'tensor<2xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q alibi %slopes scale 0.125 causal : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_block_alibi_rank(%q: tensor<2x4x16x8xf32>, %slopes: tensor<1x4xf32>) {
  // expected-error @+2 {{alibi must be a vector of 4 slopes, one per query head, got 'tensor<1x4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.attention_block %q, %q, %q alibi %slopes scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<1x4xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x1xf32>)
  return
}

// -----

func.func @attention_grad_alibi_type(%q: tensor<2x4x16x8xf32>, %slopes: tensor<4xi32>) {
  // expected-error @+1 {{operand #4 must be statically shaped tensor of 32-bit float or 64-bit float or 16-bit float or bfloat16 type values, but got 'tensor<4xi32>'}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q alibi %slopes scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<4xi32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_window(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{window must be at least 1 key, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q scale 0.125 causal window 0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_window_not_causal(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{a sliding window (window 4) needs causal}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q scale 0.125 window 4 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_grad_window(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{a sliding window (window 2) needs causal}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q scale 0.125 window 2 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_dropout(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{dropout must be in [0, 1), got 1.5}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %q scale 0.125 dropout 1.5 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

func.func @attention_block_shapes(%q: tensor<2x4x16x8xf32>, %k: tensor<2x4x16x4xf32>) {
  // expected-error @+2 {{q and k must have one head dimension, got 8 and 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.attention_block %q, %k, %k scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>) -> (tensor<2x4x16x4xf32>, tensor<2x4x16x1xf32>)
  return
}

// -----

func.func @attention_block_scale(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{scale must be positive}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.attention_block %q, %q, %q scale 0.0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x1xf32>)
  return
}

// -----

func.func @attention_block_lse(%q: tensor<2x4x16x8xbf16>) {
  // expected-error @+1 {{result #1 must be tensor of 32-bit float values, but got 'tensor<2x4x16x1xbf16>'}}
  %0:2 = weft.attention_block %q, %q, %q scale 0.125 : (tensor<2x4x16x8xbf16>, tensor<2x4x16x8xbf16>, tensor<2x4x16x8xbf16>) -> (tensor<2x4x16x8xbf16>, tensor<2x4x16x1xbf16>)
  return
}

// -----

func.func @attention_block_positions_together(%q: tensor<2x4x16x8xf32>, %p: tensor<16xi64>) {
  // expected-error @+1 {{q_positions and k_positions are given together}}
  %0:2 = "weft.attention_block"(%q, %q, %q, %p) {scale = 0.125 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 0, 0, 1, 0>} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<16xi64>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x1xf32>)
  return
}

// -----

func.func @attention_block_positions_size(%q: tensor<2x4x16x8xf32>, %p: tensor<16xi64>, %kp: tensor<8xi64>) {
  // expected-error @+1 {{k_positions must be a vector of 16 positions, got 'tensor<8xi64>'}}
  %0:2 = weft.attention_block %q, %q, %q positions %p, %kp scale 0.125 causal : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<16xi64>, tensor<8xi64>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x1xf32>)
  return
}

// -----

func.func @attention_grad_result_grad(%q: tensor<2x4x16x8xf32>, %do: tensor<2x4x8x8xf32>) {
  // expected-error @+2 {{result_grad must have the attention output's type 'tensor<2x4x16x8xf32>', got 'tensor<2x4x8x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = weft.attention_grad %q, %q, %q grad %do scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x8x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_grad_heads(%q: tensor<2x3x16x8xf32>, %k: tensor<2x2x16x8xf32>, %do: tensor<2x3x16x8xf32>) {
  // expected-error @+2 {{heads}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = weft.attention_grad %q, %k, %k grad %do scale 0.125 : (tensor<2x3x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x3x16x8xf32>) -> (tensor<2x3x16x8xf32>, tensor<2x2x16x8xf32>, tensor<2x2x16x8xf32>)
  return
}

// -----

func.func @attention_grad_dropout(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+2 {{dropout must be in [0, 1), got 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q scale 0.125 dropout 1.0 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_grad_positions_together(%q: tensor<2x4x16x8xf32>, %p: tensor<16xi64>) {
  // expected-error @+1 {{q_positions and k_positions are given together}}
  %0:3 = "weft.attention_grad"(%q, %q, %q, %q, %p) {scale = 0.125 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 1, 0, 0, 0>} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<16xi64>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_grad_positions_size(%q: tensor<2x4x16x8xf32>, %p: tensor<16xi64>, %kp: tensor<8xi64>) {
  // expected-error @+1 {{k_positions must be a vector of 16 positions, got 'tensor<8xi64>'}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q positions %p, %kp scale 0.125 causal : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<16xi64>, tensor<8xi64>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_grad_saved_together(%q: tensor<2x4x16x8xf32>) {
  // expected-error @+1 {{out and lse are given together}}
  %0:3 = "weft.attention_grad"(%q, %q, %q, %q, %q) {scale = 0.125 : f32, operandSegmentSizes = array<i32: 1, 1, 1, 1, 0, 0, 0, 0, 1, 0>} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_grad_saved_out(%q: tensor<2x4x16x8xf32>, %o: tensor<2x4x16x8xbf16>, %l: tensor<2x4x16x1xf32>) {
  // expected-error @+1 {{out must have the attention output's type 'tensor<2x4x16x8xf32>', got 'tensor<2x4x16x8xbf16>'}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q saved %o, %l scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xbf16>, tensor<2x4x16x1xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_grad_saved_lse(%q: tensor<2x4x16x8xf32>, %l: tensor<2x4x16x1xbf16>) {
  // expected-error @+1 {{lse must be each query row's log-sum-exp, 'tensor<2x4x16x1xf32>', got 'tensor<2x4x16x1xbf16>'}}
  %0:3 = weft.attention_grad %q, %q, %q grad %q saved %q, %l scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x1xbf16>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>)
  return
}

// -----

func.func @attention_result(%q: tensor<2x4x16x8xf32>, %v: tensor<2x4x16x2xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<2x4x16x2xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.attention %q, %q, %v scale 0.125 : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>, tensor<2x4x16x2xf32>) -> tensor<2x4x16x8xf32>
  return
}

// -----

//===--- indexing and data movement ---===//

func.func @embedding_table_rank(%t: tensor<100xf32>, %i: tensor<4xi64>) {
  // expected-error @+2 {{table must have rank 2 ([vocab, hidden])}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.embedding %t[%i] : (tensor<100xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @embedding_indices(%t: tensor<100x8xf32>, %i: tensor<4xf32>) {
  // expected-error @+1 {{operand #1 must be statically shaped tensor of 64-bit signless integer or 32-bit signless integer values}}
  %0 = weft.embedding %t[%i] : (tensor<100x8xf32>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @embedding_result(%t: tensor<100x8xf32>, %i: tensor<4xi64>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x8xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.embedding %t[%i] : (tensor<100x8xf32>, tensor<4xi64>) -> tensor<8x4xf32>
  return
}

// -----

func.func @gather_axis(%x: tensor<4x8xf32>, %i: tensor<2xi64>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.gather %x[%i] axis 2 : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<4x2xf32>
  return
}

// -----

func.func @gather_result(%x: tensor<4x8xf32>, %i: tensor<2xi64>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x2xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.gather %x[%i] axis 1 : (tensor<4x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  return
}

// -----

func.func @reshape_elements(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{cannot reshape 'tensor<4x8xf32>' (32 elements) to 'tensor<4x4xf32>' (16 elements)}}
  %0 = weft.reshape %x : tensor<4x8xf32> -> tensor<4x4xf32>
  return
}

// -----

func.func @reshape_element_type(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.reshape %x : tensor<4x8xf32> -> tensor<32xf16>
  return
}

// -----

func.func @transpose_length(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{permutation has 3 entries for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.transpose %x permutation [0, 1, 2] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @transpose_not_permutation(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{[1, 1] is not a permutation of 0..1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.transpose %x permutation [1, 1] : tensor<4x8xf32> -> tensor<8x8xf32>
  return
}

// -----

func.func @transpose_result(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<8x4xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.transpose %x permutation [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_entries(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{starts, limits and strides need one entry per dimension (2)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.slice %x starts [0] limits [4] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_bounds(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{dimension 1: need 0 <= start <= limit <= size, got start 2, limit 9, size 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.slice %x starts [0, 2] limits [4, 9] : tensor<4x8xf32> -> tensor<4x7xf32>
  return
}

// -----

func.func @slice_start_after_limit(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{dimension 0: need 0 <= start <= limit <= size, got start 3, limit 1, size 4}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.slice %x starts [3, 0] limits [1, 8] : tensor<4x8xf32> -> tensor<0x8xf32>
  return
}

// -----

func.func @slice_stride(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{dimension 1: stride must be at least 1, got 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.slice %x starts [0, 0] limits [4, 8] strides [1, 0] : tensor<4x8xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @slice_result(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x3xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.slice %x starts [0, 1] limits [4, 8] strides [1, 3] : tensor<4x8xf32> -> tensor<4x2xf32>
  return
}

// -----

func.func @concat_no_inputs() {
  // expected-error @+1 {{expected 1 or more operands, but found 0}}
  %0 = weft.concat axis 0 : () -> tensor<4xf32>
  return
}

// -----

func.func @concat_rank(%a: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+2 {{inputs must have one rank}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.concat %a, %b axis 0 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<5x8xf32>
  return
}

// -----

func.func @concat_dims(%a: tensor<4x8xf32>, %b: tensor<4x4xf32>) {
  // expected-error @+2 {{inputs differ in dimension 1 (only the axis 0 may differ)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.concat %a, %b axis 0 : (tensor<4x8xf32>, tensor<4x4xf32>) -> tensor<8x8xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<4x8xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.concat %a, %a axis 2 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @concat_element_type(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.concat %a, %b axis 0 : (tensor<4xf32>, tensor<4xf16>) -> tensor<8xf32>
  return
}

// -----

func.func @concat_result(%a: tensor<4xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<8xf32>' are incompatible}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.concat %a, %a axis 0 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @split_axis(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{axis 2 is out of range for rank 2}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.split %x axis 2 sizes [4, 4] : tensor<4x8xf32> -> (tensor<4x4xf32>, tensor<4x4xf32>)
  return
}

// -----

func.func @split_no_sizes(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{needs at least one size}}
  // expected-error @+1 {{failed to infer returned types}}
  "weft.split"(%x) <{axis = 1 : i64, sizes = array<i64>}> : (tensor<4x8xf32>) -> ()
  return
}

// -----

func.func @split_sum(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{sizes add up to 6 but dimension 1 has 8}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.split %x axis 1 sizes [2, 4] : tensor<4x8xf32> -> (tensor<4x2xf32>, tensor<4x4xf32>)
  return
}

// -----

func.func @split_negative(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{sizes must not be negative, got -1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = weft.split %x axis 1 sizes [9, -1] : tensor<4x8xf32> -> (tensor<4x9xf32>, tensor<4x0xf32>)
  return
}

// -----

func.func @split_result_count(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{inferred type(s) 'tensor<4x4xf32>', 'tensor<4x4xf32>' are incompatible with return type(s) of operation 'tensor<4x8xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.split %x axis 1 sizes [4, 4] : tensor<4x8xf32> -> (tensor<4x8xf32>)
  return
}

// -----

func.func @broadcast_to_shape(%x: tensor<3xf32>) {
  // expected-error @+1 {{cannot broadcast 'tensor<3xf32>' to 'tensor<2x4xf32>'}}
  %0 = weft.broadcast_to %x : tensor<3xf32> -> tensor<2x4xf32>
  return
}

// -----

func.func @broadcast_to_rank(%x: tensor<1x4xf32>) {
  // expected-error @+1 {{cannot broadcast 'tensor<1x4xf32>' to 'tensor<4xf32>'}}
  %0 = weft.broadcast_to %x : tensor<1x4xf32> -> tensor<4xf32>
  return
}

// -----

func.func @broadcast_to_element_type(%x: tensor<4xf32>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.broadcast_to %x : tensor<4xf32> -> tensor<2x4xbf16>
  return
}

// -----

func.func @cumsum_axis(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{axis 2 is not a dimension of 'tensor<4x8xf32>'}}
  %0 = weft.cumsum %x axis 2 : tensor<4x8xf32>
  return
}

// -----

func.func @cumsum_result(%x: tensor<4x8xi64>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.cumsum"(%x) <{axis = 1 : i64}> : (tensor<4x8xi64>) -> tensor<4x8xf32>
  return
}

// -----

func.func @trilu_rank(%x: tensor<4xf32>) {
  // expected-error @+1 {{needs rank at least 2, got 'tensor<4xf32>'}}
  %0 = weft.trilu %x : tensor<4xf32>
  return
}

// -----

func.func @trilu_result(%x: tensor<4x4xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.trilu"(%x) <{diagonal = 0 : i64}> : (tensor<4x4xf32>) -> tensor<4x4xbf16>
  return
}

// -----

func.func @cross_entropy_logits_rank(%l: tensor<f32>, %y: tensor<i64>) {
  // expected-error @+2 {{logits must have rank at least 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.cross_entropy %l, %y reduction mean : (tensor<f32>, tensor<i64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_labels(%l: tensor<4x8x10xf32>, %y: tensor<4x10xi64>) {
  // expected-error @+2 {{labels must have shape [4, 8] (logits without the class dimension), got 'tensor<4x10xi64>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.cross_entropy %l, %y reduction sum : (tensor<4x8x10xf32>, tensor<4x10xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_result(%l: tensor<4x10xf32>, %y: tensor<4xi64>) {
  // expected-error @+2 {{inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<4xf32>'}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = weft.cross_entropy %l, %y reduction mean : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<4xf32>
  return
}

// -----

//===--- repeated structure ---===//

func.func @layer_kind(%x: tensor<4xf32>) {
  // expected-error @+1 {{needs a non-empty kind}}
  %0 = weft.layer ""(%x) index 0 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    weft.yield %a : tensor<4xf32>
  }
  return
}

// -----

func.func @layer_index(%x: tensor<4xf32>) {
  // expected-error @+1 {{attribute 'index' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = weft.layer "block"(%x) index -1 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    weft.yield %a : tensor<4xf32>
  }
  return
}

// -----

func.func @layer_arguments(%x: tensor<4xf32>) {
  // expected-error @+1 {{body arguments 'tensor<8xf32>' must have the operand types 'tensor<4xf32>'}}
  %0 = weft.layer "block"(%x) index 0 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<8xf32>):
    %c = weft.constant dense<0.0> : tensor<4xf32>
    weft.yield %c : tensor<4xf32>
  }
  return
}

// -----

func.func @layer_results(%x: tensor<4xf32>) {
  // expected-error @+1 {{yields 'tensor<4xf32>' but the layer returns 'tensor<4xf16>'}}
  %0 = weft.layer "block"(%x) index 0 : (tensor<4xf32>) -> tensor<4xf16> {
  ^bb0(%a: tensor<4xf32>):
    weft.yield %a : tensor<4xf32>
  }
  return
}

// -----

func.func @layer_isolated(%x: tensor<4xf32>) {
  // expected-note @+1 {{required by region isolation constraints}}
  %0 = weft.layer "block"(%x) index 0 : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    // expected-error @+1 {{using value defined outside the region}}
    %b = weft.add %a, %x : tensor<4xf32>
    weft.yield %b : tensor<4xf32>
  }
  return
}

// -----

func.func @yield_outside_layer(%x: tensor<4xf32>) {
  // expected-error @+1 {{expects parent op to be one of 'weft.layer, weft.fusion'}}
  weft.yield %x : tensor<4xf32>
}

// -----

//===--- mesh ---===//

// expected-error @+1 {{needs at least one axis}}
weft.mesh @empty()

// -----

// expected-error @+1 {{axis 'tp' is declared twice}}
weft.mesh @twice(tp = 2, tp = 4)

// -----

// expected-error @+1 {{axis 'dp' has size 0; sizes must be at least 1}}
weft.mesh @zero(dp = 0)

// -----

// expected-error @+1 {{axis names must not be empty}}
weft.mesh @unnamed("" = 2)

// -----

// expected-error @+1 {{has 2 axis names but 1 sizes}}
"weft.mesh"() <{sym_name = "m", axes = ["a", "b"], shape = array<i64: 2>}> : () -> ()

// -----

func.func @mesh_in_function() {
  // expected-error @+1 {{expects parent op 'builtin.module'}}
  weft.mesh @inner(tp = 2)
  return
}

// -----

//===--- sharding attribute ---===//

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{mesh axis 'tp' is used more than once}}
func.func @sharding_axis_twice(%x: tensor<8x8xf32> {weft.sharding = #weft.sharding<@world, [[tp], []], partial = [tp]>}) {
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{axis names must not be empty (dimension 0)}}
func.func @sharding_empty_axis(%x: tensor<8x8xf32> {weft.sharding = #weft.sharding<@world, [[""], []]>}) {
  return
}

// -----

// expected-error @+1 {{invalid sharding of argument #0: mesh @nowhere is not a weft.mesh in the enclosing module}}
func.func @sharding_unknown_mesh(%x: tensor<8xf32> {weft.sharding = #weft.sharding<@nowhere, [[tp]]>}) {
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{invalid sharding of argument #0: mesh @world has no axis 'sp'}}
func.func @sharding_unknown_axis(%x: tensor<8xf32> {weft.sharding = #weft.sharding<@world, [[sp]]>}) {
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{invalid sharding of result #0: mesh @world has no axis 'cp'}}
func.func @sharding_unknown_partial_axis() -> (tensor<8xf32> {weft.sharding = #weft.sharding<@world, [[]], partial = [cp]>}) {
  %0 = weft.constant dense<0.0> : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{invalid sharding of argument #0: has 1 dimension entries for a tensor of rank 2}}
func.func @sharding_rank(%x: tensor<8x8xf32> {weft.sharding = #weft.sharding<@world, [[tp]]>}) {
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{invalid sharding of argument #0: dimension 0 of size 6 does not split into 8 equal parts}}
func.func @sharding_divides(%x: tensor<6xf32> {weft.sharding = #weft.sharding<@world, [[dp, tp]]>}) {
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
// expected-error @+1 {{'weft.sharding' on argument #0 must be a #weft.sharding, got "tp"}}
func.func @sharding_not_an_attr(%x: tensor<8xf32> {weft.sharding = "tp"}) {
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @sharding_per_result(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.sharding' on an op must be an array with one #weft.sharding per result (1)}}
  %0 = weft.exp %x {weft.sharding = #weft.sharding<@world, [[tp]]>} : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @sharding_op_result(%x: tensor<6xf32>) {
  // expected-error @+1 {{invalid sharding of result #0: dimension 0 of size 6 does not split into 4 equal parts}}
  %0 = weft.exp %x {weft.sharding = [#weft.sharding<@world, [[tp]]>]} : tensor<6xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @input_shardings_per_input(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.input_shardings' is an array with one #weft.sharding per input of a weft.layer}}
  %0 = weft.layer "h"(%x) index 0 {weft.input_shardings = []} : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    weft.yield %a : tensor<8xf32>
  }
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @input_shardings_on_layers_only(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.input_shardings' is an array with one #weft.sharding per input of a weft.layer}}
  %0 = weft.exp %x {weft.input_shardings = [#weft.sharding<@world, [[tp]]>]} : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @input_shardings_divide(%x: tensor<6xf32>) {
  // expected-error @+1 {{invalid sharding of layer input #0: dimension 0 of size 6 does not split into 4 equal parts}}
  %0 = weft.layer "h"(%x) index 0 {weft.input_shardings = [#weft.sharding<@world, [[tp]]>]} : (tensor<6xf32>) -> tensor<6xf32> {
  ^bb0(%a: tensor<6xf32>):
    weft.yield %a : tensor<6xf32>
  }
  return
}

// -----

func.func @stored_over_not_a_parameter(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.stored_over' is a non-empty list of mesh axes on a weft.parameter}}
  %0 = weft.exp %x {weft.stored_over = ["gz"]} : tensor<8xf32>
  return
}

// -----

func.func @stored_over_scalar() {
  // expected-error @+1 {{'weft.stored_over' splits a weight's first dimension; a scalar weight has none}}
  %0 = weft.parameter "s" {weft.stored_over = ["gz"]} : tensor<f32>
  return
}

// -----

func.func @stored_over_empty() {
  // expected-error @+1 {{'weft.stored_over' is a non-empty list of mesh axes on a weft.parameter}}
  %0 = weft.parameter "w" {weft.stored_over = []} : tensor<8x8xf32>
  return
}

// -----

// expected-error @+1 {{'weft.gradient_reduction' names @missing, which is not a function of the module}}
func.func @gradient_reduction_missing() attributes {weft.gradient_reduction = @missing} {
  return
}

// -----

// expected-error @+1 {{'weft.gradient_reduction' names a function (@symbol) on a function}}
func.func @gradient_reduction_not_a_symbol() attributes {weft.gradient_reduction = "f"} {
  return
}

// -----

// expected-error @+1 {{'weft.reduce_every_micro_batch' is a unit attribute on a function that has a 'weft.gradient_reduction'}}
func.func @reduce_every_micro_batch_alone() attributes {weft.reduce_every_micro_batch} {
  return
}

// -----

// expected-error @+1 {{'weft.micro_batch_block' is a positive integer on a function that has 'weft.reduce_every_micro_batch'}}
func.func @micro_batch_block_alone() attributes {weft.micro_batch_block = 2 : i64} {
  return
}

// -----

func.func private @reduce()
// expected-error @+1 {{'weft.micro_batch_block' is a positive integer on a function that has 'weft.reduce_every_micro_batch'}}
func.func @micro_batch_block_zero() attributes {weft.gradient_reduction = @reduce, weft.reduce_every_micro_batch, weft.micro_batch_block = 0 : i64} {
  return
}

// -----

func.func @decomposed_not_unit(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.decomposed' is a unit attribute}}
  %0 = weft.exp %x {weft.decomposed = 1} : tensor<8xf32>
  return
}

// -----

func.func @unknown_weft_attribute(%x: tensor<8xf32>) {
  // expected-error @+1 {{unknown weft attribute 'weft.shard' (the dialect defines 'weft.sharding')}}
  %0 = weft.exp %x {weft.shard = 1} : tensor<8xf32>
  return
}

// -----

//===--- collectives ---===//

func.func @collective_unknown_mesh(%x: tensor<8xf32>) {
  // expected-error @+1 {{mesh @world is not a weft.mesh in the enclosing module; declare it, e.g. 'weft.mesh @world(tp = 2)'}}
  %0 = weft.all_reduce sum %x over @world ["tp"] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @collective_no_axes(%x: tensor<8xf32>) {
  // expected-error @+1 {{needs at least one mesh axis}}
  %0 = weft.all_reduce sum %x over @world [] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @collective_axis_twice(%x: tensor<8xf32>) {
  // expected-error @+1 {{names mesh axis 'tp' twice}}
  %0 = weft.all_reduce max %x over @world ["tp", "tp"] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @collective_unknown_axis(%x: tensor<8xf32>) {
  // expected-error @+1 {{mesh @world has no axis 'sp'}}
  %0 = weft.all_reduce sum %x over @world ["sp"] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @codec_on_integers(%x: tensor<8xi64>) {
  // expected-error @+1 {{codec int8 compresses floats; this collective sends 'tensor<8xi64>' (drop the codec)}}
  %0 = weft.all_reduce sum %x over @world ["dp"] codec int8 : tensor<8xi64>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @topk_on_gather(%x: tensor<8xf32>) {
  // expected-error @+1 {{codec topk sends a summed gradient's largest elements: only an all_reduce sum or avg takes it}}
  %0 = weft.all_gather %x over @world ["dp"] dim 0 codec topk : tensor<8xf32> -> tensor<16xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @topk_on_max(%x: tensor<8xf32>) {
  // expected-error @+1 {{codec topk_noef sends a summed gradient's largest elements: only an all_reduce sum or avg takes it}}
  %0 = weft.all_reduce max %x over @world ["dp"] codec topk_noef : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @codec_unknown(%x: tensor<8xf32>) {
  // expected-error @+1 {{expected string or keyword containing one of the following enum values for attribute 'codec' [none, bf16, fp8, int8, topk, topk_noef]}}
  %0 = weft.all_gather %x over @world ["tp"] dim 0 codec int4 : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_reduce_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.all_reduce"(%x) <{kind = 0 : i32, mesh = @world, axes = ["tp"]}> : (tensor<8xf32>) -> tensor<8xf16>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_gather_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{dim 1 is out of range for 'tensor<8xf32>'}}
  %0 = weft.all_gather %x over @world ["tp"] dim 1 : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_gather_shape(%x: tensor<2x8xf32>) {
  // expected-error @+1 {{result shape must be [2, 64], got 'tensor<2x32xf32>'}}
  %0 = weft.all_gather %x over @world ["dp", "tp"] dim 1 : tensor<2x8xf32> -> tensor<2x32xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_gather_element_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{requires the same element type for all operands and results}}
  %0 = weft.all_gather %x over @world ["tp"] dim 0 : tensor<8xf32> -> tensor<32xbf16>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_reduce_members_axes(%x: tensor<8xf32>) {
  // expected-error @+1 {{with 'members' spans one mesh axis, not 2}}
  %0 = weft.all_reduce sum %x over @world ["dp", "tp"] members [0, 1] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_reduce_members_one(%x: tensor<8xf32>) {
  // expected-error @+1 {{'members' lists at least two coordinates}}
  %0 = weft.all_reduce sum %x over @world ["tp"] members [3] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_reduce_members_range(%x: tensor<8xf32>) {
  // expected-error @+1 {{'members' are coordinates of axis "tp" (size 4) in increasing order}}
  %0 = weft.all_reduce sum %x over @world ["tp"] members [0, 4] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_reduce_members_order(%x: tensor<8xf32>) {
  // expected-error @+1 {{'members' are coordinates of axis "tp" (size 4) in increasing order}}
  %0 = weft.all_reduce sum %x over @world ["tp"] members [3, 0] : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_gather_hold_activation(%x: tensor<8xf32>) {
  // expected-error @+1 {{with 'hold' gathers a weight's block (a weft.parameter through weft.all_slice ops); a value computed per micro-batch cannot be held over a block}}
  %0 = weft.all_gather %x over @world ["tp"] dim 0 hold 2 : tensor<8xf32> -> tensor<32xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_gather_hold_zero() {
  %w = weft.parameter "w" : tensor<8xf32>
  %b = weft.all_slice %w over @world ["dp"] dim 0 : tensor<8xf32> -> tensor<4xf32>
  // expected-error @+1 {{attribute 'hold' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = weft.all_gather %b over @world ["dp"] dim 0 hold 0 : tensor<4xf32> -> tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_slice_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{dim 1 is out of range for 'tensor<8xf32>'}}
  %0 = weft.all_slice %x over @world ["tp"] dim 1 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_slice_divides(%x: tensor<6xf32>) {
  // expected-error @+1 {{dimension 0 of size 6 does not divide by the group size 4}}
  %0 = weft.all_slice %x over @world ["tp"] dim 0 : tensor<6xf32> -> tensor<1xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_slice_shape(%x: tensor<8xf32>) {
  // expected-error @+1 {{result shape must be [2], got 'tensor<4xf32>'}}
  %0 = weft.all_slice %x over @world ["tp"] dim 0 : tensor<8xf32> -> tensor<4xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @reduce_scatter_dim(%x: tensor<8xf32>) {
  // expected-error @+1 {{dim 3 is out of range for 'tensor<8xf32>'}}
  %0 = weft.reduce_scatter sum %x over @world ["tp"] dim 3 : tensor<8xf32> -> tensor<2xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @reduce_scatter_divides(%x: tensor<6xf32>) {
  // expected-error @+1 {{dimension 0 of size 6 does not divide by the group size 4}}
  %0 = weft.reduce_scatter sum %x over @world ["tp"] dim 0 : tensor<6xf32> -> tensor<1xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @reduce_scatter_zigzag_divides(%x: tensor<4xf32>) {
  // expected-error @+1 {{dimension 0 of size 4 does not divide by the group size 4 times 2 (zigzag)}}
  %0 = weft.reduce_scatter sum %x over @world ["tp"] dim 0 zigzag : tensor<4xf32> -> tensor<1xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @reduce_scatter_shape(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{result shape must be [8, 2], got 'tensor<2x8xf32>'}}
  %0 = weft.reduce_scatter sum %x over @world ["tp"] dim 1 : tensor<8x8xf32> -> tensor<2x8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_to_all_split_dim(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{split_dim 2 is out of range for 'tensor<8x8xf32>'}}
  %0 = weft.all_to_all %x over @world ["tp"] split_dim 2 concat_dim 0 : tensor<8x8xf32> -> tensor<8x8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_to_all_concat_dim(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{concat_dim 5 is out of range for 'tensor<8x8xf32>'}}
  %0 = weft.all_to_all %x over @world ["tp"] split_dim 0 concat_dim 5 : tensor<8x8xf32> -> tensor<8x8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_to_all_divides(%x: tensor<6x8xf32>) {
  // expected-error @+1 {{split dimension 0 of size 6 does not divide by the group size 4}}
  %0 = weft.all_to_all %x over @world ["tp"] split_dim 0 concat_dim 1 : tensor<6x8xf32> -> tensor<1x32xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @all_to_all_shape(%x: tensor<8x8xf32>) {
  // expected-error @+1 {{result shape must be [2, 32], got 'tensor<32x2xf32>'}}
  %0 = weft.all_to_all %x over @world ["tp"] split_dim 0 concat_dim 1 : tensor<8x8xf32> -> tensor<32x2xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @permute_shift(%x: tensor<8xf32>) {
  // expected-error @+1 {{shift 8 is a multiple of the group size 4, so nothing moves}}
  %0 = weft.collective_permute %x over @world ["tp"] shift 8 : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @permute_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.collective_permute"(%x) <{mesh = @world, axes = ["tp"], shift = 1 : i64}> : (tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

weft.mesh @world(pp = 4)
func.func @send_offset_zero(%x: tensor<8xf32>) {
  // expected-error @+1 {{offset 0 must be non-zero with magnitude below the group size 4}}
  weft.send %x to @world ["pp"] offset 0 : tensor<8xf32>
  return
}

// -----

weft.mesh @world(pp = 4)
func.func @send_tag(%x: tensor<8xf32>) {
  // expected-error @+1 {{attribute 'tag' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  weft.send %x to @world ["pp"] offset 1 tag -2 : tensor<8xf32>
  return
}

// -----

weft.mesh @world(pp = 4)
func.func @recv_offset_range() -> tensor<8xf32> {
  // expected-error @+1 {{offset -4 must be non-zero with magnitude below the group size 4}}
  %0 = weft.recv from @world ["pp"] offset -4 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

weft.mesh @world(pp = 4)
func.func @recv_tag() -> tensor<8xf32> {
  // expected-error @+1 {{attribute 'tag' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
  %0 = weft.recv from @world ["pp"] offset 1 tag -1 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @broadcast_root(%x: tensor<8xf32>) {
  // expected-error @+1 {{root 4 is not a rank of a group of 4}}
  %0 = weft.broadcast %x over @world ["tp"] root 4 : tensor<8xf32>
  return
}

// -----

weft.mesh @world(dp = 2, tp = 4)
func.func @broadcast_type(%x: tensor<8xf32>) {
  // expected-error @+1 {{requires the same type for all operands and results}}
  %0 = "weft.broadcast"(%x) <{mesh = @world, axes = ["tp"], root = 0 : i64}> : (tensor<8xf32>) -> tensor<8xi32>
  return
}

// -----

func.func @fusion_not_elementwise(%x: tensor<4x8xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{of kind elementwise holds 'weft.reduce_sum', which is not elementwise}}
  %0 = weft.fusion elementwise(%x) : (tensor<4x8xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4x8xf32>):
    %s = weft.reduce_sum %a axes [1] : tensor<4x8xf32> -> tensor<4xf32>
    weft.yield %s : tensor<4xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fusion_shape(%v: tensor<8xf32>, %x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{of kind elementwise holds 'weft.exp' of shape 'tensor<8xf32>', not the fusion's}}
  %0 = weft.fusion elementwise(%v, %x) : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<8xf32>, %b: tensor<4x8xf32>):
    %e = weft.exp %a : tensor<8xf32>
    %s = weft.add %b, %e : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    weft.yield %s : tensor<4x8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// -----

func.func @fusion_arguments(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{body arguments 'tensor<8xf32>' must have the operand types 'tensor<4xf32>'}}
  %0 = weft.fusion elementwise(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<8xf32>):
    %e = weft.exp %a : tensor<8xf32>
    weft.yield %e : tensor<8xf32>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fusion_yield(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{yields 'tensor<4xi64>' but the fusion returns 'tensor<4xf32>'}}
  %0 = weft.fusion elementwise(%x) : (tensor<4xf32>) -> tensor<4xf32> {
  ^bb0(%a: tensor<4xf32>):
    %c = weft.cast %a : tensor<4xf32> -> tensor<4xi64>
    weft.yield %c : tensor<4xi64>
  }
  return %0 : tensor<4xf32>
}

// -----

func.func @fusion_epilogue(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{of kind epilogue must hold a weft.linear and a tanh weft.gelu of its result}}
  %0 = weft.fusion epilogue(%x, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<8x8xf32>):
    %l = weft.linear %a, %b : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %g = weft.gelu %l : tensor<4x8xf32>
    weft.yield %g : tensor<4x8xf32>
  }
  return %0 : tensor<4x8xf32>
}

// -----

func.func @wait_not_collective(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{waits for a value that no communicating collective produced}}
  %0 = weft.wait %x : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @buffer_offsets(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'weft.buffer_offsets' is an array of i64 with one offset per result}}
  %0 = weft.exp %x {weft.buffer_offsets = array<i64: 0, 256>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @buffer_offset_negative(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'weft.buffer_offsets' holds offsets >= 0, or -1 for no buffer}}
  %0 = weft.exp %x {weft.buffer_offsets = array<i64: -2>} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.buffer_offset' is an arena offset (i64 >= 0)}}
func.func @buffer_offset_argument(%x: tensor<4xf32> {weft.buffer_offset = -1 : i64}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.arena_bytes' is a count (i64 >= 0) on a function}}
func.func @arena_bytes(%x: tensor<4xf32>) -> tensor<4xf32> attributes {weft.arena_bytes = "big"} {
  return %x : tensor<4xf32>
}

// -----

//===--- pipeline stages (-weft-split-stages) ---===//

// expected-error @+1 {{'weft.pipeline' is {stages, chunks} (i64 >= 1) on a module}}
module attributes {weft.pipeline = {stages = 0 : i64, chunks = 1 : i64}} {
}

// -----

// expected-error @+1 {{'weft.pipeline_stage' is {stage, rank, chunk} (i64 >= 0) on a function}}
func.func @stage_missing_rank(%x: tensor<4xf32>) -> tensor<4xf32> attributes {weft.pipeline_stage = {stage = 1 : i64, chunk = 0 : i64}} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.model_input' is an index (i64 >= 0) on a function's argument or result}}
func.func @model_input_negative(%x: tensor<4xf32> {weft.model_input = -1 : i64}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.sent_to' is an index (i64 >= 0) on a function's argument or result}}
func.func @sent_to_string(%x: tensor<4xf32>) -> (tensor<4xf32> {weft.sent_to = "next"}) {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.pipeline_stage' has role "loss", not "forward", "backward", "weight" or "evaluation"}}
func.func @stage_bad_role(%x: tensor<4xf32>) -> tensor<4xf32> attributes {weft.pipeline_stage = {stage = 0 : i64, rank = 0 : i64, chunk = 0 : i64, role = "loss"}} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.saved' is an index (i64 >= 0) on a function's argument or result}}
func.func @saved_negative(%x: tensor<4xf32>) -> (tensor<4xf32> {weft.saved = -1 : i64}) {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.cotangent_of' is an index (i64 >= 0) on a function's argument or result}}
func.func @cotangent_of_string(%x: tensor<4xf32> {weft.cotangent_of = "out"}) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.gradient_to' is an index (i64 >= 0) on a function's argument or result}}
func.func @gradient_to_float(%x: tensor<4xf32>) -> (tensor<4xf32> {weft.gradient_to = 1.0 : f32}) {
  return %x : tensor<4xf32>
}

// -----

// A schedule in weft.pipeline (-weft-schedule-pipeline) has all three fields.
// expected-error @+1 {{'weft.pipeline' with a schedule needs schedule (a schedule's name), micro_batches (i64 >= 1) and steps (one list per stage, 2)}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a1:0"]]}} {
}

// -----

// A pipeline's codec (-weft-compress-collectives, pp's) is one the stages'
// sends can take: top-k compresses summed gradients only.
// expected-error @+1 {{'weft.pipeline' has codec "topk": a pipeline's sends take "none", "bf16", "fp8" or "int8" (top-k compresses summed gradients only)}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, codec = "topk"}} {
}

// -----

// expected-error @+1 {{'weft.pipeline' has codec 8 : i64: a pipeline's sends take}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, codec = 8}} {
}

// -----

// expected-error @+1 {{'weft.pipeline' has codec "int4": a pipeline's sends take}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, codec = "int4"}} {
}

// -----

// expected-error @+1 {{pipeline rank 1 has the step "F0.1", which is not F/B/W<mb>[.chunk] or >a|<a|>g|<g<peer>:<mb>[.chunk] with micro-batch < 1, chunk < 1 and another pipeline rank < 2 as peer}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a1:0"], ["<a0:0", "F0.1"]]}} {
}

// -----

// expected-error @+1 {{pipeline rank 0 has the step ">a0:0", which is not}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a0:0"], ["<a0:0", "F0"]]}} {
}

// -----

// expected-error @+1 {{pipeline rank 0 has the step "X0", which is not}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["X0"], []]}} {
}

// -----

// An evaluation (-weft-extract-evaluation) runs forward steps only.
// expected-error @+1 {{pipeline rank 1's evaluation step "B0" is not a forward or a send or receive of activations}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a1:0", "<g1:0", "B0"], ["<a0:0", "F0", "B0", ">g0:0"]], evaluation_steps = [["F0", ">a1:0"], ["<a0:0", "F0", "B0"]]}} {
}

// -----

// expected-error @+1 {{pipeline rank 0's evaluation step ">g1:0" is not a forward or a send or receive of activations}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a1:0"], ["<a0:0", "F0"]], evaluation_steps = [["F0", ">g1:0"], ["<a0:0", "F0"]]}} {
}

// -----

// expected-error @+1 {{'weft.pipeline' has evaluation_steps, which must be one list of step names per stage (2)}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a1:0"], ["<a0:0", "F0"]], evaluation_steps = [["F0", ">a1:0"]]}} {
}

// -----

// Evaluation steps belong to a schedule.
// expected-error @+1 {{'weft.pipeline' with a schedule needs schedule (a schedule's name), micro_batches (i64 >= 1) and steps (one list per stage, 2)}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, evaluation_steps = [["F0", ">a1:0"], ["<a0:0", "F0"]]}} {
}

// -----

// expected-error @+1 {{pipeline rank 1 has the step "F3", which is not}}
module attributes {weft.pipeline = {stages = 2 : i64, chunks = 1 : i64, schedule = "1F1B", micro_batches = 1 : i64, steps = [["F0", ">a1:0"], ["<a0:0", "F0"]], evaluation_steps = [["F0", ">a1:0"], ["<a0:0", "F3"]]}} {
}

// -----

// expected-error @+1 {{'weft.feeds' is one fill per model input on a module: "tokens" for exactly one, "source", "ones", "zeros", "positions", "labels" or "documents" for the others}}
module attributes {weft.feeds = ["ones"]} {
}

// -----

// expected-error @+1 {{'weft.feeds' is one fill per model input on a module: "tokens" for exactly one, "source", "ones", "zeros", "positions", "labels" or "documents" for the others}}
module attributes {weft.feeds = ["tokens", "arange"]} {
}

// -----

// Two inputs cannot both take the token ids.
// expected-error @+1 {{'weft.feeds' is one fill per model input on a module: "tokens" for exactly one, "source", "ones", "zeros", "positions", "labels" or "documents" for the others}}
module attributes {weft.feeds = ["source", "tokens", "tokens"]} {
}

// -----

// expected-error @+1 {{'weft.feeds' is one fill per model input on a module: "tokens" for exactly one, "source", "ones", "zeros", "positions", "labels" or "documents" for the others}}
func.func @feeds_on_a_function() attributes {weft.feeds = ["tokens"]} {
  return
}

// -----

// expected-error @+1 {{'weft.optimizer' is "adamw" or "sgd" on a function}}
func.func @optimizer_unknown_rule() attributes {weft.optimizer = "lamb"} {
  return
}

// -----

// expected-error @+1 {{'weft.optimizer_slot' is {role, parameter} on a function's argument: role is one of param, grad, exp_avg, exp_avg_sq, momentum_buffer (with a parameter name) or grad_divisor, decay_factor, step_size, bias_correction2_sqrt, lr (without one)}}
func.func @optimizer_slot_without_parameter(%p: tensor<4xf32> {weft.optimizer_slot = {role = "param"}}) {
  return
}

// -----

// expected-error @+1 {{'weft.optimizer_slot' is {role, parameter} on a function's result: role is one of param, exp_avg, exp_avg_sq, momentum_buffer (with a parameter name) or grad_norm (without one)}}
func.func @optimizer_slot_grad_result(%g: tensor<4xf32>) -> (tensor<4xf32> {weft.optimizer_slot = {role = "grad", parameter = "w"}}) {
  return %g : tensor<4xf32>
}

// -----

// expected-error @+1 {{'weft.loss_scale' marks a function's f32 scalar argument (a unit attribute)}}
func.func @loss_scale_not_scalar(%s: tensor<2xf32> {weft.loss_scale}) {
  return
}

// -----

// A pipeline rank's optimizer step names a rank the module's pipeline has.
module attributes {weft.pipeline = {chunks = 1 : i64, micro_batches = 1 : i64, schedule = "GPipe", stages = 2 : i64, steps = [["F0"], ["F0"]]}} {
  // expected-error @+1 {{'weft.pipeline_rank' is a pipeline rank (i64 >= 0, below the stages of the module's 'weft.pipeline') on an optimizer step}}
  func.func @optimizer_step_pp2() attributes {weft.optimizer = "sgd", weft.pipeline_rank = 2 : i64} {
    return
  }
}

// -----

// expected-error @+1 {{'weft.pipeline_rank' is a pipeline rank (i64 >= 0, below the stages of the module's 'weft.pipeline') on an optimizer step}}
func.func @not_pipelined() attributes {weft.optimizer = "sgd", weft.pipeline_rank = 0 : i64} {
  return
}

// -----

func.func @context_parallel_not_attention(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.context_parallel' is a list of mesh axes on a weft.attention or weft.attention_grad}}
  %0 = weft.exp %x {weft.context_parallel = ["cp"]} : tensor<8xf32>
  return
}

// -----

func.func @context_parallel_gather_without_ring(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'weft.context_parallel_gather' is a unit attribute on a weft.attention or weft.attention_grad that has 'weft.context_parallel'}}
  %0 = weft.attention %q, %q, %q scale 0.5 causal {weft.context_parallel_gather} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return
}

// -----

func.func @context_parallel_gather_not_unit(%q: tensor<1x2x8x4xf32>) {
  // expected-error @+1 {{'weft.context_parallel_gather' is a unit attribute on a weft.attention or weft.attention_grad that has 'weft.context_parallel'}}
  %0 = weft.attention %q, %q, %q scale 0.5 causal {weft.context_parallel = ["cp"], weft.context_parallel_gather = 1} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return
}

// -----

func.func @repeated_kv_heads_not_a_broadcast(%x: tensor<8xf32>) {
  // expected-error @+1 {{'weft.repeated_kv_heads' is a unit attribute on a weft.broadcast_to}}
  %0 = weft.exp %x {weft.repeated_kv_heads} : tensor<8xf32>
  return
}

// -----

func.func @repeated_kv_heads_not_unit(%x: tensor<2x1x1x8x4xf32>) {
  // expected-error @+1 {{'weft.repeated_kv_heads' is a unit attribute on a weft.broadcast_to}}
  %0 = weft.broadcast_to %x {weft.repeated_kv_heads = 2} : tensor<2x1x1x8x4xf32> -> tensor<2x1x2x8x4xf32>
  return
}
