#!/usr/bin/python3
"""Writes share/mgt/tokenizers/kjv-4k/tokenizer.json: a byte-level BPE tokenizer of 4,096 tokens
(256 bytes, 3,839 merges, <|endoftext|>) learned from the bundled King James Bible, in Hugging
Face's tokenizer.json layout with GPT-2's pre-tokenizer, so that mgt reads it as a
HuggingFaceTokenizer (mgt-preprocess(1), --tokenizer-model).  Used by `make demo` (contrib/demo.sh):
with GPT-2's 50,257 tokens the output layer is about 90% of the tiny demo model's FLOPs; with
4,096 it is about a third, and a KJV word is one token more often (issue 46).

Development tool, not run by the programs or the build: the tokenizer is shipped, and
tests/cli/t0245-kjv-tokenizer.sh checks that this script, run again, writes the same file.
Usage: contrib/kjv-tokenizer.py [KJV.jsonl.zst] [OUTPUT] (defaults: the bundled corpus and path).

Byte-pair encoding as Sennrich et al. 2016 (section 3.2) learn it, over GPT-2's byte-level
alphabet (Radford et al. 2019, section 2.2): the text is split into pieces by GPT-2's
pre-tokenization pattern, each piece's UTF-8 bytes are mapped to printable characters, and the
most frequent adjacent pair over all pieces (weighted by piece count) is merged, repeatedly.
Ties go to the pair whose two strings sort first, so the output is the same on every machine.
The vocabulary covers the whole corpus (test chapters included): it is a segmentation, not a
model, and is learned once.
"""
import heapq
import os
import json
import re
import subprocess
import sys

VOCAB = 4096
EOD = "<|endoftext|>"
# GPT-2's pattern with Python's re: [^\W\d_] is \p{L}, \d is \p{N} for this corpus.
PATTERN = re.compile(r"""'(?:[sdmt]|ll|ve|re)| ?[^\W\d_]+| ?\d+| ?[^\s\w]+|\s+(?!\S)|\s+""")


def byte_alphabet():
    """GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the other
    bytes take the characters from U+0100 up, in byte order."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def piece_counts(path):
    """{piece as a tuple of byte characters: count} over the "text" of every JSONL line."""
    alpha = byte_alphabet()
    raw = subprocess.run(["zstdcat", path], check=True, capture_output=True).stdout
    counts = {}
    for line in raw.decode("utf-8").splitlines():
        for piece in PATTERN.findall(json.loads(line)["text"]):
            key = tuple(alpha[b] for b in piece.encode("utf-8"))
            counts[key] = counts.get(key, 0) + 1
    return alpha, counts


def pairs_of(word):
    return [(word[i], word[i + 1]) for i in range(len(word) - 1)]


def learn(counts, merges_wanted):
    words = [list(w) for w in counts]
    freq = list(counts.values())
    pair_count, where = {}, {}
    for i, w in enumerate(words):
        for p in pairs_of(w):
            pair_count[p] = pair_count.get(p, 0) + freq[i]
            where.setdefault(p, set()).add(i)
    heap = [(-c, p) for p, c in pair_count.items()]
    heapq.heapify(heap)
    merges = []
    while len(merges) < merges_wanted and heap:
        c, p = heapq.heappop(heap)
        if pair_count.get(p, 0) != -c or c == 0:
            continue  # a stale entry: the pair's count changed since it was pushed
        merges.append(p)
        joined = p[0] + p[1]
        touched = {}
        for i in where.pop(p, ()):
            w = words[i]
            for q in pairs_of(w):
                pair_count[q] -= freq[i]
                touched[q] = True
            out, j = [], 0
            while j < len(w):
                if j + 1 < len(w) and w[j] == p[0] and w[j + 1] == p[1]:
                    out.append(joined)
                    j += 2
                else:
                    out.append(w[j])
                    j += 1
            words[i] = out
            for q in pairs_of(out):
                pair_count[q] = pair_count.get(q, 0) + freq[i]
                where.setdefault(q, set()).add(i)
                touched[q] = True
        pair_count.pop(p, None)
        for q in sorted(touched):
            if q != p and pair_count.get(q, 0) > 0:
                heapq.heappush(heap, (-pair_count[q], q))
    return merges


def tokenizer_json(alpha, merges):
    vocab = {}
    for b in range(256):
        vocab[alpha[b]] = b
    for a, b in merges:
        vocab[a + b] = len(vocab)
    eod = len(vocab)
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [{"id": eod, "content": EOD, "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                          "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": "", "end_of_word_suffix": "",
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else "share/mgt/data/kjv.jsonl.zst"
    dst = sys.argv[2] if len(sys.argv) > 2 else "share/mgt/tokenizers/kjv-4k/tokenizer.json"
    alpha, counts = piece_counts(src)
    merges = learn(counts, VOCAB - 256 - 1)
    with open(dst + ".tmp", "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(alpha, merges), f, ensure_ascii=False, indent=1)
        f.write("\n")
    os.replace(dst + ".tmp", dst)
    print(f"{dst}: {256 + len(merges) + 1} tokens ({len(merges)} merges) from {len(counts)} distinct pieces")


if __name__ == "__main__":
    main()
