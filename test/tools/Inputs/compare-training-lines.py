"""Compares a training program's step lines and bytes with weft train's:
program.log train.log train.err steps."""
import re
import sys

program, train, err, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])


def lines(path):
    # Everything but the throughput and the estimate of the time left.
    return [re.sub(r"  tokens/s \S+  eta \S+", "", line)
            for line in open(path).read().splitlines() if line.startswith("step ")]


got, want = lines(program), lines(train)
sent = [int(b) for b in re.search(r"bytes sent per rank:([ 0-9]+)",
                                  open(program).read()).group(1).split()]
step = [int(b) for b in re.search(r"bytes sent per rank in step 1:([ 0-9]+)",
                                  open(err).read()).group(1).split()]
print("%d steps as weft train: %s; bytes per rank as weft train: %s"
      % (len(got), len(got) == steps and got == want, sent == [b * steps for b in step]))
