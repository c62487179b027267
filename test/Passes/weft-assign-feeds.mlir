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

// -----

// Hugging Face's encoder-decoders (T5, BART): the decoder's input takes the
// token ids, the encoder's the tokens before each row's window (T5's prefix
// language modelling), each mask ones as long as its input.

// CHECK-LABEL: module attributes {weft.feeds = ["source", "ones", "tokens", "ones"]}
func.func @t5_like(%src: tensor<2x12xi64> {onnx.name = "input_ids"},
                   %src_mask: tensor<2x12xi64> {onnx.name = "attention_mask"},
                   %ids: tensor<2x8xi64> {onnx.name = "decoder_input_ids"},
                   %mask: tensor<2x8xi64> {onnx.name = "decoder_attention_mask"}) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}

// -----

// torch.nn.Transformer's users name them src and tgt.

// CHECK-LABEL: module attributes {weft.feeds = ["source", "tokens"]}
func.func @src_tgt(%src: tensor<2x12xi64> {onnx.name = "src_ids"},
                   %tgt: tensor<2x8xi64> {onnx.name = "tgt_ids"}) -> tensor<2x8xi64> {
  return %tgt : tensor<2x8xi64>
}

// -----

// An encoder-only model's input_ids are the token ids.

// CHECK-LABEL: module attributes {weft.feeds = ["tokens", "ones"]}
func.func @bert_ids(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                    %mask: tensor<2x8xi64> {onnx.name = "attention_mask"}) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}
