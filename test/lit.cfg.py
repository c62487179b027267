# -*- Python -*-
# lit configuration for Weft's IR tests.
#
# WEFT_VERIFY_ROUNDTRIP=1 runs every test's weft-opt with --verify-roundtrip:
# each parsed module is also printed in generic and custom form, re-parsed and
# compared, so a printer/parser mismatch in any op fails the test that uses it.

import os
import stat

import lit.formats

config.name = "Weft"
roundtrip = os.environ.get("WEFT_VERIFY_ROUNDTRIP") == "1"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".onnxtxt", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.weft_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py.in", "unit", "Inputs", "models", "conformance", "bench", "partition"]

path = [config.weft_tools_dir, config.llvm_tools_dir]
if roundtrip:
    # Its own scratch directory: ctest runs it next to the same lit tests.
    config.test_exec_root = os.path.join(config.weft_obj_root, "test-roundtrip")
    wrapper_dir = os.path.join(config.test_exec_root, "roundtrip-bin")
    os.makedirs(wrapper_dir, exist_ok=True)
    wrapper = os.path.join(wrapper_dir, "weft-opt")
    with open(wrapper, "w") as f:
        f.write('#!/bin/sh\nexec "%s" --verify-roundtrip "$@"\n'
                % os.path.join(config.weft_tools_dir, "weft-opt"))
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    path.insert(0, wrapper_dir)
    config.available_features.add("verify-roundtrip")
    # The mode changes weft-opt only: a test that never runs it (one that
    # compiles and builds programs, say) would only run a second time.
    # lit excludes by file name, so a name that some weft-opt test also has
    # stays.
    uses, others = set(), set()
    for directory, _, files in os.walk(config.test_source_root):
        for name in files:
            if any(name.endswith(suffix) for suffix in config.suffixes):
                with open(os.path.join(directory, name), errors="replace") as f:
                    (uses if "weft-opt" in f.read() else others).add(name)
    config.excludes += sorted(others - uses)
config.environment["PATH"] = os.pathsep.join(path + [config.environment.get("PATH", os.environ.get("PATH", ""))])
config.substitutions.append(("%python", config.python_executable))
config.substitutions.append(("%weft_test_dir", config.test_source_root))

import shutil
if shutil.which("chromium") or shutil.which("chromium-browser"):
    config.available_features.add("chromium")
config.substitutions.append(("%weft_build_dir", config.weft_obj_root))
# The CUDA toolkit (nvcc, cuBLASLt, NCCL): the runtime's CUDA backend and the
# CUDA programs build without a GPU. .ci/run checks that it is there.
if os.path.exists("/usr/local/cuda/bin/nvcc") or shutil.which("nvcc"):
    config.available_features.add("cuda")
# Open MPI's mpirun (scripts/install-deps.sh installs it), for ranks as
# processes: 4 ranks on 2 cores need --oversubscribe, and CI runs as root.
config.environment["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
config.environment["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
# Open MPI leaks from its own libraries and plugins at exit; in an ASan build
# the processes it starts skip LeakSanitizer (threads and the TCP store keep
# it).
config.substitutions.append(
    ("%mpirun", "mpirun --oversubscribe -x ASAN_OPTIONS=detect_leaks=0"))
# Debian's python3 has numpy and onnx (python3-onnx); the one on PATH may not.
config.substitutions.append(
    ("%numpy_python", "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else "python3"))
