#!/usr/bin/python3
"""Exports small GPT-2-, BERT- and LLaMA-style transformers to ONNX, with torch's outputs.

Run with Debian's python3-torch and python3-onnx (/usr/bin/python3):

    /usr/bin/python3 test/models/export_models.py test/models

For each model it writes, at opsets 14 and 17, a static export and one with dynamic
batch and sequence axes (NAME-opsetN[-dynamic].onnx), and test_data_set_0/ with the
inputs and torch's outputs for a fixed input, as ONNX's backend tests lay them out.
The modules follow the structure that HF transformers exports (split c_attn, tril
causal buffer with torch.where, erf and tanh GELU, additive padding masks, RMSNorm,
rotary embeddings, grouped KV heads with repeat_kv, SwiGLU) but are written here, small
and seeded, so the files stay a few tens of KB and regenerate exactly.
"""

import math
import os
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

HIDDEN, HEADS, LAYERS, VOCAB, MAX_SEQ = 32, 4, 2, 64, 16
BATCH, SEQ = 2, 8


class GPT2Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.c_proj = nn.Linear(HIDDEN, HIDDEN)
        self.register_buffer("bias", torch.tril(torch.ones(MAX_SEQ, MAX_SEQ, dtype=torch.bool))
                             .view(1, 1, MAX_SEQ, MAX_SEQ))

    def forward(self, x):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(HIDDEN, dim=2)
        split = lambda t: t.view(b, s, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)
        q, k, v = split(q), split(k), split(v)
        w = torch.matmul(q, k.transpose(-1, -2))
        w = w / torch.full([], v.size(-1) ** 0.5, dtype=w.dtype)
        causal = self.bias[:, :, :s, :s]
        w = torch.where(causal, w, torch.full([], torch.finfo(w.dtype).min, dtype=w.dtype))
        w = nn.functional.softmax(w, dim=-1)
        o = torch.matmul(w, v).permute(0, 2, 1, 3).reshape(b, s, HIDDEN)
        return self.c_proj(o)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(HIDDEN)
        self.attn = GPT2Attention()
        self.ln_2 = nn.LayerNorm(HIDDEN)
        self.c_fc = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.c_proj = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(gelu_new(self.c_fc(self.ln_2(x))))


