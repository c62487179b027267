#!/usr/bin/env python3
"""Benchmark: how fast `weft plan` searches, on one core, and its peak memory.

Prints, per case, the search time that weft reports, the wall time of the whole
command, the candidate plans evaluated and the peak resident memory. Targets
(issue 4): GPT-3 175B on 1,024 H100s and the 530B model on 5,128 GPUs each
under 1 s, at least 10^5 candidates for the 530B case, peak memory under 500 MB.
"""
import argparse
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

CASES = [
    ("GPT-3 175B, 1,024 H100 (8x128), batch 1536",
     ["--model", "gpt3-175b", "--cluster", "h100:8x128", "--global-batch", "1536"]),
    ("Megatron 530B, 5,128 A100 (8x641), batch 1920",
     ["--model", "megatron-530b", "--cluster", "a100-80g:8x641", "--global-batch", "1920"]),
    ("Megatron 1T, 3,072 A100 (8x384), batch 3072",
     ["--model", "megatron-1t", "--cluster", "a100-80g:8x384", "--global-batch", "3072"]),
    ("LLaMA-3 405B, 16,384 H100 (8x2048), batch 2048, seq 8192",
     ["--model", "llama3-405b", "--cluster", "h100:8x2048", "--global-batch", "2048"]),
    ("imported 2-layer ONNX GPT (test/models/gpt2), 8 A100, batch 8",
     [os.path.join(ROOT, "test", "models", "gpt2", "gpt2-opset17.onnx"),
      "--cluster", "a100-80g:8x1", "--global-batch", "8"]),
]


def run(weft, args):
    command = ["taskset", "-c", "0", weft, "plan", "--no-progress"] + args
    start = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    # communicate() reaps the child; its peak RSS is in the children's usage,
    # so each case runs in its own process: see main().
    return proc.returncode, out.decode(), err.decode(), wall


def search_seconds(weft, args):
    code, _, err, _ = run(weft, args)
    took = re.search(r"search took ([0-9.]+) s", err)
    return float(took.group(1)) if code == 0 and took else None


def compare(weft, baseline, repeats=5):
    """Search times of two builds measured in one run, alternating so that
    both see the same machine."""
    print("weft plan search, one core (taskset -c 0), best of %d, this build "
          "against %s" % (repeats, baseline))
    for name, args in CASES:
        ours, theirs = [], []
        for _ in range(repeats):
            ours.append(search_seconds(weft, args))
            theirs.append(search_seconds(baseline, args))
        if None in ours or None in theirs:
            print(f"{name}: FAILED")
            return 1
        print(f"{name}\n  search {min(ours):.3f} s, baseline {min(theirs):.3f} s, "
              f"ratio {min(ours) / min(theirs):.2f}")
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--case", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--baseline", help="another weft binary (an older build): "
                        "run both alternately, 5 times per case, and print the "
                        "best search time of each and their ratio")
    options = parser.parse_args()
    if options.baseline:
        return compare(options.weft, options.baseline)
    if options.case is not None:
        import resource
        name, args = CASES[options.case]
        code, out, err, wall = run(options.weft, args)
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        searched = re.search(r"searched (\d+) candidate plans \((\d+) fully costed\)", out)
        took = re.search(r"search took ([0-9.]+) s", err)
        best = re.search(r"^1 .*$", out, re.M)
        if code != 0 or not searched or not took:
            print(f"{name}: FAILED (exit {code})\n{err}")
            return 1
        print(f"{name}\n  search {float(took.group(1)):.3f} s, command {wall:.3f} s, "
              f"{int(searched.group(1)):,} candidates ({int(searched.group(2)):,} fully costed), "
              f"peak memory {rss_mb:.0f} MB\n  best: {' '.join(best.group(0).split()) if best else '-'}")
        return 0
    print("weft plan search, one core (taskset -c 0)")
    status = 0
    for index in range(len(CASES)):
        status |= subprocess.call([sys.executable, __file__, "--weft", options.weft,
                                   "--case", str(index)])
    return status


if __name__ == "__main__":
    sys.exit(main())
