#!/usr/bin/env python3
"""Every weft op documents an example and its Constraints, and ops.mlir round-trips it.

Reads the generated dialect reference (one section per op) and the round-trip test,
and lists each op that lacks an ```mlir example, a **Constraints** list, or a use in
the round-trip file.
"""

import re
import sys


def main(reference, roundtrip):
    doc = open(reference).read()
    ops = re.split(r"^### `(weft\.\w+)` \(::weft::\w+\)$", doc, flags=re.M)
    sections = dict(zip(ops[1::2], ops[2::2]))
    uses = open(roundtrip).read()
    problems = []
    for name, body in sorted(sections.items()):
        if "```mlir" not in body:
            problems.append("%s: no ```mlir example in its description" % name)
        if "**Constraints**" not in body:
            problems.append("%s: no **Constraints** list in its description" % name)
        if not re.search(r"\b%s\b" % re.escape(name), uses):
            problems.append("%s: not round-tripped in %s" % (name, roundtrip))
    for problem in problems:
        print(problem)
    print("%d ops checked, %d problems" % (len(sections), len(problems)))
    return 1 if problems or not sections else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
