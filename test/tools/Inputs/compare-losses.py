# Compares the losses two training logs print ("step N/M  loss X ..."):
#   compare-losses.py TOLERANCE LOG REFERENCE_LOG
# Prints the steps and the largest relative difference; exits non-zero when
# the step counts differ or a loss is further than TOLERANCE (relative).
# Where the reference prints a loss scale ("loss_scale S", and "skipped" on
# an overflowed step), each step's scale and skip must be the same exactly.
import re
import sys

tolerance, log, reference = float(sys.argv[1]), sys.argv[2], sys.argv[3]


def steps(path):
    found = []
    for line in open(path).read().splitlines():
        m = re.match(r"step \d+/\d+  loss ([0-9.]+)", line)
        if m:
            scale = re.search(r"loss_scale (\S+)", line)
            found.append((float(m.group(1)), scale and scale.group(1),
                          "skipped" in line))
    return found


a, b = steps(log), steps(reference)
if not a or len(a) != len(b):
    print("%d steps, the reference %d" % (len(a), len(b)))
    sys.exit(1)
worst = max(abs(x[0] - y[0]) / abs(y[0]) for x, y in zip(a, b))
scaled = any(y[1] for y in b)
same = all(x[1:] == y[1:] for x, y in zip(a, b))
print("%d steps, losses within %.2e of the reference's%s"
      % (len(a), worst,
         "" if not scaled else
         "; loss scales and skips %s (skipped %d)"
         % ("the same" if same else "DIFFERENT", sum(x[2] for x in a))))
sys.exit(0 if worst <= tolerance and same else 1)
