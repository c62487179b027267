"""What torch's training gives for a module that a test exports: the losses of
AdamW steps on weft train's windows, which `weft train`'s must equal."""
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

# weft train's windows, as test/training/against_torch.py reads them.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "training"))
from against_torch import windows  # noqa: E402


def write_adamw_losses(make_model, data, steps, lr, batch, seq, vocab, out):
    """`steps` AdamW steps (no weight decay) of make_model(), built after
    torch.manual_seed(0) as the exported one was, on weft train's windows of
    the tokens in `data` (batch x seq each, next-token cross-entropy over
    `vocab` classes): the losses, one per line, in OUT/torch_losses.txt."""
    torch.manual_seed(0)
    model = make_model().train()
    tokens = np.load(data)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0,
                            foreach=False)
    losses = []
    for step in range(steps):
        opt.zero_grad()
        ids, labels = windows(tokens, step, batch, seq)
        loss = F.cross_entropy(model(ids).reshape(-1, vocab), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    with open(os.path.join(out, "torch_losses.txt"), "w") as f:
        f.write("\n".join("%.9g" % x for x in losses) + "\n")
