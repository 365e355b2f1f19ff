#!/bin/sh
# The GGUF vocabulary view of the byte-level BPE tokenizers (mgt-tokenize --gguf-vocab, what
# mgt-export writes as tokenizer.ggml.*) against the tokenizer files read independently with
# Python's json: vocab.json keys by id, merges.txt lines, tokenizer.json model.vocab, merges and
# added_tokens typed as llama.cpp's convert_hf_to_gguf.py does; the pre-tokenizer names; the
# refusals. (SentencePiece's view is checked in t0220.)
. "$(dirname "$0")/lib.sh"
TK=$BIN/mgt-tokenize
G=$SHARE/tokenizers/gpt2
D=$ROOT/tests/data/tokenizers
HF() { echo "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $1"; }

gpt2_files() {
	$TK $GPT2 --gguf-vocab > "$T/gpt2.json" && $PY - "$T/gpt2.json" "$G/vocab.json" "$G/merges.txt" <<'PY'
import json, sys
got = json.load(open(sys.argv[1], encoding="utf-8"))
vocab = json.load(open(sys.argv[2], encoding="utf-8"))
merges = [l.rstrip("\n") for l in open(sys.argv[3], encoding="utf-8")]
merges = [m for i, m in enumerate(merges) if m and not (i == 0 and m.startswith("#version"))]
inv = {v: k for k, v in vocab.items()}
assert got["model"] == "gpt2" and got["pre"] == "gpt-2", (got["model"], got["pre"])
assert got["tokens"] == [inv[i] for i in range(len(inv))], "tokens differ from vocab.json"
assert got["token_type"] == [1] * len(inv), "types"
assert got["scores"] is None
assert got["merges"] == merges, "merges differ from merges.txt (%d vs %d)" % (len(got["merges"]), len(merges))
eot = vocab["<|endoftext|>"]
assert (got["bos_token_id"], got["eos_token_id"], got["unknown_token_id"], got["padding_token_id"], got["add_bos_token"]) == \
    (eot, eot, -1, -1, False), got
PY
}
ok "GPT2BPETokenizer: tokens = vocab.json keys, merges = merges.txt, bos = eos = <|endoftext|>" gpt2_files

# llama.cpp's converter: added tokens are control when special or when they look special, else
# user defined (U+2581 as a space); the model's tokens normal; ids without a token "[PAD<id>]"
hf_view() { # FILE PRE
	$TK $(HF "$1") --gguf-vocab > "$T/hf.json" && $PY - "$T/hf.json" "$1" "$2" <<'PY'
import json, sys
got = json.load(open(sys.argv[1], encoding="utf-8"))
tj = json.load(open(sys.argv[2], encoding="utf-8"))
def looks_special(t):
    return t in ("<pad>", "<mask>", "<2mass>", "[@BOS@]") or (t.startswith("<|") and t.endswith("|>")) or \
        (t.startswith("<\uff5c") and t.endswith("\uff5c>")) or (t.startswith("<unused") and t.endswith(">"))
n = max(list(tj["model"]["vocab"].values()) + [a["id"] for a in tj.get("added_tokens", [])]) + 1
tokens, types = ["[PAD%d]" % i for i in range(n)], [5] * n
for k, v in tj["model"]["vocab"].items():
    tokens[v], types[v] = k, 1
for a in tj.get("added_tokens", []):
    if a["special"] or looks_special(a["content"]):
        tokens[a["id"]], types[a["id"]] = a["content"], 3
    else:
        tokens[a["id"]], types[a["id"]] = a["content"].replace("\u2581", " "), 4
merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
assert got["model"] == "gpt2" and got["pre"] == sys.argv[3], (got["model"], got["pre"])
assert got["tokens"] == tokens, [(i, a, b) for i, (a, b) in enumerate(zip(got["tokens"], tokens)) if a != b][:3]
assert got["token_type"] == types, [(i, a, b) for i, (a, b) in enumerate(zip(got["token_type"], types)) if a != b][:3]
assert got["merges"] == merges, "merges differ"
print("# %d tokens, %d added, %d merges" % (n, len(tj.get("added_tokens", [])), len(merges)))
PY
}
ok "HF gpt2 tokenizer.json: pre gpt-2, tokens, types, merges" hf_view "$G/tokenizer.json" gpt-2
ok "HF qwen2-style tokenizer.json: pre qwen2" hf_view "$D/qwen2.json" qwen2
ok "HF tokenizer.json with special and non-special added tokens: control / user defined" hf_view "$D/added-tokens.json" gpt-2
ok "HF gpt2 tokenizer.json: bos = eos = <|endoftext|> (no tokenizer_config.json), no BOS added" sh -c "
  $TK $(HF "$G/tokenizer.json") --gguf-vocab | $PY -c '
