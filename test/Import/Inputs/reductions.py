#!/usr/bin/python3
"""reductions.py OUT_DIR: the reductions weft composes and Tile, as torch
exports them, with inputs and torch's outputs as .npy files:

  - ops.onnx: F.normalize (ReduceL2), torch.logsumexp (ReduceLogSumExp),
    amin (ReduceMin), torch.linalg.vector_norm (Abs, Pow and ReduceSum) and
    Tensor.repeat (Tile); x.npy -> ops_N.npy;
  - cosine.onnx: a language model whose attention normalizes queries and keys
    to unit length (F.normalize: cosine attention, as nGPT and Swin v2 write
    it) times a learned temperature per head, tiled over the batch with
    Tensor.repeat; exported for training (no constant folding), tokens.npy ->
    cosine_logits.npy.

reductions.py OUT_DIR --train DATA STEPS LR: torch's losses of STEPS AdamW
steps of cosine's module on weft train's windows of DATA, in
OUT_DIR/torch_losses.txt.
"""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

warnings.filterwarnings("ignore")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
VOCAB, HIDDEN, HEADS, BATCH, SEQ = 40, 24, 4, 2, 8


class Ops(nn.Module):
    def forward(self, x):
        return (F.normalize(x, dim=-1), torch.logsumexp(x, dim=1),
                x.amin(dim=(0, 2), keepdim=True), torch.linalg.vector_norm(x, dim=0),
                x.repeat(2, 1, 3))


class Cosine(nn.Module):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1 = nn.LayerNorm(HIDDEN)
            self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
            self.temperature = nn.Parameter(torch.full((1, HEADS, 1, 1), 4.0))
            self.proj = nn.Linear(HIDDEN, HIDDEN)
            self.norm2 = nn.LayerNorm(HIDDEN)
            self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
            self.down = nn.Linear(4 * HIDDEN, HIDDEN)

        def forward(self, x):
            b, t, h = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(h, 2)
            q, k, v = (z.view(b, t, HEADS, h // HEADS).transpose(1, 2)
                       for z in (q, k, v))
            q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            scores = q @ k.transpose(-1, -2) * self.temperature.repeat(b, 1, 1, 1)
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            scores = scores.masked_fill(~causal, float("-inf"))
            a = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h)
            x = x + self.proj(a)
            return x + self.down(F.gelu(self.up(self.norm2(x))))

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.blocks = nn.ModuleList([self.Block() for _ in range(2)])
        self.norm = nn.LayerNorm(HIDDEN)
        self.head = nn.Linear(HIDDEN, VOCAB, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def train(data, steps, lr):
    from torch_losses import write_adamw_losses
    write_adamw_losses(Cosine, data, steps, lr, BATCH, SEQ, VOCAB, out)


if len(sys.argv) == 6 and sys.argv[2] == "--train":
    train(sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    sys.exit(0)

torch.manual_seed(0)
x = torch.randn(3, 4, 5)
with torch.no_grad():
    results = Ops()(x)
torch.onnx.export(Ops(), (x,), os.path.join(out, "ops.onnx"), input_names=["x"],
                  opset_version=17)
np.save(os.path.join(out, "x.npy"), x.numpy())
for i, r in enumerate(results):
    np.save(os.path.join(out, "ops_%d.npy" % i), r.numpy())

torch.manual_seed(0)
model = Cosine().eval()
tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
with torch.no_grad():
    logits = model(tokens)
torch.onnx.export(model, (tokens,), os.path.join(out, "cosine.onnx"),
                  input_names=["input_ids"], output_names=["logits"],
                  opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False)
np.save(os.path.join(out, "tokens.npy"), tokens.numpy())
np.save(os.path.join(out, "cosine_logits.npy"), logits.numpy())
