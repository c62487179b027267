"""Compares weft plan --trace's predicted timeline with --print-schedule's
step lists: per pipeline rank the compute steps (F/B/W) in the list's order,
none overlapping the next on its track, and the optimizer after them (after
the gradient reduction, where one is exposed)."""
import json
import re
import sys

text, trace = open(sys.argv[1]).read(), json.load(open(sys.argv[2]))["traceEvents"]
lists = {int(r): steps.split() for r, steps in re.findall(r"^rank (\d+): (.*)$", text, re.M)}
tracks = 0
for rank, steps in sorted(lists.items()):
    events = sorted((e for e in trace if e.get("ph") == "X" and e["tid"] == rank),
                    key=lambda e: e["ts"])
    names = [e["name"] for e in events]
    compute = [s for s in steps if s[0] in "FBW"]
    # (A gradient reduction, with a tied weight's sum over pp, may come
    # before the optimizer.)
    if names not in (compute + ["optimizer"], compute + ["dp comm", "optimizer"]):
        sys.exit("rank %d: predicted %s, the schedule %s" % (rank, names, compute))
    for a, b in zip(events, events[1:]):
        if a["ts"] + a["dur"] > b["ts"] + 2e-3:  # ts and dur are printed to 1e-3 us
            sys.exit("rank %d: %s overlaps %s" % (rank, a["name"], b["name"]))
    tracks += 1
print("%d tracks: compute steps as scheduled, each ending at or before the next "
      "starts, then optimizer" % tracks)
