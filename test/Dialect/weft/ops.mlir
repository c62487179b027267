// RUN: weft-opt %s | weft-opt | FileCheck %s
// RUN: weft-opt %s --mlir-print-op-generic | weft-opt | FileCheck %s

// Every weft op, printed, parsed back and printed again in both the custom
// and the generic form.

// CHECK: weft.mesh @world(dp = 2, sp = 2, tp = 4)
weft.mesh @world(dp = 2, sp = 2, tp = 4)
// CHECK: weft.mesh @quoted("data parallel" = 8)
weft.mesh @quoted("data parallel" = 8)

// CHECK-LABEL: func.func @weights
func.func @weights() -> (tensor<768x3072xf32>, tensor<4xf32>, tensor<2x3xbf16>, tensor<2x4xi64>, tensor<2xi1>) {
  // CHECK: weft.parameter "h.0.mlp.fc1.weight" : tensor<768x3072xf32>
  %w = weft.parameter "h.0.mlp.fc1.weight" : tensor<768x3072xf32>
  // CHECK: weft.parameter "bias" : tensor<4xf32> = dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]>
  %b = weft.parameter "bias" : tensor<4xf32> = dense<[1.0, 2.0, 3.0, 4.0]>
  // CHECK: weft.parameter "emb" external <"model.onnx.data", offset = 64, length = 12> : tensor<2x3xbf16>
  %e = weft.parameter "emb" external <"model.onnx.data", offset = 64, length = 12> : tensor<2x3xbf16>
  // A column window of stored rows of 3: rows of 3 bf16, columns 1 and 2.
  // A bf16 parameter whose file holds f32 (a narrowed weight): the length
  // counts the stored bytes.
  // CHECK: weft.parameter "narrowed" external <"model.weights", offset = 0, length = 24, stored = f32> : tensor<2x3xbf16>
  %n = weft.parameter "narrowed" external <"model.weights", offset = 0, length = 24, stored = f32> : tensor<2x3xbf16>
  // CHECK: weft.parameter "narrowed.part1" external <"model.weights", offset = 0, length = 24, columns = 1 of 3, stored = f32> : tensor<2x2xbf16>
  %n1 = weft.parameter "narrowed.part1" external <"model.weights", offset = 0, length = 24, columns = 1 of 3, stored = f32> : tensor<2x2xbf16>
  // CHECK: weft.parameter "emb.part1" external <"model.onnx.data", offset = 64, length = 12, columns = 1 of 3> : tensor<2x2xbf16>
  %e1 = weft.parameter "emb.part1" external <"model.onnx.data", offset = 64, length = 12, columns = 1 of 3> : tensor<2x2xbf16>
  // CHECK: weft.parameter "emb.part0" external <"model.onnx.data", offset = 64, length = 12, columns = 0 of 3> : tensor<2x1xbf16>
  %e0 = weft.parameter "emb.part0" external <"model.onnx.data", offset = 64, length = 12, columns = 0 of 3> : tensor<2x1xbf16>
  // CHECK: weft.iota dim 1 : tensor<2x4xi64>
  %i = weft.iota dim 1 : tensor<2x4xi64>
  // CHECK: weft.constant dense<[true, false]> : tensor<2xi1>
  %c = weft.constant dense<[true, false]> : tensor<2xi1>
  return %w, %b, %e, %i, %c : tensor<768x3072xf32>, tensor<4xf32>, tensor<2x3xbf16>, tensor<2x4xi64>, tensor<2xi1>
}

