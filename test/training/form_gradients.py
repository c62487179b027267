#!/usr/bin/python3
"""Trains one formulation of test/raising/corpus.py with `weft train` and
with torch. One SGD step at lr 1 without weight decay moves each weight by
minus its gradient, so the checkpoint's weights give weft's gradient of
every parameter, compared with torch's; then two AdamW steps' losses (as
test/training/against_torch.py runs them). Unpartitioned and under each
plan given.

  - parallel_block_gptj (the default; tp=2, pp=2, cp=2): GPT-J's interleaved
    rotary embedding, x[..., ::2] and x[..., 1::2], in parallel attention and
    MLP. The strided slices' gradient is what this checks: before it was
    built, `weft train` refused the model.
  - sliding_window_mistral (cp=2, its all-gather form, cp=2 with ulysses=2):
    Mistral's sliding window, an [s, s] mask. Ring attention's forward and
    backward gather each K/V block's columns of it; before, the ring refused
    the model.
  - alibi_bloom (tp=2, cp=2, ulysses=2): BLOOM's ALiBi bias, added to the
    merged batch·heads product by baddbmm, with a causal | padding mask on
    the scores apart; raised to one causal attention whose mask is the bias
    where the padding keeps (weft train feeds attention_mask with ones).
  - alibi_mpt (tp=2, cp=2, ulysses=2): MPT's ALiBi, a constant [1, h, 1, s]
    bias with a causal fill, raised to the attention's alibi slopes: the
    fused attention and its backward with the slopes (split with the heads
    under tp and ulysses, positions around the ring under cp).
  - t5_relative_bias (tp=2, pp=2, cp=2, ulysses=2): T5's learned bias per
    head of each bucketed distance, added to unscaled scores: a mask that
    takes a gradient, so the attention's backward differentiates its
    decomposition (the relative table's gradient is checked with the rest).
  - t5_shared_position_bias (pp=2, cp=2): Hugging Face's T5Stack, whose
    first block alone has the table and hands the position bias (with the
    causal mask) to every later block: the table's gradient sums every
    block's, across pipeline stages.
  - sinusoidal_positions (tp=2, pp=2, cp=2): the Transformer's sinusoidal
    encoding, a persistent buffer `pe` (PyTorch's tutorial), and
    rotary_inv_freq_buffer (tp=2, cp=2): GPT-NeoX's persistent rotary
    inv_freq. The export stores both as initializers; torch trains neither,
    and the import makes them constants (fixed position buffers). Every run
    here trains without --freeze and fails if the checkpoint holds a weight
    torch does not train (until 2026-12-07 the rotary forms passed --freeze
    _cached$).
  - seq2seq (tp=2, dp=2, pp=2): not a corpus formulation but the
    encoder-decoder of test/Import/Inputs/encoder_decoder.py
    (torch.nn.Transformer, sources of 12 tokens, targets of 8), exported
    with dynamic axes and bound by --input-shape. weft train feeds the
    decoder's input the token windows and the encoder's each row's 12
    tokens before them; torch is fed the same. Before, `weft train` could
    not bind the source nor feed it.
  - own_loss_shifted (tp=2, pp=2), own_loss_padded (tp=2, cp=2),
    own_loss_targets, own_loss_nll: the GPT-2 formulation written to compute
    its own loss (class OwnLoss): Hugging Face's (loss, logits) with the
    labels shifted inside (and padded, as transformers 4.46 does), nanoGPT's
    (logits, loss) of targets, and nll_loss of log_softmax. weft train takes
    the loss out (-weft-lift-model-loss) and computes it from the logits;
    torch trains the logits' loss. Before, the import refused
    SoftmaxCrossEntropyLoss.
  - --objective mlm (encoder_no_mask; tp=2, dp=2, cp=2): BERT's masked
    language modelling. weft train chooses positions, masks their ids and
    counts their loss only; torch is fed the same ids and labels (the draws
    reimplemented below), with cross_entropy's ignore_index; with
    --special-token-ids (the ctest: 0,5,9) those ids are never chosen.

  - packed (--packed mask,positions,loss; tp=2, dp=2, cp=2, pp=2, ...):
    documents packed into the windows, each ended by the token EOD (a third
    of the stream), on the LLaMA-style formulation that takes position_ids
    (rotary tables and a learned position embedding both read them).
    weft train masks attention within each document (--reset-attention-mask),
    restarts the positions after each EOD (--reset-position-ids) and counts
    no loss where the input is EOD (--eod-mask-loss). Torch computes no mask:
    it runs the model on each document alone (with positions from 0, or the
    window's), concatenates the logits and scores them against the window's
    labels; without `mask` it runs whole rows with the positions.

    /usr/bin/python3 form_gradients.py --weft build/bin/weft [--form NAME --plans P...]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
import torch
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "raising"))
import against_torch as at  # noqa: E402
import corpus  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "Import", "Inputs"))
import encoder_decoder  # noqa: E402

# The encoder-decoder's source length.
SOURCE = 12
# Masked language modelling (--objective mlm): the mask token and the share of
# positions chosen (BERT's 0.15: with rows of 8 tokens, about one row in four
# draws none and has its nearest position chosen).
MASK_TOKEN, MLM_PROBABILITY = 3, 0.15
OBJECTIVE = "next-token"
# --special-token-ids: ids masked language modelling never chooses.
SPECIAL = []
# --packed: the end-of-document token, and which of Megatron-LM's packed
# document options weft train is given (mask, positions, loss).
EOD = 1
PACKED = set()


def split_mix(x):
    """SplitMix64's output function, as weft's runtime draws with it."""
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def masked(ids, step, vocab, seed=0):
    """weft train's --objective mlm of the step-th window: the chosen
    positions' labels are their tokens (the others -100), and their ids the
    mask token (80 %), a random token (10 %) or their own; a row that draws
    none has the position with the lowest draw chosen."""
    ids = ids.clone()
    labels = torch.full_like(ids, -100)
    flat, out = ids.view(-1), labels.view(-1)
    rows, seq = ids.shape

    def choose(i, h):
        kind = ((h >> 16) & 0xFFFFFF) / float(1 << 24)
        out[i] = flat[i]
        if kind < 0.8:
            flat[i] = MASK_TOKEN
        elif kind < 0.9:
            flat[i] = split_mix(h) % vocab
    for r in range(rows):
        draws = [(i, split_mix(seed ^ split_mix(step * flat.numel() + i)))
                 for i in range(r * seq, (r + 1) * seq) if int(flat[i]) not in SPECIAL]
        if not draws:
            continue
        chosen = [(i, h) for i, h in draws if (h >> 40) / float(1 << 24) < MLM_PROBABILITY]
        for i, h in chosen or [min(draws, key=lambda d: d[1] >> 40)]:
            choose(i, h)
    return ids, labels


class OwnLoss(torch.nn.Module):
    """The corpus's default formulation written to compute its own loss, as
    training code writes it:

      - targets (nanoGPT's forward(idx, targets)): (logits,
        cross_entropy(logits.view(-1, V), targets.view(-1), ignore_index=-1));
      - shifted (Hugging Face's ...ForCausalLM with labels=input_ids): (loss,
        logits), logits[..., :-1, :] scored against labels[..., 1:];
      - nll: nll_loss(log_softmax(logits, -1).view(-1, V), targets.view(-1));
      - padded (transformers 4.46 on, ForCausalLMLoss): (loss, logits), every
        position's f32 logits against pad(labels, (0, 1), value=-100)[..., 1:].

    weft train takes the loss out (-weft-lift-model-loss) and computes it
    from the logits with its own labels; `logits` is the model without it,
    which torch's side trains."""

    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.model = corpus.Model(corpus.form("hf_gpt2_where"))

    def logits(self, ids):
        return self.model(ids)

    def forward(self, ids, labels):
        logits = self.model(ids)
        vocab = logits.shape[-1]
        if self.kind == "targets":
            return logits, torch.nn.functional.cross_entropy(
                logits.view(-1, vocab), labels.view(-1), ignore_index=-1)
        if self.kind == "nll":
            logp = torch.nn.functional.log_softmax(logits, dim=-1)
            return torch.nn.functional.nll_loss(logp.view(-1, vocab), labels.view(-1)), logits
        if self.kind == "padded":
            labels = torch.nn.functional.pad(labels, (0, 1), value=-100)
            shift = labels[..., 1:].contiguous()
            return torch.nn.functional.cross_entropy(
                logits.float().view(-1, vocab), shift.view(-1), ignore_index=-100), logits
        shift_logits = logits[..., :-1, :].contiguous().float()
        shift_labels = labels[..., 1:].contiguous()
        loss = torch.nn.CrossEntropyLoss()(shift_logits.view(-1, vocab), shift_labels.view(-1))
        return loss, logits


