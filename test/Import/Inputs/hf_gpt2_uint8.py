"""hf_gpt2_uint8.py OUT_DIR: a GPT-2 written as Hugging Face's modeling_gpt2 was
before transformers 4.27: Conv1D projections (addmm of a [in, out] weight),
each block's causal buffer `attn.bias` a uint8 tril(ones) sliced and cast to
bool, and `attn.masked_bias` a float scalar buffer (-1e4) filled in where it
is 0; the head tied to the token embedding. Exported with dynamic batch and
sequence axes (opset 14, as optimum did) as model.onnx, with ids.npy and
torch's logits.npy."""
import os
import sys

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

VOCAB, HIDDEN, HEADS, POSITIONS, LAYERS = 64, 32, 4, 32, 2


class Conv1D(nn.Module):
    def __init__(self, nf, nx):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(nx, nf) * 0.02)
        self.bias = nn.Parameter(torch.randn(nf) * 0.02)

    def forward(self, x):
        size_out = x.size()[:-1] + (self.weight.size(-1),)
        return torch.addmm(self.bias, x.view(-1, x.size(-1)), self.weight).view(size_out)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.tril(torch.ones(POSITIONS, POSITIONS, dtype=torch.uint8))
                             .view(1, 1, POSITIONS, POSITIONS))
        self.register_buffer("masked_bias", torch.tensor(-1e4))
        self.c_attn = Conv1D(3 * HIDDEN, HIDDEN)
        self.c_proj = Conv1D(HIDDEN, HIDDEN)

    def forward(self, x):
        b, t, _ = x.shape
        split = lambda z: z.view(b, t, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)
        q, k, v = (split(z) for z in self.c_attn(x).split(HIDDEN, dim=2))
        w = torch.matmul(q, k.transpose(-1, -2)) / (float(v.size(-1)) ** 0.5)
        causal = self.bias[:, :, t - t:t, :t].bool()
        w = torch.where(causal, w, self.masked_bias.to(w.dtype))
        a = torch.matmul(nn.functional.softmax(w, dim=-1), v)
        return self.c_proj(a.permute(0, 2, 1, 3).contiguous().view(b, t, HIDDEN))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.attn = Attention()
        self.c_fc, self.c_proj = Conv1D(4 * HIDDEN, HIDDEN), Conv1D(HIDDEN, 4 * HIDDEN)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, HIDDEN), nn.Embedding(POSITIONS, HIDDEN)
        self.h = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(HIDDEN)

    def forward(self, input_ids):
        t = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(t)[None])
        for block in self.h:
            x = block(x)
        return F.linear(self.ln_f(x), self.wte.weight)


out = sys.argv[1]
os.makedirs(out, exist_ok=True)
torch.manual_seed(0)
model = GPT2().eval()
ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(1))
with torch.no_grad():
    np.save(os.path.join(out, "logits.npy"), model(ids).numpy())
np.save(os.path.join(out, "ids.npy"), ids.numpy())
torch.onnx.export(model, (ids,), os.path.join(out, "model.onnx"), opset_version=14,
                  input_names=["input_ids"], output_names=["logits"],
                  dynamic_axes={"input_ids": {0: "batch", 1: "sequence"},
                                "logits": {0: "batch", 1: "sequence"}})
