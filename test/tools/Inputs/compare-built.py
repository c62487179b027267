#!/usr/bin/python3
"""Compares a built model's logits from weft run with PyTorch's.

    compare-built.py TORCH.npy OTHER.npy RUN_DIR...

Prints "torch" and, for each RUN_DIR (weft run's output directory), "equal"
where its output_0.npy is within 1e-5 of TORCH.npy's largest logit and
"DIFFER d" otherwise; then "other differs" where the first run differs from
OTHER.npy (the reference without the feature under test) by more than 1e-3
of it, "other SAME d" where it does not.
"""
import os
import sys

import numpy as np

want = np.load(sys.argv[1])
other = np.load(sys.argv[2])
scale = float(np.abs(want).max())
runs = [np.load(os.path.join(d, "output_0.npy")) for d in sys.argv[3:]]
words = ["torch"]
for got in runs:
    d = float(np.abs(got - want).max())
    words.append("equal" if d <= 1e-5 * scale else "DIFFER %g" % d)
d = float(np.abs(runs[0] - other).max())
words += ["other", "differs" if d > 1e-3 * scale else "SAME %g" % d]
print(" ".join(words))
