// RUN: weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=zeros" | FileCheck %s
// RUN: weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=zeros,#1=ones" | FileCheck %s --check-prefix=BOTH
// RUN: not weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=arange" 2>&1 | FileCheck %s --check-prefix=FILL
// RUN: not weft-opt %s -weft-assign-feeds="feeds=pos=positions,#2=zeros,attention_mask=ones" 2>&1 | FileCheck %s --check-prefix=UNUSED
// RUN: not weft-opt %s -weft-assign-feeds="feeds=input_ids=tokens,#1=tokens" 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not weft-opt %s -weft-assign-feeds="feeds=input_ids=source,pos=positions,#2=zeros" 2>&1 | FileCheck %s --check-prefix=NONE
// RUN: weft-opt %s -weft-assign-feeds="feeds=input_ids=source,pos=tokens,#2=zeros" | FileCheck %s --check-prefix=MOVED

// Names that say nothing take their fill from the feeds option: by name
// (pos) or by index (#2, which has no name). A name and an index given for
// the same input: the name wins.

// CHECK: module attributes {weft.feeds = ["tokens", "positions", "zeros"]}
// BOTH: module attributes {weft.feeds = ["tokens", "positions", "zeros"]}
// FILL: error: -weft-assign-feeds: '#2=arange' is not NAME=FILL with FILL tokens, source, ones, zeros, positions or labels
// TWICE: error: -weft-assign-feeds: input #0 ('input_ids') of @unnamed and input #1 ('pos') of @unnamed are both given the token ids; one input takes them
// NONE: error: -weft-assign-feeds: no input takes the token ids: give one, e.g. --feed input_ids=tokens (weft train, weft compile --train)
// The token ids given to another input: the first is then any other fill.
// MOVED: module attributes {weft.feeds = ["source", "tokens", "zeros"]}
// UNUSED: error: -weft-assign-feeds: no input of @unnamed is 'attention_mask' (named by onnx.name, or #INDEX)
func.func @unnamed(%ids: tensor<2x8xi64> {onnx.name = "input_ids"},
                   %pos: tensor<2x8xi64> {onnx.name = "pos"},
                   %types: tensor<2x8xi64>) -> tensor<2x8xi64> {
  return %ids : tensor<2x8xi64>
}
