// RUN: weft-opt %s -split-input-file -weft-assign-feeds -verify-diagnostics

// An input whose name says nothing, and no fill given for it.
// expected-error @+1 {{input #1 ('pos') of @unnamed: a training run feeds the token ids to input #0 and fills the others by their names (attention masks with ones, position ids with 0..seq-1, token types with zeros, labels with the next tokens, an encoder's input ids with the tokens before the window), and this name says none of them; give its fill, e.g. --feed pos=ones (weft train, weft compile --train)}}
func.func @unnamed(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                   %pos: tensor<2x8xi64> {onnx.name = "pos"}) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}

// -----

// expected-error @+1 {{input #1 of @unnamed_index: a training run feeds}}
func.func @unnamed_index(%ids: tensor<2x8xi64>, %x: tensor<2x8xi64>) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}

// -----

// A float input is no window of a token file, whatever its name.
// expected-error @+1 {{input #1 ('attention_mask') of @float_input is 'tensor<2x8xf32>', not integers: a training run feeds windows of a token file (token ids, and the attention masks, position ids and token types it fills)}}
func.func @float_input(%ids: tensor<2x8xi64>, %m: tensor<2x8xf32> {onnx.name = "attention_mask"}) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}

// -----

// expected-error @+1 {{-weft-assign-feeds: the module has no function with inputs to feed}}
module {
  func.func private @external(tensor<2x8xi64>)
}
