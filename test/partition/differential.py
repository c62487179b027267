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
partitioned program's collectives (see check_bytes). Then the program the
planner costs for that plan must be the program weft runs, and its bytes the
ones the plan reports (see check_identity).
"""
import argparse
import concurrent.futures
import itertools
import json
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
    # AxoNN's 3-D tensor parallelism: each axis alone, each pair, the cube,
    # 4-way on one axis, and with dp.
    for dp, gx, gy, gz in [(1, 2, 1, 1), (1, 1, 2, 1), (1, 1, 1, 2), (1, 2, 2, 1),
                           (1, 2, 1, 2), (1, 1, 2, 2), (1, 2, 2, 2), (1, 4, 2, 1),
                           (2, 2, 2, 1), (2, 1, 4, 1)]:
        grid.append(("dp=%d,tp3d=%dx%dx%d" % (dp, gx, gy, gz), dp * gx * gy * gz))
    return grid


def run(weft, model, inputs, out, extra):
    command = [weft, "run", model, "-o", out, "--output-format", "npy"] + extra
    for path in inputs:
        command += ["-i", path]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


SSA = re.compile(r"%[A-Za-z0-9_#]+")
SEGMENT = re.compile(r"weft\.layer \"")


def normalize(lines):
    """One segment of a rank program, without what may differ between the
    costed and the emitted program: weights (the planner's are shapes only),
    parameter names and layer indices (the costed program is one layer), and
    SSA names (renumbered in order of appearance)."""
    names = {}
    out = []
    for line in lines:
        if "weft.parameter" in line:
            line = re.sub(r" = dense<.*$", "", line)
        line = re.sub(r'weft\.parameter "[^"]*"', 'weft.parameter "_"', line)
        line = re.sub(r" index \d+ ", " index _ ", line)
        line = SSA.sub(lambda m: names.setdefault(m.group(0), "%%v%d" % len(names)), line)
        out.append(line.strip())
    return out


def segments(text):
    """A rank program's function as (prefix, [layers], suffix): the lines
    before the first top-level weft.layer, each layer's lines, and the lines
    after the last (anything between two layers is a segment of its own)."""
    lines = text.splitlines()
    start = next(i for i, l in enumerate(lines) if l.lstrip().startswith("module"))
    end = next(i for i in range(start, len(lines)) if lines[i] == "}")
    lines = lines[start:end + 1]
    parts, current, depth, layers = [], [], 0, []
    for line in lines:
        if depth == 0 and SEGMENT.search(line) and "{" in line:
            parts.append(current)
            current, depth = [line], 1
            continue
        if depth > 0:
            current.append(line)
            depth += line.count("{") - line.count("}")
            if depth == 0:
                layers.append(current)
                current = []
            continue
        current.append(line)
    parts.append(current)
    return parts[0], layers, [p for p in parts[1:] if p]


def check_identity(weft, model, inputs, spec, devices, tmp, lm_head, emitted=True):
    """The program the planner costs is the program weft emits: for this plan
    (one micro-batch of the whole batch, bf16, with a training step's loss:
    on the vocabulary's logits, or without an output layer (`lm_head`
    false, BERT) on the hidden states, as weft train appends it),
    `weft plan --evaluate --print-rank-ir`
    prints one layer of the rank program it measured, with its kernels
    (fusions), and `weft compile --target cuda --dump-partitioned` writes
    the program the CUDA emitter prints, before its layers are inlined. Each
    of its layers must equal the costed layer, and what comes before and
    after the layers must be equal, up to weights, parameter names and SSA
    names. The bytes each rank sent when `weft run` ran the same partition
    must equal the plan's per-layer, embedding and output-layer figures:
    layers x layer + embedding + head. Without `emitted`, only the bytes are
    checked (the CUDA target does not emit compressed collectives)."""
    degrees = dict(item.split("=") for item in spec.split(",") if "=" in item)
    dp = int(degrees.get("dp", 1))
    base = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", model + spec))
    tokens = input_array(inputs[0])
    batch, seq = tokens.shape[0], tokens.shape[1]
    proc = subprocess.run(
        [weft, "plan", model, "--cluster", "a100-80g:8x1", "--global-batch", str(batch),
         "--seq-len", str(seq),
         "--evaluate", "%s,pp=1,mbs=%d" % (spec, batch // dp), "--print-rank-ir",
         "--json", base + ".plan.json"], capture_output=True, text=True)
    if proc.returncode != 0:
        return "weft plan --evaluate failed: " + proc.stderr[-400:]
    costed = proc.stdout
    import json
    data = json.load(open(base + ".plan.json"))
    plan = data["plans"][0]
    classes = int(data["model"]["vocab" if lm_head else "hidden"])
    extra = ["--dtype", "bf16", "--devices", str(devices), "--plan-spec", spec,
             "--dump-partitioned", base + ".ran.mlir", "--loss"]
    paths = list(inputs)
    # A model that computes its own loss (the random transformers' with_loss:
    # logits and cross_entropy against a labels input) gives it up to the
    # step's, with its labels input (-weft-lift-model-loss), as the planner
    # costs it.
    if model.endswith(".mlir") and re.search(r"weft\.cross_entropy .* reduction mean",
                                             open(model).read()):
        paths = paths[:-1]
    paths.append(base + ".labels.npy")
    np.save(paths[-1], (tokens.astype(np.int64) + 1) % classes)
    ran = run(weft, model, paths, base + ".run", extra)
    if ran.returncode != 0:
        return "weft run --dtype bf16 failed: " + ran.stderr[-400:]
    compile_args = [weft, "compile", model, "--target", "cuda", "--dtype", "bf16",
                    "--plan-spec", spec, "--batch-size", str(batch),
                    "--seq-len", str(seq), "-o", base + ".cuda",
                    "--dump-partitioned", base + ".emitted.mlir", "--loss"]
    if not emitted:
        return check_predicted_bytes(ran, plan, len(segments(open(base + ".ran.mlir").read())[1]))
    proc = subprocess.run(compile_args, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return "weft compile --target cuda failed: " + proc.stderr[-400:]
    prefix, layers, rest = segments(costed)
    run_prefix, run_layers, run_rest = segments(open(base + ".emitted.mlir").read())
    if len(layers) != 1:
        return "the costed program has %d layers, expected 1" % len(layers)
    expected = [normalize(prefix)] + [normalize(layers[0])] * len(run_layers) + \
        [normalize(p) for p in rest]
    got = [normalize(run_prefix)] + [normalize(l) for l in run_layers] + \
        [normalize(p) for p in run_rest]
    if len(got) != len(expected):
        return "the emitted program has %d segments, the costed one %d" % (len(got), len(expected))
    for index, (a, b) in enumerate(zip(expected, got)):
        if a != b:
            diff = next(i for i in range(min(len(a), len(b)) + 1)
                        if i >= min(len(a), len(b)) or a[i] != b[i])
            return ("segment %d differs at line %d: costed '%s', emitted '%s'" %
                    (index, diff, a[diff] if diff < len(a) else "<end>",
                     b[diff] if diff < len(b) else "<end>"))
    return check_predicted_bytes(ran, plan, len(run_layers))


def check_predicted_bytes(ran, plan, layers):
    """The bytes per rank `weft run` counted equal the plan's figures:
    layers x layer + embedding + head; None or the error."""
    predicted = (layers * int(plan["forward_comm_bytes_layer"]) +
                 int(plan["forward_comm_bytes_embedding"]) +
                 int(plan["forward_comm_bytes_head"]))
    counted = re.search(r"bytes sent per rank: (\d+)", ran.stderr)
    counted = int(counted.group(1)) if counted else 0
    if counted != predicted:
        return ("the communicator counted %d bytes per rank, the plan predicts %d "
                "(%d layers x %s + %s + %s)" %
                (counted, predicted, layers, plan["forward_comm_bytes_layer"],
                 plan["forward_comm_bytes_embedding"], plan["forward_comm_bytes_head"]))
    return None


def run_and_compare(weft, model, inputs, out, extra, reference, tolerance):
    """Runs `weft run` with `extra` options and compares its outputs with
    `reference`: (None, proc, worst relative error) when they agree within
    `tolerance`, else ((status, detail), proc, worst) with status "skipped"
    (the plan does not divide the model) or "failed"."""
    proc = run(weft, model, inputs, out, extra)
    if proc.returncode != 0:
        if "plan:" in proc.stderr:
            return ("skipped", proc.stderr.strip().splitlines()[-1]), proc, 0.0
        return ("failed", proc.stderr[-800:]), proc, 0.0
    worst = 0.0
    for index, ref in enumerate(reference):
        got = np.load(os.path.join(out, "output_%d.npy" % index))
        if got.shape != ref.shape:
            return ("failed", "output %d has shape %s, expected %s" % (
                index, got.shape, ref.shape)), proc, worst
        scale = max(float(np.abs(ref).max()), 1e-30)
        worst = max(worst, float(np.abs(got - ref).max()) / scale)
    if worst > tolerance:
        return ("failed", "relative error %.3g > %g" % (worst, tolerance)), proc, worst
    return None, proc, worst


def check_pair(weft, name, model, inputs, reference, spec, devices, tmp,
               lm_head=True):
    out = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name + spec))
    verdict, proc, worst = run_and_compare(
        weft, model, inputs, out,
        ["--devices", str(devices), "--plan-spec", spec,
         "--dump-partitioned", out + ".mlir"], reference, TOLERANCE)
    if verdict:
        return verdict
    bytes_error = check_bytes(proc.stderr, out + ".mlir")
    if bytes_error:
        return "failed", bytes_error
    error = check_identity(weft, model, inputs, spec, devices, tmp, lm_head)
    if error:
        return "failed", "costed != run: " + error
    return "ok", "%.2g" % worst


def input_array(path):
    if path.endswith(".npy"):
        return np.load(path)
    from onnx import TensorProto, numpy_helper
    tensor = TensorProto()
    tensor.ParseFromString(open(path, "rb").read())
    return numpy_helper.to_array(tensor)


COLLECTIVE = re.compile(
    r"weft\.(all_reduce|all_gather|reduce_scatter|all_to_all|collective_permute|all_slice)"
    r" (?:\w+ )?%\S+ over @\w+ \[([^\]]*)\](.*): tensor<([0-9x]*)x?(f32|i64|i1|f16|bf16|i32|f64)>")
CODEC = re.compile(r" codec (none|bf16|fp8|int8|topk_noef|topk)\b")
BYTES = {"f32": 4, "i64": 8, "i1": 1, "f16": 2, "bf16": 2, "i32": 4, "f64": 8}


def print_schedule(weft, spec, p):
    """`weft plan --print-schedule`'s output for the plan's pipeline (pp, v,
    m, schedule) on a GPT the planner builds, or (None, why)."""
    keep = [item for item in spec.split(",")
            if item.split("=")[0] in ("pp", "v", "m", "schedule")]
    if "zeropp" in spec:
        keep.append("zero=3")  # the planner's ZeroPP shards parameters
    m = int(re.search(r"m=(\d+)", spec).group(1))
    proc = subprocess.run(
        [weft, "plan", "--model", "gpt", "--layers", "8", "--hidden", "64",
         "--heads", "4", "--cluster", "a100-80g:%dx1" % p, "--global-batch", str(m),
         "--seq-len", "128", "--evaluate", ",".join(keep + ["mbs=1"]),
         "--allow-oom", "--print-schedule"],
        capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None, proc.stderr[-400:]
    return proc.stdout, None


def schedule_steps(weft, spec, p):
    """Per pipeline rank (below p), its steps in print_schedule's output,
    with that output: (ranks, stdout, None), or (None, None, why)."""
    stdout, error = print_schedule(weft, spec, p)
    if error:
        return None, None, error
    ranks = {}
    for line in stdout.splitlines():
        found = re.match(r"\s*rank (\d+): (.*)", line)
        if found and int(found.group(1)) < p:
            ranks[int(found.group(1))] = found.group(2).split()
    if len(ranks) != p:
        return None, None, "no schedule in weft plan's output:\n" + stdout[-600:]
    return ranks, stdout, None


def predicted_p2p(weft, spec, dims, devices):
    """The cost model's forward_p2p_bytes (bf16) for the plan on a GPT of the
    model's hidden size, heads and sequence (`weft plan --evaluate --json`),
    or an error."""
    hidden, heads, seq, batch, m = dims
    dp = int(re.search(r"dp=(\d+)", spec).group(1)) if "dp=" in spec else 1
    keep = [item for item in spec.split(",") if not item.startswith("stages=")]
    if "zeropp" in spec and "zero=" not in spec:
        keep.append("zero=3")  # the planner's ZeroPP shards parameters
    proc = subprocess.run(
        [weft, "plan", "--model", "gpt", "--layers", "8", "--hidden", str(hidden),
         "--heads", str(heads), "--cluster", "a100-80g:%dx1" % devices,
         "--global-batch", str(batch), "--seq-len", str(seq), "--evaluate",
         ",".join(keep + ["mbs=%d" % (batch // m // dp)]), "--allow-oom", "--json", "-"],
        capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None, "weft plan --evaluate failed: " + proc.stderr[-400:]
    plan = json.JSONDecoder().raw_decode(proc.stdout)[0]["plans"][0]
    return int(plan.get("forward_p2p_bytes", 0)), None


def ring_bytes(kind, n, size):
    """Bytes one rank sends in a collective of `kind` over `n` ranks on a
    tensor of `size` bytes, as NCCL's ring algorithms send them."""
    return {"all_reduce": 2 * (n - 1) * size // n,
            "all_gather": (n - 1) * size,
            "reduce_scatter": (n - 1) * size // n,
            "all_to_all": (n - 1) * size // n,
            "collective_permute": size,
            "all_slice": 0}[kind]


