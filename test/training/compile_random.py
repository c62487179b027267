#!/usr/bin/python3
"""`weft compile` on random transformers (test/partition/random_transformer.py:
1 to 8 query heads over 1 to 8 KV heads, hidden sizes that may equal the
vocabulary, GELU or SwiGLU, causal or not, with or without a loss), two
layers each, under the plans people run: tp, dp with Megatron SP, ring (cp),
Ulysses and their mix, pipeline stages (1F1B, ZB-H1, with tp and SP, with
ZeRO-3), ZeRO-2/3, AxoNN's 3-D tp and full recomputation.

For each (model, plan), `weft compile --train` (the CPU training program) and
`weft compile --target cuda` (the forward program, or the training program
where the plan has ZeRO or recomputation) must either write the program or refuse the plan
with a located `plan:` error (a plan that does not divide the model's heads
or widths); any other error fails. Each program is compiled twice and both
runs must write the same files, byte for byte: a model whose vocabulary
equals its hidden size once had the partitioner's weight splits decided in
pointer order, so that `weft compile --train` failed on most runs and passed
on some.
"""
import argparse
import concurrent.futures
import filecmp
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "partition"))
import random_transformer  # noqa: E402

PLANS = ["tp=2", "dp=2,tp=2,sp=1", "tp=2,cp=2", "ulysses=2", "cp=2,ulysses=2",
         "tp=4", "pp=2,tp=2,sp=1", "pp=2,schedule=zb-h1", "dp=2,zero=3",
         "pp=2,dp=2,zero=3", "dp=2,zero=2,tp=2,sp=1", "tp3d=2x2x1",
         "tp=2,sp=1,recompute=full"]


def compile_once(weft, model, plan, out, train, cuda):
    command = [weft, "compile", model, "--plan-spec", plan, "-o", out]
    if train:
        command.append("--train")
    if cuda:
        command += ["--target", "cuda"]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def files_under(top):
    return sorted(os.path.relpath(os.path.join(d, f), top)
                  for d, _, names in os.walk(top) for f in names)


def same_files(a, b):
    """None when `a` and `b` hold the same files (the program, its build
    files and its weights/), byte for byte; else what differs."""
    names = files_under(a)
    if names != files_under(b):
        return "the two runs wrote different files"
    _, mismatch, errors = filecmp.cmpfiles(a, b, names, shallow=False)
    if mismatch or errors:
        return "the two runs wrote different %s" % ", ".join(mismatch + errors)
    return None


def check(weft, name, model, plan, tmp, train, cuda):
    """("ok" | "refused" | "failed", detail)."""
    base = os.path.join(tmp, "%s_%s_%d%d" % (name, plan.replace(",", "_").replace("=", ""),
                                             train, cuda))
    first = compile_once(weft, model, plan, base + "_a", train, cuda)
    if first.returncode != 0:
        if "plan:" in first.stderr:
            return "refused", ""
        return "failed", first.stderr.strip()[-400:]
    second = compile_once(weft, model, plan, base + "_b", train, cuda)
    if second.returncode != 0:
        return "failed", "the second run failed where the first passed: " + \
            second.stderr.strip()[-400:]
    differ = same_files(base + "_a", base + "_b")
    return ("failed", differ) if differ else ("ok", "")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    # Seeds drawn to cover 4 and 8 query heads over 1, 4 and 8 KV heads,
    # GELU and SwiGLU, causal and not, with and without a loss, and two
    # models whose vocabulary equals the hidden size (7 and 11).
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 7, 9, 11, 17])
    parser.add_argument("--jobs", type=int, default=2)
    options = parser.parse_args()
    counts = {"ok": 0, "refused": 0, "failed": 0}
    failures = []
    vocab_equals_hidden = 0
    with tempfile.TemporaryDirectory() as tmp:
        jobs = []
        with concurrent.futures.ThreadPoolExecutor(options.jobs) as pool:
            for seed in options.seeds:
                config, text, _ = random_transformer.generate(seed, layers=2)
                name = "random%d" % seed
                model = os.path.join(tmp, name + ".mlir")
                with open(model, "w") as f:
                    f.write(text)
                if config["hidden"] == config["vocab"]:
                    vocab_equals_hidden += 1
                for plan in PLANS:
                    # The training program; the CUDA program, forward or (a
                    # forward program has no ZeRO and no recomputation)
                    # training.
                    training_only = "zero=" in plan or "recompute=" in plan
                    for train, cuda in [(True, False), (training_only, True)]:
                        jobs.append(("%s(%s) %s%s" % (
                            name, ",".join("%s=%s" % kv for kv in config.items()
                                           if kv[0] != "seed"),
                            plan, " --train" if train else "") +
                            (" --target cuda" if cuda else ""),
                            pool.submit(check, options.weft, name, model, plan,
                                        tmp, train, cuda)))
            for label, job in jobs:
                status, detail = job.result()
                counts[status] += 1
                if status == "failed":
                    failures.append("%s: %s" % (label, detail))
    for failure in failures[:20]:
        print("FAIL:", failure)
    print("compiled %d (model, plan, target) triples twice on %d random "
          "transformers (%d with the vocabulary equal to the hidden size): "
          "%d wrote the same program on both runs, %d refused with a plan: "
          "error, %d failed" % (
              len(jobs), len(options.seeds), vocab_equals_hidden, counts["ok"],
              counts["refused"], counts["failed"]))
    return 1 if failures or counts["ok"] < len(jobs) // 2 or \
        vocab_equals_hidden == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
