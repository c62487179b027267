#!/usr/bin/python3
"""reward_model.py OUT_DIR: a reward model as transformers' *ForSequenceClassification
writes it (LlamaForSequenceClassification's pooling): two causal blocks, a
score head of one output per position, and the score of each sequence's last
token, found as the first pad position minus one (ArgMax of
eq(input_ids, pad), then % the length, so that a sequence without padding
takes its last position) and gathered with a flat index. ids.npy (the first
sequence padded with the pad id 0 after 5 tokens) -> rewards.npy."""
import os
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")
out = sys.argv[1]
os.makedirs(out, exist_ok=True)
VOCAB, HIDDEN, HEADS, SEQ, PAD = 32, 16, 2, 8, 0


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(HIDDEN)
        self.qkv = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.o = nn.Linear(HIDDEN, HIDDEN)
        self.up = nn.Linear(HIDDEN, 4 * HIDDEN)
        self.down = nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, x):
        b, t, h = x.shape
        q, k, v = self.qkv(self.norm(x)).split(h, 2)
        q, k, v = (z.view(b, t, HEADS, h // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = q @ k.transpose(-1, -2) / (h // HEADS) ** 0.5
        causal = torch.ones(t, t, dtype=torch.bool).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
        x = x + self.o((scores.softmax(-1) @ v).transpose(1, 2).reshape(b, t, h))
        return x + self.down(nn.functional.gelu(self.up(x)))


class RewardModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList([Block() for _ in range(2)])
        self.score = nn.Linear(HIDDEN, 1, bias=False)

    def forward(self, input_ids):
        x = self.embed(input_ids)
        for layer in self.layers:
            x = layer(x)
        logits = self.score(x)
        b = input_ids.shape[0]
        last = torch.eq(input_ids, PAD).int().argmax(-1) - 1
        last = last % input_ids.shape[-1]
        return logits[torch.arange(b), last]


torch.manual_seed(0)
model = RewardModel().eval()
ids = torch.randint(1, VOCAB, (2, SEQ))
ids[0, 5:] = PAD
with torch.no_grad():
    rewards = model(ids)
torch.onnx.export(model, (ids,), os.path.join(out, "reward.onnx"),
                  input_names=["input_ids"], output_names=["rewards"], opset_version=17)
np.save(os.path.join(out, "ids.npy"), ids.numpy())
np.save(os.path.join(out, "rewards.npy"), rewards.numpy())
