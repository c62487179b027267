// Causal attention with a mask that varies over the queries (a document mask:
// each token sees only its own document's tokens), with grouped KV heads.
func.func @main(%q: tensor<1x4x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>, %keep: tensor<1x1x8x8xi1>) -> tensor<1x4x8x4xf32> {
  %0 = weft.attention %q, %k, %v mask %keep scale 0.5 causal : (tensor<1x4x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x1x8x8xi1>) -> tensor<1x4x8x4xf32>
  return %0 : tensor<1x4x8x4xf32>
}
