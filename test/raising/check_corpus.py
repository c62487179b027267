#!/usr/bin/python3
"""Checks that Weft raises, runs and partitions every formulation of corpus.py.

    /usr/bin/python3 test/raising/check_corpus.py --weft build/bin/weft [--dir D] [NAME...]

Exports the corpus (into a temporary directory unless --dir names one that has
it), then for each formulation and each of its exports (opsets 14 and 17,
static and dynamic axes, and the opset-18 form):

  - `weft import` raises every layer's attention to one weft.attention (no
    weft.softmax is left), its norms to weft.layer_norm / weft.rms_norm and its
    activations to weft.gelu / weft.silu / weft.relu, as the formulation says;
  - `weft run` matches torch's output within rtol 1e-4, atol 1e-5;

and, on the opset-17 static export, `weft run --devices 2` under tp=2 and
under cp=2 (ring attention; its all-gather form too for a sliding window's mask) and
under dp=2 matches the unpartitioned run within 1e-5 of the
output's magnitude. Prints one line per formulation and a summary; exits 1 if
any check fails.
"""
import argparse
import concurrent.futures
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus  # noqa: E402

NORMS = {"layernorm": "layer_norm", "ln_manual": "layer_norm", "ln_rsqrt": "layer_norm",
         "ln_nobias": "layer_norm", "rms": "rms_norm", "rms_div": "rms_norm",
         "rms_f32": "rms_norm", "rms_mean_sq": "rms_norm", "rms_gemma": "rms_norm"}
ACTIVATIONS = {"gelu": "gelu", "gelu_tanh": "gelu", "gelu_new": "gelu", "relu": "relu",
               "relu_squared": "relu",
               "silu_manual": "silu", "swiglu": "silu", "swiglu_fused": "silu",
               "geglu": "gelu",
               # x * sigmoid(1.702 x) is an approximation of GELU, not GELU:
               # raising it to weft.gelu would change the numbers.
               "gelu_sigmoid": "sigmoid"}


# Under tp=2 each rank of Megatron's split of these models sends, in f32
# (2 x 8 x 32 x 4 B = 2 KiB residuals): per layer two all-reduces of the
# residual (2 (n-1)/n S = S bytes each, 8 KiB for 2 layers), one all-reduce
# for the vocabulary-parallel embedding (2 KiB) and the all-gather of the
# column-split head's logits (2 KiB): 12 KiB, whatever the formulation. A
# fused QKV cut into a contiguous half, K/V heads repeated before the split
# or linears left unraised would show here as more or fewer bytes.
MEGATRON_TP2_BYTES = 12288
# A parallel block (GPT-J, GPT-NeoX, Falcon: x + attn(.) + mlp(.)) sums its two
# row-split outputs before one all-reduce per layer, as GPT-NeoX does: 8 KiB.
PARALLEL_TP2_BYTES = 8192