class GPT2(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(VOCAB, HIDDEN)
        self.wpe = nn.Embedding(MAX_SEQ, HIDDEN)
        self.h = nn.ModuleList(GPT2Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(HIDDEN)

    def forward(self, input_ids):
        positions = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(positions)
        for block in self.h:
            x = block(x)
        return torch.matmul(self.ln_f(x), self.wte.weight.t())  # tied embeddings


class BertLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(HIDDEN, HIDDEN)
        self.key = nn.Linear(HIDDEN, HIDDEN)
        self.value = nn.Linear(HIDDEN, HIDDEN)
        self.attn_out = nn.Linear(HIDDEN, HIDDEN)
        self.attn_norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.intermediate = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.output = nn.Linear(4 * HIDDEN, HIDDEN)
        self.out_norm = nn.LayerNorm(HIDDEN, eps=1e-12)

    def forward(self, x, extended_mask):
        b, s, _ = x.shape
        heads = lambda t: t.view(b, s, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)
        q, k, v = heads(self.query(x)), heads(self.key(x)), heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(HIDDEN // HEADS)
        probs = nn.functional.softmax(scores + extended_mask, dim=-1)
        ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).reshape(b, s, HIDDEN)
        x = self.attn_norm(x + self.attn_out(ctx))
        return self.out_norm(x + self.output(nn.functional.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self):
        super().__init__()
        self.word = nn.Embedding(VOCAB, HIDDEN)
        self.position = nn.Embedding(MAX_SEQ, HIDDEN)
        self.token_type = nn.Embedding(2, HIDDEN)
        self.norm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer() for _ in range(LAYERS))

    def forward(self, input_ids, attention_mask):
        positions = torch.arange(input_ids.shape[1], dtype=torch.long).unsqueeze(0)
        x = self.word(input_ids) + self.position(positions) + self.token_type(torch.zeros_like(input_ids))
        x = self.norm(x)
        extended = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, extended)
        return x


class RMSNorm(nn.Module):
    def __init__(self, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(HIDDEN) + 0.1 * torch.randn(HIDDEN))
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


KV_HEADS = 2
HEAD_DIM = HIDDEN // HEADS


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class LlamaLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.input_norm = RMSNorm()
        self.q_proj = nn.Linear(HIDDEN, HEADS * HEAD_DIM, bias=False)
        self.k_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.v_proj = nn.Linear(HIDDEN, KV_HEADS * HEAD_DIM, bias=False)
        self.o_proj = nn.Linear(HEADS * HEAD_DIM, HIDDEN, bias=False)
        self.post_norm = RMSNorm()
        self.gate = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.up = nn.Linear(HIDDEN, 3 * HIDDEN, bias=False)
        self.down = nn.Linear(3 * HIDDEN, HIDDEN, bias=False)

    def forward(self, x, cos, sin, mask):
        b, s, _ = x.shape
        h = self.input_norm(x)
        q = self.q_proj(h).view(b, s, HEADS, HEAD_DIM).transpose(1, 2)
        k = self.k_proj(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        v = self.v_proj(h).view(b, s, KV_HEADS, HEAD_DIM).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = HEADS // KV_HEADS
        repeat = lambda t: t[:, :, None, :, :].expand(b, KV_HEADS, rep, s, HEAD_DIM).reshape(b, HEADS, s, HEAD_DIM)
        k, v = repeat(k), repeat(v)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(HEAD_DIM) + mask
        probs = nn.functional.softmax(scores, dim=-1)
        o = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, HIDDEN)
        x = x + self.o_proj(o)
        h = self.post_norm(x)
        return x + self.down(nn.functional.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(LlamaLayer() for _ in range(LAYERS))
        self.norm = RMSNorm()
        self.lm_head = nn.Linear(HIDDEN, VOCAB, bias=False)
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        freqs = torch.outer(torch.arange(MAX_SEQ).float(), inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos_cached", emb.cos())
        self.register_buffer("sin_cached", emb.sin())

    def forward(self, input_ids):
        s = input_ids.shape[1]
        cos, sin = self.cos_cached[:s], self.sin_cached[:s]
        mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


class LlamaRope(Llama):
    """Llama with Hugging Face's rotary embedding since transformers 4.38
    (LlamaRotaryEmbedding.forward): cos and sin computed in the forward pass
    from the positions and `inv_freq`, so the export has Cos and Sin nodes.
    Hugging Face's `inv_freq` is a buffer, which torch never trains (the
    import makes one that the file stores as an initializer a constant: a
    fixed position buffer); here the frequencies are a parameter, learned,
    so that training also checks the gradients of cos and sin against
    torch's. They start 5 % off the fixed ones (1.05 at the first, 0.95 at
    the last), as learned frequencies would; the fixed ones (1 at the
    first) would be taken for the buffer."""

    def __init__(self):
        super().__init__()
        del self.cos_cached, self.sin_cached
        inv_freq = 1.0 / (10000 ** (torch.arange(0, HEAD_DIM, 2).float() / HEAD_DIM))
        self.inv_freq = nn.Parameter(inv_freq * torch.linspace(1.05, 0.95, len(inv_freq)))

    def forward(self, input_ids):
        b, s = input_ids.shape
        position_ids = torch.arange(s).unsqueeze(0)
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        mask = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x, cos, sin, mask)
        return self.lm_head(self.norm(x))


def save(tensor, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(tensor).SerializeToString())


def main(out_dir):
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator)
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 3:] = 0
    models = {
        "gpt2": (GPT2, (ids,), ["input_ids"]),
        "bert": (Bert, (ids, mask), ["input_ids", "attention_mask"]),
        "llama": (Llama, (ids,), ["input_ids"]),
    }
    for name, (cls, inputs, input_names) in models.items():
        torch.manual_seed(1)
        model = cls().eval()
        with torch.no_grad():
            expected = model(*inputs)
        data = os.path.join(out_dir, name, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        for i, tensor in enumerate(inputs):
            save(tensor.numpy(), os.path.join(data, "input_%d.pb" % i))
        save(expected.numpy(), os.path.join(data, "output_0.pb"))
        for opset in (14, 17):
            for dynamic in (False, True):
                path = os.path.join(out_dir, name, "%s-opset%d%s.onnx"
                                    % (name, opset, "-dynamic" if dynamic else ""))
                axes = {n: {0: "batch", 1: "sequence"} for n in input_names}
                axes["logits"] = {0: "batch", 1: "sequence"}
                torch.onnx.export(model, inputs, path, opset_version=opset,
                                  input_names=input_names, output_names=["logits"],
                                  dynamic_axes=axes if dynamic else None,
                                  do_constant_folding=True)
                onnx.checker.check_model(onnx.load(path))
                print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