class Packed(corpus.Model):
    """The LLaMA-style formulation whose forward takes position_ids, which
    both the rotary tables and a learned position embedding read (Hugging
    Face's GPT-2 reads wpe(position_ids))."""

    def __init__(self):
        super().__init__(corpus.form("rotary_position_ids_input"))

    def forward(self, input_ids, position_ids):
        inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[:, None], emb.sin()[:, None]
        x = self.embed(input_ids) + self.pos(position_ids)
        for block in self.blocks:
            x = block(x, cos, sin, None)
        return self.head(self.norm(x))

    def packed(self, ids):
        """The logits of rows of packed documents, with no mask of
        documents: with `mask`, each document alone (each ends with its EOD;
        its positions from 0 under `positions`, else the window's),
        concatenated; else each row whole, with the positions."""
        rows = []
        for row in ids:
            starts = [0] + [i + 1 for i in range(len(row) - 1) if int(row[i]) == EOD]
            spans = list(zip(starts, starts[1:] + [len(row)]))
            positions = torch.cat([torch.arange(b - a) if "positions" in PACKED
                                   else torch.arange(a, b) for a, b in spans])
            if "mask" not in PACKED:
                rows.append(self(row[None], positions[None]))
                continue
            rows.append(torch.cat([self(row[None, a:b], positions[None, a:b])
                                   for a, b in spans], dim=1))
        return torch.cat(rows, dim=0)