// CHECK-LABEL: func.func @binary
func.func @binary(%a: tensor<4x8xf32>, %b: tensor<8xf32>, %i: tensor<4x8xi32>, %h: tensor<1x8xf16>) {
  // CHECK: weft.add %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %0 = weft.add %a, %a : tensor<4x8xf32>
  // CHECK: weft.sub %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = weft.sub %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  // CHECK: weft.mul %{{.*}}, %{{.*}} : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = weft.mul %b, %a : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  // CHECK: weft.div %{{.*}}, %{{.*}} : tensor<4x8xi32>
  %3 = weft.div %i, %i : tensor<4x8xi32>
  // CHECK: weft.pow %{{.*}}, %{{.*}} : tensor<1x8xf16>
  %4 = weft.pow %h, %h : tensor<1x8xf16>
  // CHECK: weft.maximum %{{.*}}, %{{.*}} : tensor<4x8xf32>
  %5 = weft.maximum %a, %a : tensor<4x8xf32>
  // CHECK: weft.minimum %{{.*}}, %{{.*}} : tensor<4x8xi32>
  %6 = weft.minimum %i, %i : tensor<4x8xi32>
  // CHECK: weft.compare lt, %{{.*}}, %{{.*}} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  %7 = weft.compare lt, %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xi1>
  // CHECK: weft.where %{{.*}}, %{{.*}}, %{{.*}} : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %8 = weft.where %7, %a, %b : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return
}

// CHECK-LABEL: func.func @unary
func.func @unary(%x: tensor<4x8xf32>, %i: tensor<4xi64>) {
  // CHECK: weft.neg %{{.*}} : tensor<4xi64>
  %0 = weft.neg %i : tensor<4xi64>
  // CHECK: weft.exp
  %1 = weft.exp %x : tensor<4x8xf32>
  // CHECK: weft.log
  %2 = weft.log %x : tensor<4x8xf32>
  // CHECK: weft.sqrt
  %3 = weft.sqrt %x : tensor<4x8xf32>
  // CHECK: weft.rsqrt
  %4 = weft.rsqrt %x : tensor<4x8xf32>
  // CHECK: weft.tanh
  %5 = weft.tanh %x : tensor<4x8xf32>
  // CHECK: weft.erf
  %6 = weft.erf %x : tensor<4x8xf32>
  // CHECK: weft.sin %{{.*}} : tensor<4x8xf32>
  %s = weft.sin %x : tensor<4x8xf32>
  // CHECK: weft.cos %{{.*}} : tensor<4x8xf32>
  %c = weft.cos %x : tensor<4x8xf32>
  // CHECK: weft.sigmoid
  %7 = weft.sigmoid %x : tensor<4x8xf32>
  // CHECK: weft.relu
  %8 = weft.relu %x : tensor<4x8xf32>
  // CHECK: weft.abs %{{.*}} : tensor<4x8xf32>
  %ab = weft.abs %x : tensor<4x8xf32>
  // CHECK: weft.abs %{{.*}} : tensor<4xi64>
  %ai = weft.abs %i : tensor<4xi64>
  // CHECK: weft.cumsum %{{.*}} axis 1 : tensor<4x8xf32>
  %cs = weft.cumsum %x axis 1 : tensor<4x8xf32>
  // CHECK: weft.cumsum %{{.*}} axis 0 exclusive reverse : tensor<4xi64>
  %ci = weft.cumsum %i axis 0 exclusive reverse : tensor<4xi64>
  // CHECK: weft.silu
  %9 = weft.silu %x : tensor<4x8xf32>
  // CHECK: weft.gelu %{{.*}} : tensor<4x8xf32>
  %10 = weft.gelu %x : tensor<4x8xf32>
  // CHECK: weft.gelu %{{.*}} approximation tanh : tensor<4x8xf32>
  %11 = weft.gelu %x approximation tanh : tensor<4x8xf32>
  // CHECK: weft.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xbf16>
  %12 = weft.cast %x : tensor<4x8xf32> -> tensor<4x8xbf16>
  // CHECK: weft.cast %{{.*}} : tensor<4x8xf32> -> tensor<4x8xf64>
  %13 = weft.cast %x : tensor<4x8xf32> -> tensor<4x8xf64>
  return
}

