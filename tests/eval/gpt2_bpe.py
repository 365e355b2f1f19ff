#!/usr/bin/python3
"""An independent GPT-2 byte-level BPE encoder (vocab.json + merges.txt), written from the
published algorithm (Radford et al. 2019; openai/gpt-2 src/encoder.py read for the facts).

Debian's python3 has no `regex` module, so the pre-tokenizer approximates GPT-2's pattern
  's|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+
with Python's re: \\p{L} as [^\\W\\d_] and \\p{N} as \\d.  Exact for ASCII text (what the tests
feed it); letters or digits outside those classes (e.g. U+00BD) may split differently.

usage: gpt2_bpe.py VOCAB MERGES TEXT   prints the ids
"""
import json
import os
import re
import sys

PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+""")


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "hf"))
from gguf_min import byte_unicode as bytes_to_unicode  # noqa: E402  GPT-2's byte table, one copy


class Encoder:
    def __init__(self, vocab_path, merges_path):
        with open(vocab_path, encoding="utf-8") as f:
            self.vocab = json.load(f)
        with open(merges_path, encoding="utf-8") as f:
            lines = [l for l in f.read().split("\n") if l and not l.startswith("#version")]
        self.rank = {tuple(l.split(" ")): i for i, l in enumerate(lines)}
        self.b2u = bytes_to_unicode()
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        parts = list(word)
        while len(parts) > 1:
            pairs = [(self.rank.get((parts[i], parts[i + 1]), None), i) for i in range(len(parts) - 1)]
            pairs = [p for p in pairs if p[0] is not None]
            if not pairs:
                break
            best = min(pairs)[0]
            a, b = self._pair(best)
            out, i = [], 0
            while i < len(parts):
                if i + 1 < len(parts) and parts[i] == a and parts[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(parts[i])
                    i += 1
            parts = out
        self.cache[word] = parts
        return parts

    def _pair(self, r):
        if not hasattr(self, "_by_rank"):
            self._by_rank = {v: k for k, v in self.rank.items()}
        return self._by_rank[r]

    def encode(self, text):
        ids = []
        for piece in PAT.findall(text):
            word = "".join(self.b2u[b] for b in piece.encode("utf-8"))
            ids.extend(self.vocab[t] for t in self.bpe(word))
        return ids


if __name__ == "__main__":
    print(" ".join(map(str, Encoder(sys.argv[1], sys.argv[2]).encode(sys.argv[3]))))
