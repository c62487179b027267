#!/usr/bin/python3
"""wide_heads.py OUT_DIR: a decoder whose heads are not hidden / heads wide,
written as Hugging Face's Gemma and Mistral NeMo write it: q_proj is
Linear(hidden, heads * head_dim), k_proj and v_proj Linear(hidden, kv_heads *
head_dim) (grouped-query attention, repeat_kv), rotary tables cached at init
and applied by rotate_half, the scores scaled by head_dim ** -0.5 and an
additive causal mask of finfo.min, o_proj Linear(heads * head_dim, hidden),
Gemma's RMSNorm (1 + weight) and its GeGLU MLP (tanh GELU of the gate times
the up projection), the embedding scaled by sqrt(hidden) and tied to the
output. Exported with ONNX opset 17 as model.onnx, with tokens.npy and torch's
logits.npy. An inference export, as people write one: constant folding writes
the output layer's weight (the embedding's transpose) as a second initializer
and folds Gemma's 1 + weight into the norms' initializers.

wide_heads.py OUT_DIR --merged: the same with every norm's weight at zero.

wide_heads.py OUT_DIR --train DATA STEPS LR: torch's losses of STEPS AdamW
steps of the same module on weft train's windows of DATA, in
OUT_DIR/torch_losses.txt."""
import math
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN = 64, 48, 4, 2, 16, 96
LAYERS, BATCH, SEQ = 2, 2, 8


# --merged: every norm's weight starts at zero (Gemma's 1 + weight is ones),
# as a fresh Gemma's do: the inference export merges them into one initializer.
MERGED = "--merged" in sys.argv


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(dim) if MERGED else 0.1 * torch.randn(dim))

    def forward(self, x):
        x32 = x.float()
        normed = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6)
        return (normed * (1.0 + self.weight.float())).type_as(x)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        freqs = torch.outer(torch.arange(SEQ).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)

    def forward(self, x, mask):
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(x).view(b, t, KV_HEADS, HEAD_DIM).transpose(1, 2)
        cos, sin = self.cos[:t], self.sin[:t]
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = HEADS // KV_HEADS
        k = k[:, :, None].expand(b, KV_HEADS, group, t, HEAD_DIM).reshape(
            b, HEADS, t, HEAD_DIM)
        v = v[:, :, None].expand(b, KV_HEADS, group, t, HEAD_DIM).reshape(
            b, HEADS, t, HEAD_DIM)
        scores = torch.matmul(q, k.transpose(2, 3)) * HEAD_DIM ** -0.5 + mask
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, t, HEADS * HEAD_DIM)
        return self.o_proj(out)


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.gate_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.up_proj = nn.Linear(HIDDEN, FFN, bias=False)
        self.down_proj = nn.Linear(FFN, HIDDEN, bias=False)

    def forward(self, x):
        gate = F.gelu(self.gate_proj(x), approximate="tanh")
        return self.down_proj(gate * self.up_proj(x))


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_layernorm = RMSNorm(HIDDEN)
        self.self_attn = Attention()
        self.post_attention_layernorm = RMSNorm(HIDDEN)
        self.mlp = Mlp()

    def forward(self, x, mask):
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed_tokens = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([Layer() for _ in range(LAYERS)])
        self.norm = RMSNorm(HIDDEN)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.embed_tokens(input_ids) * torch.tensor(HIDDEN ** 0.5)
        mask = torch.full((t, t), torch.finfo(torch.float32).min).triu(1)
        mask = mask[None, None]
        for layer in self.layers:
            x = layer(x, mask)
        return F.linear(self.norm(x), self.embed_tokens.weight)


def train(out, data, steps, lr):
    """`steps` AdamW steps (no weight decay) of the exported module, from the
    same initial weights, on weft train's windows of `data`: the losses, one
    per line, in OUT/torch_losses.txt. The module's output layer is its
    embedding: its gradient is the sum of both uses'."""
    from torch_losses import write_adamw_losses
    write_adamw_losses(Model, data, steps, lr, BATCH, SEQ, VOCAB, out)


def main(out):
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    model = Model().eval()
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ))
    with torch.no_grad():
        logits = model(tokens)
    torch.onnx.export(model, (tokens,), os.path.join(out, "model.onnx"),
                      input_names=["input_ids"], output_names=["logits"],
                      opset_version=17)
    np.save(os.path.join(out, "tokens.npy"), tokens.numpy())
    np.save(os.path.join(out, "logits.npy"), logits.numpy())


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[2] == "--train":
        train(sys.argv[1], sys.argv[3], int(sys.argv[4]), float(sys.argv[5]))
    else:
        main(sys.argv[1])
