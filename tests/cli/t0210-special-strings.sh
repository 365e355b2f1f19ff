#!/bin/sh
# Special-token strings written in document text (tests/data/endoftext.jsonl), through
# mgt-tokenize and mgt-preprocess:
#   GPT2BPETokenizer      as Megatron's gpt2_tokenization.py: "<|endoftext|>" is ordinary text
#                         (7 BPE ids); only --append-eod writes 50256. Reference: gpt-3-encoder,
#                         equal to tiktoken gpt2 encode_ordinary (fixtures/endoftext.gpt2bpe.ids).
#   HuggingFaceTokenizer  as Hugging Face tokenizers: GPT-2's tokenizer.json matches the added
#                         token, 50256 (fixtures/endoftext.gpt2.ids).
#   TikTokenizer          rank files: tiktoken ranks, specials at their tiktoken ids; Megatron JSON
#                         vocabulary: rank + --tiktoken-num-special-tokens, specials are text.
# Live oracles too when tests/oracle/setup.sh can provide them.
. "$(dirname "$0")/lib.sh"
D=$ROOT/tests/data
E=$D/endoftext.jsonl
F=$D/fixtures
TK=$BIN/mgt-tokenize
PP=$BIN/mgt-preprocess
TIK=$SHARE/tokenizers/tiktoken
HFG="--tokenizer-type HuggingFaceTokenizer --tokenizer-model $SHARE/tokenizers/gpt2"

# tok_same WANT-FILE FLAGS...: mgt-tokenize --jsonl on endoftext.jsonl prints WANT-FILE
tok_same() {
	want=$1; shift
	$TK "$@" --jsonl -i "$E" > "$T/got" 2>"$T/err" || { echo "# $(head -c 300 "$T/err")"; return 1; }
	cmp -s "$want" "$T/got" && return 0
	diff "$want" "$T/got" | head -4 | sed 's/^/# /'
	return 1
}
# pp_same NAME WANT-FILE FLAGS...: mgt-preprocess --append-eod writes WANT-FILE's ids, each
# non-empty document followed by 50256, and says nothing on stderr (--quiet)
pp_same() {
	name=$1 want=$2; shift 2
	$PP --input "$E" --output-prefix "$T/$name" "$@" --append-eod --workers 2 --quiet 2>"$T/$name.err" &&
		[ ! -s "$T/$name.err" ] && $PY "$READER" --strict "$T/${name}_text_document" > "$T/$name.ids" &&
		sed '/./s/$/ 50256/' "$want" | cmp -s - "$T/$name.ids" && return 0
	echo "# stderr: $(head -c 300 "$T/$name.err")"
	sed '/./s/$/ 50256/' "$want" | diff - "$T/$name.ids" | head -4 | sed 's/^/# /'
	return 1
}
# round_trip IDS-FILE FLAGS...: mgt-tokenize --decode --jsonl gives back the texts of endoftext.jsonl
round_trip() {
	ids=$1; shift
	$TK "$@" --decode --jsonl < "$ids" > "$T/dec.jsonl" && $PY - "$E" "$T/dec.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["text"] for l in open(sys.argv[1], encoding="utf-8")]
b = [json.loads(l)["text"] for l in open(sys.argv[2], encoding="utf-8")]
bad = [i + 1 for i in range(max(len(a), len(b))) if i >= len(a) or i >= len(b) or a[i] != b[i]]
assert not bad, "texts differ at lines %s" % bad[:5]
PY
}
# one TEXT WANT FLAGS...: mgt-tokenize TEXT prints WANT
one() {
	text=$1 want=$2; shift 2
	got=$($TK "$@" "$text") && [ "$got" = "$want" ] && return 0
	echo "# '$text': got '$got', want '$want'"
	return 1
}

# --- GPT2BPETokenizer: the string is text ----------------------------------------------------
ok "GPT2BPETokenizer: '<|endoftext|>' in text is 7 ordinary ids" one '<|endoftext|>' '27 91 437 1659 5239 91 29' $GPT2
ok "GPT2BPETokenizer: 'a<|endoftext|>b'" one 'a<|endoftext|>b' '64 27 91 437 1659 5239 91 29 65' $GPT2
ok "GPT2BPETokenizer (mgt-tokenize) = gpt-3-encoder / tiktoken gpt2 encode_ordinary (fixture)" \
	tok_same $F/endoftext.gpt2bpe.ids $GPT2
ok "GPT2BPETokenizer (mgt-preprocess --append-eod): fixture ids + eod, no message" \
	pp_same gpt2bpe $F/endoftext.gpt2bpe.ids $GPT2
