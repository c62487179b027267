#!/usr/bin/python3
"""window_ring.py OUT_DIR: a Mistral-like decoder (v0.1's sliding window of
WINDOW keys per query, as a boolean band mask filled with -inf, RMS norms,
SwiGLU, rotary embeddings) over SEQ = 32 positions, long enough that under
cp = 4 the ring's load-balanced chunks of 4 positions leave one ring step
that no query's window reaches. Exported for training with opset 17 as
model.onnx, with tokens.npy and torch's logits.npy.

window_ring.py OUT_DIR --train DATA STEPS LR: torch's losses of STEPS AdamW
steps of the same module on weft train's windows of DATA, in
OUT_DIR/torch_losses.txt.

--window N (first, after OUT_DIR) sets the window (4 by default: an eighth of
the sequence, which -weft-apply-plan splits in contiguous chunks; 5 is longer,
and the ring keeps the load-balanced chunks). --rotary-buffers (after it)
caches the rotary tables at init as buffers of the sequence, sliced in the
forward pass, as transformers did before 4.38: the export makes them
initializers, which the import makes constants (fixed position buffers).
--learned-positions (after those) adds a learned table of positions to the
token embedding (GPT-2's, sliced to the sequence): a weight that cp cuts into
contiguous chunks."""
import os
import sys
import warnings

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

warnings.filterwarnings("ignore")
VOCAB, HIDDEN, HEADS, FFN, LAYERS, BATCH, SEQ, WINDOW = 64, 32, 4, 64, 2, 2, 32, 4


class RMSNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(HIDDEN))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm1, self.norm2 = RMSNorm(), RMSNorm()
        self.q, self.k, self.v, self.o = (nn.Linear(HIDDEN, HIDDEN, bias=False)
                                          for _ in range(4))
        self.gate, self.up = (nn.Linear(HIDDEN, FFN, bias=False) for _ in range(2))
        self.down = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x, cos, sin):
        b, t, h = x.shape
        d = h // HEADS
        y = self.norm1(x)
        q, k, v = (p(y).view(b, t, HEADS, d).transpose(1, 2)
                   for p in (self.q, self.k, self.v))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        scores = q @ k.transpose(-1, -2) / d ** 0.5
        seen = torch.ones(t, t, dtype=torch.bool).tril().triu(1 - WINDOW)
        scores = scores.masked_fill(~seen, float("-inf"))
        a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
        x = x + self.o(a)
        y = self.norm2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


def rotary_tables(t):
    d = HIDDEN // HEADS
    inv = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.outer(torch.arange(t).float(), inv)
    emb = torch.cat((freqs, freqs), -1)
    return emb.cos(), emb.sin()


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        if ROTARY_BUFFERS:
            cos, sin = rotary_tables(SEQ)
            self.register_buffer("cos_cached", cos)
            self.register_buffer("sin_cached", sin)
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        if LEARNED_POSITIONS:
            self.positions = nn.Parameter(0.02 * torch.randn(SEQ, HIDDEN))
        self.blocks = nn.ModuleList([Block() for _ in range(LAYERS)])
        self.norm = RMSNorm()
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        if ROTARY_BUFFERS:
            cos, sin = self.cos_cached[:t], self.sin_cached[:t]
        else:
            cos, sin = rotary_tables(t)
        x = self.embed(input_ids)
        if LEARNED_POSITIONS:
            x = x + self.positions[:t]
        for block in self.blocks:
            x = block(x, cos, sin)
        return self.head(self.norm(x))


def make():
    torch.manual_seed(0)
    return Model()


args = sys.argv[1:]
if len(args) >= 3 and args[1] == "--window":
    WINDOW = int(args[2])
    del args[1:3]
ROTARY_BUFFERS = len(args) >= 2 and args[1] == "--rotary-buffers"
if ROTARY_BUFFERS:
    del args[1]
LEARNED_POSITIONS = len(args) >= 2 and args[1] == "--learned-positions"
if LEARNED_POSITIONS:
    del args[1]
sys.argv[1:] = args
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
if len(sys.argv) == 6 and sys.argv[2] == "--train":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_losses import write_adamw_losses
    write_adamw_losses(make, sys.argv[3], int(sys.argv[4]), float(sys.argv[5]),
                       BATCH, SEQ, VOCAB, out)
    sys.exit(0)

model = make().eval()
tokens = torch.randint(0, VOCAB, (BATCH, SEQ), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    logits = model(tokens)
torch.onnx.export(model, (tokens,), os.path.join(out, "model.onnx"),
                  input_names=["input_ids"], output_names=["logits"], opset_version=17,
                  training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
np.save(os.path.join(out, "tokens.npy"), tokens.numpy())
np.save(os.path.join(out, "logits.npy"), logits.numpy())
