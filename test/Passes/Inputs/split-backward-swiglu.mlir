// A LLaMA-like model of two SwiGLU layers: gate and up projections, the
// product of silu(gate) and up, the down projection.
func.func @lm(%ids: tensor<2x8xi64>) -> tensor<2x8x32xf32> {
  %wte = weft.parameter "wte" : tensor<32x16xf32>
  %tok = weft.embedding %wte[%ids] : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %h0 = weft.layer "h"(%tok) index 0 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>):
    %w1 = weft.parameter "h.0.gate" : tensor<32x16xf32>
    %w3 = weft.parameter "h.0.up" : tensor<32x16xf32>
    %w2 = weft.parameter "h.0.down" : tensor<16x32xf32>
    %g = weft.linear %a, %w1 transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    %u = weft.linear %a, %w3 transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    %s = weft.silu %g : tensor<2x8x32xf32>
    %m = weft.mul %s, %u : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %d = weft.linear %m, %w2 transpose_weight : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
    %r = weft.add %a, %d : tensor<2x8x16xf32>
    weft.yield %r : tensor<2x8x16xf32>
  }
  %h1 = weft.layer "h"(%h0) index 1 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>):
    %w1 = weft.parameter "h.1.gate" : tensor<32x16xf32>
    %w3 = weft.parameter "h.1.up" : tensor<32x16xf32>
    %w2 = weft.parameter "h.1.down" : tensor<16x32xf32>
    %g = weft.linear %a, %w1 transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    %u = weft.linear %a, %w3 transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
    %s = weft.silu %g : tensor<2x8x32xf32>
    %m = weft.mul %s, %u : (tensor<2x8x32xf32>, tensor<2x8x32xf32>) -> tensor<2x8x32xf32>
    %d = weft.linear %m, %w2 transpose_weight : (tensor<2x8x32xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
    %r = weft.add %a, %d : tensor<2x8x16xf32>
    weft.yield %r : tensor<2x8x16xf32>
  }
  %wout = weft.parameter "lm_head" : tensor<32x16xf32>
  %logits = weft.linear %h1, %wout transpose_weight : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  return %logits : tensor<2x8x32xf32>
}