def tensor_bytes(shape, dtype, codec="none"):
    """Bytes of a tensor<AxBx...xT> from its shape text and element type, as
    `codec` sends it: bf16 2 bytes per float, fp8 and int8 one byte per
    float plus a 4-byte scale per block of 128, top-k an index and a value
    (8 bytes) for each of the largest 1 %."""
    count = 1
    for d in filter(None, shape.split("x")):
        count *= int(d)
    if dtype in ("f32", "f16", "bf16", "f64") and codec != "none":
        if codec == "bf16":
            return count * min(BYTES[dtype], 2)
        if codec.startswith("topk"):
            return 8 * ((count + 99) // 100)
        return count + 4 * ((count + 127) // 128)
    return count * BYTES[dtype]


def mesh_sizes(text):
    """Axis sizes of the partitioned module's weft.mesh."""
    mesh = re.search(r"weft\.mesh @mesh\(([^)]*)\)", text)
    return dict((k.strip(), int(v)) for k, v in
                (item.split("=") for item in mesh.group(1).split(",")))


def collective_bytes(line, sizes):
    """Bytes one rank sends in the collective on `line` (0 if none)."""
    found = COLLECTIVE.search(line)
    if not found:
        return 0
    kind, axes, attributes, shape, dtype = found.groups()
    codec = CODEC.search(attributes)
    n = 1
    for axis in re.findall(r'"(\w+)"', axes):
        n *= sizes[axis]
    # A sub-group of the axis (a tied weight's holders): its members.
    members = re.search(r" members \[([^\]]*)\]", attributes)
    if members:
        n = len(members.group(1).split(","))
    codec = codec.group(1) if codec else "none"
    if codec.startswith("topk"):
        # A top-k all-reduce gathers every rank's kept elements.
        return (n - 1) * tensor_bytes(shape, dtype, codec)
    return ring_bytes(kind, n, tensor_bytes(shape, dtype, codec))


def check_bytes(stderr, partitioned):
    """The communicator's bytes per rank equal NCCL's ring counts for the
    collectives in the partitioned program, the formulas the cost model uses:
    all_reduce 2(n-1)/n S, all_gather (n-1) S_in, reduce_scatter and
    all_to_all (n-1)/n S_in, collective_permute S, all_slice 0."""
    counted = re.search(r"bytes sent per rank:((?: \d+)+)", stderr)
    if not counted:
        return "no byte counts in weft's output"
    counted = [int(x) for x in counted.group(1).split()]
    sizes = mesh_sizes(open(partitioned).read())
    expected = sum(collective_bytes(line, sizes) for line in open(partitioned))
    # Every rank runs the same program: each sends the same bytes.
    if any(c != expected for c in counted):
        return "bytes sent %s, the program's collectives say %d per rank" % (counted, expected)
    return None


def committed_model(name, suffix=""):
    """A committed export (test/models/NAME/NAME-opset17SUFFIX.onnx) and its
    test inputs: (path, [input paths])."""
    data = os.path.join(ROOT, "test", "models", name, "test_data_set_0")
    inputs = sorted(os.path.join(data, f) for f in os.listdir(data)
                    if f.startswith("input_"))
    return (os.path.join(ROOT, "test", "models", name,
                         name + "-opset17" + suffix + ".onnx"), inputs)


def committed_kv_heads(name):
    """KV heads of a committed export, as test/models/export_models.py
    writes it (LLaMA groups its heads; GPT-2 and BERT do not)."""
    with open(os.path.join(ROOT, "test", "models", "export_models.py")) as f:
        text = f.read()
    heads = int(re.search(r"^HIDDEN, HEADS, .*= \d+, (\d+),", text, re.M).group(1))
    kv = int(re.search(r"^KV_HEADS = (\d+)", text, re.M).group(1))
    return kv if name.startswith("llama") else heads


def head_ways(spec):
    """tp x ulysses of a plan spec: the ways it splits heads."""
    degrees = dict(kv.split("=") for kv in spec.split(","))
    return int(degrees.get("tp", 1)) * int(degrees.get("ulysses", 1))


def random_model(tmp, index, seed):
    """A random transformer (random_transformer.generate(seed)) written to
    tmp/random<index>/ with its inputs: (config, model path, [input paths])."""
    directory = os.path.join(tmp, "random%d" % index)
    config, text, tensors = random_transformer.generate(seed)
    os.makedirs(directory)
    with open(os.path.join(directory, "model.mlir"), "w") as f:
        f.write(text)
    paths = []
    for position, tensor in enumerate(tensors):
        paths.append(os.path.join(directory, "input_%d.npy" % position))
        np.save(paths[-1], tensor)
    return config, os.path.join(directory, "model.mlir"), paths


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--random", type=int, default=10, help="random transformers")
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args()
    models = []
    # The static exports, and the dynamic ones (batch and sequence axes
    # symbolic, as torch.onnx.export with dynamic_axes writes them), whose
    # programs the planner builds at its own batch.
    for name, suffix in itertools.product(["gpt2", "bert", "llama"],
                                          ["", "-dynamic"]):
        models.append((name + suffix,) + committed_model(name, suffix))
    kv_heads = {name: committed_kv_heads(name) for name, _, _ in models}
    failures, counts = [], {"ok": 0, "skipped": 0, "failed": 0}
    repeated = 0
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(options.random):
            config, model, paths = random_model(tmp, seed, 1000 + seed)
            models.append(("random%d(%s)" % (seed, ",".join(
                "%s=%s" % (k, v) for k, v in config.items() if k != "seed")),
                model, paths))
            kv_heads[models[-1][0]] = config["kv_heads"]
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
                # BERT returns hidden states: no output layer; its loss is
                # over them.
                lm_head = not name.startswith("bert")
                for spec, devices in plans():
                    jobs.append((name, spec, pool.submit(
                        check_pair, options.weft, name, model, inputs, reference,
                        spec, devices, tmp, lm_head)))
            for name, spec, job in jobs:
                status, detail = job.result()
                counts[status] += 1
                # Fewer KV heads than tp x ulysses: each is repeated
                # (-weft-apply-plan), and the split gives a rank its group's.
                if status == "ok" and head_ways(spec) > kv_heads[name]:
                    repeated += 1
                if status == "failed":
                    failures.append("%s %s: %s" % (name, spec, detail))
    for failure in failures[:20]:
        print("FAIL:", failure)
    ok = counts["ok"]
    print("checked %d (model, plan) pairs on %d models: %d equal to the "
          "unpartitioned result within %g relative, with the bytes each rank "
          "sent equal to the program's collectives' ring counts, and the bf16 "
          "training-step program weft compiles for CUDA equal to the one the "
          "planner costs "
          "(weft plan --evaluate --print-rank-ir), its bytes per rank equal to "
          "the plan's; %d of them with fewer KV heads than tp x ulysses "
          "(repeated); %d failed; %d skipped (the plan does not divide the "
          "model's shapes)" %
          (ok + counts["failed"], len(models), ok, TOLERANCE, repeated,
           counts["failed"], counts["skipped"]))
    return 1 if failures or ok < 200 or repeated < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
