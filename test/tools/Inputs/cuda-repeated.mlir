// The same elementwise chain (exp, then mul) before and after a GEMM, on
// different shapes, and a different one (sub) at the end: three launches of
// two generated kernels, since shapes and strides are the kernels'
// arguments.
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>,
                %w2: tensor<16x16xf32>, %z: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %0 = weft.exp %x : tensor<4x8xf32>
  %1 = weft.mul %0, %x : tensor<4x8xf32>
  %2 = weft.linear %1, %w : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %3 = weft.exp %2 : tensor<4x16xf32>
  %4 = weft.mul %3, %2 : tensor<4x16xf32>
  %5 = weft.linear %4, %w2 : (tensor<4x16xf32>, tensor<16x16xf32>) -> tensor<4x16xf32>
  %6 = weft.sub %5, %z : tensor<4x16xf32>
  return %6 : tensor<4x16xf32>
}