// CHECK-LABEL: func.func @reductions
func.func @reductions(%x: tensor<2x8x16xf32>, %g: tensor<16xf32>, %g2: tensor<8x16xf32>) {
  // CHECK: weft.reduce_sum %{{.*}} axes [2] keep_dims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %0 = weft.reduce_sum %x axes [2] keep_dims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  // CHECK: weft.reduce_mean %{{.*}} axes [0, 2] : tensor<2x8x16xf32> -> tensor<8xf32>
  %1 = weft.reduce_mean %x axes [0, 2] : tensor<2x8x16xf32> -> tensor<8xf32>
  // CHECK: weft.reduce_max %{{.*}} axes [1] : tensor<2x8x16xf32> -> tensor<2x16xf32>
  %2 = weft.reduce_max %x axes [1] : tensor<2x8x16xf32> -> tensor<2x16xf32>
  // CHECK: weft.reduce_logsumexp %{{.*}} axes [2] keep_dims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  %lse = weft.reduce_logsumexp %x axes [2] keep_dims : tensor<2x8x16xf32> -> tensor<2x8x1xf32>
  // CHECK: weft.reduce_logsumexp %{{.*}} axes [0, 2] : tensor<2x8x16xf32> -> tensor<8xf32>
  %lse2 = weft.reduce_logsumexp %x axes [0, 2] : tensor<2x8x16xf32> -> tensor<8xf32>
  // CHECK: weft.softmax %{{.*}} axis 2 : tensor<2x8x16xf32>
  %3 = weft.softmax %x axis 2 : tensor<2x8x16xf32>
  // CHECK: weft.log_softmax %{{.*}} axis 0 : tensor<2x8x16xf32>
  %4 = weft.log_softmax %x axis 0 : tensor<2x8x16xf32>
  // CHECK: weft.softmax %{{.*}} axis 2 scale 1.250000e-01 causal : tensor<2x8x16xf32>
  %s = weft.softmax %x axis 2 scale 0.125 causal : tensor<2x8x16xf32>
  // CHECK: weft.dropout %{{.*}} ratio 1.000000e-01 : tensor<2x8x16xf32>
  %d = weft.dropout %x ratio 0.1 : tensor<2x8x16xf32>
  // CHECK: weft.layer_norm %{{.*}}, %{{.*}}, %{{.*}} axis 2 epsilon 9.99999974E-6 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %5 = weft.layer_norm %x, %g, %g axis 2 epsilon 1.0e-05 : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK: weft.layer_norm %{{.*}}, %{{.*}} axis 1 epsilon
  %6 = weft.layer_norm %x, %g2 axis 1 epsilon 1.0e-05 : (tensor<2x8x16xf32>, tensor<8x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: weft.rms_norm %{{.*}}, %{{.*}} axis 2 epsilon 9.99999997E-7 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %7 = weft.rms_norm %x, %g axis 2 epsilon 1.0e-06 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// CHECK-LABEL: func.func @linear_algebra
func.func @linear_algebra(%q: tensor<2x4x16x8xbf16>, %k: tensor<2x2x32x8xbf16>, %v: tensor<2x2x32x4xbf16>,
                          %mask: tensor<1x1x16x32xi1>, %bias_mask: tensor<16x32xbf16>,
                          %x: tensor<2x16x32xf32>, %w: tensor<32x64xf32>, %wt: tensor<64x32xf32>, %b: tensor<64xf32>,
                          %m: tensor<3x1x5x7xf32>, %n: tensor<4x9x7xf32>) {
  // CHECK: weft.matmul %{{.*}}, %{{.*}} transpose_rhs : (tensor<3x1x5x7xf32>, tensor<4x9x7xf32>) -> tensor<3x4x5x9xf32>
  %0 = weft.matmul %m, %n transpose_rhs : (tensor<3x1x5x7xf32>, tensor<4x9x7xf32>) -> tensor<3x4x5x9xf32>
  // CHECK: weft.matmul %{{.*}}, %{{.*}} transpose_lhs : (tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  %1 = weft.matmul %w, %w transpose_lhs : (tensor<32x64xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
  // CHECK: weft.linear %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x16x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  %2 = weft.linear %x, %w, %b : (tensor<2x16x32xf32>, tensor<32x64xf32>, tensor<64xf32>) -> tensor<2x16x64xf32>
  // CHECK: weft.linear %{{.*}}, %{{.*}} transpose_weight : (tensor<2x16x32xf32>, tensor<64x32xf32>) -> tensor<2x16x64xf32>
  %3 = weft.linear %x, %wt transpose_weight : (tensor<2x16x32xf32>, tensor<64x32xf32>) -> tensor<2x16x64xf32>
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 0.353553{{[0-9]*}} causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>) -> tensor<2x4x16x4xbf16>
  %4 = weft.attention %q, %k, %v scale 0.35355339 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>) -> tensor<2x4x16x4xbf16>
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.250000e-01 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<1x1x16x32xi1>) -> tensor<2x4x16x4xbf16>
  %5 = weft.attention %q, %k, %v mask %mask scale 0.125 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<1x1x16x32xi1>) -> tensor<2x4x16x4xbf16>
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.250000e-01 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<16x32xbf16>) -> tensor<2x4x16x4xbf16>
  %6 = weft.attention %q, %k, %v mask %bias_mask scale 0.125 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<16x32xbf16>) -> tensor<2x4x16x4xbf16>
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 1.250000e-01 causal dropout 1.000000e-01 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>) -> tensor<2x4x16x4xbf16>
  %7 = weft.attention %q, %k, %v scale 0.125 causal dropout 0.1 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>) -> tensor<2x4x16x4xbf16>
  // Gemma 2's soft-capped scores.
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.250000e-01 softcap 5.000000e+01 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<1x1x16x32xi1>) -> tensor<2x4x16x4xbf16>
  %8 = weft.attention %q, %k, %v mask %mask scale 0.125 softcap 50.0 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<1x1x16x32xi1>) -> tensor<2x4x16x4xbf16>
  // Mistral's sliding window.
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 1.250000e-01 causal window 4 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>) -> tensor<2x4x16x4xbf16>
  %9 = weft.attention %q, %k, %v scale 0.125 causal window 4 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>) -> tensor<2x4x16x4xbf16>
  // BLOOM's ALiBi: one slope per query head.
  %slopes = weft.constant dense<[0.25, 0.0625, 0.015625, 0.00390625]> : tensor<4xf32>
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} alibi %{{.*}} scale 1.250000e-01 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<4xf32>) -> tensor<2x4x16x4xbf16>
  %10 = weft.attention %q, %k, %v alibi %slopes scale 0.125 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<4xf32>) -> tensor<2x4x16x4xbf16>
  // CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} alibi %{{.*}} scale 1.250000e-01 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<1x1x16x32xi1>, tensor<4xf32>) -> tensor<2x4x16x4xbf16>
  %11 = weft.attention %q, %k, %v mask %mask alibi %slopes scale 0.125 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<1x1x16x32xi1>, tensor<4xf32>) -> tensor<2x4x16x4xbf16>
  return
}

