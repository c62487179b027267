#!/usr/bin/python3
"""Writes models with ONNX If nodes whose condition the input shapes decide,
each with the data to check it against:

  OUT/gpt2-script.onnx, OUT/gpt2-script/test_data_set_0: the GPT-2 of
      test/models/export_models.py whose attention calls torch.jit.script
      helpers that branch on a tensor's size (the causal mask, applied when
      the sequence is longer than one token, as Hugging Face's mask helpers
      do), traced by torch.onnx.export (1.13 here) with dynamic batch and
      sequence axes: torch writes each branch as an If on Shape arithmetic.
      torch's outputs for a batch of 2 sequences of 8 tokens.
  OUT/gpt2-script-one/test_data_set_0: the same model on one token, the
      other branch.
  OUT/scalar.onnx, OUT/scalar/test_data_set_0, written by hand as onnxscript's
      torchlib writes aten ops (torch 2.1-2.4's dynamo exporter): a local
      function that unsqueezes a scalar before Softmax and squeezes it after,
      each an If on Size(Shape(x)) == 0 whose branches give different ranks,
      called twice (the two copies' branches share their value names);
      numpy's outputs.
  OUT/nested.onnx, OUT/nested/test_data_set_0: an If inside the taken
      branch, a branch initializer, a branch output read from the outer
      scope, and an op Weft does not import (Det) in the branch not taken.
  OUT/data.onnx: an If on the input's values (ReduceSum(x) > 0).
  OUT/unsupported.onnx: an If whose taken branch holds Det.

    /usr/bin/python3 if_models.py OUT [--no-torch]

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
from local_functions import data_set, function, call  # noqa: E402


def torch_export(out):
    import torch
    import export_models as em

    @torch.jit.script
    def causal_scores(w: torch.Tensor) -> torch.Tensor:
        s = w.size(-1)
        if s > 1:
            keep = torch.ones(s, s, dtype=torch.bool, device=w.device).tril()
            w = w.masked_fill(~keep, -3.4028234663852886e38)
        return w

    class Attention(em.GPT2Attention):
        def forward(self, x):
            b, s, _ = x.shape
            q, k, v = self.c_attn(x).split(em.HIDDEN, dim=2)
            heads, size = em.HEADS, em.HIDDEN // em.HEADS
            split = lambda t: t.view(b, s, heads, size).permute(0, 2, 1, 3)
            q, k, v = split(q), split(k), split(v)
            w = torch.matmul(q, k.transpose(-1, -2)) / size ** 0.5
            w = torch.nn.functional.softmax(causal_scores(w), dim=-1)
            o = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(b, s, em.HIDDEN)
            return self.c_proj(o)

    torch.manual_seed(1)
    gpt2 = em.GPT2().eval()
    for block in gpt2.h:
        attention = Attention()
        attention.load_state_dict(block.attn.state_dict())
        block.attn = attention
    generator = torch.Generator().manual_seed(0)
    for name, seq in (("gpt2-script", em.SEQ), ("gpt2-script-one", 1)):
        ids = torch.randint(0, em.VOCAB, (em.BATCH, seq), generator=generator)
        with torch.no_grad():
            data_set(out, name, [ids.numpy()], [gpt2(ids).numpy()])
    path = os.path.join(out, "gpt2-script.onnx")
    ids = torch.zeros(em.BATCH, em.SEQ, dtype=torch.long)
    torch.onnx.export(gpt2, (ids,), path, opset_version=17,
                      input_names=["input_ids"], output_names=["logits"],
                      dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                    "logits": {0: "batch", 1: "sequence"}})
    ifs = [n for n in onnx.load(path).graph.node if n.op_type == "If"]
    assert len(ifs) == em.LAYERS, "torch wrote %d If nodes" % len(ifs)


def value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def if_node(cond, outputs, then_nodes, then_outputs, else_nodes, else_outputs,
            name, then_initializers=()):
    branch = lambda nodes, outs, inits, tag: helper.make_graph(
        nodes, name + "_" + tag, [], [value(o, None) for o in outs], list(inits))
    return helper.make_node(
        "If", [cond], outputs, name=name,
        then_branch=branch(then_nodes, then_outputs, then_initializers, "then"),
        else_branch=branch(else_nodes, else_outputs, (), "else"))


def int_constant(name, values):
    return helper.make_node("Constant", [], [name], name=name,
                            value=numpy_helper.from_array(np.array(values, np.int64)))


def is_scalar(x, out):
    """torchlib's IsScalar: Size(Shape(x)) == 0."""
    return [helper.make_node("Shape", [x], [out + "_shape"]),
            helper.make_node("Size", [out + "_shape"], [out + "_rank"]),
            int_constant(out + "_zero", 0),
            helper.make_node("Equal", [out + "_rank", out + "_zero"], [out])]