OWN_LOSS = {"own_loss_targets": "targets", "own_loss_shifted": "shifted",
            "own_loss_nll": "nll", "own_loss_padded": "padded"}


def build(form):
    torch.manual_seed(1)
    if form == "seq2seq":
        return encoder_decoder.Seq2Seq()
    if form in OWN_LOSS:
        return OwnLoss(OWN_LOSS[form])
    if form == "packed":
        return Packed()
    return corpus.Model(corpus.form(form))


def logits_of(model, inputs):
    if isinstance(model, Packed):
        return model.packed(*inputs)
    return model.logits(*inputs) if isinstance(model, OwnLoss) else model(*inputs)


def feed(form, tokens, step):
    """The model's inputs and the labels of the step-th window: the token ids
    (and for the encoder-decoder first the SOURCE tokens before each row, as
    weft train's "source" fill takes them)."""
    ids, labels = at.windows(tokens, step, corpus.BATCH, corpus.SEQ)
    if OBJECTIVE == "mlm":
        ids, labels = masked(ids, step, corpus.VOCAB)
    if "loss" in PACKED:
        labels = labels.masked_fill(ids == EOD, -100)
    if form != "seq2seq":
        return (ids,), labels
    positions = len(tokens) - (corpus.BATCH * corpus.SEQ + 1) + 1
    offset = (step * corpus.BATCH * corpus.SEQ) % positions
    starts = (offset + corpus.SEQ * np.arange(corpus.BATCH)) % len(tokens)
    at_ = (starts[:, None] - SOURCE + np.arange(SOURCE)[None, :]) % len(tokens)
    return (torch.from_numpy(tokens[at_].astype(np.int64)), ids), labels


