#!/usr/bin/python3
"""Trains GPT-2-, BERT- and LLaMA-style models for 20 AdamW steps, and for 10 steps of SGD
with momentum, clipping and 2 micro-batches a step, in PyTorch and in `weft train`, from
the same initial weights and tokens, and compares the loss of every step and the final
weights (relative 1e-4), then checks that each partitioned plan
trains like the unpartitioned run (5 steps, relative 1e-5 on losses, 3e-5 on weights).

The models are the modules of test/models/export_models.py, exported in training mode
(torch.onnx.TrainingMode.TRAINING, no constant folding): an inference export folds
parameter transposes into new initializers and merges initializers with equal values
(every LayerNorm weight starts at ones), so its parameters are no longer the module's.

Needs Debian's python3-torch (1.13) and python3-onnx; run by ctest as
`training-against-torch`.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import export_models as em  # noqa: E402

STEPS, LR, WD = 20, 1e-3, 0.01
# SGD with momentum, clipping and gradient accumulation, against torch too.
# The clipping norm is within each model's range of gradient norms, so that some
# steps are clipped and some are not (the test fails otherwise).
SGD_STEPS, SGD_LR, SGD_MOMENTUM, SGD_ACCUM = 10, 0.05, 0.9, 2
SGD_CLIP = {"gpt2": 7.5, "bert": 1.4, "llama": 1.15}
CLASSES = 32  # BERT's head is its hidden size: labels below 32 fit every model

MODELS = {
    "gpt2": (em.GPT2, ["input_ids"], []),
    "bert": (em.Bert, ["input_ids", "attention_mask"], []),
    # The rotary tables are buffers that ONNX stores as initializers: the
    # import makes them constants (fixed position buffers), as torch never
    # trains them; no --freeze.
    "llama": (em.Llama, ["input_ids"], []),
    # Rotary tables computed in the forward pass (Cos and Sin of positions
    # times inv_freq, Hugging Face's since transformers 4.38), inv_freq trained.
    "llama_rope": (em.LlamaRope, ["input_ids"], []),
}
# Models checked against torch with AdamW and under a few plans only (the
# plans' mechanisms are the other models'; these check the model's own ops).
SHORT = {"llama_rope": [("tp=2", "full"), ("cp=2", "none"), ("dp=2,tp=2,sp=true", "selective"),
                        ("ulysses=2", "op")]}

# (plan, recompute): every plan form that partitions, and the recompute modes.
PLANS = [("dp=2", "full"), ("tp=2", "full"), ("dp=2,tp=2", "full"), ("tp=2,sp=true", "full"),
         ("ulysses=2", "full"), ("dp=2,tp=2,sp=true", "full"), (None, "selective"),
         (None, "none"), ("dp=2,tp=2,sp=true", "selective"), ("dp=2,ulysses=2", "none"),
         ("cp=2", "full"), ("dp=2,cp=2", "selective"), ("cp=2,tp=2,sp=true", "none"),
         # Ulysses within a ring: each rank's heads travel the ring, forward
         # and backward.
         ("cp=2,ulysses=2", "none"),
         # A ring of 4: the backward's gradient sums travel three hops.
         ("cp=4", "none"),
         # All-gather context parallelism (Megatron's --cp-comm-type
         # all_gather): K and V gathered, their gradients reduce-scattered.
         ("cp=4,cp-comm=all-gather", "none"), ("dp=2,cp=2,cp-comm=all-gather", "full"),
         ("tp3d=2x2x2", "full"), ("dp=2,tp3d=2x2x1", "selective"), ("tp3d=1x2x2", "none"),
         # ZeRO: AdamW's two moments in each rank's block (test/training/zero.py
         # checks the bytes and memory, with SGD).
         ("dp=2,tp=2,zero=1", "full"), ("dp=2,zero=2", "selective"),
         ("dp=2,ulysses=2,zero=3", "none"),
         # LLaMA's 2 KV heads under 4-way head splits: each is repeated
         # (-weft-apply-plan) and the K and V projections stay whole.
         ("tp=4", "selective"), ("tp=4,sp=true", "none"), ("tp=2,ulysses=2", "full"),
         # torchtitan's per-op checkpointing: attention and every other weight
         # GEMM kept, the rest recomputed.
         (None, "op"), ("dp=2,tp=2,sp=true,zero=3", "op"), ("tp=2", "op"),
         ("ulysses=2", "op"), ("cp=2", "op")]


def build(name):
    cls, _, _ = MODELS[name]
    torch.manual_seed(1)
    return cls()


def example_inputs(name):
    ids = torch.zeros(em.BATCH, em.SEQ, dtype=torch.long)
    if name == "bert":
        return (ids, torch.ones(em.BATCH, em.SEQ, dtype=torch.long))
    return (ids,)


def export(name, path):
    model = build(name).train()
    torch.onnx.export(model, example_inputs(name), path, opset_version=17,
                      input_names=MODELS[name][1], output_names=["logits"],
                      training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)


def training_models(work):
    """The committed GPT-2 and the GPT-2-, BERT- and LLaMA-style exports (written
    into `work`), each as (path, label, extra weft train arguments)."""
    committed = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "models",
                             "gpt2", "gpt2-opset17.onnx")
    models = [(committed, os.path.basename(committed), [])]
    for name in MODELS:
        path = os.path.join(work, name + ".onnx")
        export(name, path)
        models.append((path, os.path.basename(path), MODELS[name][2]))
    return models


def windows(tokens, step, batch, seq):
    positions = len(tokens) - (batch * seq + 1) + 1
    offset = (step * batch * seq) % positions
    at = (offset + np.arange(batch * seq)) % len(tokens)
    ids = tokens[at].reshape(batch, seq).astype(np.int64)
    labels = tokens[(at + 1) % len(tokens)].reshape(batch, seq).astype(np.int64)
    return torch.from_numpy(ids), torch.from_numpy(labels)


def torch_run(name, tokens, steps, rule="adamw", lr=LR, clip=0.0, accum=1, norms=None,
              wd=WD, decay="all"):
    """`steps` steps of torch.optim's AdamW or SGD(momentum=0.9), each over `accum`
    consecutive windows (their gradients summed, then divided by `accum`, as
    `weft train --grad-accum` does), clipped to a global norm of `clip` if > 0;
    the norms before clipping go into `norms`. With `decay` "matrices", AdamW
    decays the parameters of rank 2 or more only (nanoGPT's groups)."""
    model = build(name)
    params = [p for _, p in model.named_parameters()]
    if rule == "adamw" and decay == "matrices":
        opt = torch.optim.AdamW(
            [{"params": [p for p in params if p.dim() >= 2], "weight_decay": wd},
             {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
            lr=lr, foreach=False)
    elif rule == "adamw":
        opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd, foreach=False)
    else:
        opt = torch.optim.SGD(params, lr=lr, momentum=SGD_MOMENTUM, weight_decay=WD,
                              foreach=False)
    losses = []
    peak = {n: np.zeros(p.shape) for n, p in model.named_parameters()}
    for step in range(steps):
        opt.zero_grad()
        total = 0.0
        for micro in range(accum):
            ids, labels = windows(tokens, step * accum + micro, em.BATCH, em.SEQ)
            inputs = (ids, torch.ones_like(ids)) if name == "bert" else (ids,)
            logits = model(*inputs)
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), labels.reshape(-1))
            loss.backward()
            total += loss.item()
        if accum > 1:
            for p in params:
                p.grad /= accum
        for n, p in model.named_parameters():
            peak[n] = np.maximum(peak[n], np.abs(p.grad.numpy()))
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(params, clip)
            if norms is not None:
                norms.append(float(norm))
        opt.step()
        losses.append(total / accum)
    # Elements the loss does not depend on: a key bias shifts every score of a
    # row alike, and softmax cancels it, so its gradient is rounding noise that
    # Adam's normalized step turns into +-lr either way. They are not compared.
    top = max(float(v.max()) for v in peak.values())
    # Elements with no gradient at all (embedding rows no token reads) are
    # compared: only weight decay moves them, on both sides.
    noise = {n: (v > 0) & (v < 1e-6 * top) for n, v in peak.items()}
    return losses, {n: p.detach().numpy() for n, p in model.named_parameters()}, noise


