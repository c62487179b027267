# Compares the losses two training logs print ("step N/M  loss X ..."):
#   compare-losses.py TOLERANCE LOG REFERENCE_LOG
# Prints the steps and the largest relative difference; exits non-zero when
# the step counts differ or a loss is further than TOLERANCE (relative).
import re
import sys

tolerance, log, reference = float(sys.argv[1]), sys.argv[2], sys.argv[3]


def losses(path):
    return [float(x) for x in
            re.findall(r"step \d+/\d+  loss ([0-9.]+)", open(path).read())]


a, b = losses(log), losses(reference)
if not a or len(a) != len(b):
    print("%d steps, the reference %d" % (len(a), len(b)))
    sys.exit(1)
worst = max(abs(x - y) / abs(y) for x, y in zip(a, b))
print("%d steps, losses within %.2e of the reference's" % (len(a), worst))
sys.exit(0 if worst <= tolerance else 1)
