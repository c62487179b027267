#!/usr/bin/python3
"""Benchmark: Weft's CPU path against PyTorch eager, side by side in one run.

For each case it exports a transformer written in PyTorch (the GPT-2 and LLaMA modules
of test/models/export_models.py at realistic sizes, seeded, random weights) to ONNX once,
then runs, each as a separate process with the same number of threads:

  torch    a script that imports torch 1.13, builds the same module with the same seed
           and runs two eager forwards under torch.no_grad(): the second (warm) one is
           the forward Weft's single forward is compared with;
  run      `weft run model.onnx -i ids.npy --profile`;
  compiled the program `weft compile --target cpu --build` made for the same shapes,
           run with WEFT_PROFILE=1.

and prints, per side, the forward alone (each side times its own forward and prints it),
the whole process (wall clock), the peak resident memory (wait4's ru_maxrss, measured by
a small wrapper process), the ratios
against torch, and the largest difference of Weft's logits from torch's relative to the
largest torch logit. Figures are measured, never compared against a bound: this is a
benchmark, not a test.

    /usr/bin/python3 bench/cpu_vs_torch.py --weft build/bin/weft --prefix build/bench/runtime
    ... --cases gpt2-b1-s128 llama-b1-s128 --threads 2

`ninja -C build bench-cpu` installs the runtime and runs every case (about 10 min on
2 cores; the exports are kept in build/bench/models and reused).
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MODELS = os.path.join(HERE, "..", "test", "models")

# name: (module, sizes, batch, seq). The sizes set export_models' globals.
GPT2_SMALL = dict(HIDDEN=768, HEADS=12, LAYERS=12, VOCAB=50257, MAX_SEQ=1024)
GPT2_LONG = dict(GPT2_SMALL, MAX_SEQ=2048)
LLAMA_8L = dict(HIDDEN=1024, HEADS=16, KV_HEADS=8, LAYERS=8, VOCAB=32000, MAX_SEQ=2048)
CASES = {
    "gpt2-b1-s128": ("GPT2", GPT2_SMALL, 1, 128),
    "gpt2-b4-s512": ("GPT2", GPT2_SMALL, 4, 512),
    "llama-b1-s128": ("Llama", LLAMA_8L, 1, 128),
    "gpt2-b1-s2048": ("GPT2", GPT2_LONG, 1, 2048),
}

# Runs in the child processes: builds the module exactly as the exporter does.
BUILD = r"""
import json, sys, time
sys.path.insert(0, {models!r})
import torch
import export_models as m
sizes = json.loads({sizes!r})
for key, value in sizes.items():
    setattr(m, key, value)
m.HEAD_DIM = m.HIDDEN // m.HEADS
torch.manual_seed(1)
model = getattr(m, {module!r})().eval()
"""

TORCH = BUILD + r"""
import numpy
torch.set_num_threads({threads})
ids = torch.from_numpy(numpy.load({ids!r}))
# The first forward pays one-time costs (the thread pool, first touches of
# memory); Weft is held to the second, warm one, and both are printed.
times = []
with torch.no_grad():
    for _ in range(2):
        start = time.perf_counter()
        logits = model(ids)
        times.append(time.perf_counter() - start)
numpy.save({out!r}, logits.numpy())
print("first forward %.6f" % times[0])
print("forward %.6f" % times[1])
"""

EXPORT = BUILD + r"""
generator = torch.Generator().manual_seed(0)
ids = torch.randint(0, m.VOCAB, (1, 8), generator=generator)
axes = {{"input_ids": {{0: "batch", 1: "sequence"}}, "logits": {{0: "batch", 1: "sequence"}}}}
torch.onnx.export(model, (ids,), {path!r}, opset_version=17, input_names=["input_ids"],
                  output_names=["logits"], dynamic_axes=axes, do_constant_folding=True)
"""


# Starts the command and reports its peak resident memory. Linux carries a
# process's peak over fork and exec (ru_maxrss starts at the forking process's
# own peak), so a command started by this script, which holds logits of
# hundreds of MB, would report at least this script's peak: it is started by
# this small process instead.
WRAPPER = r"""
import os, subprocess, sys
child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
sys.stdout.flush()
print("weft-bench: maxrss %d" % usage.ru_maxrss, flush=True)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_measured(command, env):
    """Runs `command`: (wall seconds, peak resident memory in MB, output)."""
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", WRAPPER] + command,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    elapsed = time.perf_counter() - start
    output = result.stdout.decode()
    if result.returncode != 0:
        raise SystemExit("failed (exit %d): %s\n%s" % (result.returncode, " ".join(command),
                                                       output[-4000:]))
    peak_kb = float(re.findall(r"^weft-bench: maxrss (\d+)", output, re.MULTILINE)[-1])
    return elapsed, peak_kb / 1024.0, output