def weft_run(weft, onnx_path, work, name, steps, plan=None, recompute="full", extra=(),
             norms=None, wd=WD):
    out = os.path.join(work, "ck-%s-%s%s" % ((plan or "single").replace(",", "_").replace("=", ""),
                                             recompute, "-".join(extra).replace("-", "")))
    log = out + ".csv"
    cmd = [weft, "train", onnx_path, "--data", os.path.join(work, "tokens.npy"),
           "--steps", str(steps), "--lr", str(LR), "--weight-decay", str(wd),
           "--batch-size", str(em.BATCH), "--seq-len", str(em.SEQ),
           "--log", log, "--save", out, "--recompute", recompute] + MODELS[name][2]
    cmd += list(extra)
    if plan:
        cmd += ["--plan-spec", plan]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError("%s failed:\n%s%s" % (" ".join(cmd), result.stdout, result.stderr))
    with open(log) as f:
        rows = list(csv.DictReader(f))
    losses = [float(row["loss"]) for row in rows]
    if norms is not None:
        norms.extend(float(row["grad_norm"]) for row in rows)
    step_dir = os.path.join(out, open(os.path.join(out, "latest")).read().strip())
    manifest = json.load(open(os.path.join(step_dir, "manifest.json")))
    weights = {}
    for entry in manifest["parameters"]:
        weights[entry["name"]] = np.load(os.path.join(step_dir, entry["value"]))
    return losses, merge_parts(weights, onnx_path)


