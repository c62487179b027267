#!/usr/bin/python3
"""Writes a token stream as Megatron-LM's indexed dataset, PREFIX.bin and
PREFIX.idx, in the layout of megatron/core/datasets/indexed_dataset.py's
_IndexWriter (what tools/preprocess_data.py writes): the .idx holds
b"MMIDIDX\\x00\\x00", version 1 (<Q), the token type's DType code (<B), the
sequence and document counts (<Q), each sequence's length (<i4), each
sequence's byte offset in the .bin (<i8) and the document indices (<i8,
starting with 0). Each document here is one sequence.

    megatron_indexed.py TOKENS.npy PREFIX DTYPE [--corrupt KIND]

DTYPE is uint16 or int32 (the types preprocess_data.py picks below and
above a vocabulary of 65,500) or another of Megatron's DType names; the
documents are cut where the stream holds token 3 (each ends with it, as
--append-eod writes them). --corrupt writes a broken index: magic, float32,
outside (a sequence past the .bin's end)."""
import struct
import sys

import numpy as np

CODES = {"uint8": 1, "int8": 2, "int16": 3, "int32": 4, "int64": 5, "float64": 6,
         "float32": 7, "uint16": 8}


def main(argv):
    tokens = np.load(argv[1])
    prefix, dtype = argv[2], argv[3]
    corrupt = argv[5] if len(argv) > 5 and argv[4] == "--corrupt" else ""
    ends = [i + 1 for i, t in enumerate(tokens) if t == 3]
    if not ends or ends[-1] != len(tokens):
        ends.append(len(tokens))
    starts = [0] + ends[:-1]
    lengths = [b - a for a, b in zip(starts, ends)]
    item = np.dtype(dtype).itemsize
    with open(prefix + ".bin", "wb") as out:
        out.write(tokens.astype(dtype).tobytes())
    pointers = [a * item for a in starts]
    if corrupt == "outside":
        pointers[-1] += item * 4
    with open(prefix + ".idx", "wb") as out:
        out.write(b"MMIDIDX\x00\x01" if corrupt == "magic" else b"MMIDIDX\x00\x00")
        out.write(struct.pack("<Q", 1))
        out.write(struct.pack("<B", CODES["float32" if corrupt == "float32" else dtype]))
        out.write(struct.pack("<Q", len(lengths)))
        out.write(struct.pack("<Q", len(lengths) + 1))
        out.write(np.array(lengths, dtype=np.int32).tobytes())
        out.write(np.array(pointers, dtype=np.int64).tobytes())
        out.write(np.arange(len(lengths) + 1, dtype=np.int64).tobytes())
    print("%d tokens in %d documents" % (len(tokens), len(lengths)))


if __name__ == "__main__":
    main(sys.argv)
