// Attention's fused gradient with grouped KV heads, causal (with dropout,
// which a training step does not apply), with a padding mask, with one
// tensor as keys and values, soft-capped with a mask and causal, and with a
// sliding window of 3, and with ALiBi's slopes (causal; with a mask, not
// causal): the numeric reference for
// -weft-decompose-attention on weft.attention_grad.
func.func @main(%q: tensor<2x4x6x3xf32>, %k: tensor<2x2x6x3xf32>, %v: tensor<2x2x6x5xf32>, %keep: tensor<2x1x1x6xi1>, %do: tensor<2x4x6x5xf32>, %do3: tensor<2x4x6x3xf32>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>) {
  %0:3 = weft.attention_grad %q, %k, %v grad %do scale 0.57735 causal dropout 0.1 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x5xf32>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>)
  %1:3 = weft.attention_grad %q, %k, %v grad %do mask %keep scale 0.5 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x1x1x6xi1>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>)
  %2:3 = weft.attention_grad %q, %k, %k grad %do3 scale 0.5 causal : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x4x6x3xf32>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x3xf32>)
  %3:3 = weft.attention_grad %q, %k, %v grad %do mask %keep scale 0.5 softcap 0.4 causal : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x1x1x6xi1>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>)
  %4:3 = weft.attention_grad %q, %k, %v grad %do scale 0.5 causal window 3 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x5xf32>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>)
  %slopes = weft.constant dense<[1.0, 0.5, 0.25, -0.75]> : tensor<4xf32>
  %5:3 = weft.attention_grad %q, %k, %v grad %do alibi %slopes scale 0.5 causal : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x5xf32>, tensor<4xf32>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>)
  %6:3 = weft.attention_grad %q, %k, %v grad %do mask %keep alibi %slopes scale 0.5 : (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x5xf32>, tensor<2x1x1x6xi1>, tensor<4xf32>) -> (tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>)
  return %0#0, %0#1, %0#2, %1#0, %1#1, %1#2, %2#0, %2#1, %2#2, %3#0, %3#1, %3#2, %4#0, %4#1, %4#2, %5#0, %5#1, %5#2, %6#0, %6#1, %6#2 : tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>, tensor<2x4x6x3xf32>, tensor<2x2x6x3xf32>, tensor<2x2x6x5xf32>
}