def merge_parts(weights, onnx_path):
    """A checkpoint's weights by the exported initializers' names: fused
    projections that -weft-unfuse-projections split come back whole, in
    columns (a weight stored [in, out]) or in rows (nn.Linear's [out, in]),
    whichever gives the exported initializer's shape."""
    merged = {}
    def piece(key):
        base, _, part = key.rpartition(".part")
        return (base, int(part)) if base and part.isdigit() else (key, -1)
    for key in sorted(weights, key=piece):
        base, _, part = key.rpartition(".part")
        if base and part.isdigit():
            merged.setdefault(base, []).append(weights[key])
        else:
            merged[key] = [weights[key]]
    shapes = {t.name: tuple(t.dims) for t in onnx.load(onnx_path).graph.initializer}

    def whole(name, parts):
        if len(parts) == 1:
            return parts[0]
        # Parts of [out, in] weights differ in their rows and cannot be
        # joined as columns.
        if all(p.shape[:-1] == parts[0].shape[:-1] for p in parts):
            columns = np.concatenate(parts, axis=-1)
            if columns.shape == shapes.get(name, columns.shape):
                return columns
        return np.concatenate(parts, axis=0)
    return {k: whole(k, v) for k, v in merged.items()}


def check_plans(weft, onnx_path, work, name, plans, noise, base_losses, base, failures):
    """Trains `name` 5 steps under each plan and compares with the unpartitioned
    run (`base_losses`, `base`); returns the number of plans compared."""
    pairs = 0
    for plan, recompute in plans:
        label = "%s, recompute %s" % (plan or "one device", recompute)
        try:
            plan_losses, plan_weights = weft_run(weft, onnx_path, work, name, 5, plan,
                                                 recompute)
        except RuntimeError as e:
            failures.append(str(e))
            continue
        # Losses to 1e-5; weights to 3e-5 of each tensor's largest element: a
        # gradient that nearly cancels (a sum of terms of both signs) carries
        # the rounding of its summation order, which differs between plans,
        # and Adam's m / sqrt(v) passes that relative noise on to the update
        # undamped (one element of BERT's MLP weight differs by 1.1e-5 after 5
        # steps under dp=2 once its linears are raised in training exports).
        err = relative(plan_losses, base_losses)
        weight_err = 0.0
        for k in base:
            keep = ~noise[k] if k in noise else np.ones(base[k].shape, bool)
            if keep.any():
                weight_err = max(weight_err, relative(plan_weights[k][keep], base[k][keep]))
        pairs += 1
        if err > 1e-5 or weight_err > 3e-5:
            err = max(err, weight_err)
            failures.append("%s under %s: differs from the unpartitioned run by %.2e"
                            % (name, label, err))
        else:
            print("%s under %s: 5 steps equal to the unpartitioned run (losses "
                  "%.1e, weights %.1e)" % (name, label, err, weight_err))
    return pairs


