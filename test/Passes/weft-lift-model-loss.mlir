// RUN: weft-opt %s -split-input-file -weft-lift-model-loss -verify-diagnostics | FileCheck %s
// RUN: not weft-opt %s -split-input-file -weft-lift-model-loss=explain -o /dev/null 2>&1 | FileCheck %s --check-prefix=EXPLAIN

// nanoGPT's forward(idx, targets): (logits, cross_entropy(logits.view(-1, V),
// targets.view(-1), ignore_index=-1)). The logits stay the first result, the
// loss and its reshapes go, and so does the targets input.
// CHECK-LABEL: func.func @nanogpt(%arg0: tensor<2x8xi64> {onnx.name = "idx"}) -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[E:.*]] = weft.parameter "wte"
// CHECK-NEXT: %[[X:.*]] = weft.embedding %[[E]][%arg0]
// CHECK-NEXT: %[[L:.*]] = weft.linear %[[X]], %[[E]] transpose_weight
// CHECK-NEXT: return %[[L]] : tensor<2x8x16xf32>
// EXPLAIN: remark: the model computes its own loss, cross_entropy against input #1 ('targets'); the training step computes it from the logits, with the labels it feeds (the next tokens)
func.func @nanogpt(%idx: tensor<2x8xi64> {onnx.name = "idx"},
                   %targets: tensor<2x8xi64> {onnx.name = "targets"})
    -> (tensor<2x8x16xf32>, tensor<f32>) {
  %wte = weft.parameter "wte" : tensor<16x4xf32> = dense<0.5>
  %x = weft.embedding %wte[%idx] : (tensor<16x4xf32>, tensor<2x8xi64>) -> tensor<2x8x4xf32>
  %logits = weft.linear %x, %wte transpose_weight : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
  %flat = weft.reshape %logits : tensor<2x8x16xf32> -> tensor<16x16xf32>
  %labels = weft.reshape %targets : tensor<2x8xi64> -> tensor<16xi64>
  %loss = weft.cross_entropy %flat, %labels reduction mean ignore_index -1 : (tensor<16x16xf32>, tensor<16xi64>) -> tensor<f32>
  return %logits, %loss : tensor<2x8x16xf32>, tensor<f32>
}

// -----

// Hugging Face's ...ForCausalLM(input_ids, labels): (loss, logits), the
// logits widened to f32 and their last position scored against the labels'
// next. The logits become the first result, and the labels input goes.
// CHECK-LABEL: func.func @hf(%arg0: tensor<2x8xi64> {onnx.name = "input_ids"}) -> (tensor<2x8x16xbf16>, tensor<2x8x4xbf16>)
// CHECK-NOT: cross_entropy
// CHECK: return %{{.*}}, %{{.*}} : tensor<2x8x16xbf16>, tensor<2x8x4xbf16>
// EXPLAIN: remark: the model computes its own loss, cross_entropy against input #1 ('labels') shifted by one position; the training step computes it from the logits, with the labels it feeds (the next tokens, at every position: the model's loss leaves out each row's last)
func.func @hf(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
              %labels: tensor<2x8xi64> {onnx.name = "labels"})
    -> (tensor<f32>, tensor<2x8x16xbf16>, tensor<2x8x4xbf16>) {
  %wte = weft.parameter "wte" : tensor<16x4xbf16> = dense<0.5>
  %x = weft.embedding %wte[%ids] : (tensor<16x4xbf16>, tensor<2x8xi64>) -> tensor<2x8x4xbf16>
  %logits = weft.linear %x, %wte transpose_weight : (tensor<2x8x4xbf16>, tensor<16x4xbf16>) -> tensor<2x8x16xbf16>
  %wide = weft.cast %logits : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %shift = weft.slice %wide starts [0, 0, 0] limits [2, 7, 16] : tensor<2x8x16xf32> -> tensor<2x7x16xf32>
  %flat = weft.reshape %shift : tensor<2x7x16xf32> -> tensor<14x16xf32>
  %next = weft.slice %labels starts [0, 1] limits [2, 8] : tensor<2x8xi64> -> tensor<2x7xi64>
  %flatl = weft.reshape %next : tensor<2x7xi64> -> tensor<14xi64>
  %loss = weft.cross_entropy %flat, %flatl reduction mean ignore_index -100 : (tensor<14x16xf32>, tensor<14xi64>) -> tensor<f32>
  return %loss, %logits, %x : tensor<f32>, tensor<2x8x16xbf16>, tensor<2x8x4xbf16>
}

// -----

