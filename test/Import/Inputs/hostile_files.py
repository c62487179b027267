"""hostile_files.py DIR: writes the malformed .npy and .pb files of the
readers' hardening test (each once crashed, hung or was misread)."""
import struct
import sys

import onnx

out = sys.argv[1]


def npy(name, header, data=b"", version=b"\x01\x00"):
    text = header.encode()
    total = 10 + len(text) + 1
    text += b" " * ((64 - total % 64) % 64) + b"\n"
    with open(f"{out}/{name}.npy", "wb") as f:
        f.write(b"\x93NUMPY" + version + struct.pack("<H", len(text)) + text + data)


def header(shape, descr="<f4", order="False"):
    return f"{{'descr': '{descr}', 'fortran_order': {order}, 'shape': {shape}, }}"


# Products that wrap around int64 (3 * 6148914691236517206 = 2 mod 2^64).
npy("wrap", header("(3, 6148914691236517206)"), b"\0" * 8)
# A count whose byte size wraps (used to throw std::length_error).
npy("length", header("(4611686018427387905,)"), b"\0" * 8)
# What the regex reader misread.
npy("negative", header("(-1, 3)"), b"\0" * 12)
npy("fraction", header("(2.5, 3)"), b"\0" * 120)
npy("one-no-comma", header("(4)"), b"\0" * 16)
npy("trailing", header("(2, 3)"), b"\0" * 28)
npy("short", header("(2, 3)"), b"\0" * 20)
npy("extra-key", header("(2, 3)")[:-1] + "'pickle': 1, }", b"\0" * 24)
npy("repeated-key", "{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", b"\0" * 4)
npy("garbage-after", header("(2, 3)") + " x", b"\0" * 24)
npy("version", header("(2, 3)"), b"\0" * 24, version=b"\x01\x07")
npy("good", header("(2, 4)"), struct.pack("<8f", *range(8)))
npy("good-scalar", header("()"), struct.pack("<f", 7.0))

# A TensorProto that declares 2^33 floats and holds none (8 bytes in all).
tensor = onnx.TensorProto()
tensor.data_type = onnx.TensorProto.FLOAT
tensor.dims.extend([2**33])
with open(f"{out}/huge.pb", "wb") as f:
    f.write(tensor.SerializeToString())
tensor.ClearField("dims")
tensor.dims.extend([3, 6148914691236517206])
tensor.float_data.extend([1.0, 2.0])
with open(f"{out}/wrap.pb", "wb") as f:
    f.write(tensor.SerializeToString())
