#!/usr/bin/python3
"""Independent reference of Megatron's GPTDataset sample order, for tests.

Written from megatron/core/datasets/gpt_dataset.py with numpy (numpy.random.RandomState for the
shuffles, numpy.random.default_rng for the mock lengths), sharing no code with mgt. It reads
datasets with megatron_idx_reader.py.

Usage: gptdataset_ref.py KEY=VALUE...   (the keys of `test_gptdataset --dump`)
  data="w1 p1 ..." | mock=1, split=, seq=, seed=, train=, valid=, test= (a number or none),
  eod=, vocab=, eodmask=1, resetpos=1, keeppartial=1, samples=K
  cache=DIR         also check the C side's .npy cache files in DIR (GPTDataset and BlendedDataset)
  checkcache=1      check the GPTDataset files even without cache= (in PREFIX/cache/GPTDataset_indices)
Prints what `test_gptdataset --dump` prints. Exit status 1 when a cache file differs.
"""
import glob
import hashlib
import io
import json
import math
import os
import re
import sys

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_idx_reader import Dataset  # noqa: E402

SPLITS = ("train", "valid", "test")
PAD = -1


def normalize(w):
    w = numpy.array(w, dtype=numpy.float64)
    return (w / numpy.sum(w)).tolist()


def split_matrix(split):
    v = [float(x) for x in re.findall(r"[.0-9]+", split)]
    v = v + [0.0] * (3 - len(v))
    assert len(v) == 3
    v = normalize(v)
    cum = [0]
    for x in v:
        cum.append(cum[-1] + x)
    return [(cum[i], cum[i + 1]) if cum[i + 1] > cum[i] else None for i in range(3)]


def blend_list(words):
    """get_blend_from_list"""
    if len(words) % 2 == 1:
        return [w.strip() for w in words], None
    weights = []
    for w in words[0::2]:
        try:
            weights.append(float(w))
        except ValueError:
            return [w.strip() for w in words], None
    return [w.strip() for w in words[1::2]], weights


class Mock:
    """MockGPTLowLevelDataset (ids limited below a small vocabulary as mgt documents)."""

    def __init__(self, eod, vocab):
        rng = numpy.random.default_rng(seed=0)
        self.lengths = rng.integers(low=1, high=4096, size=100000, dtype=numpy.int32)
        self.eod, self.vocab = eod, vocab if 0 < vocab < 4096 else 0
        self.prefix = "mock"

    def get(self, seq, offset, length):
        n = int(self.lengths[seq])
        j = numpy.arange(n - 1, dtype=numpy.int64)
        ids = (1 + j % (self.vocab - 1)) if self.vocab > 1 else (j * 0 if self.vocab == 1 else j + 1)
        return numpy.concatenate([ids, [self.eod]])[offset:offset + length]


class Indexed:
    def __init__(self, prefix):
        self.ds = Dataset(prefix)
        self.lengths = self.ds.index.sequence_lengths
        self.prefix = prefix

    def get(self, seq, offset, length):
        return self.ds.get(seq).astype(numpy.int64)[offset:offset + length]


def build_document_index(docs, ne, rs, sep):
    if not sep or ne == 1:
        a = numpy.tile(docs, ne).astype(numpy.int32)
        rs.shuffle(a)
        return a
    return numpy.concatenate((build_document_index(docs, ne - 1, rs, False),
                              build_document_index(docs, 1, rs, False)))


def build_shuffle(n, total, rs):
    dt = numpy.uint32 if total < 2**32 - 1 - 1 else numpy.int64
    a = numpy.arange(0, n, dtype=dt)
    rs.shuffle(a)
    if n == total:
        return a
    b = numpy.arange(n, total, dtype=dt)
    rs.shuffle(b)
    return numpy.concatenate((a, b))


def build_sample_index(lengths, doc, S, ne, T, drop_last):
    tokens = ne * T - 1
    if drop_last:
        num = int(tokens / S) if tokens < 0 else tokens // S       # C++ truncation
    else:
        num = int(math.ceil(numpy.float32(tokens) / numpy.float32(S)))
    big = max(len(doc), int(lengths.max()) if len(lengths) else 0) > 2**31 - 1
    out = numpy.zeros((num + 1, 2), dtype=numpy.int64 if big else numpy.int32)
    di, off = 0, 0
    for k in range(1, num + 1):
        rem = S + 1
        while rem != 0:
            dl = int(lengths[doc[di]]) - off
            rem -= dl
            if rem <= 0:
                off += rem + dl - 1
                rem = 0
            elif di == len(doc) - 1:
                off = int(lengths[doc[di]]) - 1
                break
            else:
                di += 1
                off = 0
        out[k] = (di, off)
    return out


