#!/usr/bin/python3
"""Compressed collectives end to end (issue 17): a plan's compression policy
(`compress=dp:int8,tp:bf16`) gives each collective a codec, the communicator
sends what the codec encodes, and the counts, the cost model and training
agree with what the codecs promise.

Forward, on the committed GPT-2, LLaMA and BERT exports and random
transformers, for each codec on each parallel dimension (tp, Megatron SP,
Ulysses, ring) and the hybrid policy:
- the bytes each rank sent equal the ring counts of the partitioned program's
  collectives with their codecs (bf16 two bytes a float, fp8 and int8 one byte
  a float plus a 4-byte scale per 128), and equal the bytes the same program
  without a policy sent with each compressed collective's bytes recounted under
  its codec (the factor each codec promises, applied collective by
  collective);
- the output stays within the codec's error of the unpartitioned run;
- the bytes of a bf16 run with the loss equal the cost model's forward
  figures for the plan (`weft plan --evaluate`), whose rank program carries
  the same codecs.

Pipelines (pp's codec on the stages' sends of activations and gradients):
the committed exports with a dynamic batch at pp=2, m=2 and random
transformers of 4 layers at pp=2, m=1 under pp:bf16, pp:int8 and pp:fp8,
and pp=2, tp=2 under pp:bf16,tp:int8: outputs within the codec's bound; with
sends only, each rank's bytes equal its activation sends in the schedule
times the cost model's forward_p2p_bytes under the policy; with tp, adding
pp's codec saves exactly those sends' bytes.

Training: the bundled GPT-2 trains 200 AdamW steps on 4 simulated devices
(dp=2 x tp=2) on tokens of a random bigram chain, uncompressed, with the
hybrid policy (dp:int8,tp:bf16), with fp8 everywhere, and with top-k (1 %)
gradients with and without error feedback; the mean loss of the last 20
steps with the hybrid policy is within 2 % of the uncompressed run's
(printed side by side), top-k with error feedback ends closer to it than
without, and the bytes of step 1 equal the training program's collectives'
counts. Pipelined (pp=2 x tp=2, m=2), pp:bf16,tp:bf16 ends within 2 % of
the uncompressed pipeline and saves exactly the schedule's sends at the cost
model's figures against tp:bf16 alone.

Needs Debian's python3-numpy; run by ctest as `compression`.
"""

import argparse
import csv
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(HERE, "..", "partition"))
from differential import (COLLECTIVE, CODEC, check_bytes, check_identity,  # noqa: E402
                          collective_bytes, committed_model, mesh_sizes, predicted_p2p,
                          random_model, run, schedule_steps)
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export_models as em  # noqa: E402
import random_transformer  # noqa: E402

# What a codec may cost a forward pass (largest error over the output's
# largest magnitude); int8 and fp8 are per-block scaled.
BOUNDS = {"bf16": 0.03, "int8": 0.06, "fp8": 0.15}
SPECS = [
    ("dp=2,tp=2", "tp:bf16", 4),
    ("dp=2,tp=2", "tp:int8", 4),
    ("dp=2,tp=2", "tp:fp8", 4),
    ("dp=1,tp=2,sp=1", "tp:int8", 2),
    ("dp=1,ulysses=2", "ulysses:fp8", 2),
    ("dp=1,cp=2", "cp:bf16", 2),
    ("dp=2,cp=2", "cp:int8", 4),
    ("dp=2,tp=2", "dp:int8,tp:bf16", 4),
    # AxoNN's 3-D grid: its activations' all-reduces over gx and gy and its
    # weights' gathers over gz, each axis with its own codec.
    ("dp=1,tp3d=2x2x2", "gx:int8,gy:bf16,gz:bf16", 8),
]


# Pipeline sends (pp's codec): every activation a stage sends on and every
# gradient it sends back. (plan, policy, devices); m is 1 on models whose
# loss is one scalar per batch.
PIPELINE_SPECS = [
    ("pp=2,m=2", "pp:bf16", 2),
    ("pp=2,m=2", "pp:int8", 2),
    ("pp=2,m=2", "pp:fp8", 2),
    ("pp=2,m=2,tp=2", "pp:bf16,tp:int8", 4),
]


def counted_bytes(stderr):
    found = re.search(r"bytes sent per rank(?: in step 1)?:((?: \d+)+)", stderr)
    return [int(x) for x in found.group(1).split()] if found else None


