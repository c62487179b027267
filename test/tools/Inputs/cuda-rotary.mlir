// Rotary embedding computed in the forward pass: cos and sin of the
// positions times the frequencies, applied to x (x cos + x sin).
func.func @main(%x: tensor<4x8xf32>, %p: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = weft.cos %p : tensor<4x8xf32>
  %s = weft.sin %p : tensor<4x8xf32>
  %a = weft.mul %x, %c : tensor<4x8xf32>
  %b = weft.mul %x, %s : tensor<4x8xf32>
  %y = weft.add %a, %b : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
