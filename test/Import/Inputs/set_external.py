"""set_external.py IN OUT KEY VALUE: copies the ONNX model IN to OUT with the
external-data entry KEY (location, offset, length) of every externally stored
initializer set to VALUE, without reading the data."""
import sys

import onnx

source, target, key, value = sys.argv[1:5]
model = onnx.load(source, load_external_data=False)
for tensor in model.graph.initializer:
    for entry in tensor.external_data:
        if entry.key == key:
            entry.value = value
onnx.save(model, target)
