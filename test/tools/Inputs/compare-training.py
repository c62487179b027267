# Compares two training runs of the same plan:
#   compare-training.py LOG_A OUT_A LOG_B OUT_B
# LOG_* hold the programs' (or weft train's) progress lines ("step N/M  loss
# X ..."), OUT_* the trained parameters (param-K.npy) the programs wrote.
# Prints the steps, whether the losses are within 1e-5 relative, and how many
# parameters are within 1e-5 relative (max |a - b| / max |b|), naming the
# others (OUT_B/parameters.txt names them).
import os
import re
import sys

import numpy

log_a, out_a, log_b, out_b = sys.argv[1:5]


def losses(path):
    return [float(x) for x in
            re.findall(r"step \d+/\d+  loss ([0-9.]+)", open(path).read())]


a, b = losses(log_a), losses(log_b)
if not a or len(a) != len(b):
    sys.exit("the runs have %d and %d steps" % (len(a), len(b)))
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
names = open(os.path.join(out_b, "parameters.txt")).read().split()
outside = []
for k, name in enumerate(names):
    x = numpy.load(os.path.join(out_a, "param-%d.npy" % k))
    y = numpy.load(os.path.join(out_b, "param-%d.npy" % k))
    if x.shape != y.shape or \
            float(abs(x - y).max()) > 1e-5 * max(float(abs(y).max()), 1e-30):
        outside.append(name)
print("%d steps, losses within 1e-5: %s, %d of %d parameters within 1e-5%s"
      % (len(a), worst <= 1e-5, len(names) - len(outside), len(names),
         "; not: " + " ".join(outside) if outside else ""))
