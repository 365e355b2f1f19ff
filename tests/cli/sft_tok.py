#!/usr/bin/python3
"""sft_tok.py KJV4K_TOKENIZER_JSON OUT_JSON: the demo's kjv-4k tokenizer with Nemotron's prompt
tokens added as special tokens (<SPECIAL_10>, <SPECIAL_11>, <SPECIAL_12>, <SPECIAL_233>, <unk> at
ids 4096..4100), the tokenizer of the SFT tests (t1010, t3220) and tests/bench/sft_packing.sh."""
import json
import sys

t = json.load(open(sys.argv[1], encoding="utf-8"))
n = len(t["model"]["vocab"]) + len(t["added_tokens"])
for k, name in enumerate(["<SPECIAL_10>", "<SPECIAL_11>", "<SPECIAL_12>", "<SPECIAL_233>", "<unk>"]):
    t["added_tokens"].append({"id": n + k, "content": name, "single_word": False, "lstrip": False,
                              "rstrip": False, "normalized": False, "special": True})
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
