#!/usr/bin/python3
"""A training step's communication and training state: the bytes each rank
sends, and the gradients, weights and optimizer state it holds, equal the cost
model's figures for the plan.

`weft plan --evaluate` fills each plan's `step_comm`: the bytes one rank sends
in one training step, counted on the step `weft train` builds for the plan
(the loss, -weft-differentiate under the plan's recomputation, the partitioned
step with its ZeRO stage, the gradient reduction and the optimizer step, in
bf16 from f32 weights) with the model's layers cut to one and two: one layer's
forward and backward, the embedding's, the output layer's and the loss's per
micro-batch, the gradient reduction (per step, or per micro-batch under
ZeRO-2) and the optimizer step, composed as

    step = m x (layers x (layer_forward + layer_backward) + embedding_forward
                + embedding_backward + head) + gradient_reduction + optimizer

For the committed GPT-2 and the GPT-2-, BERT- and LLaMA-style exports of
test/models/export_models.py, under dp, tp, Megatron SP, Ulysses, ring
attention (cp), their combinations and ZeRO 1/2/3, with the recompute modes
and two micro-batches per step, this test checks per plan:

- `weft train --dtype bf16 --clip-grad 1 --grad-accum 2 --steps 1` prints
  `bytes sent per rank in step 1`: every rank's figure equals `step` exactly;
- the step's forward layer sends what the search's rank program (the forward
  program the planner costs) sends: `layer_forward` equals
  `forward_comm_bytes_layer`, and `embedding_forward` equals
  `forward_comm_bytes_embedding`. Under ZeRO-3 they differ, and are printed
  with both figures instead of compared: the step all-gathers the weights
  stored in blocks; the search's rank program does not (the cost model adds
  them as shard_comm_bytes, checked by training/zero.py).

LLaMA's exported rotary tables are constants (the import recognises fixed
position buffers; until 2026-12-07 the runs passed --freeze _cached$ to weft
train and weft plan), in the step the cost model counts too, so every total
must be equal: the tables get no gradient (no all-reduce of it in a backward
layer) and no update (no ZeRO-3 gather).

Without Ulysses it also checks that the step has no all-to-all, in its layers
or outside them: under Megatron SP, a training step's propagation once re-laid
q, k, v and the MLP's activations between the column split and the sequence
split in every forward and backward layer, and the vocabulary-parallel
embedding's backward computed its one-hot along the sequence split and
re-laid it to the vocabulary split (docs/training.md).

It also prints, per plan, each block's backward bytes against its forward's:
the search times a block's backward tensor-parallel communication as its
forward's (docs/cost-model.md), which these figures check.

It also checks the training state each rank held in the step (`weft train`
prints it: the summed gradients, before the step's reduction, and the
optimizer step's f32 weights and AdamW moments, as the CPU runtime allocates
them) against the cost model's memory breakdown (`stage_memory`): gradients
equal its gradients; the two moments 8 of its 12 optimizer bytes a parameter
(the other 4 are Megatron's f32 master weights, which in `weft train` are the
weights); the f32 weights twice its trained bf16 weights (all but
frozen_weights_gib: LLaMA's rotary tables) below ZeRO-3. One difference is
explained and printed: under SP with ZeRO, the moments of weights tp does not
split, which the step keeps in blocks over dp x tp (their gradients are
partial over both) where the cost model, as Megatron's distributed optimizer,
divides over dp: the difference is computed from the dumped optimizer step
and must match to the byte. A weight used before the batch dimension (the
rotary frequencies of a model that computes its tables in the forward pass)
is split by ZeRO as the others are: its gradient's reduction moves to the
end of the step (-weft-defer-gradient-reduction), where it is
reduce-scattered.

Needs Debian's python3-torch (1.13) and python3-onnx (for the exports); run by
ctest as `training-step-communication`.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import against_torch as at  # noqa: E402

ACCUM = 2
# (plan spec, devices, data-parallel degree, recompute modes)
PLANS = [("dp=2", 2, 2, ["full"]),
         ("tp=2", 2, 1, ["none", "selective", "full", "op"]),
         ("tp=2,sp=true", 2, 1, ["none", "full", "op"]),
         ("ulysses=2", 2, 1, ["none"]),
         # recompute=op: the backward ring runs over the recomputed K.
         ("cp=2", 2, 1, ["none", "op"]),
         # Ulysses within a ring: all-to-alls and ring steps, both ways.
         ("cp=2,ulysses=2", 4, 1, ["none", "op"]),
         ("cp=2,cp-comm=all-gather", 2, 1, ["none", "full", "op"]),
         ("dp=2,tp=2", 4, 2, ["none"]),
         ("dp=2,tp=2,sp=true,zero=1", 4, 2, ["selective"]),
         ("dp=2,zero=1", 2, 2, ["none"]),
         ("dp=2,zero=2", 2, 2, ["none"]),
         ("dp=2,zero=3", 2, 2, ["full", "op"]),
         ("dp=2,ulysses=2,zero=1", 4, 2, ["none"]),
         # LLaMA's 2 KV heads repeated to 4.
         ("tp=4", 4, 1, ["none", "full"]), ("tp=4,sp=true", 4, 1, ["none"])]
SENT = re.compile(r"bytes sent per rank in step 1:((?: \d+)+)")
HELD = re.compile(r"gradients, optimizer's parameters and optimizer state per rank in step 1 "
                  r"\(bytes held\):((?: \d+/\d+/\d+)+)")


def option(extra, name, default):
    return int(extra[extra.index(name) + 1]) if name in extra else default


def evaluate(weft, model, spec, devices, dp, mode, batch, seq, extra):
    text = "%s,mbs=%d,recompute=%s" % (spec, batch // dp, mode)
    # The run's frozen parameters are frozen in the step the cost model counts.
    freeze = ["--freeze", extra[extra.index("--freeze") + 1]] if "--freeze" in extra else []
    proc = subprocess.run(
        [weft, "plan", model, "--cluster", "a100-80g:%dx1" % devices, "--global-batch",
         str(batch * ACCUM), "--seq-len", str(seq), "--evaluate", text, "--allow-oom",
         "--json", "-"] + freeze, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("weft plan --evaluate %s failed: %s" % (text, proc.stderr[-400:]))
    return json.loads(proc.stdout[:proc.stdout.index("\n}\n") + 3])["plans"][0]


SLOT = re.compile(r"tensor<([0-9x]+)xf32> \{weft\.local_sharding = #weft\.sharding<@mesh, "
                  r"(\[[^>]*\])>, weft\.optimizer_slot = \{parameter = \"([^\"]+)\", "
                  r"role = \"([a-z_]+)\"\}")


STATE = {"equal": 0, "explained": 0}


def over_tp_moments(dumped, dp):
    """Bytes of moments fewer than dp blocks of the parameters would hold:
    for each parameter whose optimizer-step block is not split over tp but
    whose moments are, 2 moments x 4 bytes x (its elements / dp - the moment
    block's), read from the dumped optimizer step's arguments."""
    slots = {}
    for dims, sharding, name, role in SLOT.findall(dumped):
        slots.setdefault(name, {})[role] = (numel(dims), "tp" in sharding)
    extra = 0
    for roles in slots.values():
        if "param" in roles and "exp_avg" in roles and not roles["param"][1] \
                and roles["exp_avg"][1]:
            extra += 2 * 4 * (roles["param"][0] // dp - roles["exp_avg"][0])
    return extra


def numel(dims):
    return int(np.prod([int(d) for d in dims.split("x")]))


def cost_state(memory):
    """What a rank should hold by the cost model's memory breakdown `memory`
    (one stage's), in the CPU runtime's f32 (see check_state): gradients,
    f32 weights (twice the bf16 weights it trains: the frozen ones are not
    the optimizer's) and AdamW's two moments (8 of the 12 optimizer bytes a
    parameter)."""
    gib = 1 << 30
    trained = float(memory.get("weights_gib", 0)) - float(memory.get("frozen_weights_gib", 0))
    return (round(float(memory.get("gradients_gib", 0)) * gib),
            round(trained * gib * 2),
            round(float(memory.get("optimizer_gib", 0)) * gib * 8 / 12))


def check_state(tag, stderr, plan, extra, zero, spec, dumped, dp):
    """The gradients, parameters and optimizer state each rank held against
    the cost model's memory breakdown, in the CPU runtime's f32:

    - gradients: the cost model's (4 bytes a parameter, divided over the
      data-parallel group under ZeRO-2 and 3) exactly;
    - AdamW's two moments: 8 of the cost model's 12 optimizer bytes a
      parameter (divided under ZeRO-1 and up); the other 4 are Megatron's f32
      master weights, which in `weft train` are the weights themselves;
    - the optimizer's parameters, the f32 weights: twice the cost model's bf16
      weights (whole below ZeRO-3; under ZeRO-3 the cost model adds the
      gathered layers, so they are printed).

    LLaMA's rotary tables are constants since the import (fixed position
    buffers), in weft train and weft plan alike: they have no gradients and
    no optimizer state. Frozen weights (--freeze; frozen_weights_gib in the
    cost model's memory) are left out of the optimizer's f32 weights."""
    found = HELD.search(stderr)
    if not found:
        raise RuntimeError("%s: weft train printed no gradients and optimizer state" % tag)
    held = [tuple(int(x) for x in triple.split("/")) for triple in found.group(1).split()]
    gradients, weights, moments = cost_state(plan["stage_memory"][0])
    same = [g == gradients and m == moments and (zero >= 3 or p == weights)
            for g, p, m in held]
    if all(same):
        STATE["equal"] += 1
        return "gradients %d, f32 weights %s, moments %d bytes per rank as the cost " \
            "model's" % (gradients, weights if zero < 3 else
                         "%d (cost model's with two gathered layers %d)" % (held[0][1], weights),
                         moments)
    if zero >= 1:
        # Under SP the weights tp does not split (LayerNorm's, the biases after
        # row-parallel linears, a position table) have gradients partial over
        # tp as well as dp; the step reduce-scatters them over both, so their
        # moments are in blocks over dp x tp where the cost model (as
        # Megatron's distributed optimizer) divides them over dp only.
        extra_split = over_tp_moments(dumped, dp) if "sp=true" in spec else 0
        if extra_split > 0 and all(g == gradients and (zero >= 3 or p == weights) and
                                   m == moments - extra_split for g, p, m in held):
            STATE["explained"] += 1
            return "moments KNOWN: the ranks held %d fewer bytes of moments than the cost " \
                "model's %d: the moments of weights tp does not split are in blocks over " \
                "dp x tp (their gradients are reduce-scattered over both under SP), the " \
                "cost model's over dp; gradients %d, f32 weights %d as the cost model's" % (
                    extra_split, moments, gradients, weights)
    raise RuntimeError("%s: the ranks held %s bytes of gradients/f32 weights/moments; the "
                       "cost model's memory %d/%d/%d" % (tag, held, gradients, weights, moments))


def check(weft, model, work, extra, spec, devices, dp, mode):
    batch, seq = option(extra, "--batch-size", 2), option(extra, "--seq-len", 8)
    tag = "%s %s recompute=%s" % (os.path.basename(model), spec, mode)
    cmd = [weft, "train", model, "--data", os.path.join(work, "tokens.npy"), "--steps", "1",
           "--dtype", "bf16", "--clip-grad", "1", "--grad-accum", str(ACCUM),
           "--recompute", mode, "--devices", str(devices), "--plan-spec", spec,
           "--dump-partitioned", os.path.join(work, "step.mlir")] + extra
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), proc.stderr[-1500:]))
    found = SENT.search(proc.stderr)
    if not found:
        raise RuntimeError("%s: weft train printed no byte counts" % tag)
    sent = [int(x) for x in found.group(1).split()]
    dumped = open(os.path.join(work, "step.mlir")).read()
    # Ops in a layer's body are indented two levels, the step's own one.
    # Under SP, KV heads repeated to tp (LLaMA's 2 under tp=4) trade the
    # sequence for the heads in an all-to-all, as Ulysses does.
    degrees = dict(kv.split("=") for kv in spec.split(","))
    kv_heads = at.em.KV_HEADS if os.path.basename(model).startswith("llama") else at.em.HEADS
    repeated = degrees.get("sp") == "true" and int(degrees.get("tp", 1)) > kv_heads
    if "ulysses" not in spec and not repeated:
        for where, indent in (("layers", "      "), ("embedding, head or loss", "    ")):
            if re.search(r"^%s%%\S+ = weft\.all_to_all" % indent, dumped, re.M):
                raise RuntimeError("%s: the step's %s have all-to-alls, which no collective "
                                   "of the plan needs" % (tag, where))
    plan = evaluate(weft, model, spec, devices, dp, mode, batch, seq, extra)
    comm = plan.get("step_comm", {})
    if comm.get("missing"):
        raise RuntimeError("%s: the cost model did not count the step: %s"
                           % (tag, comm["missing"]))
    get = lambda key: int(comm.get(key, 0))  # noqa: E731
    layers = sum(plan["stage_layers"])
    predicted = get("step")
    composed = (ACCUM * (layers * (get("layer_forward") + get("layer_backward")) +
                         get("embedding_forward") + get("embedding_backward") + get("head") +
                         (get("gradient_reduction") if comm.get("reduction_per_micro_batch")
                          else 0)) +
                (0 if comm.get("reduction_per_micro_batch") else get("gradient_reduction")) +
                get("optimizer"))
    if composed != predicted:
        raise RuntimeError("%s: step_comm.step %d is not its parts composed (%d)"
                           % (tag, predicted, composed))
    notes = []
    zero3 = "zero=3" in spec
    if any(s != predicted for s in sent):
        raise RuntimeError("%s: the ranks sent %s bytes in step 1; the cost model's step "
                           "%d (%s)" % (tag, sent, predicted, json.dumps(comm)))
    forward_layer = int(plan.get("forward_comm_bytes_layer", 0))
    forward_embedding = int(plan.get("forward_comm_bytes_embedding", 0))
    if get("layer_forward") != forward_layer or get("embedding_forward") != forward_embedding:
        if not zero3:
            raise RuntimeError("%s: the step's forward sends %d per layer and %d for the "
                               "embedding; the search's rank program %d and %d"
                               % (tag, get("layer_forward"), get("embedding_forward"),
                                  forward_layer, forward_embedding))
        notes.append("forward DIFFERS from the search's rank program (%d per layer, %d for "
                     "the embedding): %s"
                     % (forward_layer, forward_embedding, "ZeRO-3's weight gathers"))
    forward_head = int(plan.get("forward_comm_bytes_head", 0))
    zero = int(re.search(r"zero=(\d)", spec).group(1)) if "zero=" in spec else 0
    notes.append(check_state(tag, proc.stderr, plan, extra, zero, spec, dumped, dp))
    kind = "equal"
    return kind, ("%s: %d bytes per rank = %d x (%d layers x (%d + %d) + %d + %d + %d) + %d%s + %d; "
            "backward/forward per layer %s, embedding %d/%d, head and loss %d both ways "
            "(forward program %d)"
            % (tag, predicted, ACCUM, layers, get("layer_forward"), get("layer_backward"),
               get("embedding_forward"), get("embedding_backward"), get("head"),
               get("gradient_reduction"),
               " (per micro-batch)" if comm.get("reduction_per_micro_batch") else "",
               get("optimizer"),
               "%.2f" % (get("layer_backward") / forward_layer) if forward_layer else "-",
               get("embedding_backward"), forward_embedding, get("head"), forward_head) +
            "".join("; " + note for note in notes))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weft", required=True)
    args = parser.parse_args()
    failures, counts = [], {"equal": 0}
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, at.CLASSES, size=4096).astype(np.uint16)
    with tempfile.TemporaryDirectory() as work:
        np.save(os.path.join(work, "tokens.npy"), tokens)
        for model, label, extra in at.training_models(work):
            for spec, devices, dp, modes in PLANS:
                for mode in modes:
                    try:
                        kind, line = check(args.weft, model, work, extra, spec, devices, dp,
                                           mode)
                        counts[kind] += 1
                        print(line)
                    except RuntimeError as e:
                        failures.append(str(e))
                    sys.stdout.flush()
    print("checked the bytes sent in a training step of %d (model, plan, recompute) pairs "
          "against the cost model's step_comm: %d equal, %d failed"
          % (sum(counts.values()) + len(failures), counts["equal"], len(failures)))
    print("checked the gradients, f32 weights and AdamW moments each rank held against the "
          "cost model's memory: %d equal, %d differences explained (moments over dp x tp under "
          "SP)"
          % (STATE["equal"], STATE["explained"]))
    for failure in failures:
        print("FAILED: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