def forward_seconds(output, pattern):
    match = re.search(pattern, output, re.MULTILINE)
    if not match:
        raise SystemExit("no forward time in:\n" + output[-4000:])
    return float(match.group(1))


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--prefix", required=True,
                        help="an installed Weft runtime (cmake --install build --prefix P)")
    parser.add_argument("--work", default=None, help="where models and programs go")
    parser.add_argument("--cases", nargs="*", default=list(CASES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--sides", nargs="*", default=["run", "compiled"],
                        help="Weft sides to run (torch always runs: it is the reference)")
    parser.add_argument("--profile", action="store_true",
                        help="print Weft's per-op-kind profile of each run")
    args = parser.parse_args()
    work = os.path.abspath(args.work or os.path.join(os.path.dirname(args.weft), "..", "bench"))
    os.makedirs(work, exist_ok=True)
    python = sys.executable
    import numpy

    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "WEFT_NUM_THREADS"):
        env[var] = str(args.threads)
    rows = []
    for name in args.cases:
        module, sizes, batch, seq = CASES[name]
        tag = "%s-%s" % (module.lower(), "-".join("%s%d" % (k.lower(), v)
                                                  for k, v in sorted(sizes.items())))
        model_dir = os.path.join(work, "models", tag)
        model = os.path.join(model_dir, "model.onnx")
        if not os.path.exists(model):
            os.makedirs(model_dir, exist_ok=True)
            print("exporting %s to %s" % (name, model), flush=True)
            script = EXPORT.format(models=MODELS, sizes=json.dumps(sizes), module=module,
                                   path=model)
            subprocess.run([python, "-c", script], check=True, env=env,
                           stderr=subprocess.DEVNULL)
        case_dir = os.path.join(work, name)
        shutil.rmtree(case_dir, ignore_errors=True)
        os.makedirs(case_dir)
        rng = numpy.random.default_rng(0)
        ids = os.path.join(case_dir, "ids.npy")
        numpy.save(ids, rng.integers(0, sizes["VOCAB"], (batch, seq), dtype=numpy.int64))

        results = {}
        reference = os.path.join(case_dir, "torch.npy")
        # torch always runs: its logits are the reference.
        script = TORCH.format(models=MODELS, sizes=json.dumps(sizes), module=module,
                              threads=args.threads, ids=ids, out=reference)
        wall, peak, out = run_measured([python, "-c", script], env)
        results["torch"] = (forward_seconds(out, r"^forward ([0-9.]+)"), wall, peak)
        expected = numpy.load(reference)

        def compare(path):
            got = numpy.load(path)
            if got.shape != expected.shape:
                return float("nan")
            return float(abs(got - expected).max() / abs(expected).max())

        errors = {}
        if "run" in args.sides:
            out_dir = os.path.join(case_dir, "run")
            command = [args.weft, "run", model, "-i", ids, "-o", out_dir,
                       "--output-format", "npy", "--profile"]
            wall, peak, out = run_measured(command, env)
            results["run"] = (forward_seconds(out, r"^weft: forward ([0-9.]+) s"), wall, peak)
            errors["run"] = compare(os.path.join(out_dir, "output_0.npy"))
            if args.profile:
                print(out)
        if "compiled" in args.sides:
            project = os.path.join(case_dir, "project")
            subprocess.run([args.weft, "compile", model, "--batch-size", str(batch),
                            "--seq-len", str(seq), "--plan-spec", "dp=1", "--target", "cpu",
                            "-o", project,
                            "--build", "--runtime-prefix", os.path.abspath(args.prefix)],
                           check=True, env=env, stdout=subprocess.DEVNULL)
            out_dir = os.path.join(case_dir, "compiled")
            os.makedirs(out_dir)
            penv = dict(env, WEFT_PROFILE="1")
            command = [os.path.join(project, "build", "program"),
                       os.path.join(project, "weights"), out_dir, ids]
            wall, peak, out = run_measured(command, penv)
            results["compiled"] = (forward_seconds(out, r"^weft: forward ([0-9.]+) s"),
                                   wall, peak)
            errors["compiled"] = compare(os.path.join(out_dir, "output_0.npy"))
            if args.profile:
                print(out)
        rows.append((name, results, errors))
        report(rows[-1:], args.threads, header=len(rows) == 1)
    print()
    print("summary (%d threads each; ratio = Weft / torch, below 1 is faster):" % args.threads)
    report(rows, args.threads, header=True)


def report(rows, threads, header):
    if header:
        print("%-15s %-9s %10s %10s %10s %10s %9s %9s %10s" % (
            "case", "side", "forward s", "process s", "peak MB", "fwd ratio", "proc rat",
            "mem rat", "max rel d"))
    for name, results, errors in rows:
        t = results["torch"]
        for side in ("torch", "run", "compiled"):
            if side not in results:
                continue
            f, w, p = results[side]
            print("%-15s %-9s %10.3f %10.2f %10.0f %10.2f %9.2f %9.2f %10s" % (
                name, side, f, w, p, f / t[0], w / t[1], p / t[2],
                "%.2e" % errors[side] if side in errors else "-"), flush=True)


if __name__ == "__main__":
    main()
