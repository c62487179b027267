"""Compares a per-token loss with numpy's cross-entropy of reference logits
(an ONNX TensorProto file) against labels (.npy)."""
import sys

import numpy as np
import onnx
from onnx import numpy_helper

tensor = onnx.TensorProto()
tensor.ParseFromString(open(sys.argv[1], "rb").read())
logits = numpy_helper.to_array(tensor).astype(np.float64)
labels = np.load(sys.argv[2])
loss = np.load(sys.argv[3])
shifted = logits - logits.max(axis=-1, keepdims=True)
log_probs = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
expected = -np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
difference = float(np.abs(loss - expected).max())
if difference > 1e-5 * max(1.0, float(np.abs(expected).max())):
    print("loss differs from numpy by %g" % difference)
    sys.exit(1)
print("per-token loss of %d positions within 1e-5 of numpy's cross-entropy of "
      "the reference logits" % expected.size)
