"""Exports test/models/export_models.py's GPT-2 (tied embedding) with LAYERS
layers in training mode, as training tests do: export_gpt2_layers.py OUT
LAYERS."""
import os
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "models"))
import export_models as em  # noqa: E402

em.LAYERS = int(sys.argv[2])
torch.manual_seed(1)
model = em.GPT2().train()
ids = torch.zeros(em.BATCH, em.SEQ, dtype=torch.long)
torch.onnx.export(model, (ids,), sys.argv[1], opset_version=17, input_names=["input_ids"],
                  output_names=["logits"], training=torch.onnx.TrainingMode.TRAINING,
                  do_constant_folding=False)