// CHECK-LABEL: func.func @attention_block
func.func @attention_block(%q: tensor<2x4x16x8xbf16>, %k: tensor<2x2x32x8xbf16>, %v: tensor<2x2x32x4xbf16>,
                           %qp: tensor<16xi64>, %kp: tensor<32xi64>, %mask: tensor<2x1x1x32xi1>) {
  // CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} positions %{{.*}}, %{{.*}} scale 1.250000e-01 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  %0:2 = weft.attention_block %q, %k, %v positions %qp, %kp scale 0.125 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  // CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} scale 1.250000e-01 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x1x1x32xi1>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  %1:2 = weft.attention_block %q, %k, %v mask %mask scale 0.125 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x1x1x32xi1>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  // CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} positions %{{.*}}, %{{.*}} scale 1.250000e-01 softcap 3.000000e+01 causal :
  %2:2 = weft.attention_block %q, %k, %v positions %qp, %kp scale 0.125 softcap 30.0 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  // CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} positions %{{.*}}, %{{.*}} scale 1.250000e-01 causal window 8 :
  %3:2 = weft.attention_block %q, %k, %v positions %qp, %kp scale 0.125 causal window 8 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  %slopes = weft.constant dense<[0.25, 0.0625, 0.015625, 0.00390625]> : tensor<4xf32>
  // CHECK: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} alibi %{{.*}} positions %{{.*}}, %{{.*}} scale 1.250000e-01 causal :
  %4:2 = weft.attention_block %q, %k, %v alibi %slopes positions %qp, %kp scale 0.125 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<4xf32>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>)
  return
}

