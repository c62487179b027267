// RUN: weft-opt %s -split-input-file -weft-unfuse-projections | FileCheck %s

// GPT-2's fused Q/K/V projection becomes one linear per piece, with the
// weight's and bias's columns sliced into new parameters.
// CHECK-LABEL: func.func @qkv
func.func @qkv(%x: tensor<1x2x2xf32>) -> (tensor<1x2x2xf32>, tensor<1x2x1xf32>) {
  %w = weft.parameter "c_attn" : tensor<2x3xf32> = dense<[[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]>
  %b = weft.parameter "c_attn.bias" : tensor<3xf32> = dense<[0.5, 0.25, 0.125]>
  // CHECK-DAG: weft.parameter "c_attn.part0" : tensor<2x2xf32> = dense<{{\[\[}}1.000000e+00, 2.000000e+00], [4.000000e+00, 5.000000e+00]]>
  // CHECK-DAG: weft.parameter "c_attn.bias.part0" : tensor<2xf32> = dense<[5.000000e-01, 2.500000e-01]>
  // CHECK-DAG: weft.parameter "c_attn.part1" : tensor<2x1xf32> = dense<{{\[\[}}3.000000e+00], [6.000000e+00]]>
  // CHECK-DAG: weft.parameter "c_attn.bias.part1" : tensor<1xf32> = dense<1.250000e-01>
  // CHECK-DAG: weft.linear %arg0, {{.*}} -> tensor<1x2x2xf32>
  // CHECK-DAG: weft.linear %arg0, {{.*}} -> tensor<1x2x1xf32>
  // CHECK-NOT: weft.split
  %y = weft.linear %x, %w, %b : (tensor<1x2x2xf32>, tensor<2x3xf32>, tensor<3xf32>) -> tensor<1x2x3xf32>
  %p:2 = weft.split %y axis 2 sizes [2, 1] : tensor<1x2x3xf32> -> (tensor<1x2x2xf32>, tensor<1x2x1xf32>)
  return %p#0, %p#1 : tensor<1x2x2xf32>, tensor<1x2x1xf32>
}

// -----

// Shape-only parameters (a model imported for planning) become shape-only
// pieces: the planner costs the program that runs.
// CHECK-LABEL: func.func @shape_only
func.func @shape_only(%x: tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
  %w = weft.parameter "c_attn" : tensor<4x8xf32>
  %b = weft.parameter "c_attn.bias" : tensor<8xf32>
  // CHECK-DAG: weft.parameter "c_attn.part0" : tensor<4x4xf32>{{$}}
  // CHECK-DAG: weft.parameter "c_attn.bias.part1" : tensor<4xf32>{{$}}
  // CHECK-NOT: weft.split
  %y = weft.linear %x, %w, %b : (tensor<1x2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %p:2 = weft.split %y axis 2 sizes [4, 4] : tensor<1x2x8xf32> -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>)
  return %p#0, %p#1 : tensor<1x2x4xf32>, tensor<1x2x4xf32>
}

// -----

// A weight in an external file stays fused: its columns are not one byte
// range.
// CHECK-LABEL: func.func @external
func.func @external(%x: tensor<1x2x4xf32>) -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>) {
  %w = weft.parameter "c_attn" external <"model.onnx.data", offset = 0, length = 128> : tensor<4x8xf32>
  // CHECK: weft.linear
  // CHECK: weft.split
  %y = weft.linear %x, %w : (tensor<1x2x4xf32>, tensor<4x8xf32>) -> tensor<1x2x8xf32>
  %p:2 = weft.split %y axis 2 sizes [4, 4] : tensor<1x2x8xf32> -> (tensor<1x2x4xf32>, tensor<1x2x4xf32>)
  return %p#0, %p#1 : tensor<1x2x4xf32>, tensor<1x2x4xf32>
}
