// RUN: weft-opt %s -split-input-file -weft-apply-plan="cp=2" -weft-propagate-sharding -weft-partition | FileCheck %s --check-prefix=RING
// RUN: weft-opt %s -split-input-file -weft-apply-plan="ulysses=2" -weft-propagate-sharding -weft-partition | FileCheck %s --check-prefix=ULYSSES

// ALiBi's slopes under context parallelism: each ring step's block reads
// the positions of its queries and of the keys it holds (ALiBi's distance
// is between positions, not indices in the block), causal or not, and the
// slopes whole (the heads are). Under Ulysses the heads split, and each
// rank's attention reads its heads' slopes.

// RING-LABEL: func.func @causal
// RING-COUNT-2: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} alibi %arg3 positions %{{.*}}, %{{.*}} scale 5.000000e-01 causal visible
// RING-NOT: weft.attention_block
// ULYSSES-LABEL: func.func @causal
// ULYSSES: %[[MINE:.*]] = weft.all_slice %arg3 over @mesh ["ulysses"] dim 0 : tensor<2xf32> -> tensor<1xf32>
// ULYSSES: weft.attention %{{.*}}, %{{.*}}, %{{.*}} alibi %[[MINE]] scale 5.000000e-01 causal : {{.*}} tensor<1xf32>) -> tensor<1x1x8x4xf32>
func.func @causal(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>, %slopes: tensor<2xf32>) -> tensor<1x2x8x4xf32> {
  %0 = weft.attention %q, %k, %v alibi %slopes scale 5.000000e-01 causal : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<2xf32>) -> tensor<1x2x8x4xf32>
  return %0 : tensor<1x2x8x4xf32>
}

// -----

// RING-LABEL: func.func @bidirectional
// RING-COUNT-2: weft.attention_block %{{.*}}, %{{.*}}, %{{.*}} alibi %arg3 positions %{{.*}}, %{{.*}} scale 5.000000e-01 {weft.decomposed} :
func.func @bidirectional(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>, %slopes: tensor<2xf32>) -> tensor<1x2x8x4xf32> {
  %0 = weft.attention %q, %k, %v alibi %slopes scale 5.000000e-01 : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>, tensor<2xf32>) -> tensor<1x2x8x4xf32>
  return %0 : tensor<1x2x8x4xf32>
}
