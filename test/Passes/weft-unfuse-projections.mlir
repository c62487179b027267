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

// A weight and bias in an external file become column windows of the same
// bytes: nothing is read, and the pieces are what tp splits.
// CHECK-LABEL: func.func @external
func.func @external(%x: tensor<1x2x4xf32>) -> (tensor<1x2x2xf32>, tensor<1x2x6xf32>) {
  %w = weft.parameter "c_attn" external <"model.onnx.data", offset = 0, length = 128> : tensor<4x8xf32>
  %b = weft.parameter "c_attn.bias" external <"model.onnx.data", offset = 128, length = 32> : tensor<8xf32>
  // CHECK-DAG: weft.parameter "c_attn.part0" external <"model.onnx.data", offset = 0, length = 128, columns = 0 of 8> : tensor<4x2xf32>
  // CHECK-DAG: weft.parameter "c_attn.part1" external <"model.onnx.data", offset = 0, length = 128, columns = 2 of 8> : tensor<4x6xf32>
  // CHECK-DAG: weft.parameter "c_attn.bias.part1" external <"model.onnx.data", offset = 128, length = 32, columns = 2 of 8> : tensor<6xf32>
  // CHECK-NOT: weft.split
  %y = weft.linear %x, %w, %b : (tensor<1x2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %p:2 = weft.split %y axis 2 sizes [2, 6] : tensor<1x2x8xf32> -> (tensor<1x2x2xf32>, tensor<1x2x6xf32>)
  return %p#0, %p#1 : tensor<1x2x2xf32>, tensor<1x2x6xf32>
}

// -----

// Slicing the fused output (h[..., :d], h[..., d:2d], h[..., 2d:]) cuts it
// just as split does.
// CHECK-LABEL: func.func @qkv_slices
// CHECK: %[[W0:.*]] = weft.parameter "qkv.weight.part0" : tensor<8x8xf32> = dense<1.000000e+00>
// CHECK: %[[Q:.*]] = weft.linear %arg0, %[[W0]], %{{.*}} : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK: "qkv.bias.part1" : tensor<8xf32>
// CHECK: %[[K:.*]] = weft.linear
// CHECK: "qkv.weight.part2" : tensor<8x8xf32> = dense<3.000000e+00>
// CHECK: %[[V:.*]] = weft.linear
// CHECK-NOT: weft.slice
// CHECK: return %[[Q]], %[[K]], %[[V]]
func.func @qkv_slices(%x: tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %w = weft.parameter "qkv.weight" : tensor<8x24xf32> = dense<[[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]]>
  %b = weft.parameter "qkv.bias" : tensor<24xf32>
  %h = weft.linear %x, %w, %b : (tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
  %q = weft.slice %h starts [0, 0, 0] limits [2, 4, 8] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  %k = weft.slice %h starts [0, 0, 8] limits [2, 4, 16] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  %v = weft.slice %h starts [0, 0, 16] limits [2, 4, 24] : tensor<2x4x24xf32> -> tensor<2x4x8xf32>
  return %q, %k, %v : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// qkv.view(b, s, 3, h, d)[:, :, i]: a view to [..., 3, h, d] indexed with
// constants on the 3; each piece's linear is viewed as [..., h, d]. A bias
// that is not a parameter of its own is sliced as a value.
// CHECK-LABEL: func.func @qkv_view
// CHECK: %[[B:.*]] = weft.slice %arg1 starts [8] limits [16] : tensor<24xf32> -> tensor<8xf32>
// CHECK: %[[K:.*]] = weft.linear %arg0, %{{.*}}, %[[B]] : (tensor<2x4x8xf32>, tensor<8x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK: weft.reshape %[[K]] : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
// CHECK-NOT: weft.gather
func.func @qkv_view(%x: tensor<2x4x8xf32>, %b: tensor<24xf32>) -> (tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>) {
  %w = weft.parameter "qkv.weight" : tensor<8x24xf32>
  %h = weft.linear %x, %w, %b : (tensor<2x4x8xf32>, tensor<8x24xf32>, tensor<24xf32>) -> tensor<2x4x24xf32>
  %r = weft.reshape %h : tensor<2x4x24xf32> -> tensor<2x4x3x2x4xf32>
  %i0 = weft.constant dense<0> : tensor<i64>
  %i1 = weft.constant dense<1> : tensor<i64>
  %i2 = weft.constant dense<2> : tensor<i64>
  %q = weft.gather %r[%i0] axis 2 : (tensor<2x4x3x2x4xf32>, tensor<i64>) -> tensor<2x4x2x4xf32>
  %k = weft.gather %r[%i1] axis 2 : (tensor<2x4x3x2x4xf32>, tensor<i64>) -> tensor<2x4x2x4xf32>
  %v = weft.gather %r[%i2] axis 2 : (tensor<2x4x3x2x4xf32>, tensor<i64>) -> tensor<2x4x2x4xf32>
  return %q, %k, %v : tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>, tensor<2x4x2x4xf32>
}

// -----

// nn.Linear(h, 3h) stores its weight [out, in] (transpose_weight): the
// pieces are rows, and each piece's linear keeps transpose_weight.
// CHECK-LABEL: func.func @qkv_linear
// CHECK-DAG: weft.parameter "qkv.weight.part0" : tensor<2x2xf32> = dense<{{\[\[}}1.000000e+00, 2.000000e+00], [3.000000e+00, 4.000000e+00]]>
// CHECK-DAG: weft.parameter "qkv.weight.part1" : tensor<1x2xf32> = dense<{{\[\[}}5.000000e+00, 6.000000e+00]]>
// CHECK-DAG: weft.parameter "qkv.bias.part1" : tensor<1xf32> = dense<1.250000e-01>
// CHECK-DAG: weft.linear %arg0, {{.*}} transpose_weight : (tensor<1x2x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<1x2x2xf32>
// CHECK-DAG: weft.linear %arg0, {{.*}} transpose_weight : (tensor<1x2x2xf32>, tensor<1x2xf32>, tensor<1xf32>) -> tensor<1x2x1xf32>
// CHECK-NOT: weft.split
func.func @qkv_linear(%x: tensor<1x2x2xf32>) -> (tensor<1x2x2xf32>, tensor<1x2x1xf32>) {
  %w = weft.parameter "qkv.weight" : tensor<3x2xf32> = dense<[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]>
  %b = weft.parameter "qkv.bias" : tensor<3xf32> = dense<[0.5, 0.25, 0.125]>
  %y = weft.linear %x, %w, %b transpose_weight : (tensor<1x2x2xf32>, tensor<3x2xf32>, tensor<3xf32>) -> tensor<1x2x3xf32>
  %p:2 = weft.split %y axis 2 sizes [2, 1] : tensor<1x2x3xf32> -> (tensor<1x2x2xf32>, tensor<1x2x1xf32>)
  return %p#0, %p#1 : tensor<1x2x2xf32>, tensor<1x2x1xf32>
}

// -----

// Rows of a weight in an external file are one byte range each: the pieces
// are ranges of the same bytes, nothing is read.
// CHECK-LABEL: func.func @external_linear
// CHECK-DAG: weft.parameter "qkv.weight.part0" external <"model.onnx.data", offset = 0, length = 32> : tensor<2x4xf32>
// CHECK-DAG: weft.parameter "qkv.weight.part1" external <"model.onnx.data", offset = 32, length = 96> : tensor<6x4xf32>
// CHECK-DAG: weft.parameter "qkv.bias.part1" external <"model.onnx.data", offset = 128, length = 32, columns = 2 of 8> : tensor<6xf32>
// CHECK-NOT: weft.split
func.func @external_linear(%x: tensor<1x2x4xf32>) -> (tensor<1x2x2xf32>, tensor<1x2x6xf32>) {
  %w = weft.parameter "qkv.weight" external <"model.onnx.data", offset = 0, length = 128> : tensor<8x4xf32>
  %b = weft.parameter "qkv.bias" external <"model.onnx.data", offset = 128, length = 32> : tensor<8xf32>
  %y = weft.linear %x, %w, %b transpose_weight : (tensor<1x2x4xf32>, tensor<8x4xf32>, tensor<8xf32>) -> tensor<1x2x8xf32>
  %p:2 = weft.split %y axis 2 sizes [2, 6] : tensor<1x2x8xf32> -> (tensor<1x2x2xf32>, tensor<1x2x6xf32>)
  return %p#0, %p#1 : tensor<1x2x2xf32>, tensor<1x2x6xf32>
}

// -----

// A narrowed weight (bf16, its file f32: stored = f32) is cut in rows of the
// stored bytes, 16 a row.
// CHECK-LABEL: func.func @narrowed_linear
// CHECK-DAG: weft.parameter "qkv.weight.part0" external <"model.weights", offset = 0, length = 32, stored = f32> : tensor<2x4xbf16>
// CHECK-DAG: weft.parameter "qkv.weight.part1" external <"model.weights", offset = 32, length = 96, stored = f32> : tensor<6x4xbf16>
func.func @narrowed_linear(%x: tensor<1x2x4xbf16>) -> (tensor<1x2x2xbf16>, tensor<1x2x6xbf16>) {
  %w = weft.parameter "qkv.weight" external <"model.weights", offset = 0, length = 128, stored = f32> : tensor<8x4xbf16>
  %y = weft.linear %x, %w transpose_weight : (tensor<1x2x4xbf16>, tensor<8x4xbf16>) -> tensor<1x2x8xbf16>
  %p:2 = weft.split %y axis 2 sizes [2, 6] : tensor<1x2x8xbf16> -> (tensor<1x2x2xbf16>, tensor<1x2x6xbf16>)
  return %p#0, %p#1 : tensor<1x2x2xbf16>, tensor<1x2x6xbf16>
}

// -----

// A transposed weight that is already a column window of its file cannot be
// cut in rows as one byte range each: it stays fused.
// CHECK-LABEL: func.func @windowed_linear
// CHECK: weft.linear %arg0, {{.*}} -> tensor<1x2x8xf32>
// CHECK: weft.split
func.func @windowed_linear(%x: tensor<1x2x4xf32>) -> (tensor<1x2x2xf32>, tensor<1x2x6xf32>) {
  %w = weft.parameter "qkv.weight" external <"model.onnx.data", offset = 0, length = 256, columns = 4 of 8> : tensor<8x4xf32>
  %y = weft.linear %x, %w transpose_weight : (tensor<1x2x4xf32>, tensor<8x4xf32>) -> tensor<1x2x8xf32>
  %p:2 = weft.split %y axis 2 sizes [2, 6] : tensor<1x2x8xf32> -> (tensor<1x2x2xf32>, tensor<1x2x6xf32>)
  return %p#0, %p#1 : tensor<1x2x2xf32>, tensor<1x2x6xf32>
}
