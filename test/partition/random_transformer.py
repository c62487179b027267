#!/usr/bin/env python3
"""Writes a small random transformer in the weft dialect, and an input for it.

Heads, KV heads (grouped-query attention), head size, FFN kind (GELU or
SwiGLU), causal or not, layers and vocabulary are drawn from a seed; weights
are random and inline. The model has what an export raised by `weft import`
has: a token embedding, weft.layer blocks (norm, Q/K/V linears, attention,
output projection, residual; norm, MLP, residual), a final norm and an output
layer, so the partitioner sees the same structure as for ONNX models.
"""
import argparse
import os
import random

import numpy as np


def tensor_type(shape, dtype="f32"):
    return "tensor<%s%s>" % ("".join("%dx" % d for d in shape), dtype)


class Writer:
    def __init__(self, rng):
        self.rng = rng
        self.lines = []
        self.counter = 0

    def value(self):
        self.counter += 1
        return "%%v%d" % self.counter

    def param(self, name, shape, scale, indent):
        data = self.rng.standard_normal(shape).astype(np.float32) * scale
        v = self.value()
        # MLIR's hex form of a dense literal: the f32 values exactly, and
        # parsed as bytes (decimal literals cost weft's parser about 25k
        # instructions per float, which made these tests parser-bound).
        text = '"0x%s"' % data.astype("<f4").tobytes().hex().upper()
        self.lines.append('%s%s = weft.parameter "%s" : %s = dense<%s>' %
                          (indent, v, name, tensor_type(shape), text))
        return v

    def op(self, indent, text):
        v = self.value()
        self.lines.append("%s%s = %s" % (indent, v, text))
        return v


