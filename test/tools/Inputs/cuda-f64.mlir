func.func @main(%x: tensor<4xf64>) -> tensor<4xf64> {
  %0 = weft.exp %x : tensor<4xf64>
  return %0 : tensor<4xf64>
}
