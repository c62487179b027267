// Run by weft-split-stages.mlir with stages=2 chunks=2 (4 virtual stages).

// expected-error@+1 {{the 3 layers of @three do not divide into 2 stages; give stage-layers (e.g. 'stages=...' in the plan) or another pp}}
func.func @three(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.layer "h"(%x) index 0 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    weft.yield %a : tensor<2x4xf32>
  }
  %1 = weft.layer "h"(%0) index 1 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    weft.yield %a : tensor<2x4xf32>
  }
  %2 = weft.layer "h"(%1) index 2 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    weft.yield %a : tensor<2x4xf32>
  }
  return %2 : tensor<2x4xf32>
}

// -----

// expected-error@+1 {{has 0 weft.layer ops, fewer than stages x chunks - 2 = 2 (mark its layers with -weft-mark-layers)}}
func.func @flat(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.add %x, %x : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @one(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}
// expected-error@+1 {{the module has more than one function; split one model at a time}}
func.func @two(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}
