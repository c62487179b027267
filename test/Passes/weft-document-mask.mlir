// RUN: weft-opt %s -split-input-file -weft-assign-feeds -weft-document-mask | FileCheck %s

// A causal attention inside a layer: the document ids are one more input
// ("documents" in weft.feeds), "the same document" is built once from them
// and handed to the layer as one more operand, where it is the attention's
// mask; `causal` stays, so the attention is block-causal.

// CHECK-LABEL: module attributes {weft.feeds = ["tokens", "documents"]}
// CHECK:       func.func @causal(%[[IDS:.*]]: tensor<2x8xi64>, %[[DOCS:.*]]: tensor<2x8xi64> {onnx.name = "document_ids"})
// CHECK:         %[[ROWS:.*]] = weft.reshape %[[DOCS]] : tensor<2x8xi64> -> tensor<2x1x8x1xi64>
// CHECK:         %[[COLS:.*]] = weft.reshape %[[DOCS]] : tensor<2x8xi64> -> tensor<2x1x1x8xi64>
// CHECK:         %[[SAME:.*]] = weft.compare eq, %[[ROWS]], %[[COLS]] : (tensor<2x1x8x1xi64>, tensor<2x1x1x8xi64>) -> tensor<2x1x8x8xi1>
// CHECK:         weft.layer "block"(%{{.*}}, %[[SAME]]) index 0 : (tensor<2x4x8x16xf32>, tensor<2x1x8x8xi1>) -> tensor<2x4x8x16xf32>
// CHECK:         ^bb0(%[[X:.*]]: tensor<2x4x8x16xf32>, %[[M:.*]]: tensor<2x1x8x8xi1>):
// CHECK:           weft.attention %[[X]], %[[X]], %[[X]] mask %[[M]] scale 2.500000e-01 causal
// CHECK:         weft.layer "block"(%{{.*}}, %[[SAME]]) index 1
func.func @causal(%ids: tensor<2x8xi64>) -> tensor<2x4x8x16xf32> {
  %x = weft.constant dense<1.0> : tensor<2x4x8x16xf32>
  %h = weft.layer "block"(%x) index 0 : (tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  ^bb0(%a: tensor<2x4x8x16xf32>):
    %o = weft.attention %a, %a, %a scale 0.25 causal
        : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
    weft.yield %o : tensor<2x4x8x16xf32>
  }
  %g = weft.layer "block"(%h) index 1 : (tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  ^bb0(%a: tensor<2x4x8x16xf32>):
    %o = weft.attention %a, %a, %a scale 0.25 causal
        : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
    weft.yield %o : tensor<2x4x8x16xf32>
  }
  return %g : tensor<2x4x8x16xf32>
}

// -----

// The model's own masks are kept where the documents agree: a keep-mask
// (i1) with false elsewhere, an additive one (a padding bias) with -inf.
// A cross-attention over another length is left alone.

// CHECK-LABEL: module attributes {weft.feeds = ["tokens", "ones", "documents"]}
// CHECK:       func.func @own_masks(%{{.*}}: tensor<2x8xi64>, %{{.*}}: tensor<2x8xi64> {onnx.name = "attention_mask"}, %[[DOCS:.*]]: tensor<2x8xi64> {onnx.name = "document_ids"})
// CHECK:         %[[SAME:.*]] = weft.compare eq
// CHECK:         %[[F:.*]] = weft.constant dense<false> : tensor<i1>
// CHECK:         %[[KEEP:.*]] = weft.where %[[SAME]], %{{.*}}, %[[F]] : (tensor<2x1x8x8xi1>, tensor<8x8xi1>, tensor<i1>) -> tensor<2x1x8x8xi1>
// CHECK:         weft.attention %{{.*}} mask %[[KEEP]] scale
// CHECK:         %[[INF:.*]] = weft.constant dense<0xFF800000> : tensor<f32>
// CHECK:         %[[BIAS:.*]] = weft.where %[[SAME]], %{{.*}}, %[[INF]] : (tensor<2x1x8x8xi1>, tensor<2x1x1x8xf32>, tensor<f32>) -> tensor<2x1x8x8xf32>
// CHECK:         weft.attention %{{.*}} mask %[[BIAS]] scale
// CHECK:         weft.attention %{{.*}}, %{{.*}}, %{{.*}} scale 2.500000e-01 :
func.func @own_masks(%ids: tensor<2x8xi64>, %pad: tensor<2x8xi64> {onnx.name = "attention_mask"})
    -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  %x = weft.constant dense<1.0> : tensor<2x4x8x16xf32>
  %src = weft.constant dense<1.0> : tensor<2x4x12x16xf32>
  %window = weft.constant dense<true> : tensor<8x8xi1>
  %bias = weft.constant dense<0.0> : tensor<2x1x1x8xf32>
  %a = weft.attention %x, %x, %x mask %window scale 0.25
      : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<8x8xi1>) -> tensor<2x4x8x16xf32>
  %b = weft.attention %x, %x, %x mask %bias scale 0.25
      : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x1x1x8xf32>) -> tensor<2x4x8x16xf32>
  %c = weft.attention %x, %src, %src scale 0.25
      : (tensor<2x4x8x16xf32>, tensor<2x4x12x16xf32>, tensor<2x4x12x16xf32>) -> tensor<2x4x8x16xf32>
  return %a, %b, %c : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}
