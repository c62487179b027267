#!/usr/bin/python3
"""nanogpt.py OUT_DIR: a GPT written as nanoGPT's model.py writes it (a
LayerNorm module with an optional bias, one c_attn projection split three
ways, a registered tril buffer and masked_fill, nn.GELU, the token embedding
tied to lm_head), exported the two ways its forward(idx, targets=None) runs:

  - nanogpt.onnx: forward(idx, targets), the training forward, which returns
    (logits, cross_entropy(logits.view(-1, V), targets.view(-1),
    ignore_index=-1)): SoftmaxCrossEntropyLoss at the end of the graph;
  - generate.onnx: forward(idx), generation's, whose logits are the last
    position's only (lm_head(x[:, [-1], :])).

Also idx.npy, targets.npy (the next tokens) and loss.npy, torch's loss of
them. Exported for training (one initializer per parameter)."""
import math
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, BLOCK, EMBD, HEADS, LAYERS, BATCH = 64, 16, 32, 4, 2, 2


class LayerNorm(nn.Module):
    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(EMBD, 3 * EMBD)
        self.c_proj = nn.Linear(EMBD, EMBD)
        self.attn_dropout = nn.Dropout(0.0)
        self.resid_dropout = nn.Dropout(0.0)
        self.register_buffer("bias", torch.tril(torch.ones(BLOCK, BLOCK))
                             .view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(EMBD, dim=2)
        k = k.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        q = q.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        v = v.view(b, t, HEADS, c // HEADS).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // HEADS))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(EMBD, 4 * EMBD)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * EMBD, EMBD)
        self.dropout = nn.Dropout(0.0)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = LayerNorm(EMBD, bias=True)
        self.attn = CausalSelfAttention()
        self.ln_2 = LayerNorm(EMBD, bias=True)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(VOCAB, EMBD), wpe=nn.Embedding(BLOCK, EMBD),
            drop=nn.Dropout(0.0), h=nn.ModuleList([Block() for _ in range(LAYERS)]),
            ln_f=LayerNorm(EMBD, bias=True)))
        self.lm_head = nn.Linear(EMBD, VOCAB, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss


class Generate(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, idx):
        return self.model(idx)[0]


def main(out):
    torch.manual_seed(0)
    model = GPT()
    tokens = torch.randint(0, VOCAB, (BATCH, BLOCK + 1), generator=torch.Generator().manual_seed(1))
    idx, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    common = dict(opset_version=14, do_constant_folding=False,
                  training=torch.onnx.TrainingMode.TRAINING)
    torch.onnx.export(model, (idx, targets), os.path.join(out, "nanogpt.onnx"),
                      input_names=["idx", "targets"], output_names=["logits", "loss"], **common)
    torch.onnx.export(Generate(model), (idx,), os.path.join(out, "generate.onnx"),
                      input_names=["idx"], output_names=["logits"], **common)
    with torch.no_grad():
        loss = model(idx, targets)[1]
    np.save(os.path.join(out, "idx.npy"), idx.numpy())
    np.save(os.path.join(out, "targets.npy"), targets.numpy())
    np.save(os.path.join(out, "loss.npy"), loss.numpy())


if __name__ == "__main__":
    main(sys.argv[1])