def export(form, path):
    model = build(form).train()
    ids = torch.zeros(corpus.BATCH, corpus.SEQ, dtype=torch.long)
    if form in OWN_LOSS:
        outputs = ["logits", "loss"] if OWN_LOSS[form] == "targets" else ["loss", "logits"]
        torch.onnx.export(model, (ids, ids), path, opset_version=17,
                          input_names=["input_ids", "targets" if OWN_LOSS[form] in
                                       ("targets", "nll") else "labels"],
                          output_names=outputs, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        return []
    if form == "packed":
        torch.onnx.export(model, (ids, ids), path, opset_version=17,
                          input_names=["input_ids", "position_ids"],
                          output_names=["logits"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        return []
    if form != "seq2seq":
        torch.onnx.export(model, (ids,), path, opset_version=17, input_names=["input_ids"],
                          output_names=["logits"], do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        return []
    source = torch.zeros(corpus.BATCH, SOURCE, dtype=torch.long)
    torch.onnx.export(model, (source, ids), path, opset_version=17,
                      input_names=["src_ids", "tgt_ids"], output_names=["logits"],
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                      dynamic_axes={"src_ids": {0: "batch", 1: "source"},
                                    "tgt_ids": {0: "batch", 1: "sequence"},
                                    "logits": {0: "batch", 1: "sequence"}})
    return ["--input-shape", "src_ids=%dx%d" % (corpus.BATCH, SOURCE)]


def torch_steps(form, tokens, steps):
    model = build(form)
    params = [p for _, p in model.named_parameters()]
    opt = torch.optim.AdamW(params, lr=at.LR, weight_decay=at.WD, foreach=False)
    losses, norms = [], []
    for step in range(steps):
        opt.zero_grad()
        inputs, labels = feed(form, tokens, step)
        logits = logits_of(model, inputs)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))
        loss.backward()
        norms.append(float(torch.sqrt(sum((p.grad ** 2).sum() for p in params
                                           if p.grad is not None))))
        opt.step()
        losses.append(loss.item())
    return losses, norms


def torch_gradients(form, tokens):
    model = build(form)
    inputs, labels = feed(form, tokens, 0)
    logits = logits_of(model, inputs)
    if OWN_LOSS.get(form) in ("targets", "nll"):
        # The model's own loss with the next tokens as its targets is the
        # loss weft computes.
        own = model(*inputs, labels)
        own = own[1] if OWN_LOSS[form] == "targets" else own[0]
        want = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 labels.reshape(-1))
        assert abs(own.item() - want.item()) < 1e-6, (own.item(), want.item())
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                      labels.reshape(-1)).backward()
    return {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None}


