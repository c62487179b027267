// RUN: weft-opt %s -split-input-file -weft-assign-feeds | FileCheck %s

// Hugging Face's input names, as torch.onnx.export writes forward's
// arguments: the mask is filled with ones, the positions with 0..seq-1, the
// token types with zeros.

// CHECK-LABEL: module attributes {weft.feeds = ["tokens", "ones", "positions", "zeros"]}
func.func @bert_like(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                     %mask: tensor<2x8xi64> {onnx.name = "attention_mask"},
                     %pos: tensor<2x8xi64> {onnx.name = "position_ids"},
                     %types: tensor<2x8xi64> {onnx.name = "token_type_ids"}) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}

// -----

// A model that takes its labels and returns a loss of its own (Hugging
// Face's `labels` argument) gets the next tokens there too.

// CHECK-LABEL: module attributes {weft.feeds = ["tokens", "labels"]}
func.func @own_loss(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                    %labels: tensor<2x8xi64> {onnx.name = "labels"}) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}

// -----

// Only token ids: nothing else to fill.

// CHECK-LABEL: module attributes {weft.feeds = ["tokens"]}
func.func @gpt(%ids: tensor<2x8xi64>) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}
