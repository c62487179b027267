#!/usr/bin/python3
"""scatter_nd.py OUT_DIR: slice assignments as torch.onnx exports them (ScatterND
with indices computed from shapes), with inputs and torch's outputs as .npy:

  - mask.onnx: Hugging Face's causal mask with padding (transformers' Llama
    `_update_causal_mask`): a full causal mask expanded over the batch, cloned,
    and its first `attention_mask.shape[-1]` keys set to the minimum where the
    padding mask is 0 (`causal_mask[:, :, :, :n] = ....masked_fill(...)`), added
    to scores; x.npy, attention_mask.npy -> mask_out.npy;
  - rows.onnx: rows 2 and 0 of a matrix replaced (`x[[2, 0]] = y * 2`, indices
    that are not a box) and a column block updated in place
    (`x[:, 1:3] += 1`); rows_x.npy, rows_y.npy -> rows_out.npy;
  - llama.onnx: two Llama-style blocks whose attention adds mask.onnx's mask
    (raised to causal attention with the padding mask);
    ids.npy, padded.npy (the second sequence left-padded) -> llama_logits.npy.
"""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def update_causal_mask(attention_mask):
    """transformers' Llama `_update_causal_mask` (4.38 on), its slice
    assignment included."""
    b, t = attention_mask.shape
    low = torch.finfo(torch.float32).min
    causal = torch.triu(torch.full((t, t), fill_value=low), diagonal=1)
    causal = causal[None, None, :, :].expand(b, 1, -1, -1).clone()
    n = attention_mask.shape[-1]
    padding = causal[:, :, :, :n] + attention_mask[:, None, None, :]
    padding = padding == 0
    causal[:, :, :, :n] = causal[:, :, :, :n].masked_fill(padding, low)
    return causal


class Mask(nn.Module):
    def forward(self, x, attention_mask):
        return (x + update_causal_mask(attention_mask)).softmax(-1)


class Rows(nn.Module):
    def forward(self, x, y):
        x = x.clone()
        x[[2, 0]] = y * 2
        x[:, 1:3] += 1
        return x


x = torch.randn(2, 1, 5, 5)
attention_mask = torch.ones(2, 5, dtype=torch.long)
attention_mask[0, :2] = 0
with torch.no_grad():
    y = Mask()(x, attention_mask)
torch.onnx.export(Mask(), (x, attention_mask), os.path.join(out, "mask.onnx"),
                  input_names=["x", "attention_mask"], output_names=["y"],
                  opset_version=17)
np.save(os.path.join(out, "x.npy"), x.numpy())
np.save(os.path.join(out, "attention_mask.npy"), attention_mask.numpy())
np.save(os.path.join(out, "mask_out.npy"), y.numpy())

rx, ry = torch.randn(4, 5), torch.randn(2, 5)
with torch.no_grad():
    r = Rows()(rx, ry)
torch.onnx.export(Rows(), (rx, ry), os.path.join(out, "rows.onnx"),
                  input_names=["x", "y"], output_names=["out"], opset_version=17)
np.save(os.path.join(out, "rows_x.npy"), rx.numpy())
np.save(os.path.join(out, "rows_y.npy"), ry.numpy())
np.save(os.path.join(out, "rows_out.npy"), r.numpy())


VOCAB, HIDDEN, HEADS, SEQ = 32, 16, 2, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.k = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.v = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.o = nn.Linear(HIDDEN, HIDDEN, bias=False)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN, bias=False)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, causal):
        b, t, _ = x.shape
        split = lambda z: z.view(b, t, HEADS, HIDDEN // HEADS).transpose(1, 2)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        scores = q @ k.transpose(2, 3) / (HIDDEN // HEADS) ** 0.5 + causal
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, HIDDEN)
        x = x + self.o(a)
        return x + self.down(nn.functional.silu(self.up(x)))


class Llama(nn.Module):
    """Two blocks as transformers' Llama writes them (without norms and
    rotary positions), fed input_ids and an attention_mask: the additive
    mask is Mask's."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([Block() for _ in range(2)])
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids, attention_mask):
        causal = update_causal_mask(attention_mask)
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, causal)
        return self.head(x)


torch.manual_seed(0)
lm = Llama().eval()
ids = torch.randint(0, VOCAB, (2, SEQ))
padded = torch.ones(2, SEQ, dtype=torch.long)
padded[1, :2] = 0  # the second sequence left-padded by two
with torch.no_grad():
    logits = lm(ids, padded)
torch.onnx.export(lm, (ids, padded), os.path.join(out, "llama.onnx"),
                  input_names=["input_ids", "attention_mask"],
                  output_names=["logits"], opset_version=17)
np.save(os.path.join(out, "ids.npy"), ids.numpy())
np.save(os.path.join(out, "padded.npy"), padded.numpy())
np.save(os.path.join(out, "llama_logits.npy"), logits.numpy())
