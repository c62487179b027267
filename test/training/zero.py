#!/usr/bin/python3
"""ZeRO 1, 2 and 3 in `weft train`: sharded optimizer state, reduce-scattered
gradients, all-gathered parameters, as the cost model predicts.

With `zero=1`, `2` or `3` in the plan, -weft-defer-gradient-reduction=scatter=true
reduce-scatters each gradient over its reduction group (dp x cp x ulysses) and
-weft-build-optimizer=rank-local=true builds the step each rank runs on its
blocks: its optimizer state is one block per parameter, the parameter is cut
to that block, updated, and all-gathered back. ZeRO-2 and 3 reduce after every
micro-batch (weft.reduce_every_micro_batch); ZeRO-3 also stores the weights in
blocks (-weft-shard-parameters), gathered by each layer where used, and the
optimizer step updates the stored blocks. For the committed GPT-2 and the
GPT-2-, BERT- and LLaMA-style exports of test/models/export_models.py, under
plans that combine dp with tp, Megatron SP, Ulysses and ring attention (and
the ring alone, whose group's blocks are in its load-balanced zigzag layout),
with each recompute mode, this test checks:

- 5 steps of SGD with momentum, clipping and --grad-accum 2 give the losses and
  weights of the unpartitioned run (relative 1e-5 on losses, 3e-5 on weights as
  gradient_reduction.py; SGD, whose update is linear in the gradient, as there);
- the bytes each rank sent in step 1 are the step's collectives twice plus the
  reduction's (once with ZeRO-1; with ZeRO-2, whose step is marked
  weft.reduce_every_micro_batch, once per micro-batch) and the optimizer step's
  once (NCCL ring counts of the dumped IR);
- the cost model (weft plan --evaluate, the same plan) counts the gradient
  elements a rank holds: its grad_reduce_bytes is the ring reduce-scatter of
  them over the group (f32) and its param_gather_bytes their all-gather (bf16);
  the runtime's reduction and gather equal those figures for the gradients
  reduce-scattered over the whole group, and the rest (reduced in the step, or
  over part of the group, or with no dimension the group divides) are printed
  with their share: what they send instead is checked exactly;
- (the elements a rank holds are the trained ones: the frozen weights,
  --freeze, get no gradient and no state, and `weft plan --freeze` leaves them
  out of these figures as weft train does);
- the optimizer state a rank holds (the optimizer step's state arguments) is one
  block per trained parameter, and the cost model's optimizer memory is 12 bytes
  per parameter a rank holds / the group; its gradient memory is 4 bytes per
  parameter, / the group with ZeRO-2 (whose runner accumulates the reduced
  blocks; ZeRO-1 accumulates whole partial gradients). Both are printed with
  what the rank holds;
- under ZeRO-3, that some weights are stored over the whole group and the step
  all-gathers them, and that the bytes of ZeRO-3's collectives in a step (the
  step's gathers over the group and the reductions) are within 10 % of the cost
  model's shard_comm_bytes with its bf16 gathers counted in f32 (the program
  gathers per use, which the recompute mode moves by a few percent; printed).

With pipeline stages (pp=2 x dp=2, m=2, zero=1, per model), it also checks
that each pipeline rank's optimizer step holds the cost model's parameters of
that stage exactly (stage_memory: its weights, the frozen weights a stage
reads included and counted as frozen_weights_gib, and the optimizer state of
the trained ones / dp), and that the run equals the unpartitioned one.

Run by ctest as `training-zero`.
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
sys.path.insert(0, os.path.join(HERE, "..", "partition"))
sys.path.insert(0, HERE)
import against_torch as at  # noqa: E402
import differential as diff  # noqa: E402
import gradient_reduction as gr  # noqa: E402

# (plan, recompute)
PLANS = [("dp=2", "full"), ("dp=2", "selective"), ("dp=2,tp=2", "none"),
         ("dp=2,tp=2,sp=true", "full"), ("dp=2,ulysses=2", "selective"),
         ("dp=2,cp=2", "none"), ("cp=2", "selective")]
STEPS, ACCUM, CLIP = 5, 2, 1.0
ARG = re.compile(r"tensor<([0-9x]*)x?f32>\s*\{([^}]*\})\s*\}")


def signature_entries(signature, results):
    """(shape, attributes) of the arguments (or results) of a signature line."""
    head, _, tail = signature.partition(") -> (")
    return [(m.group(1), m.group(2)) for m in ARG.finditer(tail if results else head)]


def train(weft, model, work, tag, plan, recompute, extra):
    args = ["--steps", str(STEPS), "--lr", str(at.SGD_LR), "--weight-decay", str(at.WD),
            "--optimizer", "sgd", "--momentum", str(at.SGD_MOMENTUM),
            "--clip-grad", str(CLIP), "--grad-accum", str(ACCUM), "--recompute",
            recompute] + extra
    dump = os.path.join(work, "ck-" + tag + ".mlir")
    if plan:
        args += ["--plan-spec", plan, "--dump-partitioned", dump]
    losses, weights, stderr = gr.train_and_read(weft, model, work, tag, args)
    return losses, weights, stderr, dump


def evaluate(weft, model, plan, extra, pipeline="pp=1"):
    # dp=2, one sequence per rank per micro-batch: ACCUM micro-batches a step
    # (without dp, dp=1 and both sequences on the rank).
    # The run's frozen weights are frozen in the step the cost model counts.
    freeze = ["--freeze", extra[extra.index("--freeze") + 1]] if "--freeze" in extra else []
    mbs = 1
    if "dp=" not in plan:
        plan, mbs = "dp=1," + plan, 2
    proc = subprocess.run(
        [weft, "plan", model, "--cluster", "a100-80g:8x1", "--global-batch", str(2 * ACCUM),
         "--evaluate", plan + "," + pipeline + ",mbs=%d" % mbs, "--allow-oom", "--json",
         "-"]
        + freeze, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError("weft plan --evaluate %s failed: %s" % (plan, proc.stderr[-400:]))
    text = proc.stdout[:proc.stdout.index("\n}\n") + 3]
    return json.loads(text)["plans"][0]


def check(weft, model, work, plan, recompute, zero, extra, base):
    label = os.path.basename(model).split(".")[0]
    full = "%s,zero=%d" % (plan, zero)
    tag = "%s-%s-%s" % (label, full.replace(",", "_").replace("=", ""), recompute)
    losses, weights, stderr, dump = train(weft, model, work, tag, full, recompute, extra)
    err = at.relative(losses, base[0])
    werr = max(at.relative(weights[k], base[1][k]) for k in base[1])
    if err > 1e-5 or werr > 3e-5:
        raise RuntimeError("%s: differs from the unpartitioned run (losses %.1e, weights "
                           "%.1e)" % (tag, err, werr))
    text = open(dump).read()
    sizes = diff.mesh_sizes(text)
    funcs = gr.functions(text)
    for name in ("main", "main_reduce_gradients", "optimizer_step"):
        if name not in funcs:
            raise RuntimeError("%s: the partitioned step has no @%s" % (tag, name))

    def sent(name):
        return sum(diff.collective_bytes(line, sizes) for line in funcs[name][1])
    step_bytes, reduce_bytes, update_bytes = (
        sent("main"), sent("main_reduce_gradients"), sent("optimizer_step"))
    counted = re.search(r"bytes sent per rank in step 1:((?: \d+)+)", stderr)
    if not counted:
        raise RuntimeError("%s: weft train printed no byte counts" % tag)
    counted = [int(x) for x in counted.group(1).split()]
    # ZeRO-2 reduces after every micro-batch (weft.reduce_every_micro_batch).
    every = "weft.reduce_every_micro_batch" in funcs["main"][0]
    if every != (zero >= 2):
        raise RuntimeError("%s: the step is%s marked weft.reduce_every_micro_batch"
                           % (tag, "" if every else " not"))
    reductions = ACCUM if zero >= 2 else 1
    expected = ACCUM * step_bytes + reductions * reduce_bytes + update_bytes
    if any(c != expected for c in counted):
        raise RuntimeError("%s: ranks sent %s bytes in step 1; %d x %d (step) + %d x %d "
                           "(reduction) + %d (optimizer step) = %d"
                           % (tag, counted, ACCUM, step_bytes, reductions, reduce_bytes,
                              update_bytes, expected))
    group_axes = [a for a in ("dp", "cp", "ulysses") if sizes.get(a, 1) > 1]
    n = 1
    for axis in group_axes:
        n *= sizes[axis]
    # What each gradient a rank holds became: the optimizer step's gradient
    # argument (the rank's block) against the step's result. The block is the
    # step's result split further over the group that reduce-scattered it.
    name = re.compile(r'gradient_of = "([^"]+)"')
    held = {name.search(attrs).group(1): gr.elements(shape) for shape, _, attrs
            in gr.result_attrs(funcs["main"][0]) if "gradient_of" in attrs}
    # (Frozen weights, --freeze: LLaMA's rotary tables, get no gradient, and
    # weft plan --freeze leaves them out of the figures below.)
    total = sum(held.values())
    args = signature_entries(funcs["optimizer_step"][0], results=False)
    slot = re.compile(r'parameter = "([^"]+)", role = "(\w+)"')
    blocks, state, stored = {}, 0, {}
    for shape, attrs in args:
        found = slot.search(attrs)
        if found and found.group(2) == "grad":
            blocks[found.group(1)] = gr.elements(shape)
        elif found and found.group(2) == "param":
            stored[found.group(1)] = gr.elements(shape)
        else:
            state += gr.elements(shape) if found else 0
    if set(blocks) - set(held):
        raise RuntimeError("%s: the optimizer step updates %s, which the step returns no "
                           "gradient of" % (tag, sorted(set(blocks) - set(held))))
    # Per trained parameter, the size of the group its state is sharded over.
    groups = {k: held[k] // blocks[k] for k in blocks}
    trained = sum(held[k] for k in blocks)
    over = {}
    for k in blocks:
        over[groups[k]] = over.get(groups[k], 0) + held[k]
    # The cost model counts the elements a rank holds.
    predicted = evaluate(weft, model, full, extra)
    reduce_model = int(predicted["grad_reduce_bytes"])
    gather_model = int(predicted.get("param_gather_bytes", 0))
    if zero == 3:
        # ZeRO-3's collectives are costed inside the pipeline's steps, not
        # as these two figures.
        if reduce_model or gather_model:
            raise RuntimeError("%s: the cost model's grad_reduce_bytes %d and "
                               "param_gather_bytes %d are not 0 under ZeRO-3"
                               % (tag, reduce_model, gather_model))
    elif reduce_model != reductions * ((n - 1) * 4 * total // n):
        raise RuntimeError("%s: the cost model's grad_reduce_bytes is %d; %d ring "
                           "reduce-scatter(s) over %d ranks of the %d gradient elements a "
                           "rank holds (f32) are %d"
                           % (tag, reduce_model, reductions, n, total,
                              reductions * ((n - 1) * 4 * total // n)))
    if zero < 3 and gather_model != (n - 1) * 2 * total // n:
        raise RuntimeError("%s: the cost model's param_gather_bytes is %d; the ring "
                           "all-gather of %d bf16 weights over %d ranks is %d"
                           % (tag, gather_model, total, n, (n - 1) * 2 * total // n))
    # The runtime's all-gathers (the optimizer step's) move each sharded
    # parameter in f32 over its group.
    gathers = sum(diff.collective_bytes(line, sizes) for line in funcs["optimizer_step"][1]
                  if "weft.all_gather" in line)
    expected_gathers = sum((groups[k] - 1) * 4 * blocks[k] for k in blocks)
    if zero < 3 and gathers != expected_gathers:
        raise RuntimeError("%s: the optimizer step all-gathers %d bytes; its sharded f32 "
                           "parameters over their groups are %d"
                           % (tag, gathers, expected_gathers))
    # Optimizer state: the cost model's 12 bytes per parameter a rank updates
    # (f32 master weight and two moments) / the group; weft train's SGD keeps
    # one momentum buffer per trained parameter, of the gradient's block.
    optimizer_elements = predicted["memory"]["optimizer_gib"] * 2 ** 30 / 12
    if abs(optimizer_elements - total / n) > 0.5:
        raise RuntimeError("%s: the cost model's optimizer memory is %.1f parameters; "
                           "the %d a rank holds / %d are %.1f"
                           % (tag, optimizer_elements, total, n, total / n))
    if state != sum(blocks.values()):
        raise RuntimeError("%s: a rank holds %d momentum elements; its gradient blocks "
                           "have %d" % (tag, state, sum(blocks.values())))
    # Gradients: ZeRO-2 accumulates the reduced blocks, ZeRO-1 the whole
    # partial gradients (the cost model: 4 bytes per parameter, / the group
    # with ZeRO-2).
    gradient_elements = predicted["memory"]["gradients_gib"] * 2 ** 30 / 4
    model_grads = total / n if zero >= 2 else total
    if abs(gradient_elements - model_grads) > 0.5:
        raise RuntimeError("%s: the cost model's gradient memory is %.1f elements, "
                           "expected %.1f" % (tag, gradient_elements, model_grads))
    accumulated = (sum(blocks[k] for k in blocks) + (total - trained)) if zero >= 2 else total
    # ZeRO-3: the weights a rank stores (the optimizer step's parameters)
    # and what the step all-gathers of them per micro-batch.
    storage = ""
    if zero == 3:
        kept = sum(stored.values())
        whole = sum(held[k] for k in stored if stored[k] * n == held[k])
        group = "over @mesh [%s]" % ", ".join('"%s"' % a for a in group_axes)
        step_gathers = sum(diff.collective_bytes(line, sizes) for line in funcs["main"][1]
                           if "weft.all_gather" in line and group in line)
        if whole == 0 or step_gathers == 0:
            raise RuntimeError("%s: ZeRO-3 stores no weight over the %d-rank group (%d of "
                               "%d elements kept) or gathers none (%d bytes)"
                               % (tag, n, kept, trained, step_gathers))
        weights_model = predicted["memory"]["weights_gib"] * 2 ** 30 / 2
        # The cost model's ZeRO-3 bytes: gathers in bf16, reduce-scatters in
        # f32; the runtime's gathers are f32: twice its gather bytes, which
        # are the total less the f32 reduce-scatter of every weight.
        shard_model = int(predicted.get("shard_comm_bytes", 0))
        scatter_model = ACCUM * ((n - 1) * 4 * total // n)
        runtime_zero3 = ACCUM * (step_gathers + reduce_bytes)
        model_in_f32 = 2 * (shard_model - scatter_model) + scatter_model
        # The cost model assumes one gather of every layer weight in forward
        # and one in backward, and of the embedding and head in forward only;
        # the program gathers per use, which the recompute mode moves a little
        # (a backward that reads a value computed from the forward's gathered
        # weight gathers less; under tp with no recomputation, more).
        if abs(runtime_zero3 - model_in_f32) > 0.10 * model_in_f32:
            raise RuntimeError("%s: ZeRO-3's collectives send %d bytes per rank in a step; "
                               "the cost model's shard_comm_bytes %d is %d with f32 gathers"
                               % (tag, runtime_zero3, shard_model, model_in_f32))
        storage = ("; ZeRO-3 stores %d of the %d trained weight elements per rank (%.1f%% "
                   "stored over all %d ranks), the step all-gathers %d bytes of them per "
                   "micro-batch, the cost model's weight memory %d elements (its 1/%d "
                   "plus two layers gathered); ZeRO-3 collectives per step: runtime %d "
                   "bytes, cost model %d (bf16 gathers; %d with f32 gathers, %+.2f%%)"
                   % (kept, trained, 100.0 * whole / trained, n, step_gathers,
                      round(weights_model), n, runtime_zero3, shard_model, model_in_f32,
                      100.0 * (runtime_zero3 - model_in_f32) / model_in_f32))
    if over.get(n, 0) + over.get(2 * n, 0) == 0:
        raise RuntimeError("%s: no gradient is reduce-scattered over the %d-rank group"
                           % (tag, n))
    shares = ", ".join("%.1f%% over %d" % (100.0 * count / trained, g)
                       for g, count in sorted(over.items(), reverse=True))
    return ("%s: equals the unpartitioned run (losses %.1e, weights %.1e); step 1 sent %d "
            "bytes per rank = %d x %d (step) + %d x %d (reduction) + %d (optimizer step); of the "
            "%d trained gradient elements a rank holds, state sharded %s rank(s); optimizer "
            "state per rank %d elements, the cost model's %d (%d / %d); gradients "
            "accumulated per rank %d elements, the cost model's %d; cost model "
            "reduce-scatter %d bytes, all-gather %d (bf16), runtime reduction %d x %d, "
            "gathers %d (f32)"
            % (tag, err, werr, counted[0], ACCUM, step_bytes, reductions, reduce_bytes,
               update_bytes, trained, shares, state, round(optimizer_elements), total, n,
               accumulated, round(gradient_elements), reduce_model, gather_model,
               reductions, reduce_bytes, gathers) + storage)


def check_pipeline(weft, model, work, extra, base):
    """ZeRO-1 with pipeline stages (pp=2 x dp=2, m=2): each pipeline rank's
    optimizer step holds its stages' parameters, which are the cost model's
    parameters of that stage exactly, and its state in blocks over dp."""
    label = os.path.basename(model).split(".")[0]
    pipeline = "pp=2,m=%d,schedule=1f1b" % ACCUM
    plan = "dp=2,zero=1," + pipeline
    tag = "%s-pp2_dp2_zero1" % label
    losses, weights, _, dump = train(weft, model, work, tag, plan, "full", extra)
    err = at.relative(losses, base[0])
    werr = max(at.relative(weights[k], base[1][k]) for k in base[1])
    if err > 1e-5 or werr > 3e-5:
        raise RuntimeError("%s: differs from the unpartitioned run (losses %.1e, weights "
                           "%.1e)" % (tag, err, werr))
    stages = evaluate(weft, model, "dp=2,zero=1", extra, pipeline)["stage_memory"]
    funcs = gr.functions(open(dump).read())
    slot = re.compile(r'parameter = "([^"]+)", role = "(\w+)"')
    # Frozen weights (--freeze) a stage reads: held, but not updated; the
    # cost model's frozen_weights_gib.
    frozen = re.compile(extra[extra.index("--freeze") + 1]) if "--freeze" in extra else None
    param = re.compile(r'weft\.parameter "([^"]+)" : tensor<([0-9x]*?)x?f32>')
    report = []
    for rank, stage in enumerate(stages):
        name = "optimizer_step_pp%d" % rank
        if name not in funcs:
            raise RuntimeError("%s: the partitioned step has no @%s" % (tag, name))
        held, state = 0, 0
        for shape, attrs in signature_entries(funcs[name][0], results=False):
            found = slot.search(attrs)
            if found and found.group(2) == "param":
                held += gr.elements(shape)
            elif found and found.group(2) == "momentum_buffer":
                state += gr.elements(shape)
        fixed = {}
        for fname, (signature, body) in funcs.items():
            if "rank = %d : i64, role = \"forward\"" % rank not in signature:
                continue
            for line in body:
                found = param.search(line)
                if found and frozen and frozen.search(found.group(1)):
                    fixed[found.group(1)] = gr.elements(found.group(2))
        weights_model = stage["weights_gib"] * 2 ** 30 / 2
        frozen_model = stage.get("frozen_weights_gib", 0) * 2 ** 30 / 2
        optimizer_model = stage["optimizer_gib"] * 2 ** 30 / 12
        whole = held + sum(fixed.values())
        if (abs(weights_model - whole) > 0.5 or abs(frozen_model - sum(fixed.values())) > 0.5
                or abs(optimizer_model - held / 2) > 0.5):
            raise RuntimeError("%s: pipeline rank %d holds %d parameters (%d frozen); the "
                               "cost model's stage has %.1f (%.1f frozen), and optimizer "
                               "state for %.1f (expected %.1f)"
                               % (tag, rank, whole, sum(fixed.values()), weights_model,
                                  frozen_model, optimizer_model, held / 2))
        report.append("rank %d: %d weights as the cost model's stage (%d of them frozen, "
                      "as its frozen_weights_gib), state %d elements (the cost model's %d, "
                      "/ 2)" % (rank, whole, sum(fixed.values()), state,
                                round(optimizer_model)))
    return ("%s: equals the unpartitioned run (losses %.1e, weights %.1e); %s"
            % (tag, err, werr, "; ".join(report)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--weft", required=True)
    args = parser.parse_args()
    failures, pairs = [], 0
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, at.CLASSES, size=4096).astype(np.uint16)
    with tempfile.TemporaryDirectory() as work:
        np.save(os.path.join(work, "tokens.npy"), tokens)
        for model, label, extra in at.training_models(work):
            base = train(args.weft, model, work, label + "-single", None, "full", extra)
            try:
                print(check_pipeline(args.weft, model, work, extra, base))
                pairs += 1
            except RuntimeError as e:
                failures.append(str(e))
            for plan, recompute in PLANS:
                for zero in (1, 2, 3):
                    try:
                        print(check(args.weft, model, work, plan, recompute, zero, extra,
                                    base))
                        pairs += 1
                    except RuntimeError as e:
                        failures.append(str(e))
    print("checked %d (model, plan, ZeRO stage) training pairs; %d failed"
          % (pairs, len(failures)))
    for failure in failures:
        print("FAILED: " + failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