def recounted(partitioned, policy):
    """The bytes per rank of an uncompressed program's collectives, each
    recounted with the codec `policy` gives its axes (the mildest of its
    axes' codecs; float collectives only; the loss's pinned statistics
    stay)."""
    codecs = dict(item.split(":") for item in policy.split(","))
    order = ["none", "bf16", "fp8", "int8"]
    text = open(partitioned).read()
    sizes = mesh_sizes(text)
    total = 0
    for line in text.splitlines():
        found = COLLECTIVE.search(line)
        if not found:
            continue
        axes = re.findall(r'"(\w+)"', found.group(2))
        codec = min((codecs.get(axis, "none") for axis in axes), key=order.index)
        if CODEC.search(line) or found.group(5) not in ("f32", "bf16", "f16") \
                or codec == "none":
            total += collective_bytes(line, sizes)
        else:
            total += collective_bytes(line.replace(" : tensor", " codec %s : tensor" % codec, 1),
                                      sizes)
    return total


def output_error(out, reference, policy):
    """The largest error of the outputs in `out` over the reference's largest
    magnitude, and an error message if it exceeds the bound of the policy's
    harshest codec (else None)."""
    worst = 0.0
    for index, want in enumerate(reference):
        got = np.load(os.path.join(out, "output_%d.npy" % index))
        worst = max(worst, float(np.abs(got - want).max()) /
                    max(float(np.abs(want).max()), 1e-30))
    bound = max(BOUNDS[c.split(":")[1]] for c in policy.split(","))
    if worst > bound:
        return worst, "output error %.3g exceeds the codec's bound %g" % (worst, bound)
    return worst, None


def forward(weft, name, model, inputs, tmp, lm_head):
    """Runs every (plan, policy) of SPECS on one model; returns (rows,
    failures)."""
    rows, failures = [], []
    base = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name))
    ref = run(weft, model, inputs, base + ".ref", [])
    if ref.returncode != 0:
        return rows, ["%s: does not run: %s" % (name, ref.stderr[-300:])]
    reference = [np.load(os.path.join(base + ".ref", f))
                 for f in sorted(os.listdir(base + ".ref"))]
    for plan, policy, devices in SPECS:
        spec = "%s,compress=%s" % (plan, policy)
        out = base + re.sub(r"[^a-z0-9]+", "_", spec)
        plain = run(weft, model, inputs, out + ".plain",
                    ["--devices", str(devices), "--plan-spec", plan,
                     "--dump-partitioned", out + ".plain.mlir"])
        if plain.returncode != 0:
            if "plan:" in plain.stderr:
                continue  # the plan does not divide this model
            failures.append("%s %s: %s" % (name, plan, plain.stderr[-300:]))
            continue
        ran = run(weft, model, inputs, out, ["--devices", str(devices), "--plan-spec", spec,
                                             "--dump-partitioned", out + ".mlir"])
        if ran.returncode != 0:
            failures.append("%s %s: %s" % (name, spec, ran.stderr[-300:]))
            continue
        error = check_bytes(ran.stderr, out + ".mlir")
        counted, before = counted_bytes(ran.stderr), counted_bytes(plain.stderr)
        expected = recounted(out + ".plain.mlir", policy)
        if not error and counted[0] != expected:
            error = ("sent %d bytes per rank; the uncompressed program's collectives "
                     "recounted under the policy say %d" % (counted[0], expected))
        worst, bound_error = output_error(out, reference, policy)
        error = error or bound_error
        if not error:
            error = check_identity(weft, model, inputs, spec, devices, tmp, lm_head,
                                   emitted=False)
            if error:
                error = "cost model: " + error
        rows.append((name, spec, before[0], counted[0], worst))
        if error:
            failures.append("%s %s: %s" % (name, spec, error))
    return rows, failures


def pipeline_sends(weft, spec, p, kinds=(">a",)):
    """Per pipeline rank, the sends of `kinds` in the schedule of the plan's
    pipeline (`weft plan --print-schedule`; ">a" activations, which is all
    a forward run sends, ">g" gradients), or (None, why)."""
    ranks, _, error = schedule_steps(weft, spec, p)
    if error:
        return None, error
    return [sum(step.startswith(kinds) for step in ranks[r])
            for r in range(p)], None


