// Rotary tables computed in the forward pass at 768 positions (an iota of
// positions times inverse frequencies, their cos and sin) applied to x, as
// the builder builds them: weft-import-builtin-rotary.test runs it in bf16.
func.func @main(%x: tensor<1x768x4xf32>) -> tensor<1x768x4xf32> {
  %f = weft.constant dense<[[[1.0, 0.1, 1.0, 0.1]]]> : tensor<1x1x4xf32>
  %p = weft.iota dim 1 : tensor<1x768x1xf32>
  %a = weft.mul %p, %f : (tensor<1x768x1xf32>, tensor<1x1x4xf32>) -> tensor<1x768x4xf32>
  %c = weft.cos %a : tensor<1x768x4xf32>
  %s = weft.sin %a : tensor<1x768x4xf32>
  %xc = weft.mul %x, %c : tensor<1x768x4xf32>
  %xs = weft.mul %x, %s : tensor<1x768x4xf32>
  %y = weft.add %xc, %xs : tensor<1x768x4xf32>
  return %y : tensor<1x768x4xf32>
}
