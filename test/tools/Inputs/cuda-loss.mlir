// A language-model head and its loss: the logits of a GEMM, their per-token
// cross-entropy against i64 labels (weft.cross_entropy, not split).
func.func @main(%x: tensor<2x8x32xf32>, %w: tensor<32x96xf32>, %labels: tensor<2x8xi64>) -> tensor<2x8xf32> {
  %0 = weft.linear %x, %w : (tensor<2x8x32xf32>, tensor<32x96xf32>) -> tensor<2x8x96xf32>
  %1 = weft.cross_entropy %0, %labels reduction none : (tensor<2x8x96xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
  return %1 : tensor<2x8xf32>
}
