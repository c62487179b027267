// gpt_block.mlir with multi-query attention (one KV head for four query
// heads, as StarCoder and Falcon-7B): the input of
// test/Passes/weft-apply-plan-repeat-kv.mlir, where tp exceeds the KV heads.
// A one-layer GPT-style transformer with shape-only weights, as
// the partitioning lit tests (test/Passes/weft-partition*.mlir).
func.func @main(%ids: tensor<2x8xi64>) -> tensor<2x8x32xf32> {
  %table = weft.parameter "embed" : tensor<32x16xf32>
  %x = weft.embedding %table[%ids] : (tensor<32x16xf32>, tensor<2x8xi64>) -> tensor<2x8x16xf32>
  %y = weft.layer "h"(%x) index 0 : (tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  ^bb0(%a: tensor<2x8x16xf32>):
    %g1 = weft.parameter "ln1" : tensor<16xf32>
    %n1 = weft.rms_norm %a, %g1 axis 2 epsilon 1.0E-5 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %wq = weft.parameter "q" : tensor<16x16xf32>
    %q = weft.linear %n1, %wq : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %qr = weft.reshape %q : tensor<2x8x16xf32> -> tensor<2x8x4x4xf32>
    %qh = weft.transpose %qr permutation [0, 2, 1, 3] : tensor<2x8x4x4xf32> -> tensor<2x4x8x4xf32>
    %wk = weft.parameter "k" : tensor<16x4xf32>
    %k = weft.linear %n1, %wk : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> tensor<2x8x4xf32>
    %kr = weft.reshape %k : tensor<2x8x4xf32> -> tensor<2x8x1x4xf32>
    %kh = weft.transpose %kr permutation [0, 2, 1, 3] : tensor<2x8x1x4xf32> -> tensor<2x1x8x4xf32>
    %wv = weft.parameter "v" : tensor<16x4xf32>
    %v = weft.linear %n1, %wv : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> tensor<2x8x4xf32>
    %vr = weft.reshape %v : tensor<2x8x4xf32> -> tensor<2x8x1x4xf32>
    %vh = weft.transpose %vr permutation [0, 2, 1, 3] : tensor<2x8x1x4xf32> -> tensor<2x1x8x4xf32>
    %att = weft.attention %qh, %kh, %vh scale 5.000000e-01 causal : (tensor<2x4x8x4xf32>, tensor<2x1x8x4xf32>, tensor<2x1x8x4xf32>) -> tensor<2x4x8x4xf32>
    %back = weft.transpose %att permutation [0, 2, 1, 3] : tensor<2x4x8x4xf32> -> tensor<2x8x4x4xf32>
    %merged = weft.reshape %back : tensor<2x8x4x4xf32> -> tensor<2x8x16xf32>
    %wo = weft.parameter "o" : tensor<16x16xf32>
    %o = weft.linear %merged, %wo : (tensor<2x8x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
    %r1 = weft.add %a, %o : tensor<2x8x16xf32>
    %g2 = weft.parameter "ln2" : tensor<16xf32>
    %n2 = weft.rms_norm %r1, %g2 axis 2 epsilon 1.0E-5 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %wup = weft.parameter "up" : tensor<16x32xf32>
    %up = weft.linear %n2, %wup : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
    %gl = weft.gelu %up approximation tanh : tensor<2x8x32xf32>
    %wdown = weft.parameter "down" : tensor<32x16xf32>
    %down = weft.linear %gl, %wdown : (tensor<2x8x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
    %r2 = weft.add %r1, %down : tensor<2x8x16xf32>
    weft.yield %r2 : tensor<2x8x16xf32>
  }
  %gf = weft.parameter "final" : tensor<16xf32>
  %nf = weft.rms_norm %y, %gf axis 2 epsilon 1.0E-5 : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %wout = weft.parameter "output" : tensor<16x32xf32>
  %logits = weft.linear %nf, %wout : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  return %logits : tensor<2x8x32xf32>
}
