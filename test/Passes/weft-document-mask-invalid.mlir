// RUN: weft-opt %s -split-input-file -verify-diagnostics -weft-document-mask

// Without weft.feeds, which input takes the token ids is not known.

// expected-error @+1 {{-weft-document-mask: the module has no weft.feeds for its function's inputs; run -weft-assign-feeds first}}
module {
  func.func @no_feeds(%ids: tensor<2x8xi64>) -> tensor<2x8xi64> {
    return %ids : tensor<2x8xi64>
  }
}

// -----

// An encoder-decoder reads a source beside the token windows.

module attributes {weft.feeds = ["source", "tokens"]} {
  // expected-error @+1 {{-weft-document-mask: the model reads an encoder's source (an encoder-decoder); document masks are for models that read packed windows of one token stream}}
  func.func @seq2seq(%src: tensor<2x12xi64>, %tgt: tensor<2x8xi64>) -> tensor<2x8xi64> {
    return %tgt : tensor<2x8xi64>
  }
}

// -----

// Twice: the model takes document ids already.

module attributes {weft.feeds = ["tokens", "documents"]} {
  // expected-error @+1 {{-weft-document-mask: the model already takes document ids}}
  func.func @twice(%ids: tensor<2x8xi64>, %docs: tensor<2x8xi64>) -> tensor<2x8xi64> {
    return %ids : tensor<2x8xi64>
  }
}

// -----

// No attention over the token sequence (attention the import did not raise
// stays matmuls and a softmax, which no mask reaches).

module attributes {weft.feeds = ["tokens"]} {
  // expected-error @+1 {{-weft-document-mask: no weft.attention of @mlp attends over the token sequence (8 queries and keys): an attention the import did not raise cannot be masked by document}}
  func.func @mlp(%ids: tensor<2x8xi64>) -> tensor<2x8xi64> {
    return %ids : tensor<2x8xi64>
  }
}

// -----

// Token ids of a dynamic shape.

module attributes {weft.feeds = ["tokens"]} {
  // expected-error @+1 {{-weft-document-mask: the token ids (input #0) are 'tensor<?x8xi64>', not [batch, seq] with a static shape: give --batch-size and --seq-len}}
  func.func @dynamic(%ids: tensor<?x8xi64>) -> tensor<?x8xi64> {
    return %ids : tensor<?x8xi64>
  }
}
