// Two layers whose attention stays matmuls and a softmax: the import raised
// no weft.attention.
func.func @model(%x: tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  %h = weft.layer "block"(%x) index 0 : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  ^bb0(%a: tensor<2x8x32xf32>):
    %w = weft.parameter "h.0.w" : tensor<32x32xf32>
    %y = weft.matmul %a, %w : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %t = weft.tanh %y : tensor<2x8x32xf32>
    weft.yield %t : tensor<2x8x32xf32>
  }
  %g = weft.layer "block"(%h) index 1 : (tensor<2x8x32xf32>) -> tensor<2x8x32xf32> {
  ^bb0(%a: tensor<2x8x32xf32>):
    %w = weft.parameter "h.1.w" : tensor<32x32xf32>
    %y = weft.matmul %a, %w : (tensor<2x8x32xf32>, tensor<32x32xf32>) -> tensor<2x8x32xf32>
    %t = weft.tanh %y : tensor<2x8x32xf32>
    weft.yield %t : tensor<2x8x32xf32>
  }
  return %g : tensor<2x8x32xf32>
}
