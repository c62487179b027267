#!/usr/bin/env python3
"""Runs ONNX's backend node tests for the transformer op set through Weft.

For every node test of the ops below (Debian's libonnx-testdata), imports the
model and runs it on the CPU with `weft run --check` (ONNX's default tolerances,
rtol 1e-3 and atol 1e-7), once as exported and once with every input shape
made dynamic and bound from the input files. The allow-list
(onnx-node-tests.txt) records which pass and why the others do not. The run
fails when a listed pass stops passing or when a test is missing from the
list; --update rewrites the list from the results.
"""

import argparse
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

# The transformer op set, by the names of their node tests.
OPS = ["matmul", "gemm", "add", "sub", "mul", "div", "pow", "sqrt", "neg", "abs", "exp",
       "erf", "tanh", "sin", "cos", "sigmoid", "reduce_mean", "reduce_sum", "reduce_max",
       "softmax", "logsoftmax", "layer_normalization", "gather", "reshape",
       "transpose", "split", "slice", "concat", "unsqueeze", "squeeze", "shape",
       "constant", "constantofshape", "cast", "castlike", "expand", "range", "equal", "less",
       "where", "tril", "triu", "identity", "clip", "einsum", "dropout", "cumsum",
       # A model's own loss (nanoGPT's, Hugging Face's: docs/training.md), and
       # the Pad of Hugging Face's shifted labels.
       "sce", "nllloss", "constant_pad", "edge_pad", "reflect_pad",
       # Convolutions (a ViT's patch embedding, Whisper's stem).
       "conv", "basic_conv",
       # Slice assignments (Hugging Face's causal-mask update), Tensor.repeat,
       # and the reductions weft composes (F.normalize's L2, logsumexp).
       "scatternd", "tile", "reduce_min", "reduce_l1", "reduce_l2", "reduce_sum_square",
       "reduce_log_sum", "reduce_log_sum_exp",
       # A reward model's last-token index (ArgMax, then % the length).
       "argmax", "argmin", "mod",
       # Activations and rounding weft composes (Softplus: Mamba's step size;
       # HardSwish, Mish: vision blocks).
       "softplus", "softsign", "leakyrelu", "prelu", "elu", "celu", "selu",
       "thresholdedrelu", "hardsigmoid", "hardswish", "mish", "sign", "floor", "ceil",
       "round", "isnan", "isinf", "sum", "mean",
       # Elementwise ops of masks and activations (Max and Min variadic).
       "max", "min", "greater", "log", "reciprocal", "relu", "not", "and", "or",
       "xor", "flatten", "size"]
# Tests whose names start like one of the ops but test another op.
OTHER_OPS = re.compile(r"^test_(split_to_sequence)")


def selected(name):
    if OTHER_OPS.match(name):
        return False
    return any(re.match(r"^test_%s(_|$)" % op, name) for op in OPS)


# Ops whose shape arguments (starts, split sizes, k, axes, bounds) the node
# tests pass as graph inputs; exported models hold them as constants, so these
# tests run with --fold-small-inputs (onnx-mlir's "inputs made constant").
SHAPE_ARGUMENT_OPS = re.compile(r"^test_(slice|split|tril|triu|reduce_sum|range|cumsum|"
                                r"constant_pad|edge_pad|reflect_pad|scatternd|tile)(_|$)")


def run_one(weft, test_dir, dynamic):
    sets = sorted(d for d in os.listdir(test_dir) if d.startswith("test_data_set_"))
    if not sets:
        return "FAIL", "no test data"
    for data in sets:
        cmd = [weft, "run", os.path.join(test_dir, "model.onnx"),
               "--data-dir", os.path.join(test_dir, data), "--check"]
        if dynamic:
            cmd.append("--dynamic-inputs")
        if SHAPE_ARGUMENT_OPS.match(os.path.basename(test_dir)):
            cmd.append("--fold-small-inputs")
        try:
            result = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        except subprocess.TimeoutExpired:
            return "FAIL", "timed out"
        if result.returncode < 0:
            return "CRASH", "signal %d" % -result.returncode
        if result.returncode != 0:
            lines = (result.stderr + result.stdout).strip().splitlines()
            reason = next((l for l in lines if "error" in l or "MISMATCH" in l),
                          lines[-1] if lines else "exit %d" % result.returncode)
            reason = re.sub(r"^.*?/model\.onnx: ", "", reason)
            return "FAIL", reason
    return "PASS", ""


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--data", default="/usr/share/libonnx-testdata/data/node")
    parser.add_argument("--list", default=os.path.join(os.path.dirname(__file__),
                                                       "onnx-node-tests.txt"))
    parser.add_argument("--update", action="store_true")
    parser.add_argument("-j", type=int, default=2)
    args = parser.parse_args()

    if not os.path.isdir(args.data):
        print("ONNX node tests not found at %s (apt-get install libonnx-testdata)"
              % args.data)
        return 1
    tests = sorted(t for t in os.listdir(args.data) if selected(t))
    jobs = [(t, dynamic) for t in tests for dynamic in (False, True)]
    with ThreadPoolExecutor(args.j) as pool:
        outcomes = list(pool.map(
            lambda job: run_one(args.weft, os.path.join(args.data, job[0]), job[1]),
            jobs))
    results = {}
    for (test, dynamic), outcome in zip(jobs, outcomes):
        results[(test, dynamic)] = outcome

    expected, reasons = {}, {}
    if os.path.exists(args.list):
        for line in open(args.list):
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            name, status = line.split()[:2]
            expected[name] = status
            reasons[name] = line.split(None, 2)[2] if len(line.split()) > 2 else ""

    def key(test, dynamic):
        return test + ("[dynamic]" if dynamic else "")

    if args.update:
        with open(args.list, "w") as f:
            f.write("# ONNX node tests of the transformer op set: name, status, reason.\n"
                    "# Written by run_onnx_node_tests.py --update; a PASS that stops\n"
                    "# passing fails CI. [dynamic]: input shapes bound from the files.\n")
            for (test, dynamic), (status, reason) in sorted(results.items()):
                name = key(test, dynamic)
                # A failure keeps the reason written for it by hand.
                if status != "PASS" and expected.get(name) == status:
                    reason = reasons.get(name) or reason
                f.write("%s %s%s\n" % (name, status, " " + reason if reason else ""))

    regressions, unlisted, crashes = [], [], []
    for (test, dynamic), (status, reason) in sorted(results.items()):
        name = key(test, dynamic)
        if status == "CRASH":
            crashes.append("%s: %s" % (name, reason))
        if name not in expected:
            unlisted.append("%s %s %s" % (name, status, reason))
        elif expected[name] == "PASS" and status != "PASS":
            regressions.append("%s: %s" % (name, reason))

    for dynamic in (False, True):
        passed = sum(1 for (t, d), (s, _) in results.items() if d == dynamic and s == "PASS")
        total = len(tests)
        print("%s: %d of %d node tests pass (%.1f%%)"
              % ("dynamic inputs bound from files" if dynamic else "as exported",
                 passed, total, 100.0 * passed / max(total, 1)))
    for line in crashes:
        print("CRASH " + line)
    for line in regressions:
        print("REGRESSION " + line)
    if not args.update:
        for line in unlisted:
            print("NOT IN LIST " + line)
    failed = crashes or regressions or (unlisted and not args.update)
    if unlisted and not args.update:
        print("run with --update to record new tests in %s" % args.list)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