def pipeline_forward(weft, name, model, inputs, dims, m, tmp):
    """The pipeline's codec on one model: outputs within the codec's bound of
    the unpartitioned run; with pipeline sends only, the bytes each rank sent
    equal its sends in the schedule times the cost model's forward_p2p_bytes
    under the policy (and twice its bf16 figure without one, the f32
    program); with tp too, adding pp's codec to the policy saves exactly the
    sends' bytes it promises (tp's collectives are the same). `m`
    micro-batches: the model is imported at the micro-batch. Returns (rows,
    failures)."""
    rows, failures = [], []
    base = os.path.join(tmp, "pp_" + re.sub(r"[^a-z0-9]+", "_", name))
    ref = run(weft, model, inputs, base + ".ref", [])
    if ref.returncode != 0:
        return rows, ["%s: does not run: %s" % (name, ref.stderr[-300:])]
    reference = [np.load(os.path.join(base + ".ref", f))
                 for f in sorted(os.listdir(base + ".ref"))]
    hidden, heads, seq, batch = dims
    for plan, policy, devices in PIPELINE_SPECS:
        plan = plan.replace("m=2", "m=%d" % m)
        spec = "%s,compress=%s" % (plan, policy)
        out = base + re.sub(r"[^a-z0-9]+", "_", spec)
        others = ",".join(c for c in policy.split(",") if not c.startswith("pp:"))
        before_spec = plan + (",compress=" + others if others else "")
        before = run(weft, model, inputs, out + ".before",
                     ["--devices", str(devices), "--plan-spec", before_spec])
        if before.returncode != 0:
            if "plan:" in before.stderr:
                continue  # the plan does not divide this model
            failures.append("%s %s: %s" % (name, before_spec, before.stderr[-300:]))
            continue
        ran = run(weft, model, inputs, out, ["--devices", str(devices), "--plan-spec", spec])
        if ran.returncode != 0:
            failures.append("%s %s: %s" % (name, spec, ran.stderr[-300:]))
            continue
        counted, plain = counted_bytes(ran.stderr), counted_bytes(before.stderr)
        sends, error = pipeline_sends(weft, plan, 2)
        encoded = plain_bf16 = None
        if not error:
            encoded, error = predicted_p2p(weft, spec, (hidden, heads, seq, batch, m), devices)
        if not error:
            plain_bf16, error = predicted_p2p(weft, plan, (hidden, heads, seq, batch, m),
                                              devices)
        if not error:
            per_rank = devices // 2
            stage = [sends[r // per_rank] for r in range(devices)]
            if devices == 2:
                want = [n * encoded for n in stage]
                want_plain = [n * 2 * plain_bf16 for n in stage]
                if counted != want or plain != want_plain:
                    error = ("sent %s bytes per rank (%s without the codec); the schedule's "
                             "sends at the cost model's forward_p2p_bytes (%d encoded, %d "
                             "bf16) say %s (%s)" % (counted, plain, encoded, plain_bf16,
                                                    want, want_plain))
            else:
                saved = [b - a for a, b in zip(counted, plain)]
                want = [n * (2 * plain_bf16 - encoded) for n in stage]
                if saved != want:
                    error = ("pp's codec saved %s bytes per rank; the schedule's sends at "
                             "the cost model's forward_p2p_bytes (%d encoded, %d bf16) "
                             "say %s" % (saved, encoded, plain_bf16, want))
        worst, bound_error = output_error(out, reference, policy)
        error = error or bound_error
        rows.append((name, spec, plain[0], counted[0], worst))
        if error:
            failures.append("%s %s: %s" % (name, spec, error))
    return rows, failures


def bigram_tokens(path, count=40000, vocab=64, seed=0):
    rng = np.random.default_rng(seed)
    successors = rng.integers(0, vocab, size=(vocab, 4))
    tokens = [0]
    for choice in rng.integers(0, 4, size=count):
        tokens.append(successors[tokens[-1], choice])
    np.save(path, np.array(tokens, dtype=np.uint16))


def train_run(weft, model, tokens, steps, spec, log, extra=()):
    """`weft train` for `steps` steps under `spec` on 4 simulated devices:
    (losses, bytes per rank in step 1, stderr), or (None, None, why)."""
    proc = subprocess.run(
        [weft, "train", model, "--data", tokens, "--steps", str(steps), "--lr", "3e-3",
         "--warmup", "10", "--min-lr", "3e-4", "--plan-spec", spec, "--devices", "4",
         "--log", log] + list(extra),
        capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        return None, None, "weft train %s: %s" % (spec, proc.stderr[-400:])
    with open(log) as f:
        losses = [float(row["loss"]) for row in csv.DictReader(f)]
    return losses, counted_bytes(proc.stderr), proc.stderr


def loss_within_2_percent(rows, base_key, compressed_key, what, against, failures):
    """The compressed run's final loss (mean of the last 20 steps) within 2 %
    of the uncompressed run's."""
    if base_key not in rows or compressed_key not in rows:
        return
    base = np.mean(rows[base_key][1][-20:])
    compressed = np.mean(rows[compressed_key][1][-20:])
    if abs(compressed - base) > 0.02 * base:
        failures.append("%s %.4f is not within 2%% of %s %.4f"
                        % (what, compressed, against, base))


def train(weft, tmp, steps):
    """200 steps of the bundled GPT-2 under each policy; returns (rows,
    failures)."""
    model = os.path.join(ROOT, "test", "models", "gpt2", "gpt2-opset17.onnx")
    tokens = os.path.join(tmp, "bigram.npy")
    bigram_tokens(tokens)
    rows, failures = {}, []
    for label, policy in [("none", ""), ("hybrid", "dp:int8,tp:bf16"),
                          ("fp8", "dp:fp8,tp:fp8"), ("topk", "dp:topk"),
                          ("topk_noef", "dp:topk_noef")]:
        spec = "dp=2,tp=2" + (",compress=" + policy if policy else "")
        log = os.path.join(tmp, "train_%s.csv" % label)
        dump = os.path.join(tmp, "train_%s.mlir" % label)
        losses, counted, error = train_run(weft, model, tokens, steps, spec, log,
                                           ["--dump-partitioned", dump])
        if losses is None:
            failures.append(error)
            continue
        sizes = mesh_sizes(open(dump).read())
        expected = sum(collective_bytes(line, sizes) for line in open(dump))
        if counted is None or any(c != expected for c in counted):
            failures.append("weft train %s: step 1 sent %s bytes per rank, the training "
                            "program's collectives say %d" % (spec, counted, expected))
        rows[label] = (policy or "none", losses, counted[0] if counted else 0)
    loss_within_2_percent(rows, "none", "hybrid", "the hybrid policy's loss",
                          "the uncompressed run's", failures)
    # Pipelined: pp=2 x tp=2, the stages' sends (activations and their
    # gradients) under pp's codec. Adding pp:bf16 to tp:bf16 must save
    # exactly the schedule's sends at the cost model's figures, and the
    # loss stay within 2 % of the uncompressed pipeline's.
    plan = "pp=2,tp=2,m=2"
    piped = {}
    for label, policy in [("pp none", ""), ("pp tp", "tp:bf16"),
                          ("pp hybrid", "pp:bf16,tp:bf16")]:
        spec = plan + (",compress=" + policy if policy else "")
        log = os.path.join(tmp, "train_%s.csv" % label.replace(" ", "_"))
        losses, counted, error = train_run(weft, model, tokens, steps, spec, log)
        if losses is None:
            failures.append(error)
            continue
        piped[label] = (policy or "none", losses, counted[0] if counted else 0)
        rows[label] = piped[label]
        if label == "pp hybrid" and "pp tp" in piped and counted:
            _, _, before = piped["pp tp"]
            sends, error = pipeline_sends(weft, plan, 2, (">a", ">g"))
            dims = (em.HIDDEN, em.HEADS, em.SEQ, 2 * em.BATCH, 2)
            encoded = plain = None
            if not error:
                encoded, error = predicted_p2p(weft, spec, dims, 4)
            if not error:
                plain, error = predicted_p2p(weft, plan, dims, 4)
            if error:
                failures.append("weft train %s: %s" % (spec, error))
            else:
                sends = sends[0]
                want = sends * (2 * plain - encoded)
                if before - counted[0] != want:
                    failures.append(
                        "weft train %s: pp:bf16 saved %d bytes on rank 0 in step 1; its %d "
                        "sends at the cost model's forward_p2p_bytes (%d encoded, %d bf16) "
                        "say %d" % (spec, before - counted[0], sends, encoded, plain, want))
    loss_within_2_percent(piped, "pp none", "pp hybrid",
                          "pipelined: the pp:bf16,tp:bf16 loss",
                          "the uncompressed pipeline's", failures)
    if {"none", "topk", "topk_noef"} <= set(rows):
        base = np.mean(rows["none"][1][-20:])
        feedback = abs(np.mean(rows["topk"][1][-20:]) - base)
        plain = abs(np.mean(rows["topk_noef"][1][-20:]) - base)
        if not feedback < plain:
            failures.append("top-k with error feedback ends %.4f from the uncompressed "
                            "loss, without it %.4f: error feedback should diverge less"
                            % (feedback, plain))
    return rows, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--random", type=int, default=3, help="random transformers")
    parser.add_argument("--steps", type=int, default=200)
    options = parser.parse_args()
    models = [(name,) + committed_model(name) for name in ["gpt2", "llama", "bert"]]
    rows, failures = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in range(options.random):
            _, model, paths = random_model(tmp, seed, 2000 + seed)
            models.append(("random%d" % seed, model, paths))
        for name, model, inputs in models:
            got, failed = forward(options.weft, name, model, inputs, tmp,
                                  not name.startswith("bert"))
            rows += got
            failures += failed
        # Pipelines: the committed exports with a dynamic batch (imported at
        # the micro-batch; m = 2) and random transformers of 4 layers (their
        # batch fixed in the IR, and a mean loss one scalar per batch: m = 1).
        staged = [(name + "-dynamic",) + committed_model(name, "-dynamic") +
                  ((em.HIDDEN, em.HEADS, em.SEQ, em.BATCH), 2)
                  for name in ["gpt2", "llama", "bert"]]
        for seed in range(options.random):
            config, text, tensors = random_transformer.generate(2000 + seed, 4)
            directory = os.path.join(tmp, "staged%d" % seed)
            os.makedirs(directory)
            open(os.path.join(directory, "model.mlir"), "w").write(text)
            paths = []
            for position, tensor in enumerate(tensors):
                paths.append(os.path.join(directory, "input_%d.npy" % position))
                np.save(paths[-1], tensor)
            staged.append(("random%d-4layers" % seed, os.path.join(directory, "model.mlir"),
                           paths, (config["hidden"], config["heads"], config["seq"],
                                   config["batch"]), 1))
        for name, model, inputs, dims, m in staged:
            got, failed = pipeline_forward(options.weft, name, model, inputs, dims, m, tmp)
            rows += got
            failures += failed
        trained, failed = train(options.weft, tmp, options.steps)
        failures += failed
    print("%-10s %-36s %10s %10s %7s %9s" % ("model", "plan", "bytes", "encoded", "ratio",
                                            "error"))
    for name, spec, before, after, worst in rows:
        print("%-10s %-36s %10d %10d %7.3f %9.2e" % (name, spec, before, after,
                                                    after / max(before, 1), worst))
    if trained:
        print("\nweft train gpt2-opset17.onnx, dp=2 x tp=2, %d steps (mean of the last 20):"
              % options.steps)
        print("%-18s %12s %12s %14s" % ("policy", "final loss", "vs none", "bytes step 1"))
        base = np.mean(trained["none"][1][-20:]) if "none" in trained else float("nan")
        for label in ["none", "hybrid", "fp8", "topk", "topk_noef"]:
            if label in trained:
                policy, losses, sent = trained[label]
                final = np.mean(losses[-20:])
                print("%-18s %12.4f %+11.2f%% %14d" % (policy, final,
                                                       100 * (final - base) / base, sent))
        print("\nweft train gpt2-opset17.onnx, pp=2 x tp=2, m=2, %d steps (mean of the "
              "last 20; bytes of rank 0):" % options.steps)
        base = np.mean(trained["pp none"][1][-20:]) if "pp none" in trained else float("nan")
        for label in ["pp none", "pp tp", "pp hybrid"]:
            if label in trained:
                policy, losses, sent = trained[label]
                final = np.mean(losses[-20:])
                print("%-18s %12.4f %+11.2f%% %14d" % (policy, final,
                                                       100 * (final - base) / base, sent))
    for failure in failures[:20]:
        print("FAIL:", failure)
    print("checked %d (model, compressed plan) pairs: the bytes each rank sent equal "
          "the program's codec-encoded ring counts, the uncompressed program's "
          "recounted under the policy and the cost model's (pipelines: the schedule's "
          "sends at the cost model's forward_p2p_bytes), and outputs within "
          "each codec's bound; trained %d policies; %d failed" %
          (len(rows), len(trained), len(failures)))
    return 1 if failures or len(rows) < 20 else 0


if __name__ == "__main__":
    sys.exit(main())
