// Contiguous chunks need the sequence divisible by cp only: 40 positions on
// cp=8 with a window of 5 (an eighth) are split, with a window of 6 they
// would need 2 x cp.
func.func @contiguous(%q: tensor<1x2x40x4xf32>, %k: tensor<1x2x40x4xf32>, %v: tensor<1x2x40x4xf32>) -> tensor<1x2x40x4xf32> {
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 5 : (tensor<1x2x40x4xf32>, tensor<1x2x40x4xf32>, tensor<1x2x40x4xf32>) -> tensor<1x2x40x4xf32>
  return %0 : tensor<1x2x40x4xf32>
}

// -----

func.func @balanced(%q: tensor<1x2x40x4xf32>, %k: tensor<1x2x40x4xf32>, %v: tensor<1x2x40x4xf32>) -> tensor<1x2x40x4xf32> {
  // expected-error @+1 {{plan: the sequence (40) is not divisible by 2 x cp x ulysses (16)}}
  %0 = weft.attention %q, %k, %v scale 5.000000e-01 causal window 6 : (tensor<1x2x40x4xf32>, tensor<1x2x40x4xf32>, tensor<1x2x40x4xf32>) -> tensor<1x2x40x4xf32>
  return %0 : tensor<1x2x40x4xf32>
}
