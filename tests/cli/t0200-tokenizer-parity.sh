#!/bin/sh
# Token ids identical to the reference implementations: committed fixtures made by Hugging Face
# tokenizers, tiktoken and gpt-3-encoder (tests/oracle/make_fixtures.sh) on KJV, the Unicode
# corpus, added-token and edge cases; and, when the npm oracles can be installed, the live oracles
# on the same inputs. GPT2BPETokenizer is compared with gpt-3-encoder where special-token strings
# occur in the text (Megatron's GPT2BPETokenizer encodes them as text; t0210 tests that).
. "$(dirname "$0")/lib.sh"
D=$ROOT/tests/data
F=$D/fixtures
TK=$BIN/mgt-tokenize
KJV=$SHARE/data/kjv.jsonl.zst
TIK=$SHARE/tokenizers/tiktoken
HF() { echo "--tokenizer-type HuggingFaceTokenizer --tokenizer-model $1"; }
TT() { echo "--tokenizer-type TikTokenizer --tokenizer-model $TIK/$1.tiktoken"; }
# Llama 3 style tokenizer.json files are large: generated from cl100k_base at test time (node only)
TOKDIR=$D/tokenizers
if command -v node >/dev/null 2>&1 && node "$ROOT/tests/oracle/make_tokenizers.mjs" --data "$SHARE/tokenizers" "$T/tok" >/dev/null 2>&1; then
	TOKDIR=$T/tok
fi

same() { # FIXTURE INPUT FLAGS...: mgt-tokenize --jsonl equals the fixture
	fix=$1 in=$2; shift 2
	zstd -dcqf "$fix" > "$T/want" && $TK "$@" --jsonl -i "$in" > "$T/got" 2>"$T/err" || { head -3 "$T/err"; return 1; }
	cmp -s "$T/want" "$T/got" && return 0
	$PY - "$T/want" "$T/got" "$in" <<'PY'
import sys
w = open(sys.argv[1]).read().split("\n"); g = open(sys.argv[2]).read().split("\n")
bad = [i for i in range(max(len(w), len(g))) if (w[i] if i < len(w) else None) != (g[i] if i < len(g) else None)]
print("# %d of %d documents differ, first at input line %d" % (len(bad), len(w) - 1, bad[0] + 1))
PY
	return 1
}
ok "KJV, GPT2BPETokenizer = HF tokenizers" same $F/kjv.gpt2.ids.zst "$KJV" $GPT2
ok "KJV, HuggingFaceTokenizer gpt2 tokenizer.json = HF tokenizers" same $F/kjv.gpt2.ids.zst "$KJV" $(HF $SHARE/tokenizers/gpt2)
ok "KJV, the demo's kjv-4k tokenizer.json = HF tokenizers" same $F/kjv.kjv-4k.ids.zst "$KJV" $(HF $SHARE/tokenizers/kjv-4k)
ok "Unicode corpus, the demo's kjv-4k tokenizer.json (bytes outside KJV) = HF tokenizers" \
	same $F/unicode.kjv-4k.ids.zst $D/unicode.jsonl $(HF $SHARE/tokenizers/kjv-4k)
# the shipped kjv-4k is what its script writes (contrib/kjv-tokenizer.py: deterministic ties)
kjv4k_again() {
	$PY "$ROOT/contrib/kjv-tokenizer.py" "$KJV" "$T/kjv-4k.json" >/dev/null && cmp "$T/kjv-4k.json" "$SHARE/tokenizers/kjv-4k/tokenizer.json"
}
full_only "contrib/kjv-tokenizer.py writes the shipped kjv-4k tokenizer.json byte for byte" &&
	ok "contrib/kjv-tokenizer.py writes the shipped kjv-4k tokenizer.json byte for byte" kjv4k_again
ok "KJV, cl100k_base = tiktoken" same $F/kjv.cl100k_base.ids.zst "$KJV" $(TT cl100k_base)
ok "KJV, o200k_base = tiktoken" same $F/kjv.o200k_base.ids.zst "$KJV" $(TT o200k_base)
ok "Unicode corpus, GPT2BPETokenizer = gpt-3-encoder (special-token strings are text)" \
	same $F/unicode.gpt2bpe.ids.zst $D/unicode.jsonl $GPT2
ok "Unicode corpus, HuggingFaceTokenizer gpt2 tokenizer.json = HF tokenizers" \
	same $F/unicode.gpt2.ids.zst $D/unicode.jsonl $(HF $SHARE/tokenizers/gpt2)
ok "Unicode corpus, cl100k_base = tiktoken" same $F/unicode.cl100k_base.ids.zst $D/unicode.jsonl $(TT cl100k_base)
ok "Unicode corpus, o200k_base = tiktoken" same $F/unicode.o200k_base.ids.zst $D/unicode.jsonl $(TT o200k_base)
for t in llama3-cl100k llama3; do
	if [ -f "$TOKDIR/$t.json" ]; then
		ok "Unicode corpus, $t-style tokenizer.json (Split + ByteLevel, ignore_merges, BOS template) = HF" \
			same $F/unicode.$t.ids.zst $D/unicode.jsonl $(HF $TOKDIR/$t.json)
	else
		skip "$t.json not generated (needs node)"
	fi