def relative(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-6))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weft", required=True)
    args = parser.parse_args()
    failures, checked, pairs = [], 0, 0
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, CLASSES, size=4096).astype(np.uint16)
    with tempfile.TemporaryDirectory() as work:
        np.save(os.path.join(work, "tokens.npy"), tokens)
        for name in MODELS:
            onnx_path = os.path.join(work, name + ".onnx")
            export(name, onnx_path)
            expected_losses, expected, noise = torch_run(name, tokens, STEPS)
            ignored = 0
            losses, weights = weft_run(args.weft, onnx_path, work, name, STEPS)
            loss_err = max(abs(a - b) / abs(b) for a, b in zip(losses, expected_losses))
            weight_err = 0.0
            for key, value in expected.items():
                if key not in weights:
                    failures.append("%s: weft trained no parameter %s" % (name, key))
                    continue
                keep = ~noise[key]
                if keep.any():
                    weight_err = max(weight_err, relative(weights[key][keep], value[keep]))
                ignored += int(noise[key].sum())
            print("%s: %d steps, loss %.5f -> %.5f (torch %.5f -> %.5f); max relative "
                  "error: loss %.2e, weights %.2e over %d tensors (%d elements with a "
                  "rounding-noise gradient not compared)"
                  % (name, STEPS, losses[0], losses[-1], expected_losses[0],
                     expected_losses[-1], loss_err, weight_err, len(expected), ignored))
            if len(losses) != STEPS or loss_err > 1e-4 or weight_err > 1e-4:
                failures.append("%s: weft train differs from torch (loss %.2e, weights %.2e)"
                                % (name, loss_err, weight_err))
            checked += 1
            if name == "gpt2":
                # --decay matrices: no decay for biases and norm weights, as
                # nanoGPT's parameter groups; a weight decay of 0.1 moves the
                # rank-1 weights by 2e-3 over the steps if they decayed.
                group_losses, grouped, _ = torch_run(name, tokens, STEPS, wd=0.1,
                                                     decay="matrices")
                losses, weights = weft_run(args.weft, onnx_path, work, name, STEPS, wd=0.1,
                                           extra=["--decay", "matrices"])
                loss_err = relative(losses, group_losses)
                weight_err = max(relative(weights[k][~noise[k]], v[~noise[k]])
                                 for k, v in grouped.items() if (~noise[k]).any())
                print("%s: %d AdamW steps with --decay matrices (weight decay 0.1 on the "
                      "%d matrices, none on the %d biases and norm weights); max relative "
                      "error: loss %.2e, weights %.2e"
                      % (name, STEPS, sum(v.ndim >= 2 for v in grouped.values()),
                         sum(v.ndim < 2 for v in grouped.values()), loss_err, weight_err))
                if loss_err > 1e-4 or weight_err > 1e-4:
                    failures.append("%s: --decay matrices differs from torch's groups "
                                    "(loss %.2e, weights %.2e)" % (name, loss_err, weight_err))
            if name in SHORT:
                base_losses, base = weft_run(args.weft, onnx_path, work, name, 5)
                pairs += check_plans(args.weft, onnx_path, work, name, SHORT[name], noise,
                                     base_losses, base, failures)
                continue
            # SGD with momentum, weight decay, clipping and 2 micro-batches a step:
            # the other rule of the optimizer step, against torch.optim.SGD and
            # clip_grad_norm_ (the norms before clipping too).
            torch_norms, weft_norms = [], []
            sgd_losses, sgd_expected, _ = torch_run(
                name, tokens, SGD_STEPS, rule="sgd", lr=SGD_LR, clip=SGD_CLIP[name],
                accum=SGD_ACCUM, norms=torch_norms)
            sgd = ["--optimizer", "sgd", "--momentum", str(SGD_MOMENTUM), "--lr", str(SGD_LR),
                   "--clip-grad", str(SGD_CLIP[name]), "--grad-accum", str(SGD_ACCUM)]
            losses, weights = weft_run(args.weft, onnx_path, work, name, SGD_STEPS,
                                       extra=sgd, norms=weft_norms)
            loss_err = relative(losses, sgd_losses)
            norm_err = relative(weft_norms, torch_norms)
            weight_err = max(relative(weights[k], v) for k, v in sgd_expected.items()
                             if k in weights)
            clipped = sum(n > SGD_CLIP[name] for n in torch_norms)
            print("%s: %d SGD steps (momentum %.1f, clip %.2f, %d micro-batches), loss "
                  "%.5f -> %.5f; max relative error: loss %.2e, grad norm %.2e, weights "
                  "%.2e; norms %.3f to %.3f, %d of %d steps clipped"
                  % (name, SGD_STEPS, SGD_MOMENTUM, SGD_CLIP[name], SGD_ACCUM, losses[0], losses[-1],
                     loss_err, norm_err, weight_err, min(torch_norms), max(torch_norms),
                     clipped, SGD_STEPS))
            if (len(losses) != SGD_STEPS or max(loss_err, norm_err, weight_err) > 1e-4
                    or any(k not in weights for k in sgd_expected)):
                failures.append("%s: weft train's SGD differs from torch (loss %.2e, norm "
                                "%.2e, weights %.2e)" % (name, loss_err, norm_err, weight_err))
            if clipped in (0, SGD_STEPS):
                failures.append("%s: %d of %d SGD steps had a norm above %.2f: the test "
                                "checks clipping only if some are and some are not"
                                % (name, clipped, SGD_STEPS, SGD_CLIP[name]))
            checked += 1
            # Partitioned = unpartitioned, 5 steps.
            base_losses, base = weft_run(args.weft, onnx_path, work, name, 5)
            pairs += check_plans(args.weft, onnx_path, work, name, PLANS, noise,
                                 base_losses, base, failures)
        # Resume: 3 steps, then 2 more from the step-3 checkpoint, equal the
        # uninterrupted 5 bit for bit; a corrupt manifest is refused by name.
        name = "gpt2"
        onnx_path = os.path.join(work, name + ".onnx")
        whole, _ = weft_run(args.weft, onnx_path, work, name, 5)
        first = os.path.join(work, "resume")
        base_cmd = [args.weft, "train", onnx_path, "--data", os.path.join(work, "tokens.npy"),
                    "--lr", str(LR), "--weight-decay", str(WD), "--save", first,
                    "--log", first + ".csv"]
        subprocess.run(base_cmd + ["--steps", "5", "--save-every", "3"], check=True,
                       capture_output=True)
        os.remove(first + ".csv")
        with open(os.path.join(first, "latest"), "w") as f:
            f.write("step-3\n")
        subprocess.run(base_cmd + ["--steps", "5", "--resume", first], check=True,
                       capture_output=True)
        with open(first + ".csv") as f:
            resumed = [float(row["loss"]) for row in csv.DictReader(f)]
        if resumed != whole[3:]:
            failures.append("resume: steps 4-5 after resuming give %s, the uninterrupted "
                            "run %s" % (resumed, whole[3:]))
        else:
            print("resume from step 3: steps 4-5 equal the uninterrupted run bit for bit")
        latest = open(os.path.join(first, "latest")).read().strip()
        manifest = os.path.join(first, latest, "manifest.json")
        with open(manifest, "w") as f:
            f.write("{ not json")
        bad = subprocess.run(base_cmd + ["--steps", "5", "--resume", first],
                             capture_output=True, text=True)
        if bad.returncode == 0 or "manifest.json" not in bad.stderr:
            failures.append("a corrupt checkpoint was not refused by name: %s" % bad.stderr)
        else:
            print("a corrupt checkpoint is refused: " + bad.stderr.strip().splitlines()[-1])
        # SIGKILL at an arbitrary point, checkpointing every step: whatever the
        # kill interrupted (a step, a checkpoint half written), the last
        # checkpoint loads and the resumed run continues the uninterrupted losses.
        killed = os.path.join(work, "killed")
        long_cmd = [args.weft, "train", onnx_path, "--data", os.path.join(work, "tokens.npy"),
                    "--lr", str(LR), "--weight-decay", str(WD), "--steps", "40"]
        subprocess.run(long_cmd + ["--log", killed + "-whole.csv"], check=True,
                       capture_output=True)
        with open(killed + "-whole.csv") as f:
            uninterrupted = [float(row["loss"]) for row in csv.DictReader(f)]
        proc = subprocess.Popen(long_cmd + ["--save", killed, "--save-every", "1"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        seen = 0
        for line in proc.stdout:
            seen += line.startswith("step ")
            if seen == 12:
                proc.kill()
                break
        proc.wait()
        result = subprocess.run(long_cmd + ["--resume", killed, "--log", killed + "-resumed.csv"],
                                capture_output=True, text=True)
        resumed_at = int(result.stderr.split("at step ")[-1].split()[0]) if "at step" in result.stderr else -1
        with open(killed + "-resumed.csv") as f:
            after = [float(row["loss"]) for row in csv.DictReader(f)]
        if result.returncode != 0 or resumed_at < 1 or after != uninterrupted[resumed_at:]:
            failures.append("resume after SIGKILL: exit %d, resumed at step %d, losses %s vs %s"
                            % (result.returncode, resumed_at, after, uninterrupted[resumed_at:]))
        else:
            print("killed (SIGKILL) after step 12 of 40 while checkpointing every step: resumed "
                  "at step %d, the remaining %d losses equal the uninterrupted run's"
                  % (resumed_at, len(after)))
    print("checked %d runs against torch (AdamW and SGD per model) and %d (model, plan) "
          "training pairs; %d failed"
          % (checked, pairs, len(failures)))
    for failure in failures:
        print("FAILED: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
