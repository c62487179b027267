// Attention with grouped KV heads, causal, with a padding mask,
// soft-capped (Gemma 2) with both, with a sliding window of 3 (Mistral), and
// with ALiBi's slopes, causal alone and with a mask not causal: the numeric
// reference for -weft-decompose-attention.
func.func @main(%q: tensor<2x4x6x3xf32>, %k: tensor<2x2x6x3xf32>, %v: tensor<2x2x6x5xf32>, %keep: tensor<2x1x1x6xi1>) -> (tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>) {
  %0 = weft.attention %q, %k, %v scale 0.57735 causal dropout 0.1 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>) -> tensor<2x4x6x5xf32>
  %1 = weft.attention %q, %k, %v mask %keep scale 0.5 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x1x1x6xi1>) -> tensor<2x4x6x5xf32>
  %2 = weft.attention %q, %k, %v mask %keep scale 0.5 softcap 0.4 causal : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x1x1x6xi1>) -> tensor<2x4x6x5xf32>
  %3 = weft.attention %q, %k, %v scale 0.5 causal window 3 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>) -> tensor<2x4x6x5xf32>
  %slopes = weft.constant dense<[1.0, 0.5, 0.25, -0.75]> : tensor<4xf32>
  %4 = weft.attention %q, %k, %v alibi %slopes scale 0.5 causal : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<4xf32>) -> tensor<2x4x6x5xf32>
  %5 = weft.attention %q, %k, %v mask %keep alibi %slopes scale 0.5 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x1x1x6xi1>, tensor<4xf32>) -> tensor<2x4x6x5xf32>
  return %0, %1, %2, %3, %4, %5 : tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x4x6x5xf32>
}
