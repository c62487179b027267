#!/usr/bin/python3
"""Compares two safetensors checkpoints tensor by tensor.

    compare-safetensors.py A B [--atol=X]

Prints "same N" where both have the same N tensors with the same dtypes,
shapes and bytes; with --atol, "close N" where the F32 tensors whose bytes
differ are within X of each other; otherwise "differ" with the count of
tensors that differ (and "names differ" or "dtypes differ" where those do).
"""
import json
import os
import sys

import numpy as np


def tensors(directory):
    index = os.path.join(directory, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) \
        if os.path.exists(index) else ["model.safetensors"]
    out = {}
    for file in files:
        raw = open(os.path.join(directory, file), "rb").read()
        n = int.from_bytes(raw[:8], "little")
        for name, info in json.loads(raw[8:8 + n]).items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            out[name] = (info["dtype"], tuple(info["shape"]), raw[8 + n + begin:8 + n + end])
    return out


args = [x for x in sys.argv[1:] if not x.startswith("--")]
atol = next((float(x.split("=", 1)[1]) for x in sys.argv[1:] if x.startswith("--atol=")), None)
a, b = tensors(args[0]), tensors(args[1])
if set(a) != set(b):
    print("names differ", sorted(set(a) ^ set(b))[:4])
elif any(a[k][:2] != b[k][:2] for k in a):
    print("dtypes differ")
else:
    changed = [k for k in a if a[k][2] != b[k][2]]
    close = atol is not None and all(
        a[k][0] == "F32" and np.abs(np.frombuffer(a[k][2], np.float32) -
                                    np.frombuffer(b[k][2], np.float32)).max() <= atol
        for k in changed)
    print("same %d" % len(a) if not changed else
          "close %d" % len(a) if close else "differ %d of %d" % (len(changed), len(a)))