def weft_train(weft, path, work, plan, devices, extra):
    out = os.path.join(work, "ck-%s-%s" % (re.sub("[=,]", "", plan) or "single", extra[1]))
    command = [weft, "train", path, "--data", os.path.join(work, "tokens.npy"),
               "--batch-size", str(corpus.BATCH),
               "--seq-len", str(corpus.SEQ), "--save", out] + extra
    if plan:
        command += ["--plan-spec", plan, "--devices", str(devices)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return None, None, proc.stderr.strip()[-300:]
    losses = [float(l) for l in re.findall(r"loss ([0-9.]+)", proc.stdout)]
    step = os.path.join(out, open(os.path.join(out, "latest")).read().strip())
    manifest = json.load(open(os.path.join(step, "manifest.json")))
    weights = {e["name"]: np.load(os.path.join(step, e["value"]))
               for e in manifest["parameters"]}
    return losses, at.merge_parts(weights, path), None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--form", default="parallel_block_gptj")
    parser.add_argument("--plans", nargs="+", default=["tp=2", "pp=2", "cp=2"])
    parser.add_argument("--objective", default="next-token", choices=["next-token", "mlm"])
    parser.add_argument("--special-token-ids", default="",
                        help="--objective mlm: ids never chosen, e.g. 0,5,9")
    parser.add_argument("--packed", default="mask,positions,loss",
                        help="--form packed: of mask, positions and loss, what "
                        "weft train is given (--reset-attention-mask, "
                        "--reset-position-ids, --eod-mask-loss)")
    args = parser.parse_args()
    global OBJECTIVE, SPECIAL, PACKED
    OBJECTIVE = args.objective
    SPECIAL = [int(i) for i in args.special_token_ids.split(",") if i]
    if args.form == "packed":
        PACKED = set(p for p in args.packed.split(",") if p)
        assert PACKED <= {"mask", "positions", "loss"}, args.packed
    failed = 0
    with tempfile.TemporaryDirectory() as work:
        path = os.path.join(work, args.form + ".onnx")
        shapes = export(args.form, path)
        initial = {t.name: numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
        rng = np.random.default_rng(7)
        tokens = rng.integers(0, corpus.VOCAB, 4096).astype(np.int64)
        if args.form == "packed":
            # Documents of 3 tokens on average, each ended by EOD.
            tokens[rng.random(len(tokens)) < 1 / 3] = EOD
        np.save(os.path.join(work, "tokens.npy"), tokens)
        want_grads = torch_gradients(args.form, tokens)
        trained = [n for n, _ in build(args.form).named_parameters()]
        want_losses, _ = torch_steps(args.form, tokens, 2)
        if OBJECTIVE == "mlm":
            shapes += ["--objective", "mlm", "--mask-token-id", str(MASK_TOKEN),
                       "--mlm-probability", str(MLM_PROBABILITY)]
            if SPECIAL:
                shapes += ["--special-token-ids", ",".join(map(str, SPECIAL))]
        if args.form == "packed":
            shapes += ["--eod-token", str(EOD)] + [
                flag for key, flag in (("mask", "--reset-attention-mask"),
                                       ("positions", "--reset-position-ids"),
                                       ("loss", "--eod-mask-loss")) if key in PACKED]
        sgd = ["--steps", "1", "--optimizer", "sgd", "--lr", "1", "--weight-decay", "0"] + shapes
        adamw = ["--steps", "2", "--lr", str(at.LR), "--weight-decay", str(at.WD)] + shapes
        for plan in [""] + args.plans:
            devices = int(np.prod([int(part.split("=")[1]) for part in plan.split(",")
                                   if part.split("=")[1].isdigit()])) if plan else 1
            _, weights, error = weft_train(args.weft, path, work, plan, devices, sgd)
            losses, _, error2 = weft_train(args.weft, path, work, plan, devices, adamw)
            if error or error2 or len(losses) != 2:
                print("FAIL %-22s weft train failed: %s" % (plan or "single", error or error2))
                failed += 1
                continue
            # The largest error of any parameter's gradient, relative to its
            # largest element (GPT-J's strided slices carry q's and k's),
            # beyond the rounding of the f32 weights it is read from (a few
            # units in their last place of each weight). A gradient that is 0
            # in exact arithmetic (the key bias's without rotary embeddings,
            # which adds the same to every key's score) is rounding on both
            # sides, in sums of cancelling terms that each plan orders its own
            # way: it is measured against 1e-4 of the largest gradient of all
            # instead (so the check is then to 1e-8 of that: T5's key bias
            # under cp=2 is 2e-10 of it off torch's).
            floor = 1e-4 * max(float(np.abs(g).max()) for g in want_grads.values())
            grad_err, worst = 0.0, ""
            for name, want in want_grads.items():
                got = initial[name] - weights[name]
                ulps = 4 * np.spacing(np.abs(initial[name]).astype(np.float32))
                beyond = np.maximum(np.abs(got - want) - ulps, 0.0)
                err = float(beyond.max()) / max(float(np.abs(want).max()), floor)
                if err > grad_err:
                    grad_err, worst = err, name
            loss_err = max(abs(l - w) / w for l, w in zip(losses, want_losses))
            # Weft trains what torch trains: a buffer the file stores as an
            # initializer (rotary tables, a sinusoidal encoding) is not
            # trained without --freeze (the import makes it a constant).
            untrained = sorted(set(weights) - set(trained))
            if untrained:
                print("FAIL %-22s weft trains what torch does not: %s"
                      % (plan or "single", ", ".join(untrained)))
            ok = grad_err < 1e-4 and loss_err < 1e-5 and not untrained
            failed += not ok
            print("%s %-22s gradients of %d parameters: max rel error %.1e beyond the f32 "
                  "weights' rounding (%s); AdamW losses "
                  "%s (torch %s), max rel error %.1e" %
                  ("ok  " if ok else "FAIL", plan or "single", len(want_grads), grad_err, worst,
                   losses, ["%.6f" % w for w in want_losses], loss_err))
    print("%d plans, %d failed" % (1 + len(args.plans), failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
