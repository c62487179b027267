// ALiBi-style distance bias: x - slope * |p|, one fused kernel on fabsf.
func.func @main(%x: tensor<4x8xf32>, %p: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %slope = weft.constant dense<0.25> : tensor<f32>
  %d = weft.abs %p : tensor<4x8xf32>
  %b = weft.mul %d, %slope : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %y = weft.sub %x, %b : tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}
