#!/usr/bin/python3
"""Writes OUT/model.onnx and OUT/model/test_data_set_0: a bfloat16 ConstantOfShape
at opset 17, as torch's TorchScript exporter writes one for a bfloat16 model
(torch.full, new_zeros), although opset 17's schema allows it from opset 20:
y = f32(bf16(x) + ConstantOfShape(shape(x), value=bf16 1.5)) - 0.25, with x
exact in bfloat16.

    /usr/bin/python3 bf16_constant_of_shape.py OUT
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main(out):
    value = onnx.TensorProto()
    value.data_type = TensorProto.BFLOAT16
    value.dims.append(1)
    value.raw_data = np.array([1.5], np.float32).view(np.uint32).__rshift__(16) \
        .astype("<u2").tobytes()
    nodes = [
        helper.make_node("Cast", ["x"], ["xb"], to=TensorProto.BFLOAT16),
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("ConstantOfShape", ["shape"], ["fill"], name="fill",
                         value=value),
        helper.make_node("Add", ["xb", "fill"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["wide"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["wide", "quarter"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [numpy_helper.from_array(np.array(0.25, np.float32), "quarter")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    os.makedirs(out, exist_ok=True)
    onnx.save(model, os.path.join(out, "model.onnx"))
    x = np.array([[0.5, -1.0, 2.0], [3.25, 0.0, -0.75]], np.float32)
    data = os.path.join(out, "model", "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for name, array in (("input_0.pb", x), ("output_0.pb", x + 1.5 - 0.25)):
        with open(os.path.join(data, name), "wb") as f:
            f.write(numpy_helper.from_array(array).SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1])
