#!/usr/bin/python3
"""Writes models that use opset 23's Attention, RMSNormalization and
RotaryEmbedding ops (torch's torchlib writes the first two for
scaled_dot_product_attention and rms_norm at opset 23; graph rewriters fuse
the third), with test data from a numpy reference written from the ONNX
operator specification:

  OUT/ops.onnx     each op alone, in several forms: Attention 4-D causal with
                   grouped KV heads; 3-D (q_num_heads, kv_num_heads) with a
                   bool mask and an explicit scale; 4-D with an additive float
                   mask; softcap, causal (4-D) and with a bool mask (3-D),
                   capped before the mask as the spec now orders it. RMSNormalization over the last axis, and over the last
                   two with a scale of shape [1, 8] broadcast. RotaryEmbedding
                   4-D with position_ids (halves), the same with one row of
                   positions for the whole batch, and 3-D interleaved with a
                   partial rotary_embedding_dim and per-batch caches;
  OUT/block.onnx   a LLaMA of two decoder layers, with its token embedding,
                   final norm and head: RMSNormalization, Q/K/V
                   projections, RotaryEmbedding at position_ids, causal
                   grouped-query Attention, the output projection, the
                   residual, and a SwiGLU MLP after a second
                   RMSNormalization; weights as
                   initializers, so that it partitions under tp and cp;
  OUT/refused/*.onnx  forms Weft refuses at the node: a KV cache, scores
                   (qk_matmul_output) that the model reads, a negative softcap, head
                   counts that do not divide, another stash_type, a scale
                   that does not broadcast, an odd rotary_embedding_dim; and
                   the LLaMA with unnamed residual Adds, whose layers are no
                   chain.

Each has OUT/NAME/test_data_set_0 with input_*.pb and output_*.pb.

    /usr/bin/python3 opset23_ops.py OUT
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32 = TensorProto.FLOAT


def softmax(x):
    top = np.max(x, -1, keepdims=True)
    top = np.where(np.isneginf(top), 0, top)
    e = np.exp(x - top)
    total = e.sum(-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


def attention(q, k, v, mask=None, causal=False, scale=None, q_heads=None, kv_heads=None,
              softcap=0.0):
    """ONNX Attention-23 without a cache: Y = softmax(cap(scale Q K^T) + bias) V,
    cap(s) = softcap tanh(s / softcap) when softcap > 0 (before the mask: onnx/onnx
    issue 7865 moved it there from after the mask, where -inf becomes -softcap)."""
    three_d = q.ndim == 3
    if three_d:
        def split(x, heads):
            b, s, h = x.shape
            return x.reshape(b, s, heads, h // heads).transpose(0, 2, 1, 3)
        q, k, v = split(q, q_heads), split(k, kv_heads), split(v, kv_heads)
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    if scale is None:
        scale = 1 / np.sqrt(q.shape[-1])
    scores = scale * (q.astype(np.float64) @ np.swapaxes(k, -1, -2))
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    if causal:
        scores = scores + np.triu(np.full(scores.shape[-2:], -np.inf), 1)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == bool else scores + mask
    y = softmax(scores) @ v
    if three_d:
        b, h, s, d = y.shape
        y = y.transpose(0, 2, 1, 3).reshape(b, s, h * d)
    return y.astype(np.float32)


def rms_norm(x, scale, axis=-1, epsilon=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 * x64).mean(axes, keepdims=True) + epsilon) * scale).astype(
        np.float32)


def rotary(x, cos, sin, positions=None, interleaved=False, dim=0, heads=None):
    """ONNX RotaryEmbedding-23: rotate the first `dim` features of each head."""
    shape = x.shape
    if x.ndim == 4:  # [batch, heads, seq, head] -> [batch, seq, heads, head]
        x = x.transpose(0, 2, 1, 3)
    else:
        x = x.reshape(shape[0], shape[1], heads, shape[2] // heads)
    dim = dim or x.shape[-1]
    if positions is not None:
        cos, sin = cos[positions], sin[positions]
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    rotate, keep = x[..., :dim], x[..., dim:]
    if interleaved:
        x1, x2 = rotate[..., 0::2], rotate[..., 1::2]
    else:
        x1, x2 = rotate[..., :dim // 2], rotate[..., dim // 2:]
    real, imaginary = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rotated = np.stack([real, imaginary], -1).reshape(rotate.shape)
    else:
        rotated = np.concatenate([real, imaginary], -1)
    y = np.concatenate([rotated, keep], -1)
    y = y.transpose(0, 2, 1, 3) if len(shape) == 4 else y.reshape(shape)
    return y.astype(np.float32)


def tables(positions, half, base=10000.0):
    frequencies = base ** (-np.arange(half) / half)
    angles = np.asarray(positions, np.float64)[..., None] * frequencies
    return np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)


def save(out, name, model, inputs, outputs):
    model.ir_version = 10
    onnx.save(model, os.path.join(out, name + ".onnx"))
    data = os.path.join(out, name, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    for kind, tensors in (("input", inputs), ("output", outputs)):
        for i, t in enumerate(tensors):
            with open(os.path.join(data, "%s_%d.pb" % (kind, i)), "wb") as f:
                f.write(numpy_helper.from_array(t).SerializeToString())


def info(name, array):
    kind = {np.dtype(np.float32): F32, np.dtype(bool): TensorProto.BOOL,
            np.dtype(np.int64): TensorProto.INT64}[array.dtype]
    return helper.make_tensor_value_info(name, kind, list(array.shape))


def ops_model(out, rng):
    normal = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    q4, k4, v4 = normal(2, 4, 6, 8), normal(2, 2, 6, 8), normal(2, 2, 6, 8)
    q3, k3, v3 = normal(2, 5, 16), normal(2, 5, 8), normal(2, 5, 12)
    keep = rng.random((2, 1, 5, 5)) < 0.7
    keep[..., 0] = True
    bias = normal(1, 4, 6, 6)
    x = normal(3, 4, 8)
    gamma, gamma2 = normal(8), normal(1, 8)
    r4 = normal(2, 3, 5, 8)
    positions = np.array([[0, 1, 2, 3, 4], [7, 3, 9, 0, 2]], np.int64)
    cos_table, sin_table = tables(np.arange(16), 4)
    r3 = normal(2, 5, 12)  # 2 heads of 6, the first 4 rotated, interleaved
    cos_rows, sin_rows = tables(rng.integers(0, 20, (2, 5)), 2)
    shared_positions = np.array([[3, 1, 4, 1, 5]], np.int64)  # one row for the batch
    inputs = [q4, k4, v4, q3, k3, v3, keep, bias, x, gamma, gamma2, r4, positions,
              cos_table, sin_table, r3, cos_rows, sin_rows, shared_positions]
    names = ["q4", "k4", "v4", "q3", "k3", "v3", "keep", "bias", "x", "gamma", "gamma2",
             "r4", "positions", "cos_table", "sin_table", "r3", "cos_rows", "sin_rows",
             "shared_positions"]
    nodes = [
        # All four outputs named, as torch's exporter writes them; the cache
        # outputs are K and V without a past, the scores are not read.
        helper.make_node("Attention", ["q4", "k4", "v4"],
                         ["causal", "present_key", "present_value", "scores"],
                         is_causal=1, name="attention_causal"),
        helper.make_node("Attention", ["q3", "k3", "v3", "keep"], ["masked"],
                         q_num_heads=4, kv_num_heads=2, scale=0.3, name="attention_3d"),
        helper.make_node("Attention", ["q4", "k4", "v4", "bias"], ["biased"],
                         name="attention_bias"),
        helper.make_node("RMSNormalization", ["x", "gamma"], ["normed"], epsilon=1e-6,
                         name="rms_last"),
        helper.make_node("RMSNormalization", ["x", "gamma2"], ["normed2"], axis=-2,
                         name="rms_two"),
        helper.make_node("RotaryEmbedding", ["r4", "cos_table", "sin_table", "positions"],
                         ["rotated"], name="rope_4d"),
        helper.make_node("RotaryEmbedding", ["r3", "cos_rows", "sin_rows"], ["rotated2"],
                         interleaved=1, num_heads=2, rotary_embedding_dim=4,
                         name="rope_3d"),
        helper.make_node("RotaryEmbedding",
                         ["r4", "cos_table", "sin_table", "shared_positions"], ["rotated3"],
                         name="rope_shared_positions"),
        helper.make_node("Attention", ["q4", "k4", "v4"], ["capped"], is_causal=1,
                         softcap=2.0, name="attention_softcap"),
        helper.make_node("Attention", ["q3", "k3", "v3", "keep"], ["capped_masked"],
                         q_num_heads=4, kv_num_heads=2, scale=0.3, softcap=1.5,
                         name="attention_softcap_mask"),
    ]
    outputs = [
        attention(q4, k4, v4, causal=True),
        attention(q3, k3, v3, mask=keep, scale=0.3, q_heads=4, kv_heads=2),
        attention(q4, k4, v4, mask=bias),
        rms_norm(x, gamma, epsilon=1e-6),
        rms_norm(x, gamma2, axis=-2),
        rotary(r4, cos_table, sin_table, positions),
        rotary(r3, cos_rows, sin_rows, interleaved=True, dim=4, heads=2),
        rotary(r4, cos_table, sin_table, shared_positions),
        attention(q4, k4, v4, causal=True, softcap=2.0),
        attention(q3, k3, v3, mask=keep, scale=0.3, q_heads=4, kv_heads=2, softcap=1.5),
        k4,
    ]
    out_names = ["causal", "masked", "biased", "normed", "normed2", "rotated", "rotated2",
                 "rotated3", "capped", "capped_masked", "present_key"]
    graph = helper.make_graph(nodes, "opset23_ops",
                              [info(n, t) for n, t in zip(names, inputs)],
                              [info(n, t) for n, t in zip(out_names, outputs)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    save(out, "ops", model, inputs, outputs)


def block_model(out, rng, layers=2):
    batch, seq, hidden, heads, kv_heads, ffn = 2, 8, 32, 4, 2, 64
    head = hidden // heads
    w = lambda *shape: (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)
    norm = lambda: (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)
    cos_table, sin_table = tables(np.arange(32), head // 2)
    weights = {"cos": cos_table, "sin": sin_table}
    vocab = 64
    weights["embed_tokens.weight"] = rng.standard_normal((vocab, hidden)).astype(np.float32)
    weights["norm.weight"] = norm()
    weights["lm_head.weight"] = w(hidden, vocab)
    ids = rng.integers(0, vocab, (batch, seq)).astype(np.int64)
    x = weights["embed_tokens.weight"][ids]
    positions = np.tile(np.arange(seq, dtype=np.int64), (batch, 1))
    positions[1] += 5

    def heads_first(t, n):
        return t.reshape(batch, seq, n, head).transpose(0, 2, 1, 3)

    shape = lambda name, dims: helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.array(dims, np.int64)))
    nodes = [shape("q_shape", [batch, seq, heads, head]),
             shape("kv_shape", [batch, seq, kv_heads, head]),
             shape("merged", [batch, seq, hidden]),
             helper.make_node("Gather", ["embed_tokens.weight", "input_ids"], ["x"],
                              name="embed_tokens")]
    y, current = x, "x"
    for layer in range(layers):
        p = "layers.%d." % layer
        lw = {"ln1": norm(), "wq": w(hidden, hidden), "wk": w(hidden, kv_heads * head),
              "wv": w(hidden, kv_heads * head), "wo": w(hidden, hidden), "ln2": norm(),
              "gate": w(hidden, ffn), "up": w(hidden, ffn), "down": w(ffn, hidden)}
        weights.update({p + n: t for n, t in lw.items()})
        # The numpy reference of the layer.
        h = rms_norm(y, lw["ln1"])
        q = rotary(heads_first(h @ lw["wq"], heads), cos_table, sin_table, positions)
        k = rotary(heads_first(h @ lw["wk"], kv_heads), cos_table, sin_table, positions)
        v = heads_first(h @ lw["wv"], kv_heads)
        a = attention(q, k, v, causal=True).transpose(0, 2, 1, 3).reshape(batch, seq, hidden)
        y1 = y + a @ lw["wo"]
        h2 = rms_norm(y1, lw["ln2"])
        g = h2 @ lw["gate"]
        y = (y1 + ((g / (1 + np.exp(-g))) * (h2 @ lw["up"])) @ lw["down"]).astype(np.float32)
        # The layer as the exporter writes it.
        t = lambda name: p + name
        nodes.append(helper.make_node("RMSNormalization", [current, p + "ln1"], [t("h")],
                                      name=p + "input_layernorm"))
        for name, target in (("q", "q_shape"), ("k", "kv_shape"), ("v", "kv_shape")):
            nodes += [helper.make_node("MatMul", [t("h"), p + "w" + name], [t(name + "_flat")],
                                       name=p + name + "_proj"),
                      helper.make_node("Reshape", [t(name + "_flat"), target],
                                       [t(name + "_rows")]),
                      helper.make_node("Transpose", [t(name + "_rows")],
                                       [t(name + ("_heads" if name == "v" else "_plain"))],
                                       perm=[0, 2, 1, 3])]
        nodes += [
            helper.make_node("RotaryEmbedding", [t("q_plain"), "cos", "sin", "positions"],
                             [t("q_heads")], name=p + "rope_q"),
            helper.make_node("RotaryEmbedding", [t("k_plain"), "cos", "sin", "positions"],
                             [t("k_heads")], name=p + "rope_k"),
            helper.make_node("Attention", [t("q_heads"), t("k_heads"), t("v_heads")],
                             [t("attended")], is_causal=1, name=p + "sdpa"),
            helper.make_node("Transpose", [t("attended")], [t("attended_rows")],
                             perm=[0, 2, 1, 3]),
            helper.make_node("Reshape", [t("attended_rows"), "merged"], [t("attended_flat")]),
            helper.make_node("MatMul", [t("attended_flat"), p + "wo"], [t("o")],
                             name=p + "o_proj"),
            helper.make_node("Add", [current, t("o")], [t("x1")]),
            helper.make_node("RMSNormalization", [t("x1"), p + "ln2"], [t("h2")],
                             name=p + "post_attention_layernorm"),
            helper.make_node("MatMul", [t("h2"), p + "gate"], [t("g")], name=p + "gate_proj"),
            helper.make_node("Sigmoid", [t("g")], [t("sig")]),
            helper.make_node("Mul", [t("g"), t("sig")], [t("silu")]),
            helper.make_node("MatMul", [t("h2"), p + "up"], [t("u")], name=p + "up_proj"),
            helper.make_node("Mul", [t("silu"), t("u")], [t("act")]),
            helper.make_node("MatMul", [t("act"), p + "down"], [t("d")], name=p + "down_proj"),
            helper.make_node("Add", [t("x1"), t("d")], [t("out")]),
        ]
        for i, node in enumerate(nodes):
            if not node.name and node.op_type != "Constant":
                node.name = "%s%s_%d" % (p, node.op_type, i)
        current = t("out")
    logits = rms_norm(y, weights["norm.weight"]) @ weights["lm_head.weight"]
    nodes += [helper.make_node("RMSNormalization", [current, "norm.weight"], ["final"],
                               name="norm"),
              helper.make_node("MatMul", ["final", "lm_head.weight"], ["logits"],
                               name="lm_head")]
    graph = helper.make_graph(
        nodes, "opset23_llama", [info("input_ids", ids), info("positions", positions)],
        [info("logits", logits)],
        initializer=[numpy_helper.from_array(t, n) for n, t in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    save(out, "block", model, [ids, positions], [logits])
    # The same with its residual Adds named outside the layers' scope: the
    # layers no longer form a chain, which the planner cannot cost.
    for node in model.graph.node:
        if node.op_type == "Add":
            node.name = ""
    os.makedirs(os.path.join(out, "refused"), exist_ok=True)
    onnx.save(model, os.path.join(out, "refused", "unchained.onnx"))


def refused_models(out):
    """Forms Weft refuses, each at its node: OUT/refused/NAME.onnx."""
    os.makedirs(os.path.join(out, "refused"), exist_ok=True)
    q = helper.make_tensor_value_info("q", F32, [1, 2, 4, 8])
    y = helper.make_tensor_value_info("y", F32, [1, 2, 4, 8])
    table = helper.make_tensor_value_info("table", F32, [16, 4])
    positions = helper.make_tensor_value_info("positions", TensorProto.INT64, [1, 4])
    cases = {
        "cache": ([helper.make_node("Attention", ["q", "q", "q", "", "q", "q"], ["y"])],
                  [q]),
        "scores": ([helper.make_node("Attention", ["q", "q", "q"], ["y", "", "", "scores"]),
                    helper.make_node("Identity", ["scores"], ["y2"])], [q]),
        "softcap": ([helper.make_node("Attention", ["q", "q", "q"], ["y"], softcap=-30.0)],
                    [q]),
        "heads": ([helper.make_node("Reshape", ["q", "flat_shape"], ["flat"]),
                   helper.make_node("Attention", ["flat", "flat", "flat"], ["y3"],
                                    q_num_heads=3, kv_num_heads=3)], [q]),
        "stash": ([helper.make_node("RMSNormalization", ["q", "gamma"], ["y"],
                                    stash_type=10)], [q]),
        "scale": ([helper.make_node("RMSNormalization", ["q", "gamma5"], ["y"])], [q]),
        "rotary_dim": ([helper.make_node("RotaryEmbedding", ["q", "table", "table",
                                                             "positions"], ["y"],
                                         rotary_embedding_dim=5)],
                       [q, table, positions]),
    }
    for name, (nodes, inputs) in cases.items():
        for i, node in enumerate(nodes):
            node.name = "%s_%d" % (name, i)
        initializers = [numpy_helper.from_array(np.ones(8, np.float32), "gamma"),
                        numpy_helper.from_array(np.ones(5, np.float32), "gamma5"),
                        numpy_helper.from_array(np.array([1, 4, 16], np.int64), "flat_shape")]
        outputs = [helper.make_tensor_value_info("y3", F32, [1, 4, 16])] if name == "heads" \
            else [y, helper.make_tensor_value_info("y2", F32, [1, 2, 4, 4])] \
            if name == "scores" else [y]
        graph = helper.make_graph(nodes, name, inputs, outputs, initializer=initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
        model.ir_version = 10
        onnx.save(model, os.path.join(out, "refused", name + ".onnx"))


def main(out):
    rng = np.random.default_rng(23)
    ops_model(out, rng)
    block_model(out, rng)
    refused_models(out)


if __name__ == "__main__":
    main(sys.argv[1])
