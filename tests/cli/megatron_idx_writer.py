#!/usr/bin/python3
"""Tiny Megatron indexed-dataset writer and merger, for tests.

Follows megatron/core/datasets/indexed_dataset.py (IndexedDatasetBuilder, _IndexWriter) as
megatron/core/datasets/indexed_dataset.py, tools/merge_datasets.py describe it, writing the same bytes numpy does. Shares no
code with mgt.

Usage:
  megatron_idx_writer.py write PREFIX DTYPE < DOCS   DTYPE: a numpy name (uint16, int32, ...).
      Each stdin line is one document; '|' separates its sequences; ids are space-separated; an
      empty line is an empty document (zero sequences, document index repeated).
  megatron_idx_writer.py merge OUT PREFIX...         IndexedDatasetBuilder.add_index for each
      PREFIX in order, with the dtype of the first (tools/merge_datasets.py).
"""
import shutil
import struct
import sys

import numpy

sys.path.insert(0, __file__.rsplit("/", 1)[0] if "/" in __file__ else ".")
from megatron_idx_reader import Index  # noqa: E402

INDEX_HEADER = b"MMIDIDX\x00\x00"
CODES = {numpy.uint8: 1, numpy.int8: 2, numpy.int16: 3, numpy.int32: 4, numpy.int64: 5,
         numpy.float64: 6, numpy.float32: 7, numpy.uint16: 8}


class Builder:
    """IndexedDatasetBuilder: .bin streamed, lengths and document indices kept as lists."""

    def __init__(self, bin_path, dtype):
        self.data_file = open(bin_path, "wb")
        self.dtype = dtype
        self.sequence_lengths = []
        self.document_indices = [0]

    def add_document(self, tokens, lengths):
        np_array = numpy.array(tokens, dtype=self.dtype)
        self.data_file.write(np_array.tobytes(order="C"))
        self.sequence_lengths.extend(lengths)
        self.document_indices.append(len(self.sequence_lengths))

    def add_index(self, prefix):
        index = Index(prefix + ".idx")
        assert index.dtype == self.dtype, f"{prefix}: dtype mismatch"
        offset = len(self.sequence_lengths)
        self.sequence_lengths.extend(index.sequence_lengths)
        self.document_indices.extend((offset + index.document_indices)[1:])
        with open(prefix + ".bin", "rb") as f:
            shutil.copyfileobj(f, self.data_file)

    def finalize(self, idx_path):
        self.data_file.close()
        itemsize = numpy.dtype(self.dtype).itemsize
        pointers, cur = [], 0
        for length in self.sequence_lengths:   # _IndexWriter._sequence_pointers
            pointers.append(cur)
            cur += int(length) * itemsize
        with open(idx_path, "wb") as w:
            w.write(INDEX_HEADER)
            w.write(struct.pack("<Q", 1))
            w.write(struct.pack("<B", CODES[self.dtype]))
            w.write(struct.pack("<Q", len(self.sequence_lengths)))
            w.write(struct.pack("<Q", len(self.document_indices)))
            w.write(numpy.array(self.sequence_lengths, dtype=numpy.int32).tobytes(order="C"))
            w.write(numpy.array(pointers, dtype=numpy.int64).tobytes(order="C"))
            w.write(numpy.array(self.document_indices, dtype=numpy.int64).tobytes(order="C"))


def write(prefix, dtype_name, lines):
    b = Builder(prefix + ".bin", getattr(numpy, dtype_name))
    for line in lines:
        line = line.rstrip("\n")
        seqs = [[int(x) for x in s.split()] for s in line.split("|")] if line else []
        b.add_document([x for s in seqs for x in s], [len(s) for s in seqs])
    b.finalize(prefix + ".idx")


def merge(out, prefixes):
    first = Index(prefixes[0] + ".idx")
    b = Builder(out + ".bin", first.dtype)
    for p in prefixes:
        b.add_index(p)
    b.finalize(out + ".idx")


def main(argv):
    if len(argv) == 3 and argv[0] == "write":
        write(argv[1], argv[2], sys.stdin)
    elif len(argv) >= 3 and argv[0] == "merge":
        merge(argv[1], argv[2:])
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