def stats(weft, path):
    """Counts of each weft op in the imported module, and of causal attentions
    (as "attention_causal")."""
    proc = subprocess.run([weft, "import", path, "--batch-size", str(corpus.BATCH),
                           "--seq-len", str(corpus.SEQ), "--no-weights"],
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return None, proc.stderr.strip()[-400:]
    counts = {}
    for line in proc.stdout.splitlines():
        m = re.match(r"\s*(?:%[\w#:]+ = )?weft\.(\w+)", line)
        if m:
            counts[m.group(1)] = counts.get(m.group(1), 0) + 1
            if m.group(1) == "attention" and re.search(r" causal[ :]", line):
                counts["attention_causal"] = counts.get("attention_causal", 0) + 1
            if m.group(1) == "attention" and re.search(r" window \d+ ", line):
                counts["attention_window"] = counts.get("attention_window", 0) + 1
            # A mask that broadcasts over the queries ([b, 1, 1, s]: padding).
            if m.group(1) == "attention" and re.search(r" mask .*x1x\d+xf32>\) ->", line):
                counts["attention_key_mask"] = counts.get("attention_key_mask", 0) + 1
    return counts, None


def check_raised(counts, f):
    layers = corpus.LAYERS
    problems = []
    if counts.get("attention", 0) != layers:
        problems.append("%d weft.attention, expected %d" % (counts.get("attention", 0), layers))
    if counts.get("softmax", 0):
        problems.append("%d weft.softmax left" % counts["softmax"])
    # Mistral's band mask is a sliding window, with no mask left (on the
    # even layers only where the formulation alternates local and global
    # layers, as Gemma 2).
    windowed = counts.get("attention_window", 0)
    expected = 0
    if f["mask"] in ("sliding_window", "window_padding_fill", "gemma2_padding"):
        expected = layers if f["window_layers"] == "all" else (layers + 1) // 2
    # With the padding of an attention_mask input, the window factors out
    # and a mask of the keys alone is left ([b, 1, 1, s]).
    if f["mask"] in ("window_padding_fill", "gemma2_padding") and \
            counts.get("attention_key_mask", 0) != layers:
        problems.append("%d weft.attention with a mask of the keys alone, expected %d" %
                        (counts.get("attention_key_mask", 0), layers))
    if windowed != expected:
        problems.append("%d weft.attention with a window, expected %d" %
                        (windowed, expected))
    causal = counts.get("attention_causal", 0)
    if causal != (layers if corpus.is_causal(f) else 0):
        problems.append("%d causal weft.attention, expected %d" %
                        (causal, layers if corpus.is_causal(f) else 0))
    norm = NORMS[f["norm"]]
    # One norm per layer in a parallel block. GPT-NeoX's two norms of the same
    # input are one normalization when the export writes them out (opset 14):
    # CSE computes it once and each branch scales it by its own weights.
    # Four in a sandwich block (Gemma 2 and 3: before and after each half).
    per_layer = {"parallel": 1, "sandwich": 4}.get(f["block"], 2)
    norms = {per_layer * layers + 1}
    if f["block"] == "parallel_two_norms":
        norms.add(layers + 1)
    if f["qk_norm"]:  # q's and k's RMSNorm in each layer
        norms = {n + 2 * layers for n in norms}
    if f["attention"] == "mla":  # the latents' RMSNorms in each layer
        norms = {n + (2 if f["mla_q_rank"] else 1) * layers for n in norms}
    if counts.get(norm, 0) not in norms:
        problems.append("%d weft.%s, expected %s" % (counts.get(norm, 0), norm,
                                                     " or ".join(map(str, sorted(norms)))))
    if counts.get("reduce_mean", 0):
        problems.append("%d weft.reduce_mean left" % counts["reduce_mean"])
    act = ACTIVATIONS[f["mlp"]]
    if counts.get(act, 0) != layers:
        problems.append("%d weft.%s, expected %d" % (counts.get(act, 0), act, layers))
    # Gemma 2's final logit soft-capping is one tanh of the logits, not of
    # an attention's scores.
    for leftover, allowed in (("erf", 0), ("tanh", 1 if f["final_softcap"] else 0)):
        if counts.get(leftover, 0) != allowed:
            problems.append("%d weft.%s left, expected %d" % (counts.get(leftover, 0),
                                                              leftover, allowed))
    if act != "sigmoid" and counts.get("sigmoid", 0):
        problems.append("%d weft.sigmoid left" % counts["sigmoid"])
    return problems


def run(weft, path, inputs, out, extra=()):
    command = [weft, "run", path, "-o", out, "--output-format", "npy"] + list(extra)
    for i in inputs:
        command += ["-i", i]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        return None, proc.stderr.strip()[-600:]
    sent = re.search(r"bytes sent per rank: (\d+)", proc.stderr)
    return np.load(os.path.join(out, "output_0.npy")), int(sent.group(1)) if sent else None


def check_form(weft, name, root, tmp):
    f = corpus.form(name)
    directory = os.path.join(root, name)
    data = os.path.join(directory, "test_data_set_0")
    inputs = sorted(os.path.join(data, p) for p in os.listdir(data) if p.startswith("input_"))
    expected = np.load(os.path.join(data, "output_0.npy"))
    problems = []
    base = None
    variants = ["opset%d%s" % (opset, "-dynamic" if dynamic else "") for opset in (14, 17)
                for dynamic in ((False, True) if f["dynamic"] else (False,))] + ["opset18"]
    for variant in variants:
        path = os.path.join(directory, "%s-%s.onnx" % (name, variant))
        counts, error = stats(weft, path)
        if error:
            problems.append("%s: import failed: %s" % (variant, error))
            continue
        problems += ["%s: %s" % (variant, p) for p in check_raised(counts, f)]
        got, error = run(weft, path, inputs, os.path.join(tmp, name + variant))
        if got is None:
            problems.append("%s: run failed: %s" % (variant, error))
            continue
        if not np.allclose(got, expected, rtol=1e-4, atol=1e-5):
            problems.append("%s: differs from torch by %.3g" %
                            (variant, float(np.abs(got - expected).max())))
        if variant == "opset17":
            base = got
    path = os.path.join(directory, "%s-opset17.onnx" % name)
    worst = {}
    if base is not None:
        # A sliding window runs under both forms of cp: each ring step hides
        # the keys outside the window by the K/V block's positions.
        specs = ["tp=2", "cp=2", "dp=2"]
        if f["mask"] in ("sliding_window", "window_padding_fill", "gemma2_padding"):
            specs.append("cp=2,cp-comm=all-gather")
        for spec in specs:
            got, sent = run(weft, path, inputs, os.path.join(tmp, name + spec),
                            ["--devices", "2", "--plan-spec", spec])
            if got is None:
                problems.append("%s: run failed: %s" % (spec, sent))
                continue
            # (A sandwich block's norms after attention and the MLP read
            # the row-split outputs all-reduced, as a sequential block's
            # residual adds do.)
            sequential = f["block"] in ("sequential", "sandwich", "post")
            wanted = MEGATRON_TP2_BYTES if sequential else PARALLEL_TP2_BYTES
            # OLMo 2's norm of the whole q and k projections, whose width
            # tp splits: each all-reduces one f32 per row (2 x 8 x 4 B) per
            # layer, where gathering q and k would send their halves.
            if f["qk_norm"] == "whole":
                wanted += corpus.LAYERS * 2 * corpus.BATCH * corpus.SEQ * 4
            if spec == "tp=2" and sent != wanted:
                problems.append("tp=2: each rank sent %s bytes; Megatron's column/row split "
                                "of this model sends %d (%s all-reduce%s of the residual "
                                "per layer, the embedding's and the head's)"
                                % (sent, wanted, "two" if sequential else "one",
                                   "s" if sequential else ""))
            scale = max(float(np.abs(base).max()), 1e-30)
            spec = spec.replace(",cp-comm=all-gather", "(all-gather)")
            worst[spec] = float(np.abs(got - base).max()) / scale
            if worst[spec] > 1e-5:
                problems.append("%s: differs from the unpartitioned run by %.3g of its "
                                "magnitude" % (spec, worst[spec]))
    return name, problems, worst


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--dir", help="corpus directory (exported there if missing)")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("names", nargs="*")
    args = parser.parse_args()
    names = args.names or list(corpus.FORMS)
    with tempfile.TemporaryDirectory() as tmp:
        root = args.dir or os.path.join(tmp, "corpus")
        for name in names:
            if not os.path.exists(os.path.join(root, name, "test_data_set_0", "output_0.npy")):
                corpus.export(name, root)
        failed = 0
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            results = pool.map(lambda n: check_form(args.weft, n, root, tmp), names)
            for name, problems, worst in results:
                partitioned = " ".join("%s %.1e" % kv for kv in sorted(worst.items()))
                if problems:
                    failed += 1
                    print("FAIL %-28s %s" % (name, partitioned))
                    for p in problems:
                        print("     " + p)
                else:
                    print("ok   %-28s raised, runs as torch; %s" % (name, partitioned))
        print("%d formulations, %d passed, %d failed" % (len(names), len(names) - failed, failed))
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
