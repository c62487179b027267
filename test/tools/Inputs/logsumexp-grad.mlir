func.func @main(%x: tensor<4x6xf32>) -> tensor<f32> {
  %w = weft.parameter "w" : tensor<4x6xf32> = dense<[[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [0.5, -1.0, 2.0, 0.0, 1.5, -2.0], [30.0, 31.0, 29.0, 30.5, 28.0, 31.5], [-1.0, -2.0, -3.0, -4.0, -5.0, -6.0]]>
  %y = weft.mul %x, %w : tensor<4x6xf32>
  %lse = weft.reduce_logsumexp %y axes [1] : tensor<4x6xf32> -> tensor<4xf32>
  %l = weft.reduce_sum %lse axes [0] : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}
