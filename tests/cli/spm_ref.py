#!/usr/bin/python3
"""Reference for mgt's SentencePiece tokenizers, for tests: Megatron-LM's _SentencePieceTokenizer
and _Llama2Tokenizer (megatron/training/tokenizer/tokenizer.py) written anew from their
behaviour on top of python3-sentencepiece, sharing no code with mgt; and the GGUF vocabulary
llama.cpp's converter (_create_vocab_sentencepiece) would write for them.

Usage (TYPE = SentencePieceTokenizer | Llama2Tokenizer; EXTRA = --vocab-extra-ids, 0 for none):
  spm_ref.py encode TYPE MODEL EXTRA JSONL       ids of each non-blank line's "text", one line each
  spm_ref.py decode TYPE MODEL EXTRA IDS         {"text": detokenize(ids)} per line of ids
  spm_ref.py info TYPE MODEL EXTRA               "type T\\nvocab_size N\\neod E" (mgt-tokenize --info)
  spm_ref.py vocab TYPE MODEL EXTRA GOT.json     assert mgt-tokenize --gguf-vocab output matches
  spm_ref.py bytes MODEL JSONL                   exit 1 unless some line encodes with byte pieces
"""
import json
import struct
import sys

import sentencepiece


class Megatron:
    def __init__(self, kind, model, extra):
        self.kind = kind
        self.sp = sentencepiece.SentencePieceProcessor(model_file=model)
        self.vocab = {self.sp.id_to_piece(i): i for i in range(self.sp.get_piece_size())}
        self.specials = {}  # text -> id, in insertion order
        if kind == "Llama2Tokenizer":
            self.bos, self.eos, self.pad = self.sp.bos_id(), self.sp.eos_id(), self.sp.pad_id()
            self.eod = self.eos
            return
        for t in ("<CLS>", "<SEP>", "<EOD>", "<MASK>"):
            self.add(t)
        self.eod = self.vocab["<EOD>"]
        ids = []
        for get, fallback in ((self.sp.pad_id, "<PAD>"), (self.sp.bos_id, "<BOS>"), (self.sp.eos_id, "<EOS>")):
            try:
                text = self.sp.id_to_piece(get())
            except IndexError:  # id -1: no such piece
                text = fallback
            ids.append(self.add(text))
        self.pad, self.bos, self.eos = ids
        for i in range(extra):
            self.add("<extra_id_%d>" % i)
        self.inv_specials = {v: k for k, v in self.specials.items()}

    def add(self, t):
        if t not in self.vocab:
            self.vocab[t] = len(self.vocab)
        self.specials[t] = self.vocab[t]
        return self.vocab[t]

    def tokenize(self, text):
        if self.kind == "Llama2Tokenizer":
            return [self.bos] + self.sp.encode(text)
        ids, idx = [], 0
        while True:
            found = {t: text[idx:].index(t) for t in self.specials if t in text[idx:]}
            if not found:
                break
            t = min(found, key=found.get)  # earliest; ties: first inserted
            ids += self.sp.encode_as_ids(text[idx:idx + found[t]]) + [self.specials[t]]
            idx += found[t] + len(t)
        return ids + self.sp.encode_as_ids(text[idx:])

    def detokenize(self, ids):
        if self.kind == "Llama2Tokenizer":
            return self.sp.decode_ids(ids)
        text, last = "", 0
        for i, x in enumerate(ids):
            if x in self.inv_specials:
                text += self.sp.decode_ids(ids[last:i]) + " " + self.inv_specials[x] + " "
                last = i + 1
        return text + self.sp.decode_ids(ids[last:])


def texts(path):
    for line in open(path, encoding="utf-8"):
        if line.strip():
            yield json.loads(line)["text"]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def check_vocab(m, got):
    sp = m.sp
    n = len(m.vocab)
    assert got["model"] == "llama" and got["pre"] is None, (got["model"], got["pre"])
    assert len(got["tokens"]) == n == len(got["token_type"]) == len(got["scores"]), (len(got["tokens"]), n)
    inv = {v: k for k, v in m.vocab.items()}
    for i in range(n):
        if i < sp.get_piece_size():
            want_type = 2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 5 if sp.is_unused(i) else 6 if sp.is_byte(i) else 1
            want_score = f32(sp.get_score(i))
        else:  # Megatron's appended special tokens: llama.cpp's added tokens, as control
            want_type, want_score = 3, -1000.0
        assert got["tokens"][i] == inv[i], (i, got["tokens"][i], inv[i])
        assert got["token_type"][i] == want_type, (i, inv[i], got["token_type"][i], want_type)
        assert got["scores"][i] == want_score, (i, got["scores"][i], want_score)
    want = {"bos_token_id": m.bos, "eos_token_id": m.eod, "unknown_token_id": sp.unk_id(),
            "padding_token_id": m.pad, "add_bos_token": m.kind == "Llama2Tokenizer"}
    for k, v in want.items():
        assert got[k] == v, (k, got[k], v)


def main():
    if sys.argv[1] == "bytes":
        sp = sentencepiece.SentencePieceProcessor(model_file=sys.argv[2])
        n = sum(1 for t in texts(sys.argv[3]) for i in sp.encode(t) if sp.is_byte(i))
        print("# %d byte-fallback ids" % n)
        sys.exit(0 if n else 1)
    cmd, kind, model, extra = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    m = Megatron(kind, model, int(extra))
    if cmd == "encode":
        for t in texts(sys.argv[5]):
            print(" ".join(map(str, m.tokenize(t))))
    elif cmd == "decode":
        for line in open(sys.argv[5]):
            print(json.dumps({"text": m.detokenize([int(x) for x in line.split()])}, ensure_ascii=False))
    elif cmd == "info":
        print("type %s\nvocab_size %d\neod %d" % (kind, len(m.vocab), m.eod))
    elif cmd == "vocab":
        check_vocab(m, json.load(open(sys.argv[5], encoding="utf-8")))
    else:
        sys.exit("unknown command " + cmd)


main()
