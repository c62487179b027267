// RUN: weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=zeros" | FileCheck %s
// RUN: weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=zeros,#1=ones" | FileCheck %s --check-prefix=BOTH
// RUN: not weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=arange" 2>&1 | FileCheck %s --check-prefix=FILL
// RUN: not weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=zeros,attention_mask=ones" 2>&1 | FileCheck %s --check-prefix=UNUSED

// Names that say nothing take their fill from the feeds option: by name
// (pos) or by index (#2, which has no name). A name and an index given for
// the same input: the name wins.

// CHECK: module attributes {weft.feeds = ["tokens", "positions", "zeros"]}
// BOTH: module attributes {weft.feeds = ["tokens", "positions", "zeros"]}
// FILL: error: -weft-assign-feeds: '#2=arange' is not NAME=FILL with FILL ones, zeros, positions or labels
// UNUSED: error: -weft-assign-feeds: no input of @unnamed after the token ids is 'attention_mask' (named by onnx.name, or #INDEX)
func.func @unnamed(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                   %pos: tensor<2x8xi64> {onnx.name = "pos"},
                   %types: tensor<2x8xi64>) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}
