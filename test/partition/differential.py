#!/usr/bin/env python3
"""Differential test of partitioning: every plan of a grid, on the committed
GPT-2, BERT and LLaMA exports and on random transformers, computes what the
unpartitioned model computes.

For each model the unpartitioned program runs once on the CPU; then every plan
in the grid (tp in {1,2,4}, Megatron SP on/off, Ulysses in {1,2,4}, ring in
{1,2,4}, dp in {1,2}, at most 8 devices) is partitioned and run on that many
simulated devices (`weft run --devices N --plan-spec ...`). Outputs must agree
to 1e-5 relative to the output's magnitude: max|partitioned - reference| <=
1e-5 * max|reference| (f32). A plan that the model's shapes do not allow
(heads by tp x ulysses, KV heads, the sequence by cp x ulysses) is refused by
weft with a located 'plan:' error; it is counted as skipped, not checked. The
bytes each rank sent are checked against the count expected from the
partitioned program's collectives (see check_bytes).
"""
import argparse
import concurrent.futures
import itertools
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import random_transformer  # noqa: E402

TOLERANCE = 1e-5


def plans():
    grid = []
    for tp, sp, ulysses, cp, dp in itertools.product([1, 2, 4], [0, 1], [1, 2, 4],
                                                      [1, 2, 4], [1, 2]):
        if sp and tp == 1:
            continue
        if tp * ulysses * cp * dp > 8 or tp * ulysses * cp * dp == 1:
            continue
        spec = "dp=%d,tp=%d,sp=%d,ulysses=%d,cp=%d" % (dp, tp, sp, ulysses, cp)
        grid.append((spec, tp * ulysses * cp * dp))
    return grid


