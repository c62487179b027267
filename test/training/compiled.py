#!/usr/bin/python3
"""`weft compile --train` programs against `weft train`.

`weft compile --train` builds the training step with the passes `weft train`
runs (the loss, -weft-differentiate, the partitioning, the deferred gradient
reduction, ZeRO, -weft-build-optimizer) and emits the step, its gradient
reduction and the optimizer step as C++ that every rank runs over the runtime
(`weft/runtime/Training.h`): each rank holds its blocks of the parameters and
of the optimizer state. For the committed GPT-2 and the GPT-2-, BERT- and
LLaMA-style exports of test/models/export_models.py, under plans that combine
dp with tp, Megatron SP, Ulysses, ring attention, AxoNN's 3-D grid, pipeline
stages and ZeRO 1, 2 and 3 (and in
bf16 and in f16 with loss scaling), with
AdamW and SGD (momentum, clipping) and --grad-accum 2, this test checks that
the compiled program, run as threads (and for some pairs as MPI processes):

- prints the losses, learning rates and gradient norms `weft train` prints for
  the same flags, every step (the same text; the unpartitioned step's loss may
  differ in its 6th decimal: weft train sums its micro-batches in double), and
  writes `weft train`'s loss log (--log), the same to the 9 decimals logged;
- ends with the weights of `weft train`'s last checkpoint, identical;
- sends, per rank, the bytes `weft train` reports for one step times the
  steps (the compiled program runs the same collectives every step), while it
  saves a checkpoint every step (--save; gathering one is not training);
- for twelve pairs (SGD's momentum buffer, ZeRO 1, 2 and 3, stored blocks over
  gz), resumed from its
  step-1 checkpoint (--resume), prints the uninterrupted run's later steps and
  ends with its weights, identical.

Run by ctest as `training-compiled`.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import against_torch as at  # noqa: E402
import gradient_reduction as gr  # noqa: E402

STEPS = 3
# (model label prefix, plan, optimizer arguments, run under mpirun too)
PAIRS = [
    # Warmup-stable-decay and linear decay (--lr-decay-style): the program
    # prints weft train's learning rates.
    ("gpt2-opset17", "dp=1", ["--optimizer", "adamw", "--warmup", "1", "--lr-decay-style",
                              "wsd", "--lr-wsd-decay-steps", "2", "--min-lr", "1e-3"], False),
    ("gpt2-opset17", "tp=2", ["--optimizer", "sgd", "--clip-grad", "1.0", "--lr-decay-style",
                              "linear"], False),
    ("gpt2-opset17", "dp=2,tp=2,zero=1", ["--optimizer", "adamw"], True),
    ("gpt2-opset17", "dp=2,tp=2,sp=true", ["--optimizer", "sgd", "--momentum", "0.5"], False),
    ("gpt2-opset17", "tp=2,sp=true", ["--optimizer", "adamw", "--recompute", "selective"],
     False),
    ("llama.onnx", "tp=2", ["--optimizer", "adamw", "--recompute", "none"], False),
    # LLaMA's 2 KV heads repeated to 4 (-weft-repeat-kv-heads).
    ("llama.onnx", "tp=4", ["--optimizer", "adamw", "--recompute", "none"], False),
    ("gpt2-opset17", "dp=2,cp=2,zero=2", ["--optimizer", "adamw", "--recompute", "none"], False),
    ("gpt2-opset17", "dp=2,ulysses=2,zero=3", ["--optimizer", "adamw"], True),
    ("gpt2.onnx", "dp=2,tp=2,zero=3", ["--optimizer", "adamw", "--warmup", "2",
                                       "--min-lr", "1e-4"], False),
    ("bert.onnx", "dp=2,tp=2", ["--optimizer", "adamw"], False),
    ("llama.onnx", "dp=2,tp=2,sp=true,zero=1", ["--optimizer", "sgd", "--clip-grad", "0.5"],
     False),
    ("llama.onnx", "ulysses=2,dp=2,zero=2", ["--optimizer", "adamw"], False),
    # Mixed precision: bf16 compute from f32 weights (-weft-mixed-precision),
    # and f16 with dynamic loss scaling (its step 1 overflows at 65536 and is
    # skipped, grad_norm inf in both; the scale is in the checkpoint).
    ("gpt2-opset17", "dp=2,tp=2,zero=1", ["--optimizer", "adamw", "--dtype", "bf16"], True),
    ("gpt2-opset17", "dp=2,tp=2", ["--optimizer", "adamw", "--dtype", "f16",
                                   "--loss-scale-window", "2"], False),
    # Pipeline stages (a step runs the schedule on m=2 micro-batches, so
    # --grad-accum 2 is m): each stage's forward, backward and weight-gradient
    # steps compiled, each pipeline rank's optimizer step on its stages'
    # parameters, the tied/merged ones all-reduced over pp.
    ("gpt2-opset17", "pp=2,m=2,schedule=1f1b", ["--optimizer", "adamw"], True),
    ("gpt2-opset17", "pp=2,tp=2,m=2,schedule=gpipe", ["--optimizer", "sgd", "--momentum",
                                                      "0.5", "--clip-grad", "1.0"], False),
    ("gpt2.onnx", "pp=2,dp=2,m=2,schedule=1f1b,zero=1", ["--optimizer", "adamw"], True),
    ("llama.onnx", "pp=2,m=2,schedule=interleaved,v=2", ["--optimizer", "adamw"], False),
    ("bert.onnx", "pp=2,m=2,schedule=zb-h1,tp=2,sp=true", ["--optimizer", "adamw"], False),
    ("gpt2-opset17", "pp=2,tp=2,m=2,schedule=1f1b", ["--optimizer", "adamw", "--dtype",
                                                     "bf16"], False),
    # ZeroPP: pipeline stages over ZeRO-3, here over a load-balanced ring (the
    # stored blocks and the gradients' reduce-scatters in its zigzag layout).
    ("gpt2.onnx", "pp=2,cp=2,m=2,schedule=zeropp,zero=3", ["--optimizer", "adamw"], False),
    # AxoNN's 3-D grid: the weights stored over the depth axis gz, each rank's
    # optimizer step on its stored blocks (the gradients reduce-scattered
    # into them after every micro-batch).
    ("gpt2-opset17", "tp3d=1x2x2", ["--optimizer", "adamw"], False),
    # torchtitan's per-op checkpointing over a ring: the backward layer
    # recomputes the rotary K, runs the ring over it with the forward ring's
    # statistics, and takes the output in the output projection's layout.
    ("llama.onnx", "cp=2", ["--optimizer", "adamw", "--recompute", "op"], False),
    # Packed documents: the document ids filled by the runtime as weft train
    # fills them, the block-causal mask, and no loss where the input ends a
    # document; BERT's padding bias kept within each document under pipeline
    # stages, with masked language modelling that never chooses the end.
    ("gpt2-opset17", "dp=2,tp=2", ["--optimizer", "adamw", "--eod-token", "3",
                                   "--reset-attention-mask", "--eod-mask-loss"], False),
    ("bert.onnx", "pp=2,m=2,schedule=1f1b", ["--optimizer", "adamw", "--eod-token", "3",
                                            "--reset-attention-mask", "--objective", "mlm",
                                            "--mask-token-id", "1", "--special-token-ids",
                                            "3"], False),
]

# Pairs whose program also resumes its step-1 checkpoint (SGD's momentum
# buffer, ZeRO 1, 2 and 3 blocks of the optimizer state, blocks stored over
# gz, bf16, f16's loss scale): the steps after it and the final weights must be the uninterrupted
# run's.
RESUME = {3, 6, 7, 8, 10, 12, 13, 14, 16, 19, 20, 21}

LOSS = re.compile(r"^step (\d+)/\d+  loss (\S+)  lr (\S+)  grad_norm (\S+)", re.M)


# mpirun refuses to start as root unless told (CI's containers run as root).
MPI_ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def run(cmd, **kwargs):
    proc = subprocess.run(cmd, capture_output=True, text=True, env=MPI_ENV, **kwargs)
    if proc.returncode != 0:
        raise RuntimeError("%s failed:\n%s%s" % (" ".join(cmd), proc.stdout[-1000:],
                                                 proc.stderr[-2000:]))
    return proc


def check_pair(weft, prefix, model, extra, plan, optimizer, mpi, work, tag, resume):
    """Compiles, builds and runs one pair; returns the lines to print. Raises
    AssertionError or RuntimeError on a mismatch or a failure."""
    args = ["--plan-spec", plan, "--steps", str(STEPS), "--grad-accum", "2", "--lr", "0.01"]
    args += optimizer + extra
    losses, weights, stderr = gr.train_and_read(weft, model, work, tag, args)
    step_bytes = [int(b) for b in re.search(r"bytes sent per rank in step 1:([ 0-9]*)",
                                            stderr).group(1).split()] \
        if "bytes sent per rank" in stderr else [0]
    train = run([weft, "train", model, "--data", os.path.join(work, "tokens.npy")] + args)
    expected = LOSS.findall(train.stdout)
    project = os.path.join(work, "project-" + tag)
    # Debug: unoptimized programs build several times faster, and compute the
    # same (no fast-math; the kernels are the installed Release runtime's).
    # The README's example and the lit tests build Release.
    run([weft, "compile", model, "--train", "-o", project, "--build", "--build-type",
         "Debug", "--runtime-prefix", prefix] + args)
    lines = []
    launches = [("threads", [])]
    if mpi:
        launches.append(("mpirun", ["mpirun", "--oversubscribe", "-np",
                                    str(len(step_bytes))]))
    for how, launcher in launches:
        out = os.path.join(work, "out-%s-%s" % (tag, how))
        log = os.path.join(work, "log-%s-%s.csv" % (tag, how))
        # Every step's checkpoint: what gathers it is not counted as the
        # training's bytes (checked below).
        saves = os.path.join(work, "ckpt-%s-%s" % (tag, how))
        program = run(launcher + [os.path.join(project, "build", "program"), "--log", log,
                                  "--save", saves, "--save-every", "1",
                                  os.path.join(project, "weights"), out,
                                  os.path.join(work, "tokens.npy")])
        # The loss log, as weft train's (9 decimals): the same values, but for
        # the unpartitioned step (see above).
        logged = [float(line.split(",")[1]) for line in open(log).read().split("\n")[1:]
                  if line]
        tolerance = 2e-6 if len(step_bytes) == 1 else 0.0
        assert len(logged) == len(losses) and all(
            abs(a - b) <= tolerance * abs(b) for a, b in zip(logged, losses)), \
            "%s: the program logged %s, weft train %s" % (how, logged, losses)
        got = LOSS.findall(program.stdout)
        # The losses as printed (6 decimals): weft train's unpartitioned step
        # sums the micro-batches' losses in double, the programs in float, so
        # the last digit may differ there; the rest must be the same text.
        assert len(got) == len(expected) and all(
            g[0] == e[0] and g[2:] == e[2:] and abs(float(g[1]) - float(e[1])) <= 2e-6 * abs(
                float(e[1])) for g, e in zip(got, expected)), \
            "%s: the program printed\n%s\nweft train\n%s" % (how, got, expected)
        # The trained parameters: every one weft train saves but the frozen.
        names = open(os.path.join(out, "parameters.txt")).read().split()
        frozen = [n for n in weights if n not in names]
        freeze = extra[extra.index("--freeze") + 1] if "--freeze" in extra else None
        assert len(set(names)) == len(names) and set(names) <= set(weights) and all(
            freeze and re.search(freeze, n) for n in frozen), \
            "%s: parameters %s, weft train %s" % (how, names, sorted(weights))
        worst = 0.0
        for k, name in enumerate(names):
            got_w = np.load(os.path.join(out, "param-%d.npy" % k))
            worst = max(worst, float(np.abs(got_w - weights[name]).max()))
        assert worst == 0.0, "%s: weights differ from weft train's by %g" % (how, worst)
        sent = [int(b) for b in re.search(r"bytes sent per rank:([ 0-9]*)",
                                          program.stdout).group(1).split()]
        assert sent == [b * STEPS for b in step_bytes], \
            "%s: sent %s, weft train %s per step" % (how, sent, step_bytes)
        resumed = ""
        if resume and how == "threads":
            again = os.path.join(work, "resumed-%s" % tag)
            program = run([os.path.join(project, "build", "program"), "--resume",
                           os.path.join(saves, "step-1"), os.path.join(project, "weights"),
                           again, os.path.join(work, "tokens.npy")])
            after = LOSS.findall(program.stdout)
            assert after == got[1:], "resumed at step 1: %s, uninterrupted %s" % (after, got)
            for k in range(len(names)):
                a = np.load(os.path.join(out, "param-%d.npy" % k))
                b = np.load(os.path.join(again, "param-%d.npy" % k))
                assert np.array_equal(a, b), "resumed: %s differs" % names[k]
            resumed = ", resumed at step 1 identically"
        lines.append("%-20s %-26s %-8s %d steps, losses %s (as weft train), %d weights "
                     "identical, %d bytes/rank%s" % (os.path.basename(model), plan, how, STEPS,
                                                    " ".join(loss for _, loss, _, _ in got),
                                                    len(names), sent[0], resumed))
    return lines


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weft", required=True)
    parser.add_argument("--build-dir", required=True,
                        help="the build tree whose runtime the programs link")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--pairs", help="only these (comma-separated indices)")
    args = parser.parse_args()
    chosen = [int(i) for i in args.pairs.split(",")] if args.pairs else range(len(PAIRS))
    failures, lines = [], []
    with tempfile.TemporaryDirectory() as work:
        prefix = os.path.join(work, "prefix")
        run(["cmake", "--install", args.build_dir, "--prefix", prefix])
        tokens = np.random.default_rng(0).integers(0, at.CLASSES, size=4096)
        np.save(os.path.join(work, "tokens.npy"), tokens.astype(np.uint16))
        models = {os.path.basename(path): (path, extra)
                  for path, _, extra in at.training_models(work)}
        has_mpi = shutil.which("mpirun") is not None

        def one(index):
            label, plan, optimizer, mpi = PAIRS[index]
            model, extra = next(v for k, v in models.items() if k.startswith(label))
            try:
                return check_pair(args.weft, prefix, model, extra, plan, optimizer,
                                  mpi and has_mpi, work, "p%d" % index,
                                  index in RESUME), None
            except (AssertionError, RuntimeError) as error:
                return [], "%s %s: %s" % (label, plan, error)

        with ThreadPoolExecutor(max_workers=args.jobs) as pool:
            for got, error in pool.map(one, chosen):
                lines += got
                if error:
                    failures.append(error)
    for line in lines:
        print(line)
    for failure in failures:
        print("FAIL", failure)
    print("checked %d compiled training programs (%d runs) against weft train; %d failed"
          % (len(chosen), len(lines) + len(failures), len(failures)))
    return 1 if failures or not lines else 0


if __name__ == "__main__":
    sys.exit(main())
