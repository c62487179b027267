"""Exports a model holding the fixed position buffers that torch keeps as
buffers and torch.onnx.export stores as initializers, next to weights of the
same shapes that are trained, for test/Import/fixed-buffers.test:

  fixed (the import makes them constants):
    pe            the Transformer's sinusoidal encoding, PyTorch's tutorial
                  PositionalEncoding ([max_len, 1, d], sin and cos interleaved)
    embed_positions  GPT-J's sin | cos table ([max_len, d])
    inv_freq      GPT-NeoX's persistent rotary frequencies, cos and sin of the
                  positions times them computed in the forward pass
    scaled_freq   Llama 3.1's scaled frequencies (not geometric), the same way
    cos16, sin16  rotary tables stored in float16, cast to float
  trained (stay weft.parameter):
    learned       a learned position table (N(0, 0.02))
    zero_table    a learned table initialised to zeros
    slopes        geometric (1, 1/2, 1/4, ...) but read by a product that is no
                  sine's or cosine's (ALiBi-like)
    fourier       learnable Fourier features' random frequencies, into Sin

    python3 fixed_buffers.py OUT_DIR   (writes model.onnx, external/model.onnx
        with every initializer as external data, ids.npy and torch's logits.npy)
"""
import math
import os
import sys

import numpy as np
import onnx
import torch
from torch import nn

L, D = 32, 8


def llama31_scaled(inv_freq, factor=8.0, low=1.0, high=4.0, original=1024):
    wavelen = 2 * math.pi / inv_freq
    smooth = (original / wavelen - low) / (high - low)
    scaled = torch.where(wavelen > original / low, inv_freq / factor, inv_freq)
    middle = (wavelen <= original / low) & (wavelen >= original / high)
    return torch.where(middle, (1 - smooth) * inv_freq / factor + smooth * inv_freq, scaled)


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(16, D)
        position = torch.arange(L).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, D, 2) * (-math.log(10000.0) / D))
        pe = torch.zeros(L, 1, D)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)
        sinusoid = torch.outer(torch.arange(L).float(), div_term)
        self.register_buffer("embed_positions",
                             torch.cat((sinusoid.sin(), sinusoid.cos()), dim=-1))
        inv_freq = 1.0 / (10000 ** (torch.arange(0, D, 2).float() / D))
        self.register_buffer("inv_freq", inv_freq)
        self.register_buffer("scaled_freq", llama31_scaled(inv_freq))
        emb = torch.cat((torch.outer(torch.arange(L).float(), inv_freq),) * 2, dim=-1)
        self.register_buffer("cos16", emb.cos().half())
        self.register_buffer("sin16", emb.sin().half())
        self.learned = nn.Parameter(torch.randn(L, D) * 0.02)
        self.zero_table = nn.Parameter(torch.zeros(L, D))
        self.slopes = nn.Parameter(0.5 ** torch.arange(D).float())
        self.fourier = nn.Parameter(torch.rand(D // 2) + 0.1)
        self.out = nn.Linear(D, 16)

    def forward(self, ids):
        s = ids.shape[1]
        positions = torch.arange(s).float()
        x = self.embed(ids)
        x = (x.transpose(0, 1) + self.pe[:s]).transpose(0, 1) + self.embed_positions[:s]
        for freq in (self.inv_freq, self.scaled_freq):
            angles = torch.cat((torch.outer(positions, freq),) * 2, dim=-1)
            x = x * angles.cos() + x.flip(-1) * angles.sin()
        x = x * self.cos16[:s].float() + x.flip(-1) * self.sin16[:s].float()
        x = x + self.learned[:s] + self.zero_table[:s]
        x = x + positions[:, None] * self.slopes
        x = x + torch.cat((torch.outer(positions, self.fourier).sin(),) * 2, dim=-1)
        return self.out(x)


def main(out):
    path = os.path.join(out, "model.onnx")
    model = Model()
    ids = torch.randint(0, 16, (2, 8), generator=torch.Generator().manual_seed(1))
    np.save(os.path.join(out, "ids.npy"), ids.numpy())
    with torch.no_grad():
        np.save(os.path.join(out, "logits.npy"), model(ids).numpy())
    torch.onnx.export(model, (ids,), path,
                      opset_version=17, input_names=["input_ids"], output_names=["logits"],
                      do_constant_folding=False)
    os.makedirs(os.path.join(out, "external"), exist_ok=True)
    onnx.save_model(onnx.load(path), os.path.join(out, "external", "model.onnx"),
                    save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=0)


if __name__ == "__main__":
    main(sys.argv[1])