class GPT:
    """One GPTDataset: indices and sample fetch as megatron/core/datasets/gpt_dataset.py builds them."""

    def __init__(self, low, indices, ns, S, seed, drop_last):
        self.low, self.S, self.ns = low, S, ns
        lengths = low.lengths
        T = int(numpy.sum(lengths[indices], dtype=numpy.int64))
        ne = 1
        if ns is not None:
            assert T > 0 or ns == 0, "samples from an empty split"
            t = T
            while T > 0 and t < ns * S + 1:
                ne += 1
                t += T
        sep = False
        if ne > 1:
            sans = ((ne - 1) * T - 1) // S
            sep = ns - sans < int(0.80 * ((T - 1) // S))
        self.ne, self.sep = ne, sep
        rs = numpy.random.RandomState(seed)
        self.doc = build_document_index(indices, ne, rs, sep)
        self.sample = build_sample_index(lengths, self.doc, S, ne, T, drop_last)
        rows = self.sample.shape[0]
        self.shuffle = build_shuffle(sans if sep else rows - 1, rows - 1, rs)

    def __len__(self):
        return self.sample.shape[0] - 1

    def text(self, i):
        j = int(self.shuffle[i])
        (d0, o0), (d1, o1) = self.sample[j], self.sample[j + 1]
        d0, o0, d1, o1 = int(d0), int(o0), int(d1), int(o1)
        parts = []
        for p in range(d0, d1 + 1):
            seq = int(self.doc[p])
            n = int(self.low.lengths[seq])
            a = o0 if p == d0 else 0
            b = o1 + 1 if p == d1 else n
            parts.append(self.low.get(seq, a, b - a))
        t = numpy.concatenate(parts)
        return numpy.concatenate([t, numpy.full(self.S + 1 - len(t), PAD, dtype=numpy.int64)])


def sample_fields(text, eod, eodmask, resetpos):
    tokens, labels = text[:-1].copy(), text[1:].copy()
    S = len(tokens)
    mask = numpy.ones(S, dtype=numpy.int64)
    if eodmask:
        mask[tokens == eod] = 0
    pos = numpy.arange(S, dtype=numpy.int64)
    if resetpos:
        prev = 0
        for i in numpy.nonzero(tokens == eod)[0]:
            pos[i + 1:] -= i + 1 - prev
            prev = i + 1
    mask[labels == PAD] = 0
    tokens[tokens == PAD] = 0
    labels[labels == PAD] = 0
    return tokens, labels, mask, pos


def blending(weights, size):
    di = numpy.zeros(size, dtype=numpy.int16)
    dsi = numpy.zeros(size, dtype=numpy.int64)
    count = [0] * len(weights)
    for s in range(size):
        x = max(float(s), 1.0)
        errs = [weights[d] * x - float(count[d]) for d in range(len(weights))]
        best = 0
        for d in range(1, len(weights)):
            if errs[d] > errs[best]:
                best = d
        di[s], dsi[s] = best, count[best]
        count[best] += 1
    return di, dsi


def exhaustive(sizes):
    total = sum(sizes)
    w = [s / float(total) for s in sizes]
    count = [0] * len(sizes)
    di, dsi = [], []
    s = 0
    while any(count[d] < sizes[d] for d in range(len(sizes))):
        x = max(float(s), 1.0)
        live = [d for d in range(len(sizes)) if count[d] < sizes[d]]
        best = live[0]
        for d in live[1:]:
            if w[d] * x - count[d] > w[best] * x - count[best]:
                best = d
        di.append(best)
        dsi.append(count[best])
        count[best] += 1
        s += 1
    return numpy.array(di, dtype=numpy.int16), numpy.array(dsi, dtype=numpy.int64)


class Data:
    def __init__(self, a):
        self.S, self.seed = int(a.get("seq", 8)), int(a.get("seed", 1234))
        self.eod = int(a.get("eod", 0))
        sizes = [a.get(k, "0") for k in SPLITS]
        sizes = [None if s == "none" else int(s) for s in sizes]
        self.matrix = split_matrix(a.get("split", "1,0,0"))
        if a.get("mock") == "1":
            lows, weights = [Mock(self.eod, int(a.get("vocab", 0)))], None
        else:
            prefixes, weights = blend_list(a["data"].split())
            lows = [Indexed(p) for p in prefixes]
        self.lows = lows
        self.blended = len(lows) > 1 or weights is not None
        self.gpt = [[None] * 3 for _ in lows]     # [dataset][split]
        self.blend = [None] * 3
        keep = a.get("keeppartial") == "1"
        w1 = normalize(weights) if weights is not None else None
        for s in range(3):
            if self.matrix[s] is None:
                continue
            drop_last = not (s == 1 and keep)
            if not self.blended:
                self.gpt[0][s] = self.make(0, s, sizes[s], drop_last)
            elif w1 is not None:
                target = [int(math.ceil(sizes[s] * w)) for w in w1]
                for k in range(len(lows)):
                    self.gpt[k][s] = self.make(k, s, int(math.ceil(target[k] * (1 + 0.005))), drop_last)
                self.blend[s] = blending(normalize(w1), sum(target))
            else:
                for k in range(len(lows)):
                    self.gpt[k][s] = self.make(k, s, None, drop_last)
                lens = [len(self.gpt[k][s]) for k in range(len(lows))]
                if sizes[s] is None:
                    self.blend[s] = exhaustive(lens)
                else:
                    self.blend[s] = blending(normalize(lens), min(sizes[s], sum(lens)))

    def make(self, k, s, ns, drop_last):
        n = len(self.lows[k].lengths)
        beg, end = (int(round(x * float(n))) for x in self.matrix[s])
        return GPT(self.lows[k], numpy.arange(beg, end, dtype=numpy.int32), ns, self.S, self.seed, drop_last)

    def length(self, s):
        if self.matrix[s] is None:
            return 0
        return len(self.blend[s][0]) if self.blended else len(self.gpt[0][s])

    def locate(self, s, i):
        if not self.blended:
            return 0, i
        return int(self.blend[s][0][i]), int(self.blend[s][1][i])


def npy_bytes(a):
    f = io.BytesIO()
    numpy.save(f, a)
    return f.getvalue()


def check_files(base, arrays):
    """Compare C's BASE-{name} files with the reference arrays: values, dtype, exact bytes."""
    bad = 0
    for name, want in arrays:
        path = base + name
        if not os.path.exists(path):
            print(f"{path}: missing", file=sys.stderr)
            bad += 1
            continue
        got = numpy.load(path)
        if got.dtype != want.dtype or got.shape != want.shape or not numpy.array_equal(got, want):
            print(f"{path}: differs from the reference ({got.dtype}{got.shape} vs {want.dtype}{want.shape})",
                  file=sys.stderr)
            bad += 1
        elif open(path, "rb").read() != npy_bytes(want):
            print(f"{path}: not the bytes numpy.save writes", file=sys.stderr)
            bad += 1
    return bad


def find_base(cache, cls, split, match):
    for p in glob.glob(os.path.join(cache, f"*-{cls}-{split}-description.txt")):
        text = open(p).read()
        if match(json.loads(text)):
            h = os.path.basename(p).split("-")[0]
            if h != hashlib.md5(text.encode("utf-8")).hexdigest():
                print(f"{p}: name is not the md5 of the description", file=sys.stderr)
                return None
            return p[:-len("description.txt")]
    print(f"{cache}: no {cls} {split} cache entry", file=sys.stderr)
    return None


def check_cache(data, cache, with_blend):
    bad = 0
    if isinstance(data.lows[0], Mock):       # mock data is never cached
        if cache and glob.glob(os.path.join(cache, "*.npy")):
            print(f"{cache}: mock data cached", file=sys.stderr)
            return 1
        return 0
    for k, low in enumerate(data.lows):
        for s in range(3):
            g = data.gpt[k][s]
            if g is None:
                continue
            d = cache or os.path.join(low.prefix, "cache", "GPTDataset_indices")
            base = find_base(d, "GPTDataset", SPLITS[s],
                             lambda j: j["dataset_path"] == low.prefix and j["num_samples"] == g.ns)
            bad += 1 if base is None else check_files(base, [("document_index.npy", g.doc),
                                                             ("sample_index.npy", g.sample),
                                                             ("shuffle_index.npy", g.shuffle)])
    for s in range(3):
        if with_blend and data.blend[s] is not None:
            base = find_base(cache, "BlendedDataset", SPLITS[s], lambda j: True)
            bad += 1 if base is None else check_files(base, [("dataset_index.npy", data.blend[s][0]),
                                                             ("dataset_sample_index.npy", data.blend[s][1])])
    return bad


def main():
    a = dict(x.split("=", 1) for x in sys.argv[1:])
    data = Data(a)
    K = int(a.get("samples", 20))
    eodmask, resetpos = a.get("eodmask") == "1", a.get("resetpos") == "1"
    out = [f"len {SPLITS[s]} {data.length(s)}" for s in range(3)]
    out += [f"index {SPLITS[s]} {k} epochs {g.ne} separate {int(g.sep)}"
            for s in range(3) for k, g in enumerate(data.gpt[i][s] for i in range(len(data.lows))) if g]
    for s in range(3):
        L = data.length(s)
        for i in sorted({t * L // K for t in range(K)} | {L - 1}) if L else []:
            k, j = data.locate(s, i)
            f = sample_fields(data.gpt[k][s].text(j), data.eod, eodmask, resetpos)
            out.append(f"{SPLITS[s]} {i} {k} {j} | " + " | ".join(" ".join(map(str, x.tolist())) for x in f))
    print("\n".join(out))
    bad = 0
    if "cache" in a or a.get("checkcache") == "1":
        bad = check_cache(data, a.get("cache"), "cache" in a)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