// CHECK-LABEL: func.func @attention_grad
func.func @attention_grad(%q: tensor<2x4x16x8xbf16>, %k: tensor<2x2x32x8xbf16>, %v: tensor<2x2x32x4xbf16>,
                          %do: tensor<2x4x16x4xbf16>, %qp: tensor<16xi64>, %kp: tensor<32xi64>,
                          %mask: tensor<2x1x1x32xi1>, %lse: tensor<2x4x16x1xf32>) {
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} positions %{{.*}}, %{{.*}} scale 1.250000e-01 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  %0:3 = weft.attention_grad %q, %k, %v grad %do positions %qp, %kp scale 0.125 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<16xi64>, tensor<32xi64>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} mask %{{.*}} scale 1.250000e-01 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<2x1x1x32xi1>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  %1:3 = weft.attention_grad %q, %k, %v grad %do mask %mask scale 0.125 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<2x1x1x32xi1>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} scale 1.250000e-01 causal dropout 1.000000e-01 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  %2:3 = weft.attention_grad %q, %k, %v grad %do scale 0.125 causal dropout 0.1 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  // A ring's backward step: the forward's output and log-sum-exps.
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} positions %{{.*}}, %{{.*}} saved %{{.*}}, %{{.*}} scale 1.250000e-01 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<16xi64>, tensor<32xi64>, tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  %3:3 = weft.attention_grad %q, %k, %v grad %do positions %qp, %kp saved %do, %lse scale 0.125 causal : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<16xi64>, tensor<32xi64>, tensor<2x4x16x4xbf16>, tensor<2x4x16x1xf32>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} mask %{{.*}} scale 1.250000e-01 softcap 5.000000e+01 causal dropout 1.000000e-01 :
  %4:3 = weft.attention_grad %q, %k, %v grad %do mask %mask scale 0.125 softcap 50.0 causal dropout 0.1 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>, tensor<2x1x1x32xi1>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  // CHECK: weft.attention_grad %{{.*}}, %{{.*}}, %{{.*}} grad %{{.*}} scale 1.250000e-01 causal window 4 :
  %5:3 = weft.attention_grad %q, %k, %v grad %do scale 0.125 causal window 4 : (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>, tensor<2x4x16x4xbf16>) -> (tensor<2x4x16x8xbf16>, tensor<2x2x32x8xbf16>, tensor<2x2x32x4xbf16>)
  return
}

