#!/usr/bin/python3
"""Writes models that call ONNX local functions (ModelProto.functions, IR
version 8), each with the data to check it against:

  OUT/<name>-functions.onnx, OUT/<name>/test_data_set_0 for gpt2, bert and
      llama of test/models/export_models.py, exported by torch (1.13 here)
      with export_modules_as_functions=True: one function per module class,
      called once per module, its parameters passed as inputs; torch's outputs.
  OUT/nested.onnx, OUT/nested/test_data_set_0: written by hand: a call inside
      a function; attribute references (ref_attr_name) given by the call, left
      to the function's default (FunctionProto.attribute_proto, field 11) and
      absent; an omitted optional input; two overloads of one name
      (FunctionProto field 13, NodeProto field 8); numpy's outputs.
  OUT/recursive.onnx, OUT/opset.onnx, OUT/arity.onnx: a function that calls
      itself, one of another opset, a call with more inputs than the function.

The IR-10 fields are newer than this machine's onnx 1.12 package: they are
appended to the messages' bytes as the unknown fields they are to it.

    /usr/bin/python3 local_functions.py OUT [--no-torch]

(--no-torch: the models written by hand only, the importer fuzzer's seeds.)
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "models"))
from dynamo_scopes import field  # noqa: E402  (a length-delimited protobuf field)


def save(array, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def data_set(out, name, inputs, outputs):
    data = os.path.join(out, name, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for i, array in enumerate(inputs):
        save(array, os.path.join(data, "input_%d.pb" % i))
    for i, array in enumerate(outputs):
        save(array, os.path.join(data, "output_%d.pb" % i))


def torch_exports(out):
    import torch
    import export_models as em

    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, em.VOCAB, (em.BATCH, em.SEQ), generator=generator)
    mask = torch.ones(em.BATCH, em.SEQ, dtype=torch.long)
    mask[1, em.SEQ - 3:] = 0
    models = {
        "gpt2": (em.GPT2, (ids,), ["input_ids"]),
        "bert": (em.Bert, (ids, mask), ["input_ids", "attention_mask"]),
        "llama": (em.Llama, (ids,), ["input_ids"]),
    }
    for name, (cls, inputs, input_names) in models.items():
        torch.manual_seed(1)
        model = cls().eval()
        with torch.no_grad():
            expected = model(*inputs)
        data_set(out, name, [t.numpy() for t in inputs], [expected.numpy()])
        path = os.path.join(out, name + "-functions.onnx")
        torch.onnx.export(model, inputs, path, opset_version=17,
                          input_names=input_names, output_names=["logits"],
                          export_modules_as_functions=True)
        written = onnx.load(path)
        assert len(written.functions) >= 3, "torch wrote no module functions"
        assert all(n.domain or n.op_type == "Identity" for n in written.graph.node
                   if n.op_type != "Constant"), "the graph is not one call"


def ref(name, attr_type, refers_to):
    attribute = onnx.AttributeProto()
    attribute.name = name
    attribute.type = attr_type
    attribute.ref_attr_name = refers_to
    return attribute


def function(domain, name, inputs, outputs, nodes, opset=17, attributes=(),
             defaults=(), overload=None):
    proto = helper.make_function(domain, name, inputs, outputs, nodes,
                                 [helper.make_opsetid("", opset)], list(attributes))
    extra = b"".join(field(11, d.SerializeToString()) for d in defaults)
    if overload is not None:
        extra += field(13, overload.encode())
    proto.MergeFromString(extra)
    return proto


def call(domain, name, inputs, outputs, node_name, overload=None, **attributes):
    node = helper.make_node(name, inputs, outputs, name=node_name, domain=domain,
                            **attributes)
    if overload is not None:
        node.MergeFromString(field(8, overload.encode()))
    return node


def model(nodes, functions, inputs, outputs, initializers=(), ir_version=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    proto = helper.make_model(graph, functions=functions, opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("ex", 1)])
    proto.ir_version = ir_version
    return proto


def nested(out):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = rng.standard_normal((4, 4)).astype(np.float32)
    lo = np.float32(-0.25)
    # Scale(x) = x * alpha, alpha defaulting to 2; Mul's input through a
    # Constant whose value_float refers to alpha.
    scale = function("ex", "Scale", ["x"], ["y"], [
        helper.make_node("Constant", [], ["c"], name="alpha"),
        helper.make_node("Mul", ["x", "c"], ["y"], name="mul")],
        attributes=["alpha"], defaults=[helper.make_attribute("alpha", 2.0)])
    scale.node[0].attribute.append(ref("value_float", onnx.AttributeProto.FLOAT, "alpha"))
    # Affine(x, w, lo, hi) = Clip(Scale<alpha=gain>(x @ w), lo, hi); hi is
    # optional and the call omits it; Clip has no "unused" attribute set.
    affine = function("ex", "Affine", ["x", "w", "lo", "hi"], ["y"], [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
        call("ex", "Scale", ["m"], ["s"], "scale"),
        helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="clip")],
        attributes=["gain", "unused"])
    affine.node[1].attribute.append(ref("alpha", onnx.AttributeProto.FLOAT, "gain"))
    neg = function("ex", "Act", ["x"], ["y"], [helper.make_node("Neg", ["x"], ["y"])],
                   overload="neg")
    relu = function("ex", "Act", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                    overload="relu")
    nodes = [
        call("ex", "Affine", ["x", "w", "lo"], ["a"], "fc", gain=0.5),
        call("ex", "Scale", ["a"], ["b"], "double"),
        call("ex", "Act", ["b"], ["c"], "negate", overload="neg"),
        call("ex", "Act", ["c"], ["y"], "rectify", overload="relu"),
    ]
    proto = model(nodes, [scale, affine, neg, relu],
                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
                  [numpy_helper.from_array(w, "w"), numpy_helper.from_array(lo, "lo")],
                  ir_version=10)
    onnx.save(proto, os.path.join(out, "nested.onnx"))
    expected = np.maximum(-(2 * np.maximum(0.5 * (x @ w), lo)), 0).astype(np.float32)
    data_set(out, "nested", [x], [expected])


def errors(out):
    io = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    loop = function("ex", "Again", ["x"], ["y"], [call("ex", "Again", ["x"], ["y"], "inner")])
    onnx.save(model([call("ex", "Again", ["x"], ["y"], "outer")], [loop], *io),
              os.path.join(out, "recursive.onnx"))
    old = function("ex", "Old", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                   opset=13)
    onnx.save(model([call("ex", "Old", ["x"], ["y"], "old")], [old], *io),
              os.path.join(out, "opset.onnx"))
    one = function("ex", "One", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])])
    onnx.save(model([call("ex", "One", ["x", "x"], ["y"], "two_inputs")], [one], *io),
              os.path.join(out, "arity.onnx"))


def main(out, with_torch):
    os.makedirs(out, exist_ok=True)
    nested(out)
    errors(out)
    if with_torch:
        torch_exports(out)


if __name__ == "__main__":
    main(sys.argv[1], "--no-torch" not in sys.argv[2:])
