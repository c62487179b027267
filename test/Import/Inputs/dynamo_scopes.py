#!/usr/bin/python3
"""Writes the two-layer LLaMA of opset23_ops.py as torch's dynamo exporter
(torch.onnx.export(..., dynamo=True), the default since torch 2.9) names its
nodes: "node_<op>_<n>", which say nothing of the module, with the module path
in each node's `pkg.torch.onnx.name_scopes` metadata (a Python list: the root
"", each enclosing module, and the FX node's name last):

  OUT/dynamo.onnx  and OUT/dynamo/test_data_set_0 (the same data)

NodeProto.metadata_props (field 9, ONNX 1.16) is newer than this machine's
onnx 1.12 Python package, so the entries are appended to each node's bytes as
the unknown field they are to it.

    /usr/bin/python3 dynamo_scopes.py OUT
"""
import os
import re
import shutil
import sys

import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import opset23_ops  # noqa: E402


def varint(n):
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


MODULES = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn",
           "o_proj": "self_attn", "gate_proj": "mlp", "up_proj": "mlp",
           "down_proj": "mlp", "input_layernorm": "", "post_attention_layernorm": ""}


def scopes_of(name, op_type):
    """The module path of a node of opset23_ops.block_model, as a LLaMA in
    transformers has it: projections and norms are modules of their own; the
    rotary embedding, attention, reshapes and transposes run in self_attn's
    forward, the activation in mlp's, the residual adds in the layer's."""
    if name == "lm_head":
        return ["", "lm_head"]
    match = re.match(r"layers\.(\d+)\.(\w+)$", name)
    if not match:
        return ["", "model"] + (["model." + name] if name in ("embed_tokens", "norm") else [])
    base = "model.layers." + match.group(1)
    leaf = match.group(2)
    scopes = ["", "model", "model.layers", base]
    if leaf in MODULES:
        parent = base + ("." + MODULES[leaf] if MODULES[leaf] else "")
        if parent != base:
            scopes.append(parent)
        return scopes + [parent + "." + leaf]
    if op_type in ("Sigmoid", "Mul"):
        return scopes + [base + ".mlp"]
    if op_type == "Add":
        return scopes
    return scopes + [base + ".self_attn"]


def main(out):
    opset23_ops.block_model(out, __import__("numpy").random.default_rng(23))
    model = onnx.load(os.path.join(out, "block.onnx"))
    for index, node in enumerate(model.graph.node):
        scopes = scopes_of(node.name, node.op_type) + ["%s_%d" % (node.op_type.lower(), index)]
        node.name = "node_%s_%d" % (node.op_type, index)
        entry = field(1, b"pkg.torch.onnx.name_scopes") + field(2, repr(scopes).encode())
        node.MergeFromString(field(9, entry))
    onnx.save(model, os.path.join(out, "dynamo.onnx"))
    shutil.copytree(os.path.join(out, "block"), os.path.join(out, "dynamo"),
                    dirs_exist_ok=True)


if __name__ == "__main__":
    main(sys.argv[1])
