// The CUDA emitter's decisions on a small function: a GEMM with its bias and
// GELU (tanh) fused into the cuBLASLt epilogue, then an elementwise chain
// (add with a broadcast vector, exp, mul) as one generated kernel.
func.func @main(%x: tensor<4x64xf32>, %w: tensor<64x64xf32>, %b: tensor<64xf32>,
                %c: tensor<64xf32>, %z: tensor<4x64xf32>) -> tensor<4x64xf32> {
  %0 = weft.linear %x, %w, %b : (tensor<4x64xf32>, tensor<64x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %1 = weft.gelu %0 approximation tanh : tensor<4x64xf32>
  %2 = weft.add %1, %c : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  %3 = weft.exp %2 : tensor<4x64xf32>
  %4 = weft.mul %3, %z : tensor<4x64xf32>
  return %4 : tensor<4x64xf32>
}
