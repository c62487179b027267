#!/usr/bin/python3
"""compare_npy.py GOT.npy EXPECTED.npy RTOL: prints the largest difference relative
to the largest expected magnitude and exits 1 if it exceeds RTOL (or shapes differ)."""

import sys

import numpy

got, expected = numpy.load(sys.argv[1]), numpy.load(sys.argv[2])
if got.shape != expected.shape:
    print("shape %s, expected %s" % (got.shape, expected.shape))
    sys.exit(1)
difference = float(abs(got - expected).max() / abs(expected).max())
print("max relative difference %.3g (limit %s)" % (difference, sys.argv[3]))
sys.exit(0 if difference <= float(sys.argv[3]) else 1)
