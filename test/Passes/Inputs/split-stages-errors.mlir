// Run by weft-split-stages.mlir with stages=2 chunks=2 (4 virtual stages).

// expected-error@+1 {{has 3 weft.layer ops, fewer than stages x chunks = 4; use a smaller pp or v}}
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

// expected-error@+1 {{has 0 weft.layer ops, fewer than stages x chunks = 4 (mark its layers with -weft-mark-layers)}}
func.func @flat(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  %0 = weft.add %x, %x : tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

// expected-error@+1 {{the 6 layers of @six do not divide into stages x chunks = 4 virtual stages}}
func.func @six(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
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
  %3 = weft.layer "h"(%2) index 3 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    weft.yield %a : tensor<2x4xf32>
  }
  %4 = weft.layer "h"(%3) index 4 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    weft.yield %a : tensor<2x4xf32>
  }
  %5 = weft.layer "h"(%4) index 5 : (tensor<2x4xf32>) -> tensor<2x4xf32> {
  ^bb0(%a: tensor<2x4xf32>):
    weft.yield %a : tensor<2x4xf32>
  }
  return %5 : tensor<2x4xf32>
}

// -----

func.func @one(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}
// expected-error@+1 {{the module has more than one function; split one model at a time}}
func.func @two(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
  return %x : tensor<2x4xf32>
}