import json, sys; g = json.load(sys.stdin)
assert (g[\"bos_token_id\"], g[\"eos_token_id\"], g[\"add_bos_token\"]) == (50256, 50256, False), g[\"bos_token_id\"]'"

# a Llama 3 style tokenizer.json (pattern, BOS template, tokenizer_config.json): made from the qwen2
# test file by swapping in Llama 3's split pattern and a post-processor that prepends id 0
llama3() {
	mkdir -p "$T/l3" && $PY - "$D/qwen2.json" "$T/l3" <<'PY' && $TK $(HF "$T/l3") --gguf-vocab > "$T/l3.json" &&
import json, sys
tj = json.load(open(sys.argv[1], encoding="utf-8"))
pat = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = pat
bos = tj["added_tokens"][0]
tj["post_processor"] = {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": bos["content"], "type_id": 0}},
    {"Sequence": {"id": "A", "type_id": 0}}], "pair": [], "special_tokens": {bos["content"]: {"id": bos["content"], "ids": [bos["id"]], "tokens": [bos["content"]]}}}
json.dump(tj, open(sys.argv[2] + "/tokenizer.json", "w"))
json.dump({"bos_token": bos["content"], "eos_token": {"content": tj["added_tokens"][1]["content"]}}, open(sys.argv[2] + "/tokenizer_config.json", "w"))
print(bos["id"], tj["added_tokens"][1]["id"], file=open(sys.argv[2] + "/ids", "w"))
PY
	$PY - "$T/l3.json" "$T/l3/ids" <<'PY'
import json, sys
g = json.load(open(sys.argv[1])); bos, eos = map(int, open(sys.argv[2]).read().split())
assert g["pre"] == "llama-bpe", g["pre"]
assert (g["bos_token_id"], g["eos_token_id"], g["add_bos_token"]) == (bos, eos, True), (g["bos_token_id"], g["eos_token_id"], g["add_bos_token"])
PY
}
ok "Llama 3 pattern: pre llama-bpe; bos/eos from tokenizer_config.json; add_bos from the template" llama3

unknown_pre() {
	$PY - "$D/qwen2.json" "$T/odd.json" <<'PY' &&
import json, sys
tj = json.load(open(sys.argv[1], encoding="utf-8"))
tj["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = r"\p{L}+|\p{N}+|[^\p{L}\p{N}]+"
json.dump(tj, open(sys.argv[2], "w"))
PY
	exits 4 $TK $(HF "$T/odd.json") --gguf-vocab && err_has 'p{L}+|' && err_has "no llama.cpp pre-tokenizer name"
}
ok "unknown pre-tokenizer pattern: exit 4 naming the pattern" unknown_pre
ok "the same tokenizer still encodes (the refusal is the GGUF view's only)" sh -c "$TK $(HF "$T/odd.json") hello >/dev/null"
tik() { exits 2 $TK --tokenizer-type TikTokenizer --tokenizer-model "$SHARE/tokenizers/tiktoken/cl100k_base.tiktoken" --gguf-vocab && err_has TikTokenizer; }
ok "TikTokenizer: exit 2 with a message" tik
null() { exits 2 $TK --tokenizer-type NullTokenizer --vocab-size 10 --gguf-vocab && err_has NullTokenizer; }
ok "NullTokenizer: exit 2 with a message" null
done_testing