// transformers 4.46 on (ForCausalLMLoss): every position's logits against
// pad(labels, (0, 1), value=-100)[..., 1:]; the last position is ignored.
// CHECK-LABEL: func.func @hf_padded(%arg0: tensor<2x8xi64> {onnx.name = "input_ids"}) -> tensor<2x8x16xf32>
// CHECK-NOT: cross_entropy
// CHECK-NOT: concat
// EXPLAIN: remark: the model computes its own loss, cross_entropy against input #1 ('labels') shifted by one position
func.func @hf_padded(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                     %labels: tensor<2x8xi64> {onnx.name = "labels"})
    -> (tensor<f32>, tensor<2x8x16xf32>) {
  %wte = weft.parameter "wte" : tensor<16x4xf32> = dense<0.5>
  %x = weft.embedding %wte[%ids] : (tensor<16x4xf32>, tensor<2x8xi64>) -> tensor<2x8x4xf32>
  %logits = weft.linear %x, %wte transpose_weight : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
  %ignored = weft.constant dense<-100> : tensor<2x1xi64>
  %padded = weft.concat %labels, %ignored axis 1 : (tensor<2x8xi64>, tensor<2x1xi64>) -> tensor<2x9xi64>
  %next = weft.slice %padded starts [0, 1] limits [2, 9] : tensor<2x9xi64> -> tensor<2x8xi64>
  %flat = weft.reshape %logits : tensor<2x8x16xf32> -> tensor<16x16xf32>
  %flatl = weft.reshape %next : tensor<2x8xi64> -> tensor<16xi64>
  %loss = weft.cross_entropy %flat, %flatl reduction mean ignore_index -100 : (tensor<16x16xf32>, tensor<16xi64>) -> tensor<f32>
  return %loss, %logits : tensor<f32>, tensor<2x8x16xf32>
}

// -----

