#!/usr/bin/python3
"""tied_copies.py OUT_DIR: small graphs that hold a weight and a copy of its
transpose, as an inference export's constant folding writes a tied output
layer, and pairs that only look like one:

  - model.onnx: logits = MatMul(Gather(E, ids), T) with T = E's transpose
    (tied), plus h = MatMul(x, A) + MatMul(x, B) over pairs of transposed
    shapes that are not copies: Z1 [3, 5] and Z2 [5, 3] both zero (constant),
    and R [4, 7] and S [7, 4] with S = R's transpose but one element changed;
  - external.onnx: the same with every initializer in external.bin (the copy
    is found from sampled elements, as planning reads them)."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(0)
E = rng.standard_normal((6, 4)).astype(np.float32)
R = rng.standard_normal((4, 7)).astype(np.float32)
S = R.T.copy()
S[5, 2] += 1.0
inits = {"E": E, "T": E.T.copy(), "Z1": np.zeros((3, 5), np.float32),
         "Z2": np.zeros((5, 3), np.float32), "R": R, "S": S}
nodes = [
    helper.make_node("Gather", ["E", "ids"], ["h"]),
    helper.make_node("MatMul", ["h", "T"], ["logits"]),
    helper.make_node("MatMul", ["z", "Z1"], ["z1"]),
    helper.make_node("MatMul", ["z1", "Z2"], ["zz"]),
    helper.make_node("MatMul", ["r", "R"], ["r1"]),
    helper.make_node("MatMul", ["r1", "S"], ["rr"]),
]
graph = helper.make_graph(
    nodes, "tied",
    [helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 3]),
     helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info("r", TensorProto.FLOAT, [2, 4])],
    [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [2, 3, 6]),
     helper.make_tensor_value_info("zz", TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info("rr", TensorProto.FLOAT, [2, 4])],
    [numpy_helper.from_array(v, k) for k, v in inits.items()])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
onnx.save(model, os.path.join(out, "model.onnx"))
onnx.save(model, os.path.join(out, "external.onnx"), save_as_external_data=True,
          all_tensors_to_one_file=True, location="external.bin", size_threshold=0)
ids = np.array([[0, 5, 2], [3, 1, 4]], np.int64)
np.save(os.path.join(out, "ids.npy"), ids)
np.save(os.path.join(out, "z.npy"), np.ones((2, 3), np.float32))
np.save(os.path.join(out, "r.npy"), np.ones((2, 4), np.float32))
np.save(os.path.join(out, "logits.npy"), E[ids] @ E.T)
