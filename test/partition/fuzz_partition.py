#!/usr/bin/env python3
"""Random plans, sensible or not, on models and on corrupted shardings: the
partitioning passes never crash.

Each run applies a random plan (degrees drawn from 0..9, SP on or off) to a
committed export (`weft run --plan-spec`) or to a random transformer
(`weft-opt -weft-apply-plan ... -weft-partition`), or partitions IR whose
weft.sharding annotations were corrupted. Every run must succeed or exit 1
with an error: a signal, another exit code, a hang or a sanitizer report fails.
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import random_transformer  # noqa: E402


def outcome(command):
    try:
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        return "hang"
    if proc.returncode not in (0, 1):
        return "exit %d: %s" % (proc.returncode, proc.stderr[-300:])
    if proc.returncode == 1 and "error" not in proc.stderr:
        return "exit 1 without an error"
    if "AddressSanitizer" in proc.stderr or "runtime error:" in proc.stderr:
        return "sanitizer: " + proc.stderr[-300:]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--weft", required=True)
    parser.add_argument("--weft-opt", required=True)
    parser.add_argument("--count", type=int, default=60)
    parser.add_argument("--seed", type=int, default=7)
    options = parser.parse_args()
    rng = random.Random(options.seed)
    failures, runs = [], 0
    models = [os.path.join(ROOT, "test", "models", m, m + "-opset17.onnx")
              for m in ("gpt2", "bert", "llama")]
    with tempfile.TemporaryDirectory() as tmp:
        generated = []
        for seed in range(4):
            _, text, _ = random_transformer.generate(5000 + seed)
            path = os.path.join(tmp, "random%d.mlir" % seed)
            open(path, "w").write(text)
            generated.append(path)
        for _ in range(options.count):
            keys = rng.sample(["dp", "tp", "cp", "ulysses", "sp"], rng.randint(1, 5))
            spec = ",".join("%s=%d" % (k, rng.randint(0, 9) if k != "sp" else rng.randint(0, 1))
                            for k in keys)
            if rng.random() < 0.5:
                model = rng.choice(models)
                data = os.path.join(os.path.dirname(model), "test_data_set_0")
                command = [options.weft, "run", model, "--data-dir", data, "--plan-spec", spec]
            else:
                model = rng.choice(generated)
                command = [options.weft_opt, model,
                           "-weft-apply-plan=" + spec.replace(",", " "),
                           "-weft-propagate-sharding", "-weft-partition",
                           "-weft-optimize-collectives", "-o", os.devnull]
            runs += 1
            problem = outcome(command)
            if problem:
                failures.append((" ".join(command), problem))
        # Corrupted annotations: propagate and partition what apply-plan wrote,
        # after swapping axis names and dimension lists at random.
        for index in range(options.count):
            model = rng.choice(generated)
            annotated = os.path.join(tmp, "annotated.mlir")
            subprocess.run([options.weft_opt, model, "-weft-apply-plan=tp=2 cp=2",
                            "-o", annotated], capture_output=True)
            if not os.path.exists(annotated):
                continue
            text = open(annotated).read()
            mutated = re.sub(r'\[\[([^\]]*)\]', lambda m: "[[" + rng.choice(
                ['"tp"', '"cp"', '"dp"', '"nope"', '', '"tp", "tp"']) + "]", text)
            path = os.path.join(tmp, "mutated%d.mlir" % index)
            open(path, "w").write(mutated)
            runs += 1
            problem = outcome([options.weft_opt, path, "-weft-propagate-sharding",
                               "-weft-partition", "-o", os.devnull])
            if problem:
                failures.append(("weft-opt %s -weft-propagate-sharding -weft-partition" % path,
                                 problem))
    for command, problem in failures[:10]:
        print("FAIL:", problem, "\n  ", command)
    print("%d partitioning runs with random plans and corrupted shardings: %d "
          "crashed, hung or exited without an error" % (runs, len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