ok "GPT2BPETokenizer dataset: 50256 only as the appended eod" sh -c "
  awk '{ for (i = 1; i < NF; i++) if (\$i == 50256) exit 1 }' '$T/gpt2bpe.ids' &&
  test \"\$(grep -c ' 50256\$' '$T/gpt2bpe.ids')\" = \"\$(grep -c . '$F/endoftext.gpt2bpe.ids')\""
ok "GPT2BPETokenizer: decode(encode(text)) = text" round_trip $F/endoftext.gpt2bpe.ids $GPT2

# --- HuggingFaceTokenizer: the added token is matched ------------------------------------------
ok "HuggingFaceTokenizer gpt2: 'a<|endoftext|>b' -> 64 50256 65" one 'a<|endoftext|>b' '64 50256 65' $HFG
ok "HuggingFaceTokenizer gpt2 (mgt-tokenize) = HF tokenizers (fixture)" tok_same $F/endoftext.gpt2.ids $HFG
ok "HuggingFaceTokenizer gpt2 (mgt-preprocess --append-eod): fixture ids + eod, no message" \
	pp_same hf $F/endoftext.gpt2.ids $HFG
ok "HuggingFaceTokenizer gpt2: decode(encode(text)) = text" round_trip $F/endoftext.gpt2.ids $HFG

# --- TikTokenizer -------------------------------------------------------------------------------
CL="--tokenizer-type TikTokenizer --tokenizer-model $TIK/cl100k_base.tiktoken"
O2="--tokenizer-type TikTokenizer --tokenizer-model $TIK/o200k_base.tiktoken"
ok "TikTokenizer cl100k_base rank file: 'a<|endoftext|>b' -> 64 100257 65 (tiktoken ids)" \
	one 'a<|endoftext|>b' '64 100257 65' $CL
ok "TikTokenizer cl100k_base rank file = tiktoken (fixture)" tok_same $F/endoftext.cl100k_base.ids $CL
ok "TikTokenizer o200k_base rank file = tiktoken (fixture)" tok_same $F/endoftext.o200k_base.ids $O2
# Megatron's JSON vocabulary made from the cl100k_base ranks
$PY - "$TIK/cl100k_base.tiktoken" "$T/megatron.json" <<'PY'
import base64, json, sys
rows = []
for line in open(sys.argv[1]):
    tok, rank = line.split()
    rows.append({"rank": int(rank), "token_bytes": tok, "token_str": base64.b64decode(tok).decode("utf-8", "replace")})
json.dump(rows, open(sys.argv[2], "w"))
PY
MJ="--tokenizer-type TikTokenizer --tokenizer-model $T/megatron.json --tiktoken-pattern v2"
ok "Megatron JSON TikTokenizer: ids = cl100k rank + 1000, '<|endoftext|>' is text (fixture)" \
	tok_same $F/endoftext.megatron-v2.ids $MJ
ok "Megatron JSON TikTokenizer: 'a<|endoftext|>b' -> rank + 1000" \
	one 'a<|endoftext|>b' '1064 1027 1091 9862 1728 1428 1091 1029 1065' $MJ
ok "Megatron JSON TikTokenizer: --tiktoken-num-special-tokens 1234 shifts every id by 1234" sh -c "
  $TK $MJ --tiktoken-num-special-tokens 1234 --jsonl -i '$E' |
    awk '{ for (i = 1; i <= NF; i++) \$i -= 234; print }' | cmp -s - '$F/endoftext.megatron-v2.ids'"

# --- live oracles -------------------------------------------------------------------------------
if sh "$ROOT/tests/oracle/setup.sh" >/dev/null 2>&1; then
	live() { # "ORACLE-ARGS" INPUT MGT-FLAGS...: encode.mjs ORACLE-ARGS INPUT = mgt-tokenize --jsonl
		args=$1 in=$2; shift 2
		node "$ROOT/tests/oracle/encode.mjs" $args "$in" > "$T/live.want" && $TK "$@" --jsonl -i "$in" > "$T/live.got" &&
			{ cmp -s "$T/live.want" "$T/live.got" || { diff "$T/live.want" "$T/live.got" | head -4 | sed 's/^/# /'; false; }; }
	}
	for in in "$E" "$D/unicode.jsonl"; do
		b=$(basename "$in")
		ok "live: GPT2BPETokenizer = gpt-3-encoder on $b" live --gpt3 "$in" $GPT2
		ok "live: GPT2BPETokenizer = tiktoken gpt2 encode_ordinary on $b" live "--tiktoken gpt2 --ordinary" "$in" $GPT2
		ok "live: HuggingFaceTokenizer gpt2 = HF tokenizers on $b" live "--hf $SHARE/tokenizers/gpt2/tokenizer.json" "$in" $HFG
	done
else
	skip "npm oracles unavailable (tests/oracle/setup.sh)"
fi
done_testing
