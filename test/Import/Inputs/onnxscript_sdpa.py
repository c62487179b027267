#!/usr/bin/python3
"""Writes F.scaled_dot_product_attention as torch's dynamo exporter writes it
at opset 18 (onnxscript's torchlib, aten_scaled_dot_product_attention), with
test data from a numpy reference:

  OUT/causal.onnx   is_causal=True, the older torchlib form: Shape + Slice
                    for the key's dimensions, the scale 1/sqrt(Shape(q)[-1])
                    through CastLike, the causal mask as Where(Trilu(ones) == 0,
                    -inf, 0) added to the scores;
  OUT/plain.onnx    no mask, the newer form: Shape with start/end, and
                    CastLike(Sqrt(scale), key_transposed);
  OUT/masked.onnx   the newer form with a boolean attn_mask input [2, 1, 8, 8]
                    (Hugging Face's padding plus causal mask), added to the
                    scores as Where(attn_mask, 0, -inf);

both swap the key's last two dimensions through [-1, s, d] with a static
Transpose, as torchlib does. Inputs q, k, v are [2, 4, 8, 8]; each model has
OUT/NAME/test_data_set_0 with input_*.pb and output_0.pb.

    /usr/bin/python3 onnxscript_sdpa.py OUT
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPE = [2, 4, 8, 8]
INT64_MAX, INT64_MIN = 2**63 - 1, -2**63


def ints(name, values):
    return helper.make_node("Constant", [], [name], value_ints=values)


def floats(name, value):
    return helper.make_node("Constant", [], [name], value_float=value)


def key_transposed(nodes, newer):
    if newer:
        nodes += [helper.make_node("Shape", ["key"], ["k_last"], start=-1),
                  helper.make_node("Shape", ["key"], ["k_second_last"], start=-2, end=-1),
                  helper.make_node("Shape", ["key"], ["k_first"], end=-2)]
    else:
        nodes += [helper.make_node("Shape", ["key"], ["k_shape"]),
                  ints("m1", [-1]), ints("m2", [-2]), ints("zero", [0]),
                  ints("max", [INT64_MAX]), ints("min", [INT64_MIN]),
                  helper.make_node("Slice", ["k_shape", "m1", "max"], ["k_last"]),
                  helper.make_node("Slice", ["k_shape", "m2", "m1"], ["k_second_last"]),
                  helper.make_node("Slice", ["k_shape", "min", "m2"], ["k_first"])]
    nodes += [ints("minus_one", [-1]),
              helper.make_node("Concat", ["minus_one", "k_second_last", "k_last"],
                               ["squeezed_shape"], axis=0),
              helper.make_node("Reshape", ["key", "squeezed_shape"], ["k_squeezed"]),
              helper.make_node("Transpose", ["k_squeezed"], ["k_squeezed_t"], perm=[0, 2, 1]),
              helper.make_node("Concat", ["k_first", "k_last", "k_second_last"],
                               ["k_t_shape"], axis=0),
              helper.make_node("Reshape", ["k_squeezed_t", "k_t_shape"], ["k_t"])]


def attention_scale(nodes, newer):
    if newer:
        nodes += [helper.make_node("Shape", ["query"], ["q_last"], start=-1)]
    else:
        nodes += [helper.make_node("Shape", ["query"], ["q_shape"]), ints("q_idx", [-1]),
                  helper.make_node("Gather", ["q_shape", "q_idx"], ["q_last"])]
    nodes += [helper.make_node("CastLike", ["q_last", "query"], ["embedding"]),
              floats("one", 1.0), helper.make_node("CastLike", ["one", "query"], ["one_q"]),
              helper.make_node("Sqrt", ["embedding"], ["sqrt_e"]),
              helper.make_node("Div", ["one_q", "sqrt_e"], ["scale0"]),
              helper.make_node("CastLike", ["scale0", "query"], ["scale"])]


def causal_mask(nodes):
    nodes += [helper.make_node("Shape", ["query"], ["q_shape2"]),
              helper.make_node("Shape", ["key"], ["k_shape2"]),
              ints("cm2", [-2]), ints("cm1", [-1]),
              helper.make_node("Slice", ["q_shape2", "cm2", "cm1"], ["target"]),
              helper.make_node("Slice", ["k_shape2", "cm2", "cm1"], ["source"]),
              helper.make_node("Concat", ["target", "source"], ["size"], axis=0),
              floats("fill", 1.0),
              helper.make_node("Expand", ["fill", "size"], ["ones"]),
              helper.make_node("Trilu", ["ones"], ["tril"], upper=0),
              floats("zero_f", 0.0), floats("minus_inf", float("-inf")),
              helper.make_node("Equal", ["tril", "zero_f"], ["above"]),
              helper.make_node("Where", ["above", "minus_inf", "zero_f"], ["mask0"]),
              helper.make_node("CastLike", ["mask0", "query"], ["attn_mask"])]


def model(causal, newer, bool_mask=False):
    nodes = []
    attention_scale(nodes, newer)
    if causal:
        causal_mask(nodes)
    if bool_mask:
        nodes += [floats("zero_m", 0.0), floats("minus_inf_m", float("-inf")),
                  helper.make_node("Where", ["mask_in", "zero_m", "minus_inf_m"], ["mask0"]),
                  helper.make_node("CastLike", ["mask0", "query"], ["attn_mask"])]
    masked = causal or bool_mask
    key_transposed(nodes, newer)
    nodes += [helper.make_node("Sqrt", ["scale"], ["sqrt_scale"]),
              helper.make_node("Mul", ["query", "sqrt_scale"], ["q_scaled"])]
    if newer:
        nodes += [helper.make_node("CastLike", ["sqrt_scale", "k_t"], ["sqrt_scale_k"]),
                  helper.make_node("Mul", ["k_t", "sqrt_scale_k"], ["k_scaled"])]
    else:
        nodes += [helper.make_node("Mul", ["k_t", "sqrt_scale"], ["k_scaled"])]
    nodes += [helper.make_node("MatMul", ["q_scaled", "k_scaled"], ["scores"])]
    if masked:
        nodes += [helper.make_node("Add", ["scores", "attn_mask"], ["masked"])]
    nodes += [helper.make_node("Softmax", ["masked" if masked else "scores"], ["weights"],
                               axis=-1),
              helper.make_node("MatMul", ["weights", "value"], ["out"])]
    for i, node in enumerate(nodes):
        node.name = "/attn/%s_%d" % (node.op_type, i)
    graph = helper.make_graph(
        nodes, "sdpa",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, SHAPE)
         for n in ("query", "key", "value")] +
        ([helper.make_tensor_value_info("mask_in", TensorProto.BOOL, [2, 1, 8, 8])]
         if bool_mask else []),
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, SHAPE)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 10
    return m


def reference(q, k, v, causal, keep=None):
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if causal:
        scores = scores + np.triu(np.full(scores.shape[-2:], -np.inf), 1)
    if keep is not None:
        scores = np.where(keep, scores, -np.inf)
    scores = np.exp(scores - scores.max(-1, keepdims=True))
    return (scores / scores.sum(-1, keepdims=True)) @ v


def main(out):
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3))
    # Causal, and the second sequence's first two positions are padding.
    keep = np.tril(np.ones((8, 8), bool))[None, None].repeat(2, 0)
    keep[1, :, :, :2] = False
    keep[1, :, :2, :2] = np.eye(2, dtype=bool)  # a padded row still sees itself
    for name, causal, newer, mask in (("causal", True, False, None),
                                      ("plain", False, True, None),
                                      ("masked", False, True, keep)):
        onnx.save(model(causal, newer, mask is not None), os.path.join(out, name + ".onnx"))
        data = os.path.join(out, name, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        inputs = (q, k, v) if mask is None else (q, k, v, mask)
        for i, t in enumerate(inputs):
            with open(os.path.join(data, "input_%d.pb" % i), "wb") as f:
                f.write(numpy_helper.from_array(t).SerializeToString())
        expected = reference(q.astype(np.float64), k, v, causal, mask).astype(np.float32)
        with open(os.path.join(data, "output_0.pb"), "wb") as f:
            f.write(numpy_helper.from_array(expected).SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1])
