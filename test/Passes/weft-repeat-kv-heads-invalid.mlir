// RUN: weft-opt %s -weft-repeat-kv-heads=ways=0 -verify-diagnostics

// expected-error @+1 {{-weft-repeat-kv-heads: ways must be at least 1, got 0}}
func.func @no_ways(%q: tensor<1x4x8x4xf32>) {
  return
}
