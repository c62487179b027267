#!/usr/bin/python3
"""Writes a GPT-2 (test/models/export_models.py) that returns, besides its
logits, each layer's attention output, as models return hidden states,
attentions or a KV cache's present keys and values (Hugging Face's
output_hidden_states, output_attentions, use_cache):

  OUT/returned.onnx, OUT/returned/test_data_set_0  (outputs: logits, attn0, attn1)
  OUT/plain.onnx                                   (the same model, logits only)
  OUT/tokens.npy                                   (training tokens)

    /usr/bin/python3 returned_layer_values.py OUT
"""
import os
import sys

import numpy as np
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "models"))
import export_models as em  # noqa: E402


class Returning(torch.nn.Module):
    """The model, returning each layer's attention output after the logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.seen = []
        for block in model.h:
            block.attn.register_forward_hook(lambda mod, args, out: self.seen.append(out))

    def forward(self, input_ids):
        self.seen.clear()
        logits = self.model(input_ids)
        return (logits, *self.seen)


def save(array, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array).SerializeToString())


def main(out):
    torch.manual_seed(1)
    model = em.GPT2().eval()
    returning = Returning(model)
    ids = torch.randint(0, em.VOCAB, (em.BATCH, em.SEQ),
                        generator=torch.Generator().manual_seed(0))
    os.makedirs(out, exist_ok=True)
    torch.onnx.export(returning, (ids,), os.path.join(out, "returned.onnx"),
                      opset_version=17, input_names=["input_ids"],
                      output_names=["logits", "attn0", "attn1"])
    torch.onnx.export(model, (ids,), os.path.join(out, "plain.onnx"), opset_version=17,
                      input_names=["input_ids"], output_names=["logits"])
    data = os.path.join(out, "returned", "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    with torch.no_grad():
        outputs = returning(ids)
    save(ids.numpy(), os.path.join(data, "input_0.pb"))
    for i, tensor in enumerate(outputs):
        save(tensor.numpy(), os.path.join(data, "output_%d.pb" % i))
    np.save(os.path.join(out, "tokens.npy"),
            np.random.default_rng(0).integers(0, em.VOCAB, 4096, dtype=np.int64))


if __name__ == "__main__":
    main(sys.argv[1])
