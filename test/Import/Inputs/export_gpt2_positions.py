#!/usr/bin/python3
"""Exports test/models' GPT-2 with 1024 positions (HF's n_positions), so that its
causal buffer is a 1x1x1024x1024 tril sliced to [:s, :s] at run time, as in HF's
GPT-2: a slice of a constant too large for the importer to fold. Writes, into OUT:
gpt2.onnx (dynamic batch and sequence) and, for s in 128, 512 and 1024, ids-S.npy
(batch 1) and torch's logits-S.npy.

    /usr/bin/python3 export_gpt2_positions.py OUT
"""

import os
import sys

import numpy
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "models"))
import export_models as m  # noqa: E402

m.MAX_SEQ = 1024
out = sys.argv[1]
torch.manual_seed(1)
model = m.GPT2().eval()
ids = torch.randint(0, m.VOCAB, (1, 8), generator=torch.Generator().manual_seed(0))
axes = {"input_ids": {0: "batch", 1: "sequence"}, "logits": {0: "batch", 1: "sequence"}}
torch.onnx.export(model, (ids,), os.path.join(out, "gpt2.onnx"), opset_version=17,
                  input_names=["input_ids"], output_names=["logits"], dynamic_axes=axes,
                  do_constant_folding=True)
for seq in (128, 512, 1024):
    ids = torch.randint(0, m.VOCAB, (1, seq), generator=torch.Generator().manual_seed(seq))
    with torch.no_grad():
        logits = model(ids)
    numpy.save(os.path.join(out, "ids-%d.npy" % seq), ids.numpy())
    numpy.save(os.path.join(out, "logits-%d.npy" % seq), logits.numpy())
