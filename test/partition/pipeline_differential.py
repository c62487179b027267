#!/usr/bin/env python3
"""Differential test of pipeline stages: plans with pp in {2, 4}, each
schedule (GPipe, 1F1B, interleaved with v = 2 or 3, ZB-H1, ZeroPP), uneven
stage boundaries and chunks (chunks with no layer: only the embedding or the
output layer) and micro-batches, combined with tp, Megatron SP, dp, ring (cp)
and Ulysses up to 8 simulated devices, on the committed GPT-2, BERT and LLaMA
exports and on random transformers with more layers than stages, compute what
the unpartitioned model computes (max|pipelined - reference| <= 1e-5 *
max|reference|).

For each pair it also checks what ran against what was planned:
- the bytes each rank sent equal its stages' collectives (NCCL ring counts)
  plus the activations it sent to the next stage, per micro-batch;
- on the random transformers, what a stage sends per micro-batch equals the
  cost model's forward_p2p_bytes for the plan (`weft plan --evaluate
  --json` on a GPT of the same hidden size, heads and sequence; bf16 there,
  f32 here);
- the order of the steps each rank ran (weft run --trace) is exactly the
  forward part of the schedule `weft plan --print-schedule` prints for the
  plan (the step list the cost model simulates).
"""
import argparse
import concurrent.futures
import json
import os
import re
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import random_transformer  # noqa: E402
from differential import (collective_bytes, mesh_sizes, predicted_p2p,  # noqa: E402
                          run, run_and_compare, schedule_steps,
                          tensor_bytes)

TOLERANCE = 1e-5
SCHEDULES = [("gpipe", 1), ("1f1b", 1), ("interleaved", 2), ("zb-h1", 1),
             ("zeropp", 1)]
INNER = ["", "tp=2", "tp=2,sp=1", "dp=2", "cp=2", "ulysses=2", "dp=2,tp=2",
         "tp=2,cp=2"]


def sent_bytes(function):
    """The bytes of a stage function's results marked weft.sent_to (local
    types), from its text after `func.func @`."""
    header = function.split("{\n", 1)[0]
    results = header.split("->", 1)[1] if "->" in header else ""
    return sum(tensor_bytes(shape, dtype) for shape, dtype in re.findall(
        r"tensor<([0-9x]*?)x?(f32|i64|i1|f16|bf16|i32|f64)> \{[^}]*weft\.sent_to",
        results))


def expected_bytes(partitioned, p, m):
    """Per pipeline rank: every stage function's collectives and sent values
    (local types), once per micro-batch."""
    text = open(partitioned).read()
    sizes = mesh_sizes(text)
    per_rank = [0] * p
    for chunk in text.split("func.func @")[1:]:
        stage = re.match(r"\w+_stage(\d+)\(", chunk)
        if not stage:
            continue
        rank = int(stage.group(1)) % p
        total = sent_bytes(chunk)
        total += sum(collective_bytes(line, sizes) for line in chunk.splitlines())
        per_rank[rank] += total * m
    return per_rank


def sent_per_step(partitioned):
    """The bytes stage 0's ranks send in one send step (its values marked
    weft.sent_to, local types)."""
    text = open(partitioned).read()
    for chunk in text.split("func.func @")[1:]:
        if re.match(r"\w+_stage0\(", chunk):
            return sent_bytes(chunk)
    return None


def planned_order(weft, spec, p):
    """The forward steps of each rank in `weft plan --print-schedule` for the
    plan's pipeline (pp, v, m, schedule) on a model the planner builds."""
    ranks, _, error = schedule_steps(weft, spec, p)
    if error:
        return None, error
    return {r: [s for s in steps if s[0] == "F" or s[:2] in (">a", "<a")]
            for r, steps in ranks.items()}, None


