#!/usr/bin/python3
"""Writes an encoder-decoder, torch.nn.Transformer (2 encoder and 2 decoder
layers, width 32, 4 heads, ReLU MLPs of 64) between token embeddings and an
output projection, as people write a sequence-to-sequence model, exported by
torch.onnx.export (1.13 here) with dynamic batch, source and target axes:

  OUT/s2s.onnx
  OUT/s2s-12x8/test_data_set_0: a batch of 2, sources of 12 tokens and
      targets of 8, with torch's logits (the decoder's cross-attention has
      8 queries and 12 keys);
  OUT/s2s-8x8/test_data_set_0: sources of 8 tokens and targets of 8.

    /usr/bin/python3 encoder_decoder.py OUT
"""
import os
import sys

import torch
from onnx import numpy_helper
from torch import nn

VOCAB, WIDTH = 64, 32


class Seq2Seq(nn.Module):
    def __init__(self):
        super().__init__()
        self.source = nn.Embedding(VOCAB, WIDTH)
        self.target = nn.Embedding(VOCAB, WIDTH)
        self.transformer = nn.Transformer(d_model=WIDTH, nhead=4, num_encoder_layers=2,
                                          num_decoder_layers=2, dim_feedforward=64,
                                          dropout=0.0, batch_first=True)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, src_ids, tgt_ids):
        t = tgt_ids.shape[1]
        causal = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
        hidden = self.transformer(self.source(src_ids), self.target(tgt_ids),
                                  tgt_mask=causal)
        return self.head(hidden)


def save(tensor, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(tensor.numpy()).SerializeToString())


def main(out):
    torch.manual_seed(0)
    model = Seq2Seq().eval()
    generator = torch.Generator().manual_seed(1)
    for source in (12, 8):
        src = torch.randint(0, VOCAB, (2, source), generator=generator)
        tgt = torch.randint(0, VOCAB, (2, 8), generator=generator)
        data = os.path.join(out, "s2s-%dx8" % source, "test_data_set_0")
        os.makedirs(data, exist_ok=True)
        save(src, os.path.join(data, "input_0.pb"))
        save(tgt, os.path.join(data, "input_1.pb"))
        with torch.no_grad():
            save(model(src, tgt), os.path.join(data, "output_0.pb"))
    src = torch.zeros(2, 12, dtype=torch.long)
    tgt = torch.zeros(2, 8, dtype=torch.long)
    torch.onnx.export(model, (src, tgt), os.path.join(out, "s2s.onnx"), opset_version=17,
                      input_names=["src_ids", "tgt_ids"], output_names=["logits"],
                      dynamic_axes={"src_ids": {0: "batch", 1: "source"},
                                    "tgt_ids": {0: "batch", 1: "sequence"},
                                    "logits": {0: "batch", 1: "sequence"}})


if __name__ == "__main__":
    main(sys.argv[1])
