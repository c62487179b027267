#!/usr/bin/python3
"""Saved activations: what the runtime keeps from a forward for its backward
equals the cost model's memory figure.

`weft train` measures, on each rank, the most bytes its first step held at
once of what the forward layers hand their backward layers (the activation
inputs of a `weft.layer` and the values it yields for its `.backward` pair,
from the forward layer until the backward layer has read them): `saved
activations per rank in step 1`. The cost model's `saved_bytes_layer` (weft
plan --evaluate --json) is what one layer keeps for one micro-batch under the
plan's recomputation, read from the rank program's ops
(DifferentiableOpInterface::getSavedForBackward), bf16.

For the committed GPT-2 and the GPT-2-, BERT- and LLaMA-style exports of
test/models/export_models.py, unpartitioned and under dp, tp, Megatron SP,
Ulysses and their combination, with each recompute mode (none, selective,
full), this test checks per rank:

    measured = (layers x saved_bytes_layer + saved_bytes_layer_inputs) x 2

(x 2: the CPU runtime holds f32 where the cost model counts bf16;
saved_bytes_layer_inputs is what the layers read besides the residual
stream, BERT's attention mask, one tensor for all of them). Four differences
this test found are fixed: such a mask was counted per layer under selective
recomputation and not at all otherwise; the attention's output was counted,
which its backward never reads; an elementwise fusion's inner values that its
ops keep (a SwiGLU's SiLU output) were not, and a rotary table's slice was
counted as an activation; and under tp without SP the output projection's
input was all-gathered over tp in every forward layer to be kept whole.
Under ring attention (cp) the cost model kept the ring's blocks (q, k,
v, the blocks passed on, the block outputs and log-sum-exps) until
2026-11-28, while the step, differentiated before it is partitioned, runs
the attention's backward, which reads q, k and v: the ring partition rule
now marks its ops `weft.decomposed`, and the cost model keeps what the ring
reads from outside, as for the vocabulary-parallel cross-entropy.
Since 2026-11-29 the backward is a ring too (weft.attention_grad with the
forward's statistics, as FlashAttention's backward reads them): without
recomputation, or with selective recomputation (which leaves the fused
attention alone: its gradient reads q, k and v), the forward layer also hands
the ring's output and each query row's log-sum-exp to the backward layer,
and the cost model keeps them (the output once since 2026-12-05: as the
output projection's input, which the layer keeps anyway; until then both
figures counted it twice). The
log-sum-exps are f32 in both figures, so the x 2 is not theirs: the expected
bytes are the cost model's less one log-sum-exp a layer
([batch / dp, heads, seq / cp, 1] of f32).
Since 2026-12-04 every fused attention's gradient reads the forward's output
and log-sum-exps (-weft-keep-attention-statistics, FlashAttention-2's
backward): without recomputation and under recompute=op the forward layer
keeps them too (the output in the output projection's layout, which the
layer keeps anyway, so only the log-sum-exps are new), the cost model counts
them (AttentionOp::getSavedForBackward), and the same one log-sum-exp a
layer comes off; selective recomputation runs the
attention again in the backward layer and keeps nothing more.

recompute=op (torchtitan's per-op checkpointing, since 2026-12-02) keeps
what weft::keptByOpPolicy keeps and the backward reads, directly or through
what it recomputes, and the layer's input; the cost model follows the same
policy on the rank's program. Under cp the backward is a ring over the K it
recomputes (since 2026-12-05; until then it gathered K and V, and the cost
model refused recompute=op with cp > 1): the forward layer hands the ring's
log-sum-exps over, and its output once (the layer keeps it already for the
output projection), and the cost model keeps the same.

LLaMA's rotary tables are not trained, as in the other tests (the import
makes such fixed position buffers constants; until 2026-12-07 the tests
passed `--freeze _cached$` to weft train and weft plan): a frozen table's product
keeps no input for the table's gradient, and the cost model keeps a saved
value only if the gradient of an operand that depends on a trained weight
reads it (getGradientReads). Until 2026-11-28 it ran with every parameter
trained, the cost model keeping q in `q * cos` for a table with no gradient.

Needs Debian's python3-torch (1.13) and python3-onnx (for the exports); run by
ctest as `training-saved-activations`.
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

# (plan spec or None for one device, devices, data-parallel degree)
PLANS = [(None, 1, 1), ("dp=2", 2, 2), ("tp=2", 2, 1), ("tp=2,sp=true", 2, 1),
         ("ulysses=2", 2, 1), ("dp=2,tp=2,sp=true", 4, 2), ("cp=2", 2, 1),
         ("cp=2,cp-comm=all-gather", 2, 1),
         # LLaMA's 2 KV heads repeated to 4.
         ("tp=4", 4, 1), ("tp=4,sp=true", 4, 1)]
MODES = ["none", "selective", "full", "op"]
MEASURED = re.compile(r"saved activations per rank in step 1 \(peak bytes, one "
                      r"micro-batch\):((?: \d+)+)")


def numel(dims):
    return int(np.prod([int(d) for d in dims.split("x")]))


def option(extra, name, default):
    return int(extra[extra.index(name) + 1]) if name in extra else default


def check(weft, model, work, extra, spec, devices, dp, mode):
    freeze = []
    if "--freeze" in extra:
        at_freeze = extra.index("--freeze")
        freeze = extra[at_freeze:at_freeze + 2]
    batch, seq = option(extra, "--batch-size", 2), option(extra, "--seq-len", 8)
    cmd = [weft, "train", model, "--data", os.path.join(work, "tokens.npy"), "--steps", "1",
           "--recompute", mode, "--devices", str(devices)] + extra
    if spec:
        cmd += ["--plan-spec", spec]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("%s failed:\n%s" % (" ".join(cmd), proc.stderr[-1500:]))
    found = MEASURED.search(proc.stderr)
    if not found:
        raise RuntimeError("%s printed no saved activations" % " ".join(cmd))
    measured = [int(x) for x in found.group(1).split()]
    evaluate = (spec + "," if spec else "") + "mbs=%d,recompute=%s" % (batch // dp, mode)
    plan = subprocess.run(
        [weft, "plan", model, "--cluster", "a100-80g:%dx1" % devices, "--global-batch",
         str(batch), "--seq-len", str(seq), "--evaluate", evaluate, "--allow-oom", "--json",
         "-"] + freeze, capture_output=True, text=True)
    if plan.returncode != 0:
        raise RuntimeError("weft plan --evaluate %s failed: %s" % (evaluate, plan.stderr[-400:]))
    predicted = json.loads(plan.stdout[:plan.stdout.index("\n}\n") + 3])["plans"][0]
    layers = sum(predicted["stage_layers"])
    per_layer = int(predicted.get("saved_bytes_layer", 0))
    shared = int(predicted.get("saved_bytes_layer_inputs", 0))
    model_bytes = (layers * per_layer + shared) * 2
    tag = "%s %s recompute=%s" % (os.path.basename(model), spec or "one device", mode)
    expected = model_bytes
    degrees = dict(part.split("=") for part in spec.split(",")) if spec else {}
    cp = int(degrees.get("cp", 1))
    # One f32 log-sum-exp per query row and head a layer: a ring's, or a
    # fused attention's that its forward layer keeps for its gradient
    # (-weft-keep-attention-statistics: without recomputation and under
    # recompute=op; selective recomputation runs the attention again).
    if mode in ("none", "op") or (cp > 1 and mode == "selective"):
        heads = int(json.loads(plan.stdout[:plan.stdout.index("\n}\n") + 3])["model"]["heads"])
        heads //= int(degrees.get("tp", 1)) * int(degrees.get("ulysses", 1))
        expected -= layers * (batch // dp) * heads * (seq // cp) * 4
    if any(m != expected for m in measured):
        raise RuntimeError("%s: the ranks held %s bytes of saved activations; the cost "
                           "model's (%d layers x %d + %d) (bf16) x 2 = %d"
                           % (tag, measured, layers, per_layer, shared, expected))
    return "%s: %d bytes per rank = (%d layers x %d + %d) x 2" % (
        tag, expected, layers, per_layer, shared)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weft", required=True)
    args = parser.parse_args()
    failures, equal = [], 0
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, at.CLASSES, size=4096).astype(np.uint16)
    with tempfile.TemporaryDirectory() as work:
        np.save(os.path.join(work, "tokens.npy"), tokens)
        for model, label, extra in at.training_models(work):
            for spec, devices, dp in PLANS:
                for mode in MODES:
                    try:
                        print(check(args.weft, model, work, extra, spec, devices, dp, mode))
                        equal += 1
                    except RuntimeError as e:
                        failures.append(str(e))
    print("checked the saved activations of %d (model, plan, recompute) training runs "
          "against the cost model: %d equal, %d failed"
          % (equal + len(failures), equal, len(failures)))
    for failure in failures:
        print("FAILED: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