// CHECK-LABEL: func.func @data_movement
func.func @data_movement(%table: tensor<100x16xf32>, %ids: tensor<2x8xi64>, %x: tensor<2x8x16xf32>, %idx: tensor<3xi32>) {
  // CHECK: weft.embedding %{{.*}}[%{{.*}}] : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %0 = weft.embedding %table[%ids] : (tensor<100x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  // CHECK: weft.gather %{{.*}}[%{{.*}}] axis 1 : (tensor<2x8x16xf32>, tensor<3xi32>) -> tensor<2x3x16xf32>
  %1 = weft.gather %x[%idx] axis 1 : (tensor<2x8x16xf32>, tensor<3xi32>) -> tensor<2x3x16xf32>
  // CHECK: weft.reshape %{{.*}} : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  %2 = weft.reshape %x : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
  // CHECK: weft.transpose %{{.*}} permutation [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  %3 = weft.transpose %2 permutation [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
  // CHECK: weft.slice %{{.*}} starts [0, 1, 0] limits [2, 8, 16] strides [1, 2, 4] : tensor<2x8x16xf32> -> tensor<2x4x4xf32>
  %4 = weft.slice %x starts [0, 1, 0] limits [2, 8, 16] strides [1, 2, 4] : tensor<2x8x16xf32> -> tensor<2x4x4xf32>
  // CHECK: weft.slice %{{.*}} starts [0, 0, 8] limits [2, 8, 16] : tensor<2x8x16xf32> -> tensor<2x8x8xf32>
  %5 = weft.slice %x starts [0, 0, 8] limits [2, 8, 16] : tensor<2x8x16xf32> -> tensor<2x8x8xf32>
  // CHECK: weft.concat %{{.*}}, %{{.*}} axis 2 : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x24xf32>
  %6 = weft.concat %5, %x axis 2 : (tensor<2x8x8xf32>, tensor<2x8x16xf32>) -> tensor<2x8x24xf32>
  // CHECK: weft.split %{{.*}} axis 2 sizes [4, 12] : tensor<2x8x16xf32> -> (tensor<2x8x4xf32>, tensor<2x8x12xf32>)
  %7:2 = weft.split %x axis 2 sizes [4, 12] : tensor<2x8x16xf32> -> (tensor<2x8x4xf32>, tensor<2x8x12xf32>)
  // CHECK: weft.split %{{.*}} axis 0 sizes [0, 2] : tensor<2x8x16xf32> -> (tensor<0x8x16xf32>, tensor<2x8x16xf32>)
  %empty:2 = weft.split %x axis 0 sizes [0, 2] : tensor<2x8x16xf32> -> (tensor<0x8x16xf32>, tensor<2x8x16xf32>)
  // CHECK: weft.broadcast_to %{{.*}} : tensor<8x1xf32> -> tensor<2x8x16xf32>
  %b = weft.constant dense<1.0> : tensor<8x1xf32>
  %8 = weft.broadcast_to %b : tensor<8x1xf32> -> tensor<2x8x16xf32>
  // CHECK: weft.trilu %{{.*}} : tensor<2x8x16xf32>
  %9 = weft.trilu %x : tensor<2x8x16xf32>
  // CHECK: weft.trilu %{{.*}} upper diagonal 1 : tensor<2x8x16xf32>
  %10 = weft.trilu %x upper diagonal 1 : tensor<2x8x16xf32>
  // CHECK: weft.cross_entropy %{{.*}}, %{{.*}} reduction mean ignore_index -100 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  %11 = weft.cross_entropy %x, %ids reduction mean ignore_index -100 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  // CHECK: weft.cross_entropy %{{.*}}, %{{.*}} reduction none : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
  %12 = weft.cross_entropy %x, %ids reduction none : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
  return
}

// CHECK-LABEL: func.func @layers
func.func @layers(%h0: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK: weft.layer "block"(%{{.*}}) index 0 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK-NEXT: ^bb0(%[[X:.*]]: tensor<2x8x16xf32>):
  // CHECK-NEXT: weft.parameter "h.0.ln.weight"
  // CHECK: weft.yield %{{.*}} : tensor<2x8x16xf32>
  %h1 = weft.layer "block"(%h0) index 0 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%x: tensor<2x8x16xf32>):
    %g = weft.parameter "h.0.ln.weight" : tensor<16xf32>
    %y = weft.rms_norm %x, %g axis 2 epsilon 1.0e-06 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    weft.yield %y : tensor<2x8x16xf32>
  }
  // CHECK: weft.layer "block"(%{{.*}}) index 1
  %h2 = weft.layer "block"(%h1) index 1 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%x: tensor<2x8x16xf32>):
    %g = weft.parameter "h.1.ln.weight" : tensor<16xf32>
    %y = weft.rms_norm %x, %g axis 2 epsilon 1.0e-06 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    weft.yield %y : tensor<2x8x16xf32>
  }
  return %h2 : tensor<2x8x16xf32>
}