done
ok "Unicode corpus, qwen2-style tokenizer.json (NFC) = HF" same $F/unicode.qwen2.ids.zst $D/unicode.jsonl $(HF $D/tokenizers/qwen2.json)
ok "Unicode corpus, added tokens (lstrip/rstrip, non-special) = HF" same $F/unicode.added-tokens.ids.zst $D/unicode.jsonl $(HF $D/tokenizers/added-tokens.json)
ok "added-token corpus = HF" same $F/added_tokens.added-tokens.ids $D/added_tokens.jsonl $(HF $D/tokenizers/added-tokens.json)
ok "added-token corpus, no special tokens = HF" same $F/added_tokens.added-tokens.nospecial.ids $D/added_tokens.jsonl \
	$(HF $D/tokenizers/added-tokens.json) --tokenizer-hf-no-include-special-tokens
ok "added-token corpus, qwen2 = HF" same $F/added_tokens.qwen2.ids $D/added_tokens.jsonl $(HF $D/tokenizers/qwen2.json)
for f in $D/edge/*; do
	b=$(basename "$f"); b=${b%.zst}; b=${b%.jsonl}
	case $b in
	other-key) ok "edge case $b" same $F/edge.$b.gpt2.ids "$f" $GPT2 --json-key content ;;
	list-value) ;; # lists of sentences are rejected by mgt (see t0300)
	*) ok "edge case $b" same $F/edge.$b.gpt2.ids "$f" $GPT2 ;;
	esac
done

# Llama 3's tokenizer.model (a rank file) through TikTokenizer: its pattern and 256 specials
# after the ranks; compared with the llama3-style tokenizer.json fixture (BOS dropped) on the
# lines without special-token strings (the synthetic tokenizer.json numbers its specials apart)
llama_case() {
	mkdir -p "$T/llama" && cp "$TIK/cl100k_base.tiktoken" "$T/llama/tokenizer.model" &&
	$TK --tokenizer-type TikTokenizer --tokenizer-model "$T/llama/tokenizer.model" --jsonl -i $D/unicode.jsonl > "$T/l3.got" &&
	zstd -dcq $F/unicode.llama3.ids.zst | sed 's/^[0-9]* \{0,1\}//' > "$T/l3.want" &&
	$PY - $D/unicode.jsonl "$T/l3.got" "$T/l3.want" <<'PY'
import json, sys
ids = [json.loads(l)["id"] for l in open(sys.argv[1], encoding="utf-8")]
got = open(sys.argv[2]).read().split("\n"); want = open(sys.argv[3]).read().split("\n")
bad = [i for i, k in enumerate(ids) if not str(k).startswith("special/") and got[i] != want[i]]
assert len(got) == len(want) and not bad, "differs at lines %s" % bad[:5]
PY
}
ok "Llama 3 tokenizer.model via TikTokenizer = HF llama3-style tokenizer (non-special lines)" llama_case

# live oracles, when npm can provide them
if sh "$ROOT/tests/oracle/setup.sh" >/dev/null 2>&1; then
	live() { # ORACLE-ARGS... -- INPUT MGT-FLAGS...
		node "$ROOT/tests/oracle/encode.mjs" $1 $2 "$3" > "$T/live" && zstd -qf "$T/live" -o "$T/live.zst" &&
			same "$T/live.zst" "$3" $4
	}
	ok "live: HF tokenizers on the Unicode corpus (gpt2)" live --hf $SHARE/tokenizers/gpt2/tokenizer.json $D/unicode.jsonl \
		"$(HF $SHARE/tokenizers/gpt2)"
	ok "live: gpt-3-encoder on the Unicode corpus (GPT2BPETokenizer)" live --gpt3 "" $D/unicode.jsonl "$GPT2"
	ok "live: tiktoken cl100k_base on the Unicode corpus" live --tiktoken cl100k_base $D/unicode.jsonl "$(TT cl100k_base)"
	ok "live: tiktoken o200k_base on the Unicode corpus" live --tiktoken o200k_base $D/unicode.jsonl "$(TT o200k_base)"
	# Megatron's TikTokenizer: JSON vocabulary, --tiktoken-pattern v2, ids = rank + 1000, specials not matched
	megatron_case() { # v1|v2 PATTERN
		[ -f "$T/megatron.json" ] || $PY - "$TIK/cl100k_base.tiktoken" "$T/megatron.json" <<'PY' || return 1
import base64, json, sys
rows = []
for line in open(sys.argv[1]):
    tok, rank = line.split()
    rows.append({"rank": int(rank), "token_bytes": tok, "token_str": base64.b64decode(tok).decode("utf-8", "replace")})
json.dump(rows, open(sys.argv[2], "w"))
PY
		$PY -c 'import json, sys; json.dump({"pat_str": sys.argv[1], "special_tokens": {}}, open(sys.argv[2], "w"))' \
			"$2" "$T/pat.json" &&
		node "$ROOT/tests/oracle/encode.mjs" --tiktoken-file "$TIK/cl100k_base.tiktoken" --tiktoken-json "$T/pat.json" \
			$D/unicode.jsonl | awk '{for (i = 1; i <= NF; i++) $i += 1000; print}' > "$T/mw" &&
		$TK --tokenizer-type TikTokenizer --tokenizer-model "$T/megatron.json" --tiktoken-pattern $1 --jsonl -i $D/unicode.jsonl > "$T/mg" &&
		cmp "$T/mw" "$T/mg"
	}
	V1='[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+'
	V2='[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+'
	ok "live: Megatron TikTokenizer (JSON vocabulary, v1, +1000) = tiktoken" megatron_case v1 "$V1"
	ok "live: Megatron TikTokenizer (JSON vocabulary, v2, +1000) = tiktoken" megatron_case v2 "$V2"
else
	skip "npm oracles unavailable (tests/oracle/setup.sh)"
fi
done_testing
