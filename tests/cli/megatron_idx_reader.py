#!/usr/bin/python3
"""Independent reader of Megatron indexed datasets (MMIDIDX v1), for tests.

Written from Megatron's megatron/core/datasets/indexed_dataset.py, with
numpy, sharing no code with mgt. It reads the header with struct and the arrays with
numpy.frombuffer at byte offsets, and asserts what Megatron's _IndexReader / IndexedDataset assert
(magic, version == 1, known dtype code, len(lengths) == sequence_count == document_indices[-1]).

Usage:
  megatron_idx_reader.py PREFIX              one line per document: its ids, space-separated
  megatron_idx_reader.py --sequences PREFIX  one line per sequence instead
  megatron_idx_reader.py --info PREFIX       a JSON summary (counts, numpy length statistics)
  options: --strict     also check what Megatron does not: pointers equal the running sum of
                        lengths * itemsize, the .idx has no bytes beyond its arrays, the .bin size
                        matches, document indices are non-decreasing and start at 0
           --multimodal read the trailing int8 sequence_modes (as IndexedDataset(multimodal=True))
Exit status: 0 ok, 1 a failed assertion (the message says which), 2 usage.
"""
import json
import struct
import sys

import numpy

INDEX_HEADER = b"MMIDIDX\x00\x00"

# DType codes, megatron/core/datasets/indexed_dataset.py
DTYPES = {
    1: numpy.uint8,
    2: numpy.int8,
    3: numpy.int16,
    4: numpy.int32,
    5: numpy.int64,
    6: numpy.float64,
    7: numpy.float32,
    8: numpy.uint16,
}
DTYPE_NAMES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float64",
               7: "float32", 8: "uint16"}


class Index:
    """The .idx, read the way _IndexReader reads it."""

    def __init__(self, idx_path, multimodal=False):
        with open(idx_path, "rb") as stream:
            header = stream.read(9)
            assert header == INDEX_HEADER, f"bad header, cannot read: {idx_path}"
            version = struct.unpack("<Q", stream.read(8))[0]
            assert version == 1, f"bad version, cannot read: {idx_path}"
            code = struct.unpack("<B", stream.read(1))[0]
            assert code in DTYPES, f"unknown dtype code {code}: {idx_path}"
            self.code = code
            self.dtype = DTYPES[code]
            self.itemsize = numpy.dtype(self.dtype).itemsize
            self.sequence_count = struct.unpack("<Q", stream.read(8))[0]
            self.document_count = struct.unpack("<Q", stream.read(8))[0]
            offset = stream.tell()
        assert offset == 34
        buf = memoryview(numpy.memmap(idx_path, mode="r", order="C")) if self._size(idx_path) else b""
        self.file_size = len(buf)
        n, d1 = self.sequence_count, self.document_count
        # numpy.frombuffer raises ValueError when the buffer is too small, as in Megatron
        self.sequence_lengths = numpy.frombuffer(buf, dtype=numpy.int32, count=n, offset=offset)
        offset += self.sequence_lengths.nbytes
        self.sequence_pointers = numpy.frombuffer(buf, dtype=numpy.int64, count=n, offset=offset)
        offset += self.sequence_pointers.nbytes
        self.document_indices = numpy.frombuffer(buf, dtype=numpy.int64, count=d1, offset=offset)
        offset += self.document_indices.nbytes
        self.sequence_modes = None
        if multimodal:
            self.sequence_modes = numpy.frombuffer(buf, dtype=numpy.int8, count=n, offset=offset)
            offset += n
        self.end = offset
        # IndexedDataset's sanity checks
        assert self.sequence_lengths.shape[0] == self.sequence_count
        assert self.sequence_lengths.shape[0] == self.document_indices[-1]

    @staticmethod
    def _size(path):
        with open(path, "rb") as f:
            f.seek(0, 2)
            return f.tell()

    def check_strict(self, bin_size):
        lengths = self.sequence_lengths.astype(numpy.int64)
        assert self.file_size == self.end, f"file is {self.file_size} bytes, arrays end at {self.end}"
        assert (lengths >= 0).all(), "negative sequence length"
        want = numpy.zeros(len(lengths), dtype=numpy.int64)
        if len(lengths) > 1:
            want[1:] = numpy.cumsum(lengths[:-1]) * self.itemsize
        assert (self.sequence_pointers == want).all(), "pointers are not the running sum of lengths"
        di = self.document_indices
        assert di[0] == 0, "document_indices[0] != 0"
        assert (numpy.diff(di) >= 0).all(), "document_indices decrease"
        assert bin_size == int(lengths.sum()) * self.itemsize, \
            f".bin is {bin_size} bytes, index says {int(lengths.sum()) * self.itemsize}"


class Dataset:
    def __init__(self, prefix, multimodal=False):
        self.index = Index(prefix + ".idx", multimodal)
        size = Index._size(prefix + ".bin")
        self.bin_size = size
        self.bin = numpy.memmap(prefix + ".bin", mode="r", order="C") if size else numpy.zeros(0, numpy.uint8)

    def get(self, i):
        """Megatron's get(idx): lengths[i] items of dtype at byte pointers[i]."""
        length = int(self.index.sequence_lengths[i])
        ptr = int(self.index.sequence_pointers[i])
        return numpy.frombuffer(self.bin, dtype=self.index.dtype, count=length, offset=ptr)

    def document(self, k):
        di = self.index.document_indices
        parts = [self.get(s) for s in range(int(di[k]), int(di[k + 1]))]
        return numpy.concatenate(parts) if parts else numpy.zeros(0, self.index.dtype)

    def num_documents(self):
        return len(self.index.document_indices) - 1


def fmt_ids(a):
    if a.dtype.kind == "f":
        return " ".join(str(int(x)) if float(x).is_integer() else repr(float(x)) for x in a)
    return " ".join(str(int(x)) for x in a)


def info(ds):
    ix = ds.index
    lengths = ix.sequence_lengths.astype(numpy.int64)
    di = ix.document_indices
    out = {
        "dtype": DTYPE_NAMES[ix.code],
        "dtype_code": ix.code,
        "sequences": int(ix.sequence_count),
        "documents": ds.num_documents(),
        "empty_documents": int((numpy.diff(di) == 0).sum()),
        "tokens": int(lengths.sum()),
        "bin_bytes": ds.bin_size,
        "sequence_length": None,
    }
    if len(lengths):
        out["sequence_length"] = {
            "min": int(lengths.min()),
            "mean": float(lengths.mean()),
            "median": float(numpy.median(lengths)),
            "p99": float(numpy.percentile(lengths, 99)),
            "max": int(lengths.max()),
        }
    return out


def main(argv):
    opts = {a for a in argv if a.startswith("--")}
    args = [a for a in argv if not a.startswith("--")]
    known = {"--sequences", "--info", "--strict", "--multimodal"}
    if len(args) != 1 or opts - known:
        sys.stderr.write(__doc__)
        return 2
    ds = Dataset(args[0], "--multimodal" in opts)
    if "--strict" in opts:
        ds.index.check_strict(ds.bin_size)
    out = sys.stdout
    if "--info" in opts:
        out.write(json.dumps(info(ds)) + "\n")
    elif "--sequences" in opts:
        for i in range(ds.index.sequence_count):
            out.write(fmt_ids(ds.get(i)) + "\n")
    else:
        for k in range(ds.num_documents()):
            out.write(fmt_ids(ds.document(k)) + "\n")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (AssertionError, ValueError, struct.error) as e:
        sys.stderr.write(f"megatron_idx_reader: {type(e).__name__}: {e}\n")
        sys.exit(1)
