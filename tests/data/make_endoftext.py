#!/usr/bin/python3
"""Generate tests/data/endoftext.jsonl: documents with special-token strings written in the text.

Megatron's GPT2BPETokenizer (gpt2_tokenization.py) has no special-token splitting: a literal
"<|endoftext|>" in a document is BPE-encoded as ordinary text (7 ids), and only --append-eod
gives id 50256. Hugging Face's GPT-2 tokenizer.json matches it as the added token 50256; tiktoken
rank files with allowed_special="all" match it at its rank; Megatron's JSON TikTokenizer encodes
it as text. Fixtures: fixtures/endoftext.*.ids (tests/oracle/make_fixtures.sh); used by
tests/cli/t0210-special-strings.sh.

Usage: /usr/bin/python3 tests/data/make_endoftext.py [OUTDIR]   (default: tests/data)
Deterministic, no input files.
"""
import json
import os
import sys

E = "<|endoftext|>"
texts = [
    ("alone", E),
    ("middle-glued", "a" + E + "b"),
    ("middle-words", "foo" + E + "bar"),
    ("middle-spaced", "Hello " + E + " world"),
    ("start", E + "Hello world"),
    ("start-spaced", E + " Hello world"),
    ("end", "Hello world" + E),
    ("end-spaced", "Hello world " + E),
    ("twice-adjacent", E + E),
    ("twice-apart", "one" + E + "two" + E + "three"),
    ("twice-spaced", E + " " + E),
    ("spaces-around", "  " + E + "  "),
    ("newlines-around", "line one\n" + E + "\nline two\n"),
    ("tabs-crlf", "\t" + E + "\r\n" + E + "\t"),
    ("unicode-neighbours", "café" + E + "日本語 😀" + E),
    ("digits-punct", "123" + E + "456. (" + E + ")"),
    ("in-quotes", 'He said "' + E + '" and left.'),
    ("after-newline-lead-space", "x\n " + E),
    ("partial-open", "<|endoftext| <|endoftext <|endof"),
    ("partial-close", "endoftext|> |endoftext|>"),
    ("case", "<|ENDOFTEXT|> <|EndOfText|>"),
    ("nested-brackets", "<" + E + ">  <<" + E + ">>"),
    ("other-specials", "<|im_start|>user<|im_end|> <|fim_prefix|>x<|fim_suffix|> <|endofprompt|>"),
    ("plain", "no special strings here"),
    ("empty", ""),
]


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    path = os.path.join(outdir, "endoftext.jsonl")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for id_, text in texts:
            f.write(json.dumps({"id": "eot/" + id_, "text": text}, ensure_ascii=False) + "\n")
        # the same string written with JSON escapes: the reader decodes it before tokenizing
        f.write('{"id": "eot/escaped", "text": "a\\u003c|endoftext|\\u003eb \\u003c|endoftext|>"}\n')
    print(f"{path}: {len(texts) + 1} lines", file=sys.stderr)


main()
