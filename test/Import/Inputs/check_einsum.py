"""Inputs and numpy's reference for onnx-einsum-clip-dropout.onnxtxt.

    check_einsum.py gen DIR        writes DIR/x.npy, DIR/y.npy
    check_einsum.py check DIR OUT  compares OUT/output_{0,1}.npy to numpy
"""
import os
import sys

import numpy as np

mode, directory = sys.argv[1], sys.argv[2]
if mode == "gen":
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(os.path.join(directory, "x.npy"), rng.standard_normal((2, 3, 4, 8)).astype(np.float32))
    np.save(os.path.join(directory, "y.npy"), rng.standard_normal((2, 3, 5, 8)).astype(np.float32))
    sys.exit(0)
x = np.load(os.path.join(directory, "x.npy")).astype(np.float64)
y = np.load(os.path.join(directory, "y.npy")).astype(np.float64)
c = np.clip(np.einsum("bhqd,bhkd->bhqk", x, y), -2.0, 2.0)
expected = [np.einsum("bhqk,bhkd->bqhd", c, y), np.einsum("...ij,jk", c, np.eye(5))]
for i, want in enumerate(expected):
    got = np.load(os.path.join(sys.argv[3], "output_%d.npy" % i))
    if got.shape != want.shape or not np.allclose(got, want, rtol=1e-5, atol=1e-5):
        print("output %d differs: shape %s vs %s, max error %s" % (
            i, got.shape, want.shape,
            np.abs(got - want).max() if got.shape == want.shape else "-"))
        sys.exit(1)
print("einsum, clip and dropout match numpy")