def generate(seed, layers=None, batch=None):
    """A random transformer from `seed`; `layers` and `batch` override the
    drawn depth and the batch of 2 (the weights depend on neither the batch
    nor, for the layers both have, the depth)."""
    rng = random.Random(seed)
    nprng = np.random.default_rng(seed)
    heads = rng.choice([2, 4, 8])
    kv_heads = rng.choice([d for d in [1, 2, 4, 8] if heads % d == 0 and d <= heads])
    head_dim = rng.choice([4, 8])
    hidden = heads * head_dim
    swiglu = rng.random() < 0.5
    ffn = hidden * rng.choice([2, 3])
    causal = rng.random() < 0.7
    drawn_layers = rng.choice([1, 2])
    layers = layers or drawn_layers
    with_loss = rng.random() < 0.5
    vocab = 16 * rng.choice([2, 4])
    batch, seq = batch or 2, rng.choice([8, 16])
    config = dict(seed=seed, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                  hidden=hidden, ffn=ffn, ffn_kind="swiglu" if swiglu else "gelu",
                  causal=causal, layers=layers, vocab=vocab, batch=batch, seq=seq,
                  loss=with_loss)
    w = Writer(nprng)
    B, S, H, D = batch, seq, hidden, head_dim
    act = tensor_type([B, S, H])
    w.lines.append("module {")
    if with_loss:
        # The labels named as torch.onnx.export names forward's argument.
        w.lines.append("  func.func @main(%%ids: %s, %%labels: %s {onnx.name = \"labels\"})"
                       " -> (%s, %s) {" %
                       (tensor_type([B, S], "i64"), tensor_type([B, S], "i64"),
                        tensor_type([B, S, vocab]), "tensor<f32>"))
    else:
        w.lines.append("  func.func @main(%%ids: %s) -> %s {" %
                       (tensor_type([B, S], "i64"), tensor_type([B, S, vocab])))
    ind = "    "
    table = w.param("embed", [vocab, H], 0.5, ind)
    x = w.op(ind, "weft.embedding %s[%%ids] : (%s, %s) -> %s" %
             (table, tensor_type([vocab, H]), tensor_type([B, S], "i64"), act))

    def norm(indent, value, name):
        g = w.param(name, [H], 0.1, indent)
        if swiglu:
            return w.op(indent, "weft.rms_norm %s, %s axis 2 epsilon 1.0E-5 : (%s, %s) -> %s" %
                        (value, g, act, tensor_type([H]), act))
        b = w.param(name + ".bias", [H], 0.1, indent)
        return w.op(indent, "weft.layer_norm %s, %s, %s axis 2 epsilon 1.0E-5 : (%s, %s, %s) -> %s" %
                    (value, g, b, act, tensor_type([H]), tensor_type([H]), act))

    def linear(indent, value, k, n, name, bias):
        wt = w.param(name, [k, n], 1.0 / np.sqrt(k), indent)
        out = tensor_type([B, S, n])
        if bias:
            bs = w.param(name + ".bias", [n], 0.1, indent)
            return w.op(indent, "weft.linear %s, %s, %s : (%s, %s, %s) -> %s" %
                        (value, wt, bs, tensor_type([B, S, k]), tensor_type([k, n]),
                         tensor_type([n]), out))
        return w.op(indent, "weft.linear %s, %s : (%s, %s) -> %s" %
                    (value, wt, tensor_type([B, S, k]), tensor_type([k, n]), out))

    for layer in range(layers):
        arg = "%%l%d" % layer
        result = w.value()
        w.lines.append('%s%s = weft.layer "h"(%s) index %d : (%s) -> %s {' %
                       (ind, result, x, layer, act, act))
        w.lines.append("    ^bb0(%s: %s):" % (arg, act))
        li = "      "
        n1 = norm(li, arg, "h%d.ln1" % layer)
        q = linear(li, n1, H, heads * D, "h%d.q" % layer, not swiglu)
        k = linear(li, n1, H, kv_heads * D, "h%d.k" % layer, not swiglu)
        v = linear(li, n1, H, kv_heads * D, "h%d.v" % layer, not swiglu)

        def to_heads(value, n):
            r = w.op(li, "weft.reshape %s : %s -> %s" %
                     (value, tensor_type([B, S, n * D]), tensor_type([B, S, n, D])))
            return w.op(li, "weft.transpose %s permutation [0, 2, 1, 3] : %s -> %s" %
                        (r, tensor_type([B, S, n, D]), tensor_type([B, n, S, D])))
        qh, kh, vh = to_heads(q, heads), to_heads(k, kv_heads), to_heads(v, kv_heads)
        att = w.op(li, "weft.attention %s, %s, %s scale %.6e%s : (%s, %s, %s) -> %s" %
                   (qh, kh, vh, 1.0 / np.sqrt(D), " causal" if causal else "",
                    tensor_type([B, heads, S, D]), tensor_type([B, kv_heads, S, D]),
                    tensor_type([B, kv_heads, S, D]), tensor_type([B, heads, S, D])))
        back = w.op(li, "weft.transpose %s permutation [0, 2, 1, 3] : %s -> %s" %
                    (att, tensor_type([B, heads, S, D]), tensor_type([B, S, heads, D])))
        back = w.op(li, "weft.reshape %s : %s -> %s" %
                    (back, tensor_type([B, S, heads, D]), tensor_type([B, S, heads * D])))
        o = linear(li, back, heads * D, H, "h%d.o" % layer, not swiglu)
        r1 = w.op(li, "weft.add %s, %s : %s" % (arg, o, act))
        n2 = norm(li, r1, "h%d.ln2" % layer)
        if swiglu:
            gate = linear(li, n2, H, ffn, "h%d.gate" % layer, False)
            up = linear(li, n2, H, ffn, "h%d.up" % layer, False)
            s = w.op(li, "weft.silu %s : %s" % (gate, tensor_type([B, S, ffn])))
            hact = w.op(li, "weft.mul %s, %s : %s" % (s, up, tensor_type([B, S, ffn])))
        else:
            up = linear(li, n2, H, ffn, "h%d.up" % layer, True)
            hact = w.op(li, "weft.gelu %s approximation tanh : %s" % (up, tensor_type([B, S, ffn])))
        down = linear(li, hact, ffn, H, "h%d.down" % layer, not swiglu)
        r2 = w.op(li, "weft.add %s, %s : %s" % (r1, down, act))
        w.lines.append("%sweft.yield %s : %s" % (li, r2, act))
        w.lines.append("    }")
        x = result
    nf = norm(ind, x, "final")
    logits = linear(ind, nf, H, vocab, "output", False)
    if with_loss:
        loss = w.op(ind, "weft.cross_entropy %s, %%labels reduction mean ignore_index -100 : (%s, %s) -> tensor<f32>" %
                    (logits, tensor_type([B, S, vocab]), tensor_type([B, S], "i64")))
        w.lines.append("    return %s, %s : %s, tensor<f32>" % (logits, loss, tensor_type([B, S, vocab])))
    else:
        w.lines.append("    return %s : %s" % (logits, tensor_type([B, S, vocab])))
    w.lines.append("  }")
    w.lines.append("}")
    ids = np.array([[rng.randrange(vocab) for _ in range(S)] for _ in range(B)],
                   dtype=np.int64)
    inputs = [ids]
    if with_loss:
        # Next-token labels; the last position is ignored.
        labels = np.roll(ids, -1, axis=1)
        labels[:, -1] = -100
        inputs.append(labels)
    return config, "\n".join(w.lines) + "\n", inputs


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True, help="directory to write into")
    parser.add_argument("--layers", type=int, help="the depth (drawn if not given)")
    parser.add_argument("--batch", type=int, help="the batch (2 if not given)")
    options = parser.parse_args()
    config, text, inputs = generate(options.seed, options.layers, options.batch)
    os.makedirs(options.out, exist_ok=True)
    with open(os.path.join(options.out, "model.mlir"), "w") as f:
        f.write(text)
    for index, tensor in enumerate(inputs):
        np.save(os.path.join(options.out, "input_%d.npy" % index), tensor)
    print(config)


if __name__ == "__main__":
    main()