def scalar(out):
    # torchlib.aten_softmax(self): unsqueeze a scalar, Softmax, squeeze back.
    softmax = function("torchlib", "aten_softmax", ["self"], ["result"], is_scalar(
        "self", "scalar") + [
        if_node("scalar", ["wide"],
                [int_constant("axes", [0]),
                 helper.make_node("Unsqueeze", ["self", "axes"], ["unsqueezed"])],
                ["unsqueezed"], [helper.make_node("Identity", ["self"], ["same"])],
                ["same"], "widen"),
        helper.make_node("Softmax", ["wide"], ["soft"], axis=-1),
        if_node("scalar", ["result"],
                [int_constant("axes", [0]),
                 helper.make_node("Squeeze", ["soft", "axes"], ["squeezed"])],
                ["squeezed"], [helper.make_node("Identity", ["soft"], ["same"])],
                ["same"], "narrow")])
    nodes = [call("torchlib", "aten_softmax", ["x"], ["a"], "first"),
             helper.make_node("Mul", ["a", "x"], ["b"], name="mul"),
             call("torchlib", "aten_softmax", ["b"], ["y"], "second")]
    proto = helper.make_model(
        helper.make_graph(nodes, "g", [value("x", [2, 3])], [value("y", [2, 3])]),
        functions=[softmax], opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("torchlib", 1)])
    proto.ir_version = 8
    onnx.save(proto, os.path.join(out, "scalar.onnx"))

    def soft(t):
        e = np.exp(t - t.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    x = np.random.default_rng(3).standard_normal((2, 3)).astype(np.float32)
    data_set(out, "scalar", [x], [soft(soft(x) * x).astype(np.float32)])


def nested(out):
    # y = x is 2-D ? (x's last dim > 2 ? x * w + 1 : Det) : Det, where w is
    # the outer branch's initializer and 1 the inner's constant; z = x + 1
    # read back from the outer scope through the taken branch.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = rng.standard_normal((4,)).astype(np.float32)
    inner = if_node("wide", ["scaled"],
                    [helper.make_node("Mul", ["x", "w"], ["xw"]),
                     helper.make_node("Add", ["xw", "one"], ["sum"])],
                    ["sum"],
                    [helper.make_node("Det", ["x"], ["det"])], ["det"], "inner")
    outer = if_node(
        "two_d", ["y", "z"],
        [helper.make_node("Shape", ["x"], ["shape"]),
         int_constant("last", [-1]),
         helper.make_node("Gather", ["shape", "last"], ["width"]),
         int_constant("two", [2]),
         helper.make_node("Greater", ["width", "two"], ["wide_1"]),
         int_constant("axes", [0]),
         helper.make_node("Squeeze", ["wide_1", "axes"], ["wide"]),
         inner],
        ["scaled", "z_outer"],
        [helper.make_node("Det", ["x"], ["d"])], ["d", "z_outer"],
        "outer", then_initializers=[numpy_helper.from_array(w, "w")])
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Size", ["x_shape"], ["x_rank"]),
        int_constant("two_ranks", 2),
        helper.make_node("Equal", ["x_rank", "two_ranks"], ["two_d"]),
        helper.make_node("Constant", [], ["one"],
                         value=numpy_helper.from_array(np.float32(1), "one")),
        helper.make_node("Add", ["x", "one"], ["z_outer"]),
        outer]
    proto = helper.make_model(
        helper.make_graph(nodes, "g", [value("x", [2, 4])],
                          [value("y", [2, 4]), value("z", [2, 4])]),
        opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    onnx.save(proto, os.path.join(out, "nested.onnx"))
    data_set(out, "nested", [x], [(x * w + 1).astype(np.float32),
                                  (x + 1).astype(np.float32)])


def errors(out):
    data = [helper.make_node("ReduceSum", ["x"], ["sum"], keepdims=0),
            helper.make_node("Constant", [], ["zero"],
                             value=numpy_helper.from_array(np.float32(0), "zero")),
            helper.make_node("Greater", ["sum", "zero"], ["positive"]),
            if_node("positive", ["y"], [helper.make_node("Relu", ["x"], ["r"])], ["r"],
                    [helper.make_node("Neg", ["x"], ["n"])], ["n"], "by_value")]
    io = [value("x", [2, 2])], [value("y", [2, 2])]
    for name, nodes in (("data", data), ("unsupported", is_scalar("x", "scalar") + [
            if_node("scalar", ["y"], [helper.make_node("Relu", ["x"], ["r"])], ["r"],
                    [helper.make_node("Det", ["x"], ["d"]),
                     helper.make_node("Add", ["x", "d"], ["a"])], ["a"],
                    "det_branch")])):
        proto = helper.make_model(helper.make_graph(nodes, "g", *io),
                                  opset_imports=[helper.make_opsetid("", 17)])
        proto.ir_version = 8
        onnx.save(proto, os.path.join(out, name + ".onnx"))


def main(out, with_torch):
    os.makedirs(out, exist_ok=True)
    scalar(out)
    nested(out)
    errors(out)
    if with_torch:
        torch_export(out)


if __name__ == "__main__":
    main(sys.argv[1], "--no-torch" not in sys.argv[2:])