def check_pair(weft, name, model, inputs, reference, spec, p, m, devices, tmp,
               dims=None):
    out = os.path.join(tmp, re.sub(r"[^a-z0-9]+", "_", name + spec))
    verdict, proc, worst = run_and_compare(
        weft, model, inputs, out,
        ["--devices", str(devices), "--plan-spec", spec,
         "--dump-partitioned", out + ".mlir", "--trace", out + ".json"],
        reference, TOLERANCE)
    if verdict:
        return verdict
    counted = re.search(r"bytes sent per rank:((?: \d+)+)", proc.stderr)
    if not counted:
        return "failed", "no byte counts in weft's output"
    counted = [int(x) for x in counted.group(1).split()]
    per_stage = expected_bytes(out + ".mlir", p, m)
    expected = [per_stage[r * p // devices] for r in range(devices)]
    if counted != expected:
        return "failed", "bytes sent %s, the stages' programs say %s" % (
            counted, expected)
    if dims:
        # The cost model's point-to-point figure is the residual stream's
        # block in bf16: the f32 program sends twice its bytes per send.
        predicted, error = predicted_p2p(weft, spec, dims + (m,), devices)
        if error:
            return "failed", error
        sent = sent_per_step(out + ".mlir")
        if sent != 2 * predicted:
            return "failed", ("stage 0 sends %s bytes per micro-batch, the cost "
                              "model's forward_p2p_bytes is %d (bf16; %d in f32)" %
                              (sent, predicted, 2 * predicted))
    order, error = planned_order(weft, spec, p)
    if error:
        return "failed", error
    trace = json.load(open(out + ".json"))["traceEvents"]
    per_rank = devices // p
    for rank in range(devices):
        ran = [e["name"] for e in trace if e.get("ph") == "X" and e["tid"] == rank]
        if ran != order[rank // per_rank]:
            return "failed", "rank %d ran %s, the schedule says %s" % (
                rank, " ".join(ran), " ".join(order[rank // per_rank]))
    return "ok", "%.2g" % worst


def specs(layers, inner_choices, batch_ok, rotate):
    """(spec, pp, m, devices) for a model with `layers` layers."""
    out = []
    for p in (2, 4):
        for index, (schedule, v) in enumerate(SCHEDULES):
            if layers % (p * v):
                continue
            choices = [i for i in inner_choices
                       if p * max(1, eval_devices(i)) <= 8 and
                       not (schedule == "zeropp" and "tp" in i)]
            for pick in range(2):
                inner = choices[(rotate + index * 2 + pick) % len(choices)]
                for m in (p, 2 * p) if schedule == "interleaved" else (1, p):
                    if not batch_ok(m, inner):
                        continue
                    spec = "pp=%d,m=%d,schedule=%s" % (p, m, schedule)
                    if v > 1:
                        spec += ",v=%d" % v
                    if inner:
                        spec += "," + inner
                    out.append((spec, p, m, p * eval_devices(inner)))
                    break
    if layers == 4:
        out.append(("pp=2,m=2,schedule=1f1b,stages=3/1,tp=2", 2, 2, 4))
        # Uneven chunks (weft::chunkLayers): 3 chunks of 2 layers per rank
        # leave the first rank's first chunk only the embedding and the last
        # rank's last only the output layer (Llama 3's layout); stages=3/1
        # gives the ranks 1+2 and 1+0 layers.
        out.append(("pp=2,m=2,schedule=interleaved,v=3", 2, 2, 2))
        out.append(("pp=2,m=2,schedule=interleaved,v=2,stages=3/1,dp=2", 2, 2, 4))
    if layers == 8:
        # 4 layers in 3 chunks per rank: 1+1+2 and 2+1+1.
        out.append(("pp=2,m=4,schedule=interleaved,v=3,dp=2", 2, 4, 4))
    return out


def eval_devices(inner):
    n = 1
    for item in filter(None, inner.split(",")):
        key, value = item.split("=")
        if key in ("tp", "dp", "cp", "ulysses"):
            n *= int(value)
    return n


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--random", type=int, default=8, help="random transformers")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--verbose", action="store_true", help="say why each skipped pair was")
    options = parser.parse_args()
    failures, counts = [], {"ok": 0, "skipped": 0, "failed": 0}
    with tempfile.TemporaryDirectory() as tmp:
        cases = []  # (name, reference model, pipelined model, inputs, specs)
        # The exports have two layers and a batch of 2: pp=2; micro-batches
        # on the dynamic exports (imported at the micro-batch's shape).
        for name in ("gpt2", "bert", "llama"):
            data = os.path.join(ROOT, "test", "models", name, "test_data_set_0")
            inputs = sorted(os.path.join(data, f) for f in os.listdir(data)
                            if f.startswith("input_"))
            for suffix in ("", "-dynamic"):
                model = os.path.join(ROOT, "test", "models", name,
                                     name + "-opset17" + suffix + ".onnx")
                chosen = []
                for schedule in ("gpipe", "1f1b", "zb-h1", "zeropp"):
                    for inner in INNER[:6]:
                        if schedule == "zeropp" and "tp" in inner:
                            continue  # ZeroPP is TP-free
                        m = 2 if suffix and "dp" not in inner else 1
                        spec = "pp=2,m=%d,schedule=%s" % (m, schedule)
                        if inner:
                            spec += "," + inner
                        chosen.append((spec, 2, m, 2 * eval_devices(inner)))
                # Every schedule with every inner plan on the dynamic
                # export; a sample on the static one.
                if not suffix:
                    chosen = chosen[::4]
                else:
                    # Two layers in 2 x 2 chunks: the embedding alone, layer
                    # 0 on rank 1, layer 1 on rank 0, the output layer
                    # alone (Llama 3's layout).
                    chosen.append(("pp=2,m=2,schedule=interleaved,v=2,tp=2,sp=1",
                                   2, 2, 4))
                cases.append((name + suffix, model, model, inputs, chosen, None))
        # Random transformers of 4 and 8 layers, generated at the whole
        # batch (the reference) and at one micro-batch of 2 (the stages).
        for seed in range(options.random):
            layers = 8 if seed % 4 == 3 else 4
            directory = os.path.join(tmp, "random%d" % seed)
            os.makedirs(directory)
            config, _, _ = random_transformer.generate(2000 + seed, layers)
            # Plans that split heads need KV heads to split.
            inner = [i for i in INNER if config["kv_heads"] > 1 or
                     ("tp" not in i and "ulysses" not in i)]
            chosen = specs(layers, inner, lambda m, inner: True, seed)
            if config["loss"]:
                # A mean loss is one scalar per batch: micro-batches cannot
                # be joined into it, so these run with m = 1.
                chosen = [(re.sub(r"m=\d+", "m=1", s), p, 1, d)
                          for s, p, m, d in chosen if "interleaved" not in s]
            for spec, p, m, devices in chosen:
                key = "m%d" % m
                whole = os.path.join(directory, "whole%d.mlir" % m)
                micro = os.path.join(directory, "micro%d.mlir" % m)
                if not os.path.exists(whole):
                    _, text, tensors = random_transformer.generate(
                        2000 + seed, layers, 2 * m)
                    open(whole, "w").write(text)
                    _, text, _ = random_transformer.generate(2000 + seed, layers, 2)
                    open(micro, "w").write(text)
                    for index, tensor in enumerate(tensors):
                        np.save(os.path.join(directory, "%s_input_%d.npy" % (key, index)),
                                tensor)
                paths = sorted(os.path.join(directory, f) for f in os.listdir(directory)
                               if f.startswith(key + "_input_"))
                cases.append(("random%d(layers=%d,%s)" % (seed, layers, ",".join(
                    "%s=%s" % (k, v) for k, v in config.items()
                    if k not in ("seed", "layers", "batch"))), whole, micro, paths,
                    [(spec, p, m, devices)],
                    (config["hidden"], config["heads"], config["seq"], 2 * m)))
        jobs = []
        references = {}
        with concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
            for name, whole, micro, inputs, chosen, dims in cases:
                key = (whole, tuple(inputs))
                if key not in references:
                    ref_dir = os.path.join(tmp, "ref%d" % len(references))
                    proc = run(options.weft, whole, inputs, ref_dir, [])
                    if proc.returncode != 0:
                        print("FAIL: %s does not run unpartitioned:\n%s" % (name, proc.stderr))
                        return 1
                    references[key] = [np.load(os.path.join(ref_dir, f))
                                       for f in sorted(os.listdir(ref_dir))]
                for spec, p, m, devices in chosen:
                    jobs.append((name, spec, pool.submit(
                        check_pair, options.weft, name, micro, inputs,
                        references[key], spec, p, m, devices, tmp, dims)))
            for name, spec, job in jobs:
                status, detail = job.result()
                counts[status] += 1
                if status == "skipped" and options.verbose:
                    print("skipped %s %s: %s" % (name, spec, detail))
                if status == "failed":
                    failures.append("%s %s: %s" % (name, spec, detail))
    for failure in failures[:40]:
        print("FAIL:", failure)
    ok = counts["ok"]
    print("checked %d (model, plan) pairs with pipeline stages on %d models: %d "
          "equal to the unpartitioned result within %g relative, with the bytes "
          "each rank sent equal to its stages' collectives and sends (and, on "
          "the random transformers, each send equal to the cost model's "
          "forward_p2p_bytes), and each rank's executed steps equal to weft "
          "plan's schedule; %d failed; %d "
          "skipped (the plan does not divide the model's shapes)" %
          (ok + counts["failed"], len(set(c[0] for c in cases)), ok, TOLERANCE, counts["failed"],
           counts["skipped"]))
    return 1 if failures or ok < 150 else 0


if __name__ == "__main__":
    sys.exit(main())
