"""Compares a training program's step lines and bytes with weft train's:
program.log train.log train.err steps [last-digit].

With `last-digit`, each printed number may differ from weft train's by one
unit in its last printed digit: the host emulation runs the CUDA program's own
kernels (fused elementwise chains, GEMM epilogues), whose float roundings may
differ from the CPU runtime's in the last bit (on GPT-2 under pp=2,tp=2, one
weight after a step is 7.5e-9 apart, every other one equal), and a loss
printed to 8 significant digits can show it (by up to two float32 ulps, which
for a loss between 8 and 16 is two units of its sixth decimal: GPT-2's tied
embedding sums two gradients, each rounded its own way). Without it, the lines
must be equal."""
import math
import re
import sys

program, train, err, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
last_digit = len(sys.argv) > 5 and sys.argv[5] == "last-digit"


def lines(path):
    # Everything but the throughput and the estimate of the time left.
    return [re.sub(r"  tokens/s \S+  eta \S+", "", line)
            for line in open(path).read().splitlines() if line.startswith("step ")]


NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?:e[-+]\d+)?")


def same(a, b):
    if a == b:
        return True
    if not last_digit:
        return False
    # The same words, and numbers within one unit of the last printed digit.
    if NUMBER.sub("#", a) != NUMBER.sub("#", b):
        return False
    for x, y in zip(NUMBER.finditer(a), NUMBER.finditer(b)):
        if "e" in x.group(0) or x.group(1) is None:
            if x.group(0) != y.group(0):
                return False
            continue
        # One unit of the last printed digit, or two float32 ulps of the
        # value and the rounding to the printed digits: a loss of 17.35 is a
        # float whose ulp (1.9e-6) spans two units of its sixth decimal.
        unit = 10.0 ** -len(x.group(1))
        value = abs(float(y.group(0)))
        ulp = 2.0 ** (math.floor(math.log2(value)) - 23) if value > 0 else 0.0
        if abs(float(x.group(0)) - float(y.group(0))) > max(unit * 1.5, 2 * ulp + unit):
            return False
    return True


got, want = lines(program), lines(train)
sent = [int(b) for b in re.search(r"bytes sent per rank:([ 0-9]+)",
                                  open(program).read()).group(1).split()]
step = [int(b) for b in re.search(r"bytes sent per rank in step 1:([ 0-9]+)",
                                  open(err).read()).group(1).split()]
equal = len(got) == steps and len(got) == len(want) and all(
    same(a, b) for a, b in zip(got, want))
print("%d steps as weft train: %s; bytes per rank as weft train: %s"
      % (len(got), equal, sent == [b * steps for b in step]))