// CHECK-LABEL: func.func @collectives
func.func @collectives(%x: tensor<2x8x16xf32>, %i: tensor<4xi32>) -> tensor<2x8x16xf32> {
  // CHECK: weft.all_reduce sum %{{.*}} over @world ["tp"] : tensor<2x8x16xf32>
  %0 = weft.all_reduce sum %x over @world ["tp"] : tensor<2x8x16xf32>
  // CHECK: weft.all_reduce max %{{.*}} over @world ["dp", "tp"] : tensor<4xi32>
  %1 = weft.all_reduce max %i over @world ["dp", "tp"] : tensor<4xi32>
  // CHECK: weft.all_reduce avg
  %2 = weft.all_reduce avg %x over @world ["dp"] : tensor<2x8x16xf32>
  // CHECK: weft.all_gather %{{.*}} over @world ["tp"] dim 2 : tensor<2x8x16xf32> -> tensor<2x8x64xf32>
  %3 = weft.all_gather %x over @world ["tp"] dim 2 : tensor<2x8x16xf32> -> tensor<2x8x64xf32>
  // CHECK: weft.all_slice %{{.*}} over @world ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x2x16xf32>
  %as = weft.all_slice %x over @world ["tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x2x16xf32>
  // CHECK: weft.reduce_scatter sum %{{.*}} over @world ["sp", "tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x1x16xf32>
  %4 = weft.reduce_scatter sum %x over @world ["sp", "tp"] dim 1 : tensor<2x8x16xf32> -> tensor<2x1x16xf32>
  // CHECK: weft.all_to_all %{{.*}} over @world ["sp"] split_dim 2 concat_dim 1 : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
  %5 = weft.all_to_all %x over @world ["sp"] split_dim 2 concat_dim 1 : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
  // CHECK: weft.collective_permute %{{.*}} over @world ["tp"] shift -1 : tensor<2x8x16xf32>
  %6 = weft.collective_permute %x over @world ["tp"] shift -1 : tensor<2x8x16xf32>
  // CHECK: weft.send %{{.*}} to @world ["dp"] offset 1 tag 3 : tensor<2x8x16xf32>
  weft.send %x to @world ["dp"] offset 1 tag 3 : tensor<2x8x16xf32>
  // CHECK: weft.recv from @world ["dp"] offset -1 : tensor<2x8x16xf32>
  %7 = weft.recv from @world ["dp"] offset -1 : tensor<2x8x16xf32>
  // CHECK: weft.broadcast %{{.*}} over @world ["tp"] root 3 : tensor<2x8x16xf32>
  %8 = weft.broadcast %7 over @world ["tp"] root 3 : tensor<2x8x16xf32>
  return %8 : tensor<2x8x16xf32>
}

// Compressed collectives: the codec follows the axes (and a zigzag flag).
// CHECK-LABEL: func.func @compressed_collectives
func.func @compressed_collectives(%x: tensor<2x8x16xf32>, %h: tensor<2x8x16xbf16>) -> tensor<2x8x16xf32> {
  // CHECK: weft.all_reduce sum %{{.*}} over @world ["dp"] codec int8 : tensor<2x8x16xf32>
  %0 = weft.all_reduce sum %x over @world ["dp"] codec int8 : tensor<2x8x16xf32>
  // CHECK: weft.all_gather %{{.*}} over @world ["tp"] dim 1 zigzag codec fp8 : tensor<2x8x16xf32> -> tensor<2x32x16xf32>
  %1 = weft.all_gather %x over @world ["tp"] dim 1 zigzag codec fp8 : tensor<2x8x16xf32> -> tensor<2x32x16xf32>
  // CHECK: weft.reduce_scatter sum %{{.*}} over @world ["tp"] dim 2 codec bf16 : tensor<2x8x16xbf16> -> tensor<2x8x4xbf16>
  %2 = weft.reduce_scatter sum %h over @world ["tp"] dim 2 codec bf16 : tensor<2x8x16xbf16> -> tensor<2x8x4xbf16>
  // CHECK: weft.reduce_scatter sum %{{.*}} over @world ["tp"] dim 1 zigzag codec bf16 : tensor<2x8x16xbf16> -> tensor<2x2x16xbf16>
  %zz = weft.reduce_scatter sum %h over @world ["tp"] dim 1 zigzag codec bf16 : tensor<2x8x16xbf16> -> tensor<2x2x16xbf16>
  // CHECK: weft.all_to_all %{{.*}} over @world ["sp"] split_dim 2 concat_dim 1 codec int8 : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
  %3 = weft.all_to_all %x over @world ["sp"] split_dim 2 concat_dim 1 codec int8 : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
  // CHECK: weft.collective_permute %{{.*}} over @world ["tp"] shift 1 codec none : tensor<2x8x16xf32>
  %4 = weft.collective_permute %x over @world ["tp"] shift 1 codec none : tensor<2x8x16xf32>
  return %4 : tensor<2x8x16xf32>
}

// A sub-group of an axis: the first and last of four pipeline ranks.
// CHECK-LABEL: func.func @sub_group
// CHECK: weft.all_reduce sum %{{.*}} over @world ["tp"] members [0, 3] codec bf16 : tensor<8xf32>
func.func @sub_group(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = weft.all_reduce sum %x over @world ["tp"] members [0, 3] codec bf16 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// A weight's stored block gathered once per block of 4 micro-batches
// (ZeroPP), the gradient reduction of a stage's backward once per block.
// CHECK-LABEL: func.func @held_gather
// CHECK: weft.all_gather %{{.*}} over @world ["dp"] dim 0 codec bf16 hold 4 : tensor<4x16xf32> -> tensor<8x16xf32>
func.func @held_gather() -> tensor<8x16xf32> {
  %w = weft.parameter "w" : tensor<8x16xf32>
  %b = weft.all_slice %w over @world ["dp"] dim 0 : tensor<8x16xf32> -> tensor<4x16xf32>
  %g = weft.all_gather %b over @world ["dp"] dim 0 codec bf16 hold 4 : tensor<4x16xf32> -> tensor<8x16xf32>
  return %g : tensor<8x16xf32>
}
func.func private @held_reduce(tensor<8x16xf32>) -> tensor<4x16xf32>
// CHECK-LABEL: func.func @held_backward
// CHECK-SAME: weft.micro_batch_block = 4 : i64
func.func @held_backward() attributes {weft.gradient_reduction = @held_reduce, weft.reduce_every_micro_batch, weft.micro_batch_block = 4 : i64} {
  return
}

// CHECK-LABEL: func.func @shardings
// CHECK-SAME: {weft.sharding = #weft.sharding<@world, {{\[\[}}dp], [], [sp, tp]]>}
// CHECK-SAME: {weft.sharding = #weft.sharding<@world, {{\[\[}}], []], partial = [tp]>}
func.func @shardings(%x: tensor<2x8x16xf32> {weft.sharding = #weft.sharding<@world, [[dp], [], [sp, tp]]>})
    -> (tensor<2x8xf32> {weft.sharding = #weft.sharding<@world, [[], []], partial = [tp]>}) {
  // CHECK: weft.reduce_sum %{{.*}} axes [2] {weft.sharding = [#weft.sharding<@world, {{\[\[}}dp], [sp]], partial = [tp]>]}
  %0 = weft.reduce_sum %x axes [2] {weft.sharding = [#weft.sharding<@world, [[dp], [sp]], partial = [tp]>]} : tensor<2x8x16xf32> -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// CHECK-LABEL: func.func @fusion_and_wait
// CHECK: weft.fusion elementwise(%{{.*}}, %{{.*}}) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK: weft.fusion epilogue
// CHECK: weft.wait %{{.*}} : tensor<4x8xf32>
weft.mesh @mesh(tp = 2)
func.func @fusion_and_wait(%x: tensor<4x8xf32>, %v: tensor<8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %0 = weft.fusion elementwise(%x, %v) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<8xf32>):
    %s = weft.add %a, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
    %e = weft.exp %s : tensor<4x8xf32>
    weft.yield %e : tensor<4x8xf32>
  }
  %1 = weft.fusion epilogue(%0, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32> {
  ^bb0(%a: tensor<4x8xf32>, %b: tensor<8x8xf32>):
    %l = weft.linear %a, %b : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
    %g = weft.gelu %l approximation tanh : tensor<4x8xf32>
    weft.yield %g : tensor<4x8xf32>
  }
  %2 = weft.all_reduce sum %1 over @mesh ["tp"] : tensor<4x8xf32>
  %3 = weft.wait %2 : tensor<4x8xf32>
  return %3 : tensor<4x8xf32>
}
