#!/usr/bin/python3
"""Independent reference of Megatron's BERT and T5 masked datasets, for tests.

Written from megatron/core/datasets/masked_dataset.py only (sample index of helpers.cpp
build_mapping, the BERT and T5 samples, the masking), with numpy's own RandomState for the
per-sample draws and the raw MT19937 stream, and a pure-Python std::mt19937_64. Shares no code
with mgt. Prints what `mgt-dataset samples` prints, line for line.

Usage: masked_ref.py PREFIX --dataset-type bert|t5 --vocab-file VOCAB [the options of
mgt-dataset samples] [--check-cache DIR]
--check-cache DIR: also check that DIR holds H-CLASS-description.txt with the description as
masked_dataset.py's unique_description (json.dumps indent 4; tokenizer null) and
H-CLASS-sample_index.npy equal to the reference's rows, H = md5 of the description.
"""
import argparse
import collections
import functools
import hashlib
import json
import os
import re
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from megatron_idx_reader import Dataset  # noqa: E402

M64 = (1 << 64) - 1


class MT64:
    """std::mt19937_64 (C++11 [rand.predef])."""

    def __init__(self, seed):
        self.x = [seed & M64]
        for i in range(1, 312):
            p = self.x[-1]
            self.x.append((6364136223846793005 * (p ^ (p >> 62)) + i) & M64)
        self.i = 312

    def __call__(self):
        if self.i == 312:
            x = self.x
            for k in range(312):
                y = (x[k] & 0xFFFFFFFF80000000) | (x[(k + 1) % 312] & 0x7FFFFFFF)
                v = x[(k + 156) % 312] ^ (y >> 1)
                if y & 1:
                    v ^= 0xB5026F5AA96619E9
                x[k] = v
            self.i = 0
        y = self.x[self.i]
        self.i += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000 & M64
        y ^= (y << 37) & 0xFFF7EEE000000000 & M64
        return y ^ (y >> 43)


class MT32:
    """std::mt19937(seed): the same generator as RandomState(seed)'s raw output."""

    def __init__(self, seed):
        self.rs = np.random.RandomState(seed)
        self.buf, self.i = [], 0

    def __call__(self):
        if self.i == len(self.buf):
            self.buf, self.i = [int(v) for v in self.rs.randint(0, 2**32, 4096, dtype=np.uint32)], 0
        self.i += 1
        return self.buf[self.i - 1]