// The same, shifted before it is padded.
// CHECK-LABEL: func.func @padded_after(%arg0: tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
// CHECK-NEXT: return %arg0
func.func @padded_after(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %next = weft.slice %labels starts [0, 1] limits [2, 8] : tensor<2x8xi64> -> tensor<2x7xi64>
  %ignored = weft.constant dense<-1> : tensor<2x1xi64>
  %padded = weft.concat %next, %ignored axis 1 : (tensor<2x7xi64>, tensor<2x1xi64>) -> tensor<2x8xi64>
  %loss = weft.cross_entropy %logits, %padded reduction mean ignore_index -1 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A model that scores its own input's next tokens keeps that input: it reads
// it as its token ids.
// CHECK-LABEL: func.func @self(%arg0: tensor<2x8xi64>) -> tensor<2x8x16xf32>
// CHECK-NOT: cross_entropy
func.func @self(%ids: tensor<2x8xi64>) -> tensor<f32> {
  %wte = weft.parameter "wte" : tensor<16x4xf32> = dense<0.5>
  %x = weft.embedding %wte[%ids] : (tensor<16x4xf32>, tensor<2x8xi64>) -> tensor<2x8x4xf32>
  %logits = weft.linear %x, %wte transpose_weight : (tensor<2x8x4xf32>, tensor<16x4xf32>) -> tensor<2x8x16xf32>
  %shift = weft.slice %logits starts [0, 0, 0] limits [2, 7, 16] : tensor<2x8x16xf32> -> tensor<2x7x16xf32>
  %flat = weft.reshape %shift : tensor<2x7x16xf32> -> tensor<14x16xf32>
  %next = weft.slice %ids starts [0, 1] limits [2, 8] : tensor<2x8xi64> -> tensor<2x7xi64>
  %flatl = weft.reshape %next : tensor<2x7xi64> -> tensor<14xi64>
  %loss = weft.cross_entropy %flat, %flatl reduction mean : (tensor<14x16xf32>, tensor<14xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A model without a loss is left alone, as are per-token losses (a step's,
// which -weft-append-loss writes and reduces).
// CHECK-LABEL: func.func @plain(%arg0: tensor<2x8x16xf32>, %arg1: tensor<2x8xi64>) -> tensor<2x8xf32>
// CHECK-NEXT: weft.cross_entropy %arg0, %arg1 reduction none
func.func @plain(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<2x8xf32> {
  %loss = weft.cross_entropy %logits, %labels reduction none : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
  return %loss : tensor<2x8xf32>
}

// -----

func.func @sum(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  // expected-error @+1 {{the model's loss is a cross-entropy with reduction 'sum'; a training step's loss is the mean over the tokens: return the logits, or the loss with reduction 'mean'}}
  %loss = weft.cross_entropy %logits, %labels reduction sum : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

func.func @two(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>, %more: tensor<2x8xi64>) -> (tensor<f32>, tensor<f32>) {
  %loss = weft.cross_entropy %logits, %labels reduction mean : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  // expected-error @+1 {{the model returns two losses (results #0 and #1); a training step takes one: return the logits}}
  %other = weft.cross_entropy %logits, %more reduction mean : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss, %other : tensor<f32>, tensor<f32>
}

// -----

// A loss combined with another term (an auxiliary loss, a scale).
func.func @combined(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>, %aux: tensor<f32>) -> tensor<f32> {
  // expected-error @+1 {{the model's results are computed from this cross-entropy, which a training step does not take apart: return the logits (and the loss as cross_entropy(logits, labels) with reduction 'mean', if at all)}}
  %loss = weft.cross_entropy %logits, %labels reduction mean : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  %total = weft.add %loss, %aux : tensor<f32>
  return %total : tensor<f32>
}

// -----

// Labels that are not an input of the model.
func.func @computed(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %one = weft.constant dense<1> : tensor<i64>
  %moved = weft.add %labels, %one : (tensor<2x8xi64>, tensor<i64>) -> tensor<2x8xi64>
  // expected-error @+1 {{the model's loss does not take its labels from an input of the model; Weft takes a loss of the form cross_entropy(logits.view(-1, classes), targets.view(-1)) (nanoGPT's), or with the logits' last position and the labels' first dropped (Hugging Face's shift): return the logits instead}}
  %loss = weft.cross_entropy %logits, %moved reduction mean : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Logits whose classes a reshape mixes with their positions.
func.func @mixed(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %wrong = weft.reshape %logits : tensor<2x8x16xf32> -> tensor<2x16x8xf32>
  %flat = weft.reshape %wrong : tensor<2x16x8xf32> -> tensor<32x8xf32>
  %half = weft.slice %flat starts [0, 0] limits [16, 8] : tensor<32x8xf32> -> tensor<16x8xf32>
  %all = weft.reshape %labels : tensor<2x8xi64> -> tensor<16xi64>
  // expected-error @+1 {{the model's loss does not score logits [..., classes] of the model}}
  %loss = weft.cross_entropy %half, %all reduction mean : (tensor<16x8xf32>, tensor<16xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A shift the other way (the logits' first position dropped).
func.func @backwards(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %shift = weft.slice %logits starts [0, 1, 0] limits [2, 8, 16] : tensor<2x8x16xf32> -> tensor<2x7x16xf32>
  %next = weft.slice %labels starts [0, 0] limits [2, 7] : tensor<2x8xi64> -> tensor<2x7xi64>
  // expected-error @+1 {{the model's loss slices or pads its logits and labels otherwise than by Hugging Face's shift}}
  %loss = weft.cross_entropy %shift, %next reduction mean : (tensor<2x7x16xf32>, tensor<2x7xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A shift of the flattened positions: each row's last logits would be scored
// against the next row's first token.
func.func @flat_shift(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %flat = weft.reshape %logits : tensor<2x8x16xf32> -> tensor<16x16xf32>
  %cut = weft.slice %flat starts [0, 0] limits [15, 16] : tensor<16x16xf32> -> tensor<15x16xf32>
  %flatl = weft.reshape %labels : tensor<2x8xi64> -> tensor<16xi64>
  %next = weft.slice %flatl starts [1] limits [16] : tensor<16xi64> -> tensor<15xi64>
  // expected-error @+1 {{the model's loss slices or pads its logits and labels otherwise than by Hugging Face's shift}}
  %loss = weft.cross_entropy %cut, %next reduction mean : (tensor<15x16xf32>, tensor<15xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// A padding that the loss counts (not its ignore index): the last position
// would be scored against token 0.
func.func @padded_counted(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> tensor<f32> {
  %next = weft.slice %labels starts [0, 1] limits [2, 8] : tensor<2x8xi64> -> tensor<2x7xi64>
  %zero = weft.constant dense<0> : tensor<2x1xi64>
  %padded = weft.concat %next, %zero axis 1 : (tensor<2x7xi64>, tensor<2x1xi64>) -> tensor<2x8xi64>
  // expected-error @+1 {{the model's loss slices or pads its logits and labels otherwise than by Hugging Face's shift}}
  %loss = weft.cross_entropy %logits, %padded reduction mean ignore_index -100 : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// -----

// Unshifted labels that the model also reads: the next tokens in its view.
// expected-error @+1 {{the model reads its labels, input #1, beyond its loss; the labels of a training step are the next tokens, which the model must not see}}
func.func @peek(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>) -> (tensor<f32>, tensor<2x8xi64>) {
  %loss = weft.cross_entropy %logits, %labels reduction mean : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss, %labels : tensor<f32>, tensor<2x8xi64>
}
