#!/usr/bin/python3
"""Compares weft run's logits with transformers' from the same checkpoint.

    compare-checkpoint.py HF.npy RUN_DIR...

Prints "hf" and, for each RUN_DIR (weft run's output directory), "equal"
where its output_0.npy is within 1e-5 of HF.npy's largest logit (the f32
program against a float64 reference) and "DIFFER d" otherwise.
"""
import os
import sys

import numpy as np

want = np.load(sys.argv[1])
scale = float(np.abs(want).max())
words = ["hf"]
for directory in sys.argv[2:]:
    got = np.load(os.path.join(directory, "output_0.npy"))
    d = float(np.abs(got - want).max())
    words.append("equal" if got.shape == want.shape and d <= 1e-5 * scale else "DIFFER %g" % d)
print(" ".join(words))
