#!/usr/bin/env python3
"""Feeds weft-opt deterministic corruptions of valid inputs; fails on a crash.

Each input file is truncated at many points, has tokens deleted, duplicated
and swapped, and has its numbers replaced by extreme values. For every variant
weft-opt must either succeed (exit 0) or report an error diagnostic and exit 1:
a signal, another exit code, a hang, an exit 1 without 'error:', or a
sanitizer report (in an ASan/UBSan build) fails.
"""

import argparse
import random
import re
import subprocess
import sys

EXTREME_NUMBERS = ["0", "-1", "1", "-9223372036854775808", "9223372036854775807",
                   "4294967296", "99999999999999999999", "1.0e+300", "-0.0", "nan"]


def variants(text, rng, count):
    tokens = re.findall(r"\s+|[A-Za-z_][\w.$-]*|-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|.", text)
    numbers = [i for i, t in enumerate(tokens) if re.fullmatch(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?", t)]
    for cut in range(0, len(text), max(1, len(text) // (count // 4))):
        yield "truncate@%d" % cut, text[:cut]
    for n in range(count):
        kind = n % 4
        mutated = list(tokens)
        if kind == 0 and numbers:
            i = rng.choice(numbers)
            mutated[i] = rng.choice(EXTREME_NUMBERS)
        elif kind == 1:
            del mutated[rng.randrange(len(mutated))]
        elif kind == 2:
            i = rng.randrange(len(mutated))
            mutated.insert(i, mutated[rng.randrange(len(mutated))])
        else:
            i, j = rng.randrange(len(mutated)), rng.randrange(len(mutated))
            mutated[i], mutated[j] = mutated[j], mutated[i]
        yield "mutation#%d" % n, "".join(mutated)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft-opt", required=True)
    parser.add_argument("--count", type=int, default=160, help="mutations per file")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("inputs", nargs="+")
    args = parser.parse_args()

    rng = random.Random(args.seed)
    runs = accepted = rejected = 0
    failures = []
    for path in args.inputs:
        with open(path) as f:
            text = f.read()
        for name, variant in variants(text, rng, args.count):
            runs += 1
            try:
                result = subprocess.run([args.weft_opt, "-", "-o", "/dev/null"],
                                        input=variant.encode(), capture_output=True,
                                        timeout=20)
            except subprocess.TimeoutExpired:
                failures.append((path, name, "timed out", variant))
                continue
            stderr = result.stderr.decode(errors="replace")
            if "Sanitizer" in stderr or "runtime error:" in stderr:
                failures.append((path, name, "sanitizer report: " + stderr[-2000:], variant))
            elif result.returncode == 0:
                accepted += 1
            elif result.returncode == 1 and "error:" in stderr:
                rejected += 1
            else:
                failures.append((path, name, "exit %d: %s" % (result.returncode, stderr[-2000:]), variant))
    for path, name, why, variant in failures[:5]:
        print("FAIL %s %s: %s\n--- input ---\n%s\n-------------" % (path, name, why, variant))
    print("%d variants: %d accepted, %d rejected with a diagnostic, %d crashed or hung"
          % (runs, accepted, rejected, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