def c_round(x):
    """C round(): half away from zero."""
    return int(np.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def build_mapping(docs, sizes, num_samples, max_len, short_p, seed, min_sent):
    """Section 1.2: rows [start, end, target] over all whole epochs, shuffled."""
    ratio = c_round(1.0 / short_p) if short_p > 0 else 0
    rand = MT32(seed)

    def target():
        if ratio == 0:
            return max_len
        r = rand()
        return 2 + r % (max_len - 1) if r % ratio == 0 else max_len

    rows, epochs = [], 0
    limit = 1 if num_samples is None else 2**31 - 2
    while epochs < limit and (num_samples is None or len(rows) < num_samples):
        for d in range(len(docs) - 1):
            first, last = int(docs[d]), int(docs[d + 1])
            remain = last - first
            long_doc = remain > 1 and any(sizes[s] > 512 for s in range(first, last))
            if remain < min_sent or long_doc:
                continue
            seq_len = num_sent = 0
            prev, tgt = first, target()
            for s in range(first, last):
                seq_len += int(sizes[s])
                num_sent += 1
                remain -= 1
                if (seq_len >= tgt and remain > 1 and num_sent >= min_sent) or remain == 0:
                    rows.append([prev, s + 1, tgt])
                    prev, tgt = s + 1, target()
                    seq_len = num_sent = 0
        epochs += 1
        if not rows and num_samples is not None:
            raise SystemExit("reference: no samples")
    r64 = MT64(seed + 1)
    for i in range(len(rows) - 1, 0, -1):
        j = r64() % (i + 1)
        rows[i], rows[j] = rows[j], rows[i]
    return rows, epochs


class Vocab:
    def __init__(self, path, extra):
        toks = open(path, encoding="utf-8", newline="").read().split("\n")
        if toks and toks[-1] == "":
            toks.pop()
        toks = [t[:-1] if t.endswith("\r") else t for t in toks]
        self.sub = [t.startswith("##") for t in toks] + [False] * extra
        ids = {t: i for i, t in reversed(list(enumerate(toks)))}
        self.cls, self.sep, self.mask, pad = ids["[CLS]"], ids["[SEP]"], ids["[MASK]"], ids["[PAD]"]
        self.size = len(toks) + extra
        self.sentinels = list(range(len(toks), len(toks) + extra))
        self.bos, self.eos = self.cls, self.sep
        # pad falls back to -1 when it collides with eos or eod (both [SEP] here)
        self.pad = -1 if pad == self.sep else pad


def mask_lm(tokens, tgt, rs, v, prob, t5):
    """Section 1.5: returns (masked tokens, [(pos, orig)], spans [(idxs, origs)], n_maskings)."""
    cands = []
    for i, t in enumerate(tokens):
        if t in (v.cls, v.sep):
            continue
        if v.sub[t] and cands:
            cands[-1].append(i)
        else:
            cands.append([i])
    n_maskings = min(prob * tgt, max(1, int(round(len(tokens) * prob))))
    max_n = 10 if t5 else 3
    nvals = np.arange(1, max_n + 1, dtype=np.int64)
    p = 1.0 / nvals
    p = p / p.sum()
    p = p[:max_n] / p[:max_n].sum()
    entries = [[cands[k:k + n] for n in range(1, max_n + 1)] for k in range(len(cands))]
    rs.shuffle(entries)
    out = list(tokens)
    masked, spans, done = [], [], set()
    for entry in entries:
        if len(masked) >= n_maskings:
            break
        n = min(rs.geometric(0.2), max_n) if t5 else int(rs.choice(nvals, p=p))
        while True:
            idxs = [i for c in entry[n - 1] for i in c]
            n -= 1
            if n_maskings >= len(masked) + len(idxs):
                break
            if n == 0:
                idxs = None
                break
        if idxs is None or any(i in done for i in idxs):
            continue
        for i in idxs:
            done.add(i)
            if t5:
                out[i] = v.mask
            elif rs.random() < 0.8:
                out[i] = v.mask
            elif rs.random() >= 0.5:
                out[i] = rs.randint(0, v.size)
            masked.append((i, tokens[i]))
        spans.append((idxs, [tokens[i] for i in idxs]))
    spans.sort(key=lambda s: s[0][0])
    return out, sorted(masked), spans, n_maskings


def bert_sample(sents, tgt, idx, a):
    v = a.vocab
    rs = np.random.RandomState((a.seed + idx) % 2**32)
    pivot, is_random = len(sents), False
    if a.binary_head:
        assert len(sents) >= 2
        pivot = rs.randint(1, len(sents)) if len(sents) >= 3 else 1
        is_random = rs.random() < 0.5
    A = [t for s in sents[:pivot] for t in s]
    B = [t for s in sents[pivot:] for t in s]
    if is_random:
        A, B = B, A
    truncated = False
    while len(A) + len(B) > tgt:
        victim = A if len(A) > len(B) else B
        if rs.random() < 0.5:
            del victim[0]
        else:
            del victim[-1]
        truncated = True
    tokens = [v.cls] + A + [v.sep]
    types = [0] * len(tokens)
    if B:
        tokens += B + [v.sep]
        types += [1] * (len(B) + 1)
    out, masked, _, _ = mask_lm(tokens, tgt, rs, v, a.mask_prob, False)
    S, P = a.seq_length, v.pad
    text = np.array(out + [P] * (S - len(out)), dtype=np.int64)
    types = np.array(types + [P] * (S - len(types)), dtype=np.int64)
    pad_mask = np.where(text == P, P, 1)
    labels = np.full(S, -1, dtype=np.int64)
    loss = np.zeros(S, dtype=np.int64)
    for i, orig in masked:
        labels[i], loss[i] = orig, 1
    text[text == P] = 0
    labels[labels == P] = 0
    return collections.OrderedDict([("text", text), ("types", types), ("labels", labels),
                                    ("is_random", int(is_random)), ("padding_mask", pad_mask),
                                    ("loss_mask", loss), ("truncated", int(truncated))])


def t5_sample(sents, tgt, idx, a):
    v = a.vocab
    rs = np.random.RandomState((a.seed + idx) % 2**32)
    tokens = [t for s in sents for t in s]
    truncated = len(tokens) > tgt
    tokens = tokens[:tgt]
    out, _, spans, _ = mask_lm(tokens, tgt, rs, v, a.mask_prob, True)
    enc, dec_in, dec_out, cur = [], [v.bos], [], 0
    assert len(spans) <= len(v.sentinels), "more spans than sentinels"
    for k, (idxs, origs) in enumerate(spans):
        s = v.sentinels[k]
        enc += out[cur:idxs[0]] + [s]
        dec_in += [s] + origs
        dec_out += [s] + origs
        cur = idxs[-1] + 1
    enc += out[cur:]
    dec_out.append(v.eos)
    S, D, P = a.seq_length, a.decoder_seq_length, v.pad
    assert len(enc) <= S and len(dec_in) <= D, "lengths"
    e = np.array(enc + [P] * (S - len(enc)), dtype=np.int64)
    d = np.array(dec_in + [P] * (D - len(dec_in)), dtype=np.int64)
    lab = np.array(dec_out + [-1] * (D - len(dec_out)), dtype=np.int64)
    em, dm = (e != P).astype(np.int64), (d != P).astype(np.int64)
    loss = (np.arange(D) < len(dec_in)).astype(np.int64)
    e[e == P], d[d == P], lab[lab == P] = 0, 0, 0
    return collections.OrderedDict([("text_enc", e), ("text_dec", d), ("labels", lab), ("loss_mask", loss),
                                    ("truncated", int(truncated)), ("enc_mask", em), ("dec_mask", dm)])


def split_matrix(split):
    w = [float(x) for x in re.findall(r"[.0-9]+", split)]
    w += [0.0] * (3 - len(w))
    w = (np.array(w, dtype=np.float64) / np.sum(np.array(w, dtype=np.float64))).tolist()
    ends = functools.reduce(lambda acc, x: acc + [acc[-1] + x], [[0], *w])
    return [(b, e) if e > b else None for b, e in zip(ends[:-1], ends[1:])]


def description(a, k, n):
    u = collections.OrderedDict()
    u["class"] = "T5MaskedWordPieceDataset" if a.t5 else "BERTMaskedWordPieceDataset"
    u["dataset_path"] = a.prefix
    u["num_samples"] = n
    u["index_split"] = ["train", "valid", "test"][k]
    u["random_seed"] = a.seed
    u["sequence_length"] = a.seq_length
    u["split"] = a.split
    u["split_matrix"] = split_matrix(a.split)
    u["tokenizer"] = None
    u["masking_probability"] = a.mask_prob
    u["short_sequence_probability"] = a.short_seq_prob
    u["masking_max_ngram"] = 10 if a.t5 else 3
    u["masking_do_full_word"] = True
    u["masking_do_permutation"] = False
    u["masking_use_longer_ngrams"] = False
    u["masking_use_geometric_distribution"] = a.t5
    if a.t5:
        u["sequence_length_decoder"] = a.decoder_seq_length
    else:
        u["classification_head"] = a.binary_head
    return json.dumps(u, indent=4)


def dump(name, obj):
    print(json.dumps(obj, separators=(",", ":")))


def parse_args(argv):
    ap = argparse.ArgumentParser()
    ap.add_argument("prefix")
    ap.add_argument("--dataset-type", required=True, choices=["bert", "t5"])
    ap.add_argument("--vocab-file", required=True)
    ap.add_argument("--vocab-extra-ids", type=int, default=100)
    ap.add_argument("--seq-length", type=int, default=512)
    ap.add_argument("--encoder-seq-length", type=int)
    ap.add_argument("--decoder-seq-length", type=int, default=128)
    ap.add_argument("--bert-no-binary-head", action="store_true")
    ap.add_argument("--mask-prob", type=float, default=0.15)
    ap.add_argument("--short-seq-prob", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--split", default="969, 30, 1")
    ap.add_argument("--num-samples", default="none")
    ap.add_argument("--data-cache-path")
    ap.add_argument("--index", action="store_true")
    ap.add_argument("--samples")
    ap.add_argument("--check-cache")
    a = ap.parse_args(argv)
    a.t5 = a.dataset_type == "t5"
    if a.t5 and a.encoder_seq_length:
        a.seq_length = a.encoder_seq_length
    a.binary_head = not a.t5 and not a.bert_no_binary_head
    a.vocab = Vocab(a.vocab_file, a.vocab_extra_ids if a.t5 else 0)
    ns = [None if x.strip() == "none" else int(x) for x in a.num_samples.split(",")]
    a.ns = ns + [None] * (3 - len(ns))
    return a


def main(argv):
    a = parse_args(argv)
    ds = Dataset(a.prefix)
    di, sizes = ds.index.document_indices, ds.index.sequence_lengths
    n_docs = len(di) - 1
    for k, bookend in enumerate(split_matrix(a.split)):
        if bookend is None:
            continue
        beg, end = int(round(bookend[0] * float(n_docs))), int(round(bookend[1] * float(n_docs)))
        assert end > beg, "empty split"
        max_len = a.seq_length - (2 if a.t5 else 3)
        rows, epochs = build_mapping(di[beg:end + 1], sizes, a.ns[k], max_len, a.short_seq_prob, a.seed,
                                     2 if a.binary_head else 1)
        u64 = len(sizes) > 2**32 - 1
        name = ["train", "valid", "test"][k]
        dump(name, collections.OrderedDict([("split", name), ("documents", [beg, end]), ("samples", len(rows)),
                                            ("epochs", epochs), ("dtype", "uint64" if u64 else "uint32")]))
        if a.index:
            for i, r in enumerate(rows):
                dump(name, collections.OrderedDict([("split", name), ("row", i), ("index", r)]))
        if a.samples:
            if ":" in a.samples:
                lo, hi = a.samples.split(":")
                lo, hi = int(lo or 0), int(hi) if hi else len(rows)
            else:
                lo = int(a.samples)
                hi = lo + 1
            for i in range(lo, min(hi, len(rows))):
                s, e, tgt = rows[i]
                sents = [[int(t) for t in ds.get(j)] for j in range(s, e)]
                smp = t5_sample(sents, tgt, i, a) if a.t5 else bert_sample(sents, tgt, i, a)
                o = collections.OrderedDict([("split", name), ("idx", i)])
                for key, val in smp.items():
                    o[key] = val.tolist() if isinstance(val, np.ndarray) else val
                dump(name, o)
        if a.check_cache:
            desc = description(a, k, a.ns[k])
            h = hashlib.md5(desc.encode("utf-8")).hexdigest()
            cls = "T5MaskedWordPieceDataset" if a.t5 else "BERTMaskedWordPieceDataset"
            base = os.path.join(a.check_cache, f"{h}-{cls}-")
            got = open(base + "description.txt", encoding="utf-8").read()
            assert got == desc, f"description differs:\n{got}\n---\n{desc}"
            arr = np.load(base + "sample_index.npy")
            assert arr.dtype == (np.uint64 if u64 else np.uint32) and arr.shape == (len(rows), 3), arr.shape
            assert (arr.astype(np.int64) == np.array(rows, dtype=np.int64).reshape(-1, 3)).all(), "rows differ"
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