def run(weft, model, inputs, out, extra):
    command = [weft, "run", model, "-o", out, "--output-format", "npy"] + extra
    for path in inputs:
        command += ["-i", path]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def cost_model_bytes(weft, model, spec, batch, tmp, with_loss=False, causal=True):
    """What the planner's cost model predicts one rank sends in forward for
    this plan (weft plan --evaluate), converted to what the partitioned f32
    program sends. The differences are explained and computed here:
    - the cost model's activations are bf16, the test programs f32: x2;
    - causal ring attention also passes each K/V block's positions (i64)
      around the ring, (cp - 1) x seq/(cp*ulysses) x 8 bytes per layer;
    - the output layer differs: the test models return logits, so the program
      gathers them over tp (and, with SP, gathers the final norm's sequence
      shards first), where the cost model's training step keeps them
      vocabulary-parallel for the cross-entropy. Those bytes are computed from
      the shapes."""
    degrees = dict(item.split("=") for item in spec.split(","))
    dp, tp, sp = int(degrees["dp"]), int(degrees["tp"]), int(degrees["sp"])
    ulysses, cp = int(degrees["ulysses"]), int(degrees["cp"])
    out = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", model + spec) + ".plan.json")
    proc = subprocess.run(
        [weft, "plan", model, "--cluster", "a100-80g:8x1", "--global-batch", str(batch),
         "--evaluate", "%s,pp=1,mbs=%d" % (spec, batch // dp), "--json", out],
        capture_output=True, text=True)
    if proc.returncode != 0:
        if "2*cp*ulysses" in proc.stderr:
            # The cost model's ring is load-balanced (two mirrored chunks per
            # rank) and needs the sequence to divide by 2 x cp x ulysses.
            return None, "outside"
        return None, "weft plan --evaluate failed: " + proc.stderr[-300:]
    import json
    data = json.load(open(out))
    plan, spec_model = data["plans"][0], data["model"]
    layers, hidden, vocab = int(spec_model["layers"]), int(spec_model["hidden"]), int(spec_model["vocab"])
    seq = int(data["training"]["seq_len"])
    b, s_local = batch // dp, seq // (cp * ulysses)
    expected = 2 * (layers * int(plan["forward_comm_bytes_layer"]) +
                    int(plan["forward_comm_bytes_embedding"]))
    if causal:
        expected += layers * (cp - 1) * (seq // cp) * 8
    if tp > 1:
        if sp:
            expected += (tp - 1) * b * (s_local // tp) * hidden * 4
        expected += (tp - 1) * b * s_local * (vocab // tp) * 4
    if with_loss:
        # Vocabulary-parallel cross-entropy: max, sum of exponentials and the
        # label's logit, each an all-reduce over tp of one f32 per position;
        # a mean over positions split across ranks sums two scalars.
        if tp > 1:
            expected += 3 * (2 * (tp - 1) * b * s_local * 4 // tp)
        n = dp * cp * ulysses
        if n > 1:
            expected += 2 * (2 * (n - 1) * 4 // n)
    return expected, None


def check_pair(weft, name, model, inputs, reference, spec, devices, tmp,
               lm_head=True, causal=True):
    out = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name + spec))
    proc = run(weft, model, inputs, out,
               ["--devices", str(devices), "--plan-spec", spec,
                "--dump-partitioned", out + ".mlir"])
    if proc.returncode != 0:
        if "plan:" in proc.stderr:
            return "skipped", proc.stderr.strip().splitlines()[-1]
        return "failed", proc.stderr[-800:]
    worst = 0.0
    for index, ref in enumerate(reference):
        got = np.load(os.path.join(out, "output_%d.npy" % index))
        if got.shape != ref.shape:
            return "failed", "output %d has shape %s, expected %s" % (index, got.shape, ref.shape)
        scale = max(float(np.abs(ref).max()), 1e-30)
        worst = max(worst, float(np.abs(got - ref).max()) / scale)
    if worst > TOLERANCE:
        return "failed", "relative error %.3g > %g" % (worst, TOLERANCE)
    bytes_error = check_bytes(proc.stderr, out + ".mlir")
    if bytes_error:
        return "failed", bytes_error
    if not lm_head:
        return "ok", "%.2g" % worst
    counted = int(re.search(r"bytes sent per rank: (\d+)", proc.stderr).group(1))
    batch = int(np.load(inputs[0]).shape[0]) if inputs[0].endswith(".npy") else None
    if batch is None:
        import onnx.numpy_helper  # noqa: F401  (only for .pb inputs)
        from onnx import TensorProto
        tensor = TensorProto()
        tensor.ParseFromString(open(inputs[0], "rb").read())
        batch = tensor.dims[0]
    expected, error = cost_model_bytes(weft, model, spec, batch, tmp,
                                       with_loss=len(reference) > 1,
                                       causal=causal)
    if error == "outside":
        return "ok", "%.2g" % worst
    if error:
        return "failed", error
    if counted != expected:
        return "failed", "the communicator counted %d bytes per rank, the cost model predicts %d" % (counted, expected)
    return "ok+cost", "%.2g" % worst


COLLECTIVE = re.compile(
    r"weft\.(all_reduce|all_gather|reduce_scatter|all_to_all|collective_permute|all_slice)"
    r" (?:\w+ )?%\S+ over @\w+ \[([^\]]*)\].*: tensor<([0-9x]*)x?(f32|i64|i1|f16|bf16|i32|f64)>")
BYTES = {"f32": 4, "i64": 8, "i1": 1, "f16": 2, "bf16": 2, "i32": 4, "f64": 8}


def check_bytes(stderr, partitioned):
    """The communicator's bytes per rank equal NCCL's ring counts for the
    collectives in the partitioned program, the formulas the cost model uses:
    all_reduce 2(n-1)/n S, all_gather (n-1) S_in, reduce_scatter and
    all_to_all (n-1)/n S_in, collective_permute S, all_slice 0."""
    counted = re.search(r"bytes sent per rank:((?: \d+)+)", stderr)
    if not counted:
        return "no byte counts in weft's output"
    counted = [int(x) for x in counted.group(1).split()]
    mesh = re.search(r"weft\.mesh @mesh\(([^)]*)\)", open(partitioned).read())
    sizes = dict((k.strip(), int(v)) for k, v in
                 (item.split("=") for item in mesh.group(1).split(",")))
    expected = 0
    for line in open(partitioned):
        m = COLLECTIVE.search(line)
        if not m:
            continue
        kind, axes, shape, dtype = m.groups()
        n = 1
        for axis in re.findall(r'"(\w+)"', axes):
            n *= sizes[axis]
        size = BYTES[dtype]
        for d in filter(None, shape.split("x")):
            size *= int(d)
        expected += {"all_reduce": 2 * (n - 1) * size // n,
                     "all_gather": (n - 1) * size,
                     "reduce_scatter": (n - 1) * size // n,
                     "all_to_all": (n - 1) * size // n,
                     "collective_permute": size,
                     "all_slice": 0}[kind]
    # Every rank runs the same program: each sends the same bytes.
    if any(c != expected for c in counted):
        return "bytes sent %s, the program's collectives say %d per rank" % (counted, expected)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--random", type=int, default=10, help="random transformers")
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args()
    models = []
    for name in ["gpt2", "bert", "llama"]:
        data = os.path.join(ROOT, "test", "models", name, "test_data_set_0")
        inputs = sorted(os.path.join(data, f) for f in os.listdir(data)
                        if f.startswith("input_"))
        models.append((name, os.path.join(ROOT, "test", "models", name,
                                          name + "-opset17.onnx"), inputs))
    failures, counts = [], {"ok": 0, "ok+cost": 0, "skipped": 0, "failed": 0}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(options.random):
            directory = os.path.join(tmp, "random%d" % seed)
            config, text, tensors = random_transformer.generate(1000 + seed)
            os.makedirs(directory)
            with open(os.path.join(directory, "model.mlir"), "w") as f:
                f.write(text)
            paths = []
            for index, tensor in enumerate(tensors):
                paths.append(os.path.join(directory, "input_%d.npy" % index))
                np.save(paths[-1], tensor)
            models.append(("random%d(%s)" % (seed, ",".join(
                "%s=%s" % (k, v) for k, v in config.items() if k != "seed")),
                os.path.join(directory, "model.mlir"), paths))
        jobs = []
        with concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
            for name, model, inputs in models:
                ref_dir = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name) + "_ref")
                proc = run(options.weft, model, inputs, ref_dir, [])
                if proc.returncode != 0:
                    print("FAIL: %s does not run unpartitioned:\n%s" % (name, proc.stderr))
                    return 1
                reference = [np.load(os.path.join(ref_dir, f))
                             for f in sorted(os.listdir(ref_dir))]
                # BERT returns hidden states: no output layer to compare.
                lm_head = not name.startswith("bert")
                causal = "causal=False" not in name
                for spec, devices in plans():
                    jobs.append((name, spec, pool.submit(
                        check_pair, options.weft, name, model, inputs, reference,
                        spec, devices, tmp, lm_head, causal)))
            for name, spec, job in jobs:
                status, detail = job.result()
                counts[status] += 1
                if status == "failed":
                    failures.append("%s %s: %s" % (name, spec, detail))
    for failure in failures[:20]:
        print("FAIL:", failure)
    ok = counts["ok"] + counts["ok+cost"]
    print("checked %d (model, plan) pairs on %d models: %d equal to the "
          "unpartitioned result within %g relative, with the bytes each rank "
          "sent equal to the program's collectives' ring counts; of these, %d "
          "also equal to the cost model's prediction (weft plan --evaluate; "
          "the %d others are BERT, whose output is not a vocabulary); %d "
          "failed; %d skipped (the plan does not divide the model's shapes)" %
          (ok + counts["failed"], len(models), ok, TOLERANCE, counts["ok+cost"],
           counts["ok"], counts["failed"], counts["skipped"]))
    return 1 if failures or ok < 200 else 0


if __name__ == "__main__":
    sys.exit(main())
