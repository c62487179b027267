// RUN: weft-opt %s -split-input-file -weft-raise | FileCheck %s

// CHECK-LABEL: func.func @gelu_erf
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[G:.*]] = weft.gelu %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_erf(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %sqrt2 = weft.constant dense<1.41421354> : tensor<f32>
  %one = weft.constant dense<1.0> : tensor<f32>
  %half = weft.constant dense<0.5> : tensor<f32>
  %0 = weft.div %x, %sqrt2 : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = weft.erf %0 : tensor<4x8xf32>
  %2 = weft.add %1, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = weft.mul %x, %2 : tensor<4x8xf32>
  %4 = weft.mul %3, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// GPT-2's form, 0.5 * x first.
// CHECK-LABEL: func.func @gelu_tanh
// CHECK-NEXT: %[[G:.*]] = weft.gelu %arg0 approximation tanh : tensor<4x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_tanh(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %half = weft.constant dense<0.5> : tensor<f32>
  %three = weft.constant dense<3.0> : tensor<f32>
  %c = weft.constant dense<0.044715> : tensor<f32>
  %k = weft.constant dense<0.797884583> : tensor<f32>
  %one = weft.constant dense<1.0> : tensor<f32>
  %hx = weft.mul %x, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %cube = weft.pow %x, %three : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %cc = weft.mul %cube, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %in = weft.add %x, %cc : tensor<4x8xf32>
  %sc = weft.mul %in, %k : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %t = weft.tanh %sc : tensor<4x8xf32>
  %a = weft.add %t, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = weft.mul %hx, %a : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A wrong constant is not GELU: nothing changes.
// CHECK-LABEL: func.func @not_gelu
// CHECK: weft.erf
// CHECK-NOT: weft.gelu
func.func @not_gelu(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %two = weft.constant dense<2.0> : tensor<f32>
  %one = weft.constant dense<1.0> : tensor<f32>
  %half = weft.constant dense<0.5> : tensor<f32>
  %0 = weft.div %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %1 = weft.erf %0 : tensor<4x8xf32>
  %2 = weft.add %1, %one : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %3 = weft.mul %x, %2 : tensor<4x8xf32>
  %4 = weft.mul %3, %half : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  return %4 : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @silu
// CHECK-NEXT: %[[S:.*]] = weft.silu %arg0
// CHECK-NEXT: return %[[S]]
func.func @silu(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = weft.sigmoid %x : tensor<4x8xf32>
  %y = weft.mul %s, %x : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>)
// CHECK: %[[G:.*]] = weft.parameter "ln.weight"
// CHECK: %[[B:.*]] = weft.parameter "ln.bias"
// CHECK: %[[Y:.*]] = weft.layer_norm %[[X]], %[[G]], %[[B]] axis 2 epsilon 9.99999974E-6
// CHECK-NOT: weft.reduce_mean
// CHECK: return %[[Y]]
func.func @layer_norm(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %g = weft.parameter "ln.weight" : tensor<8xf32>
  %b = weft.parameter "ln.bias" : tensor<8xf32>
  %eps = weft.constant dense<1.0e-05> : tensor<f32>
  %two = weft.constant dense<2.0> : tensor<f32>
  %m = weft.reduce_mean %x axes [2] keep_dims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %d = weft.sub %x, %m : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %p = weft.pow %d, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %v = weft.reduce_mean %p axes [2] keep_dims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %e = weft.add %v, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %s = weft.sqrt %e : tensor<2x4x1xf32>
  %n = weft.div %d, %s : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %y = weft.mul %n, %g : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %z = weft.add %y, %b : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  return %z : tensor<2x4x8xf32>
}

// -----

// LLaMA's RMSNorm: w * (x * (1 / sqrt(mean(x^2) + eps))).
// CHECK-LABEL: func.func @rms_norm
// CHECK: %[[W:.*]] = weft.parameter "norm.weight"
// CHECK: %[[Y:.*]] = weft.rms_norm %arg0, %[[W]] axis 2 epsilon 9.99999997E-7
// CHECK-NEXT: return %[[Y]]
func.func @rms_norm(%x: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %w = weft.parameter "norm.weight" : tensor<8xf32>
  %eps = weft.constant dense<1.0e-06> : tensor<f32>
  %two = weft.constant dense<2.0> : tensor<f32>
  %one = weft.constant dense<1.0> : tensor<f32>
  %sq = weft.pow %x, %two : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %m = weft.reduce_mean %sq axes [2] keep_dims : tensor<2x4x8xf32> -> tensor<2x4x1xf32>
  %e = weft.add %m, %eps : (tensor<2x4x1xf32>, tensor<f32>) -> tensor<2x4x1xf32>
  %s = weft.sqrt %e : tensor<2x4x1xf32>
  %r = weft.div %one, %s : (tensor<f32>, tensor<2x4x1xf32>) -> tensor<2x4x1xf32>
  %n = weft.mul %x, %r : (tensor<2x4x8xf32>, tensor<2x4x1xf32>) -> tensor<2x4x8xf32>
  %y = weft.mul %w, %n : (tensor<8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// CHECK-LABEL: func.func @linear
// CHECK: %[[W:.*]] = weft.parameter "fc.weight"
// CHECK: %[[B:.*]] = weft.parameter "fc.bias"
// CHECK: %[[Y:.*]] = weft.linear %arg0, %[[W]], %[[B]] : (tensor<2x4x8xf32>, tensor<8x16xf32>, tensor<16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @linear(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = weft.parameter "fc.weight" : tensor<8x16xf32>
  %b = weft.parameter "fc.bias" : tensor<16xf32>
  %m = weft.matmul %x, %w : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  %y = weft.add %b, %m : (tensor<16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// A product of two activations is no linear layer.
// CHECK-LABEL: func.func @activation_matmul
// CHECK: weft.matmul
// CHECK-NOT: weft.linear
func.func @activation_matmul(%x: tensor<2x4x8xf32>, %y: tensor<8x16xf32>) -> tensor<2x4x16xf32> {
  %m = weft.matmul %x, %y : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %m : tensor<2x4x16xf32>
}

// -----

// Attention with k transposed together with the head permute (as torch fuses
// them), a constant causal mask applied with where, and a scale by division.
// CHECK-LABEL: func.func @causal_attention
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[KS:.*]]: tensor<1x4x2x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK: %[[K:.*]] = weft.transpose %[[KS]] permutation [0, 2, 1, 3]
// CHECK: %[[O:.*]] = weft.attention %[[Q]], %[[K]], %[[V]] scale 0.353553385 causal
// CHECK-NOT: weft.softmax
// CHECK: return %[[O]]
func.func @causal_attention(%q: tensor<1x2x4x8xf32>, %kseq: tensor<1x4x2x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %kt = weft.transpose %kseq permutation [0, 2, 3, 1] : tensor<1x4x2x8xf32> -> tensor<1x2x8x4xf32>
  %s = weft.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x4x4xf32>
  %c = weft.constant dense<2.82842708> : tensor<f32>
  %sc = weft.div %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %mask = weft.constant dense<[[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]]]]> : tensor<1x1x4x4xi1>
  %min = weft.constant dense<-3.40282347E+38> : tensor<f32>
  %w = weft.where %mask, %sc, %min : (tensor<1x1x4x4xi1>, tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// An additive padding mask computed at run time stays a mask operand.
// CHECK-LABEL: func.func @masked_attention
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %arg3 scale 1.250000e-01 :
func.func @masked_attention(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %m: tensor<2x1x1x4xf32>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %c = weft.constant dense<0.125> : tensor<f32>
  %sc = weft.mul %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %w = weft.add %sc, %m : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// Softmax probabilities used twice are not fused away.
// CHECK-LABEL: func.func @probabilities_escape
// CHECK: weft.softmax
// CHECK-NOT: weft.attention
func.func @probabilities_escape(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>) -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p = weft.softmax %s axis 3 : tensor<1x1x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %p : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// Grouped-query attention written with repeat_kv (each KV head repeated twice
// in a row) becomes attention on the 2 KV heads.
// CHECK-LABEL: func.func @repeated_kv_heads
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x2x8x16xf32>, %[[V:.*]]: tensor<1x2x8x16xf32>)
// CHECK: weft.attention %[[Q]], %[[K]], %[[V]] scale 2.500000e-01 causal : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
func.func @repeated_kv_heads(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %k5 = weft.reshape %k : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %kx = weft.broadcast_to %k5 : tensor<1x2x1x8x16xf32> -> tensor<1x2x2x8x16xf32>
  %kr = weft.reshape %kx : tensor<1x2x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %v5 = weft.reshape %v : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %vx = weft.broadcast_to %v5 : tensor<1x2x1x8x16xf32> -> tensor<1x2x2x8x16xf32>
  %vr = weft.reshape %vx : tensor<1x2x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %o = weft.attention %q, %kr, %vr scale 0.25 causal : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// Heads tiled (kv0, kv1, kv0, kv1) are not grouped-query order: left alone.
// CHECK-LABEL: func.func @tiled_kv_heads
// CHECK: weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 2.500000e-01 : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>)
func.func @tiled_kv_heads(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %k5 = weft.reshape %k : tensor<1x2x8x16xf32> -> tensor<1x1x2x8x16xf32>
  %kx = weft.broadcast_to %k5 : tensor<1x1x2x8x16xf32> -> tensor<1x2x2x8x16xf32>
  %kr = weft.reshape %kx : tensor<1x2x2x8x16xf32> -> tensor<1x4x8x16xf32>
  %o = weft.attention %q, %kr, %kr scale 0.25 : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// nanoGPT's masked_fill(mask == 0, -inf): where(drop, -inf, scores), the
// other polarity, with a constant condition that drops the upper triangle.
// CHECK-LABEL: func.func @masked_fill_causal
// CHECK: weft.attention %arg0, %arg1, %arg2 scale 0.353553385 causal :
// CHECK-NOT: weft.softmax
func.func @masked_fill_causal(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %c = weft.constant dense<0.353553385> : tensor<f32>
  %sc = weft.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %drop = weft.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %inf = weft.constant dense<0xFF800000> : tensor<f32>
  %w = weft.where %drop, %inf, %sc : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A run-time boolean mask in the dropping polarity becomes a keep mask
// (m == false); the scale split over q and kᵀ (torch 2's SDPA export) is
// one scale; softmax in f32 with casts around it and dropout after it.
// CHECK-LABEL: func.func @sdpa_form
// CHECK: %[[F:.*]] = weft.constant dense<false> : tensor<i1>
// CHECK: %[[KEEP:.*]] = weft.compare eq, %arg3, %[[F]]
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %[[KEEP]] scale 0.12497{{[0-9]+}} dropout 1.000000e-01 :
// CHECK-NOT: weft.softmax
func.func @sdpa_form(%q: tensor<2x2x4x8xbf16>, %k: tensor<2x2x4x8xbf16>, %v: tensor<2x2x4x8xbf16>, %m: tensor<2x1x1x4xi1>) -> tensor<2x2x4x8xbf16> {
  %c = weft.constant dense<0.353553385> : tensor<bf16>
  %qs = weft.mul %q, %c : (tensor<2x2x4x8xbf16>, tensor<bf16>) -> tensor<2x2x4x8xbf16>
  %kt = weft.transpose %k permutation [0, 1, 3, 2] : tensor<2x2x4x8xbf16> -> tensor<2x2x8x4xbf16>
  %ks = weft.mul %kt, %c : (tensor<2x2x8x4xbf16>, tensor<bf16>) -> tensor<2x2x8x4xbf16>
  %s = weft.matmul %qs, %ks : (tensor<2x2x4x8xbf16>, tensor<2x2x8x4xbf16>) -> tensor<2x2x4x4xbf16>
  %inf = weft.constant dense<0xFF80> : tensor<bf16>
  %w = weft.where %m, %inf, %s : (tensor<2x1x1x4xi1>, tensor<bf16>, tensor<2x2x4x4xbf16>) -> tensor<2x2x4x4xbf16>
  %wf = weft.cast %w : tensor<2x2x4x4xbf16> -> tensor<2x2x4x4xf32>
  %pf = weft.softmax %wf axis 3 : tensor<2x2x4x4xf32>
  %p = weft.cast %pf : tensor<2x2x4x4xf32> -> tensor<2x2x4x4xbf16>
  %pd = weft.dropout %p ratio 0.1 : tensor<2x2x4x4xbf16>
  %o = weft.matmul %pd, %v : (tensor<2x2x4x4xbf16>, tensor<2x2x4x8xbf16>) -> tensor<2x2x4x8xbf16>
  return %o : tensor<2x2x4x8xbf16>
}

// -----

// Gemma 2's eager attention: scores scaled, soft-capped (/ 50, tanh, · 50)
// and then masked by HF's causal + padding bias, softmax in f32: one
// weft.attention with the cap.
// CHECK-LABEL: func.func @gemma2_softcap
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %{{.*}} scale 2.500000e-01 softcap 5.000000e+01 causal :
// CHECK-NOT: weft.tanh
// CHECK-NOT: weft.softmax
func.func @gemma2_softcap(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>, %pad: tensor<2x1x1x4xf32>) -> tensor<2x2x4x16xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x4xf32>
  %scale = weft.constant dense<0.25> : tensor<f32>
  %sc = weft.mul %s, %scale : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %cap = weft.constant dense<50.0> : tensor<f32>
  %d = weft.div %sc, %cap : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %t = weft.tanh %d : tensor<2x2x4x4xf32>
  %c = weft.mul %t, %cap : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %causal = weft.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %bias = weft.add %causal, %pad : (tensor<1x1x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x1x4x4xf32>
  %w = weft.add %c, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// Grok-1's form: the cap written as c · tanh(s · (1/c)), and a scale after
// the cap (2 · 30 · tanh(s / 30) = 60 · tanh(2s / 60)) joins it: cap 60,
// scale 2 · 0.125.
// CHECK-LABEL: func.func @scaled_cap
// CHECK: weft.attention %arg0, %arg1, %arg2 scale 2.500000e-01 softcap 6.000000e+01 :
// CHECK-NOT: weft.tanh
func.func @scaled_cap(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %scale = weft.constant dense<0.125> : tensor<f32>
  %sc = weft.mul %scale, %s : (tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %inv = weft.constant dense<0.0333333351> : tensor<f32>
  %cap = weft.constant dense<30.0> : tensor<f32>
  %d = weft.mul %sc, %inv : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %t = weft.tanh %d : tensor<1x2x4x4xf32>
  %c = weft.mul %cap, %t : (tensor<f32>, tensor<1x2x4x4xf32>) -> tensor<1x2x4x4xf32>
  %two = weft.constant dense<2.0> : tensor<f32>
  %c2 = weft.mul %c, %two : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %p = weft.softmax %c2 axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Mistral's sliding window as a constant 0 / -inf bias (each query sees
// itself and the 2 keys before it): causal attention with window 3, no mask.
// CHECK-LABEL: func.func @sliding_window
// CHECK: weft.attention %arg0, %arg1, %arg2 scale 0.353553385 causal window 3 : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
func.func @sliding_window(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %c = weft.constant dense<0.353553385> : tensor<f32>
  %sc = weft.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %band = weft.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0xFF800000, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %w = weft.add %sc, %band : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// A band that is no sliding window (a key hidden inside the window) stays
// the attention's mask.
// CHECK-LABEL: func.func @not_a_window
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %{{.*}} scale 0.353553385 :
// CHECK-NOT: window
func.func @not_a_window(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %c = weft.constant dense<0.353553385> : tensor<f32>
  %sc = weft.mul %s, %c : (tensor<1x2x4x4xf32>, tensor<f32>) -> tensor<1x2x4x4xf32>
  %band = weft.constant dense<[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0xFF800000, 0.0, 0xFF800000], [0xFF800000, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
  %w = weft.add %sc, %band : (tensor<1x2x4x4xf32>, tensor<4x4xf32>) -> tensor<1x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<1x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// HF's causal + padding bias, clamped at finfo.min: causal is factored out,
// the padding bias (clamped) stays the mask, so that it broadcasts over the
// queries.
// CHECK-LABEL: func.func @causal_plus_padding
// CHECK: %[[MIN:.*]] = weft.constant dense<-3.40282347E+38> : tensor<f32>
// CHECK: %[[PAD:.*]] = weft.maximum %arg3, %[[MIN]]
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %[[PAD]] scale 1.000000e+00 causal :
func.func @causal_plus_padding(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %pad: tensor<2x1x1x4xf32>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %causal = weft.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %sum = weft.add %causal, %pad : (tensor<1x1x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x1x4x4xf32>
  %min = weft.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = weft.maximum %sum, %min : (tensor<2x1x4x4xf32>, tensor<f32>) -> tensor<2x1x4x4xf32>
  %w = weft.add %s, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// nn.MultiheadAttention: batch and heads merged ([b·h, l, d] operands viewed
// from [l, b, h·d]); raised on [b, h, l, d] with the heads kept apart
// through the output's transpose and reshape.
// CHECK-LABEL: func.func @multihead_attention
// CHECK: %[[Q:.*]] = weft.reshape %arg0 : tensor<4x2x16xf32> -> tensor<4x2x2x8xf32>
// CHECK: %[[QH:.*]] = weft.transpose %[[Q]] permutation [1, 2, 0, 3] : tensor<4x2x2x8xf32> -> tensor<2x2x4x8xf32>
// CHECK: %[[O:.*]] = weft.attention %[[QH]], %{{.*}}, %{{.*}} scale 0.353553385 causal : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
// CHECK: %[[T:.*]] = weft.transpose %[[O]] permutation [2, 0, 1, 3] : tensor<2x2x4x8xf32> -> tensor<4x2x2x8xf32>
// CHECK: %[[R:.*]] = weft.reshape %[[T]] : tensor<4x2x2x8xf32> -> tensor<8x16xf32>
// CHECK: return %[[R]]
func.func @multihead_attention(%xq: tensor<4x2x16xf32>, %xk: tensor<4x2x16xf32>, %xv: tensor<4x2x16xf32>) -> tensor<8x16xf32> {
  %q0 = weft.reshape %xq : tensor<4x2x16xf32> -> tensor<4x4x8xf32>
  %q = weft.transpose %q0 permutation [1, 0, 2] : tensor<4x4x8xf32> -> tensor<4x4x8xf32>
  %k0 = weft.reshape %xk : tensor<4x2x16xf32> -> tensor<4x4x8xf32>
  %kt = weft.transpose %k0 permutation [1, 2, 0] : tensor<4x4x8xf32> -> tensor<4x8x4xf32>
  %v0 = weft.reshape %xv : tensor<4x2x16xf32> -> tensor<4x4x8xf32>
  %v = weft.transpose %v0 permutation [1, 0, 2] : tensor<4x4x8xf32> -> tensor<4x4x8xf32>
  %c = weft.constant dense<2.82842708> : tensor<f32>
  %qs = weft.div %q, %c : (tensor<4x4x8xf32>, tensor<f32>) -> tensor<4x4x8xf32>
  %s = weft.matmul %qs, %kt : (tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<4x4x4xf32>
  %causal = weft.constant dense<[[[0.0, 0xFF800000, 0xFF800000, 0xFF800000], [0.0, 0.0, 0xFF800000, 0xFF800000], [0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]]> : tensor<1x4x4xf32>
  %w = weft.add %s, %causal : (tensor<4x4x4xf32>, tensor<1x4x4xf32>) -> tensor<4x4x4xf32>
  %p = weft.softmax %w axis 2 : tensor<4x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<4x4x4xf32>, tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
  %ot = weft.transpose %o permutation [1, 0, 2] : tensor<4x4x8xf32> -> tensor<4x4x8xf32>
  %flat = weft.reshape %ot : tensor<4x4x8xf32> -> tensor<8x16xf32>
  return %flat : tensor<8x16xf32>
}

// -----

// repeat_interleave's static export: the KV heads split one by one, each
// repeated, concatenated: grouped-query attention on the 2 KV heads.
// CHECK-LABEL: func.func @repeat_interleave_kv
// CHECK: weft.attention %arg0, %arg1, %arg1 scale 2.500000e-01 causal : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
func.func @repeat_interleave_kv(%q: tensor<1x4x8x16xf32>, %kv: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %h:2 = weft.split %kv axis 1 sizes [1, 1] : tensor<1x2x8x16xf32> -> (tensor<1x1x8x16xf32>, tensor<1x1x8x16xf32>)
  %a0 = weft.reshape %h#0 : tensor<1x1x8x16xf32> -> tensor<1x1x1x8x16xf32>
  %a1 = weft.broadcast_to %a0 : tensor<1x1x1x8x16xf32> -> tensor<1x1x2x8x16xf32>
  %a2 = weft.reshape %a1 : tensor<1x1x2x8x16xf32> -> tensor<1x2x8x16xf32>
  %b0 = weft.reshape %h#1 : tensor<1x1x8x16xf32> -> tensor<1x1x1x8x16xf32>
  %b1 = weft.broadcast_to %b0 : tensor<1x1x1x8x16xf32> -> tensor<1x1x2x8x16xf32>
  %b2 = weft.reshape %b1 : tensor<1x1x2x8x16xf32> -> tensor<1x2x8x16xf32>
  %r = weft.concat %a2, %b2 axis 1 : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32>
  %o = weft.attention %q, %r, %r scale 0.25 causal : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// Training exports keep Transpose(W) before nn.Linear's MatMul.
// CHECK-LABEL: func.func @linear_of_transposed_weight
// CHECK: weft.linear %arg0, %[[W:.*]] transpose_weight : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
func.func @linear_of_transposed_weight(%x: tensor<2x4x8xf32>) -> tensor<2x4x16xf32> {
  %w = weft.parameter "fc.weight" : tensor<16x8xf32>
  %wt = weft.transpose %w permutation [1, 0] : tensor<16x8xf32> -> tensor<8x16xf32>
  %y = weft.matmul %x, %wt : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
  return %y : tensor<2x4x16xf32>
}

// -----

// BLOOM: the ALiBi bias ([b·h, 1, s]) is added to the merged batch·heads
// product (baddbmm), the scores are taken apart to [b, h, l, s], filled
// where `causal | padding` masks, and merged again for the product with V.
// Raised on [b, h, l, d]: causal, with the bias (as [b, h, 1, s]) where the
// padding keeps and the fill where it masks.
// CHECK-LABEL: func.func @bloom_alibi
// CHECK-DAG: %[[MIN:.*]] = weft.constant dense<-3.40282347E+38> : tensor<f32>
// CHECK-DAG: %[[FALSE:.*]] = weft.constant dense<false> : tensor<i1>
// CHECK: %[[KEEP:.*]] = weft.compare eq, %arg4, %[[FALSE]] : (tensor<2x1x1x4xi1>, tensor<i1>) -> tensor<2x1x1x4xi1>
// CHECK: %[[BIAS:.*]] = weft.reshape %arg3 : tensor<4x1x4xf32> -> tensor<2x2x1x4xf32>
// CHECK: %[[MASK:.*]] = weft.where %[[KEEP]], %[[BIAS]], %[[MIN]] : (tensor<2x1x1x4xi1>, tensor<2x2x1x4xf32>, tensor<f32>) -> tensor<2x2x1x4xf32>
// CHECK: %[[O:.*]] = weft.attention %arg0, %arg1, %arg2 mask %[[MASK]] scale 0.353553385 causal : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x1x4xf32>) -> tensor<2x2x4x8xf32>
// CHECK: weft.reshape %[[O]] : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
func.func @bloom_alibi(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %alibi: tensor<4x1x4xf32>, %padded: tensor<2x1x1x4xi1>) -> tensor<4x4x8xf32> {
  %q3 = weft.reshape %q : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %k3 = weft.reshape %k : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %kt = weft.transpose %k3 permutation [0, 2, 1] : tensor<4x4x8xf32> -> tensor<4x8x4xf32>
  %v3 = weft.reshape %v : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %qk = weft.matmul %q3, %kt : (tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<4x4x4xf32>
  %c = weft.constant dense<0.353553385> : tensor<f32>
  %scaled = weft.mul %qk, %c : (tensor<4x4x4xf32>, tensor<f32>) -> tensor<4x4x4xf32>
  %biased = weft.add %scaled, %alibi : (tensor<4x4x4xf32>, tensor<4x1x4xf32>) -> tensor<4x4x4xf32>
  %apart = weft.reshape %biased : tensor<4x4x4xf32> -> tensor<2x2x4x4xf32>
  %upper = weft.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %hidden = weft.where %upper, %upper, %padded : (tensor<1x1x4x4xi1>, tensor<1x1x4x4xi1>, tensor<2x1x1x4xi1>) -> tensor<2x1x4x4xi1>
  %min = weft.constant dense<-3.40282347E+38> : tensor<f32>
  %w = weft.where %hidden, %min, %apart : (tensor<2x1x4x4xi1>, tensor<f32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x4x4xf32>
  %p3 = weft.reshape %p : tensor<2x2x4x4xf32> -> tensor<4x4x4xf32>
  %o = weft.matmul %p3, %v3 : (tensor<4x4x4xf32>, tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
  return %o : tensor<4x4x8xf32>
}

// -----

// Two biases add into one mask; two boolean masks keep where both do.
// CHECK-LABEL: func.func @two_biases
// CHECK: %[[SUM:.*]] = weft.add %arg4, %arg3 : (tensor<2x1x4x1xf32>, tensor<2x1x1x4xf32>) -> tensor<2x1x4x4xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %[[SUM]] scale 1.000000e+00 :
func.func @two_biases(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %m: tensor<2x1x1x4xf32>, %n: tensor<2x1x4x1xf32>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %w = weft.add %s, %m : (tensor<2x2x4x4xf32>, tensor<2x1x1x4xf32>) -> tensor<2x2x4x4xf32>
  %w2 = weft.add %w, %n : (tensor<2x2x4x4xf32>, tensor<2x1x4x1xf32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w2 axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}
// CHECK-LABEL: func.func @two_keep_masks
// CHECK: %[[BOTH:.*]] = weft.where %arg4, %arg3, %arg4 : (tensor<2x1x4x1xi1>, tensor<2x1x1x4xi1>, tensor<2x1x4x1xi1>) -> tensor<2x1x4x4xi1>
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %[[BOTH]] scale 1.000000e+00 :
func.func @two_keep_masks(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %m: tensor<2x1x1x4xi1>, %n: tensor<2x1x4x1xi1>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %min = weft.constant dense<0xFF800000> : tensor<f32>
  %w = weft.where %m, %s, %min : (tensor<2x1x1x4xi1>, tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %w2 = weft.where %n, %w, %min : (tensor<2x1x4x1xi1>, tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w2 axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}

// -----

// nn.MultiheadAttention with a causal mask and a key padding mask: the two
// are or-ed ([b·h, l, s], the padding expanded over the heads) and made a
// float bias (0 where kept, -inf where masked) for baddbmm. Raised causal,
// with the padding alone (as [b, h, 1, s]) as the mask, a bias as the
// model's.
// CHECK-LABEL: func.func @multihead_key_padding
// CHECK-DAG: %[[ZERO:.*]] = weft.constant dense<0.000000e+00> : tensor<f32>
// CHECK-DAG: %[[INF:.*]] = weft.constant dense<0xFF800000> : tensor<f32>
// CHECK-DAG: %[[FALSE:.*]] = weft.constant dense<false> : tensor<i1>
// CHECK: %[[KEEP:.*]] = weft.compare eq, %arg3, %[[FALSE]] : (tensor<4x1x4xi1>, tensor<i1>) -> tensor<4x1x4xi1>
// CHECK: %[[BIAS:.*]] = weft.where %[[KEEP]], %[[ZERO]], %[[INF]] : (tensor<4x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<4x1x4xf32>
// CHECK: %[[MASK:.*]] = weft.reshape %[[BIAS]] : tensor<4x1x4xf32> -> tensor<2x2x1x4xf32>
// CHECK: weft.attention {{.*}} mask %[[MASK]] scale 1.000000e+00 causal : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x1x4xf32>) -> tensor<2x2x4x8xf32>
func.func @multihead_key_padding(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %padded: tensor<4x1x4xi1>) -> tensor<4x4x8xf32> {
  %q3 = weft.reshape %q : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %k3 = weft.reshape %k : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %kt = weft.transpose %k3 permutation [0, 2, 1] : tensor<4x4x8xf32> -> tensor<4x8x4xf32>
  %v3 = weft.reshape %v : tensor<2x2x4x8xf32> -> tensor<4x4x8xf32>
  %upper = weft.constant dense<[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]> : tensor<1x4x4xi1>
  %hidden = weft.where %upper, %upper, %padded : (tensor<1x4x4xi1>, tensor<1x4x4xi1>, tensor<4x1x4xi1>) -> tensor<4x4x4xi1>
  %inf = weft.constant dense<0xFF800000> : tensor<f32>
  %zeros = weft.constant dense<0.0> : tensor<4x4x4xf32>
  %bias = weft.where %hidden, %inf, %zeros : (tensor<4x4x4xi1>, tensor<f32>, tensor<4x4x4xf32>) -> tensor<4x4x4xf32>
  %qk = weft.matmul %q3, %kt : (tensor<4x4x8xf32>, tensor<4x8x4xf32>) -> tensor<4x4x4xf32>
  %w = weft.add %qk, %bias : tensor<4x4x4xf32>
  %p = weft.softmax %w axis 2 : tensor<4x4x4xf32>
  %o = weft.matmul %p, %v3 : (tensor<4x4x4xf32>, tensor<4x4x8xf32>) -> tensor<4x4x8xf32>
  return %o : tensor<4x4x8xf32>
}

// -----

// transformers' AttentionMaskConverter (4.36 and later): a causal bias of
// 0 / finfo.min, filled with finfo.min where the padding masks. Raised
// causal, with the padding as a bias of the same fill (finite, as the
// model's).
// CHECK-LABEL: func.func @mask_converter
// CHECK-DAG: %[[ZERO:.*]] = weft.constant dense<0.000000e+00> : tensor<f32>
// CHECK-DAG: %[[MIN:.*]] = weft.constant dense<-3.40282347E+38> : tensor<f32>
// CHECK: %[[KEEP:.*]] = weft.compare eq, %arg3, %{{.*}} : (tensor<2x1x1x4xi1>, tensor<i1>) -> tensor<2x1x1x4xi1>
// CHECK: %[[BIAS:.*]] = weft.where %[[KEEP]], %[[ZERO]], %[[MIN]] : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x1x4xf32>
// CHECK: weft.attention %arg0, %arg1, %arg2 mask %[[BIAS]] scale 1.000000e+00 causal : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>, tensor<2x1x1x4xf32>)
func.func @mask_converter(%q: tensor<2x2x4x8xf32>, %k: tensor<2x2x4x8xf32>, %v: tensor<2x2x4x8xf32>, %padded: tensor<2x1x1x4xi1>) -> tensor<2x2x4x8xf32> {
  %s = weft.matmul %q, %k transpose_rhs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %causal = weft.constant dense<[[[[0.0, -3.40282347E+38, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, 0.0, -3.40282347E+38], [0.0, 0.0, 0.0, 0.0]]]]> : tensor<1x1x4x4xf32>
  %min = weft.constant dense<-3.40282347E+38> : tensor<f32>
  %bias = weft.where %padded, %min, %causal : (tensor<2x1x1x4xi1>, tensor<f32>, tensor<1x1x4x4xf32>) -> tensor<2x1x4x4xf32>
  %w = weft.add %s, %bias : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = weft.softmax %w axis 3 : tensor<2x2x4x4xf32>
  %o = weft.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  return %o : tensor<2x2x4x8xf32>
}
