# Compares programs' runs with weft run's:
#   compare-runs.py REF_DIR RUN_DIR NAME...
# For each NAME, REF_DIR/NAME.txt holds `weft run`'s report and REF_DIR/NAME
# its outputs; RUN_DIR/NAME.txt and RUN_DIR/NAME the program's. Prints the
# ranks, whether the bytes sent per rank are the same, and whether every
# output is within 1e-5 relative (max |difference| / max |reference|).
import os
import re
import sys

import numpy

ref_dir, run_dir = sys.argv[1], sys.argv[2]


def bytes_sent(path):
    text = open(path).read()
    found = re.search(r"(\d+) (?:ranks|devices); bytes sent per rank: ([\d ]+)", text)
    if not found:
        sys.exit("%s: no 'bytes sent per rank' line in:\n%s" % (path, text))
    return int(found.group(1)), found.group(2).split()


for name in sys.argv[3:]:
    ref_ranks, ref_bytes = bytes_sent(os.path.join(ref_dir, name + ".txt"))
    ranks, sent = bytes_sent(os.path.join(run_dir, name + ".txt"))
    outputs = sorted(f for f in os.listdir(os.path.join(ref_dir, name))
                     if f.endswith(".npy"))
    close = bool(outputs)
    for output in outputs:
        ref = numpy.load(os.path.join(ref_dir, name, output))
        got = numpy.load(os.path.join(run_dir, name, output))
        scale = max(float(abs(ref).max()), 1e-30)
        close = close and got.shape == ref.shape and \
            float(abs(got - ref).max()) / scale <= 1e-5
    print("%s: %d ranks, bytes sent %s, within 1e-5: %s" %
          (name, ranks, "equal" if (ranks, sent) == (ref_ranks, ref_bytes)
           else "differ (%s against %s)" % (sent, ref_bytes), close))
