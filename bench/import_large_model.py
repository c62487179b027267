#!/usr/bin/python3
"""Benchmark: importing a model with 4 GiB of external weights for planning.

Generates a transformer-shaped ONNX model (8 layers of two 8192x8192 f32 linears,
4 GiB of weights, over the 2 GB that the acceptance asks for) whose weights live in an external file, written sparse so that it
costs no disk, then times `weft import --no-weights --stats` and reports its wall
time and peak resident memory. Planning must not read weights: the acceptance bound
is under 2 s and 300 MB. For scale it also imports the same graph with 1/64 of the
hidden size; the ratio shows the cost does not grow with the weight bytes.

    /usr/bin/python3 bench/import_large_model.py --weft build/bin/weft
"""

import argparse
import os
import resource
import subprocess
import tempfile
import time

import onnx
from onnx import TensorProto, helper


def build(directory, hidden, layers, seq=128):
    nodes, inits = [], []
    data_file = "weights.bin"
    offset, x = 0, "x"
    for layer in range(layers):
        for which in ("fc1", "fc2"):
            name = "layers.%d.%s.weight" % (layer, which)
            tensor = TensorProto()
            tensor.name = name
            tensor.data_type = TensorProto.FLOAT
            tensor.dims.extend([hidden, hidden])
            tensor.data_location = TensorProto.EXTERNAL
            length = hidden * hidden * 4
            for key, value in (("location", data_file), ("offset", str(offset)),
                               ("length", str(length))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            offset += length
            inits.append(tensor)
            out = "%s_%d" % (which, layer)
            nodes.append(helper.make_node("MatMul", [x, name], [out],
                                          name="/layers.%d/%s/MatMul" % (layer, which)))
            x = out
            if which == "fc1":
                nodes.append(helper.make_node("Relu", [x], [x + "_relu"],
                                              name="/layers.%d/Relu" % layer))
                x = x + "_relu"
    graph = helper.make_graph(
        nodes, "large",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", seq, hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", seq, hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = os.path.join(directory, "model.onnx")
    with open(path, "wb") as f:
        f.write(model.SerializeToString())
    with open(os.path.join(directory, data_file), "wb") as f:
        f.truncate(offset)  # sparse: no bytes written
    return path, offset


def measure(weft, path):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    result = subprocess.run([weft, "import", path, "--no-weights", "--batch-size", "1",
                             "--stats"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if result.returncode != 0:
        raise SystemExit("weft import failed:\n" + result.stderr)
    return elapsed, max(peak_kb, before) / 1024.0, result.stdout.strip().splitlines()[-1]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as big_dir, tempfile.TemporaryDirectory() as small_dir:
        big, big_bytes = build(big_dir, hidden=8192, layers=8)
        small, small_bytes = build(small_dir, hidden=128, layers=8)
        measure(args.weft, small)  # warm the page cache for the binary
        small_time = min(measure(args.weft, small)[0] for _ in range(args.repeat))
        runs = [measure(args.weft, big) for _ in range(args.repeat)]
        big_time = min(r[0] for r in runs)
        peak = max(r[1] for r in runs)
        print("model: 8 layers x 2 linears, %.2f GiB of external f32 weights (%s)"
              % (big_bytes / 2**30, runs[0][2].strip()))
        print("weft import --no-weights: %.3f s (best of %d), peak RSS %.0f MB"
              % (big_time, args.repeat, peak))
        print("same graph with %.1f MiB of weights: %.3f s; ratio %.2fx"
              % (small_bytes / 2**20, small_time, big_time / small_time))
        ok = big_time < 2.0 and peak < 300
        print("bound (< 2 s, < 300 MB): %s" % ("met" if ok else "NOT MET"))
        return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
