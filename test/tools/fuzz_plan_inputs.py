#!/usr/bin/env python3
"""Feeds `weft plan` corrupted cluster files and random plans; fails on a crash.

Cluster files (JSON and protobuf text) are mutated like mutate_inputs.py does
for IR; --evaluate strings are drawn at random from the keys and values a user
might type, sensible or not; models are built from random, often invalid,
builder flags. Every run must exit 0, or exit 1 with 'error' on stderr: a
signal, another exit code, a hang or a sanitizer report fails.
"""

import argparse
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mutate_inputs import variants  # noqa: E402

KEYS = ["tp", "pp", "dp", "cp", "ulysses", "sp", "tp-overlap", "mbs", "m", "v",
        "schedule", "zero", "recompute", "stages", "bogus"]
VALUES = ["0", "1", "2", "3", "4", "7", "8", "16", "64", "-1", "1000000000",
          "99999999999999999999", "on", "full", "selective", "interleaved",
          "zb-h1", "zeropp", "gpipe", "1f1b", "12/12", "0/48", "x", ""]


def random_plan(rng):
    items = []
    for _ in range(rng.randint(0, 7)):
        items.append("%s=%s" % (rng.choice(KEYS), rng.choice(VALUES)))
    if rng.random() < 0.1:
        items.append(rng.choice(["=", ",,", "tp", "=3"]))
    return ",".join(items)


def run(weft, args, log):
    try:
        proc = subprocess.run([weft, "plan", "--no-progress"] + args,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        log.append(("hang", args))
        return False
    bad = proc.returncode not in (0, 1) or (
        proc.returncode == 1 and "error" not in proc.stderr) or (
        "AddressSanitizer" in proc.stderr or "runtime error:" in proc.stderr)
    if bad:
        log.append(("exit %d" % proc.returncode, args, proc.stderr[-400:]))
    return not bad


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--clusters", nargs="+", required=True)
    parser.add_argument("--count", type=int, default=80)
    parser.add_argument("--seed", type=int, default=1)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    failures, runs = [], 0
    base = ["--model", "gpt3-1.3b", "--global-batch", "64"]
    with tempfile.TemporaryDirectory() as tmp:
        for path in options.clusters:
            text = open(path).read()
            suffix = os.path.splitext(path)[1]
            for name, variant in variants(text, rng, options.count):
                file = os.path.join(tmp, "cluster" + suffix)
                with open(file, "w") as f:
                    f.write(variant)
                runs += 1
                run(options.weft, base + ["--cluster", file, "--top", "1"], failures)
        for _ in range(options.count * 2):
            runs += 1
            run(options.weft, base + ["--cluster", "a100-80g:8x4", "--evaluate",
                                      random_plan(rng)], failures)
        for _ in range(options.count):
            flags = ["--model", rng.choice(["gpt", "llama"])]
            for flag in ["--layers", "--hidden", "--heads", "--kv-heads", "--ffn",
                         "--vocab", "--seq-len"]:
                if rng.random() < 0.7:
                    flags += [flag, rng.choice(["0", "1", "3", "8", "64", "96", "4096",
                                                "100000", "-5"])]
            runs += 1
            run(options.weft, flags + ["--cluster", "h100:8x2", "--global-batch",
                                       rng.choice(["1", "8", "7", "0"]), "--top", "1"],
                failures)
    for failure in failures[:10]:
        print("FAIL:", *failure)
    print("%d weft plan runs: %d crashed, hung or exited without an error" %
          (runs, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
