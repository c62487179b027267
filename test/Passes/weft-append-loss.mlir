// RUN: weft-opt %s -split-input-file -weft-append-loss -verify-diagnostics | FileCheck %s
// RUN: weft-opt %s -split-input-file -weft-append-loss="ignore-index=-100" -verify-diagnostics | FileCheck %s --check-prefix=IGNORE
// RUN: weft-opt %s -split-input-file -weft-append-loss="reduction=mean ignore-index=-100" -verify-diagnostics | FileCheck %s --check-prefix=MEAN
// RUN: weft-opt %s -split-input-file -weft-append-loss="reduction=mean" -verify-diagnostics | FileCheck %s --check-prefix=MEANALL

// The logits become a per-token loss against labels, a new last argument;
// the loss is computed in f32 from bf16 logits, and other results stay.
// CHECK-LABEL: func.func @lm(%arg0: tensor<2x8x16xbf16>, %arg1: tensor<2x8xi64>) -> (tensor<2x8xf32>, tensor<2x8x16xbf16>)
// CHECK: %[[W:.*]] = weft.cast %arg0 : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
// CHECK-NEXT: %[[L:.*]] = weft.cross_entropy %[[W]], %arg1 reduction none : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
// CHECK-NEXT: return %[[L]], %arg0
// IGNORE: weft.cross_entropy {{.*}} reduction none ignore_index -100

// The training loss: the sum over the positions whose label counts, divided
// by how many there are.
// MEAN-LABEL: func.func @lm(%arg0: tensor<2x8x16xbf16>, %arg1: tensor<2x8xi64>) -> (tensor<f32>, tensor<2x8x16xbf16>)
// MEAN: %[[L:.*]] = weft.cross_entropy {{.*}} reduction none ignore_index -100
// MEAN-NEXT: %[[S:.*]] = weft.reduce_sum %[[L]] axes [0, 1] : tensor<2x8xf32> -> tensor<f32>
// MEAN-NEXT: %[[I:.*]] = weft.constant dense<-100> : tensor<i64>
// MEAN-NEXT: %[[K:.*]] = weft.compare ne, %arg1, %[[I]]
// MEAN-NEXT: %[[F:.*]] = weft.cast %[[K]] : tensor<2x8xi1> -> tensor<2x8xf32>
// MEAN-NEXT: %[[N:.*]] = weft.reduce_sum %[[F]] axes [0, 1] : tensor<2x8xf32> -> tensor<f32>
// MEAN-NEXT: %[[M:.*]] = weft.div %[[S]], %[[N]] : tensor<f32>
// MEAN-NEXT: return %[[M]], %arg0
// MEANALL: %[[S:.*]] = weft.reduce_sum
// MEANALL-NEXT: %[[N:.*]] = weft.constant dense<1.600000e+01> : tensor<f32>
// MEANALL-NEXT: weft.div %[[S]], %[[N]] : tensor<f32>
func.func @lm(%logits: tensor<2x8x16xbf16>) -> (tensor<2x8x16xbf16>, tensor<2x8x16xbf16>) {
  return %logits, %logits : tensor<2x8x16xbf16>, tensor<2x8x16xbf16>
}

// -----

func.func @not_logits(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{the model's first result is 'tensor<8xf32>', not logits [..., classes] of a float type; a loss needs logits}}
  return %x : tensor<8xf32>
}

// -----

// A scalar first result: a loss the model computes in a form that
// -weft-lift-model-loss does not take apart (here weighted by hand).
func.func @own_weighted_loss(%logits: tensor<2x8x16xf32>, %labels: tensor<2x8xi64>, %w: tensor<2x8xf32>) -> tensor<f32> {
  %l = weft.cross_entropy %logits, %labels reduction none : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<2x8xf32>
  %lw = weft.mul %l, %w : tensor<2x8xf32>
  %s = weft.reduce_sum %lw axes [0, 1] : tensor<2x8xf32> -> tensor<f32>
  // expected-error @+1 {{the model's first result is 'tensor<f32>', not logits [..., classes] of a float type; a loss needs logits (a scalar: if it is the model's own loss, export the model returning its logits, or its loss as cross_entropy(logits, labels) with reduction 'mean')}}
  return %s : tensor<f32>
}

// -----

// expected-error @+1 {{-weft-append-loss needs a function that returns logits}}
module {
  func.func @nothing() {
    return
  }
}

// The loss of the bundled GPT-2 export equals numpy's cross-entropy of its
// logits (torch's reference outputs): the program weft run --loss runs.
// RUN: rm -rf %t && mkdir -p %t
// RUN: %numpy_python -c "import numpy as n; n.save('%t/labels.npy', n.random.default_rng(1).integers(0, 64, (2, 8)))"
// RUN: weft run %weft_test_dir/models/gpt2/gpt2-opset17.onnx -i %weft_test_dir/models/gpt2/test_data_set_0/input_0.pb \
// RUN:   -i %t/labels.npy --loss -o %t/loss --output-format npy
// RUN: %numpy_python %S/Inputs/check_loss.py %weft_test_dir/models/gpt2/test_data_set_0/output_0.pb %t/labels.npy %t/loss/output_0.npy | FileCheck %s --check-prefix=GPT2
// GPT2: per-token loss of 16 positions within 1e-5 of numpy's cross-entropy of the reference logits
