#!/bin/sh
# BERT WordPiece (BertWordPieceLowerCase, BertWordPieceCase) against Hugging Face tokenizers
# (npm tokenizers 0.23.2, the Rust library behind transformers' fast BertTokenizer that Megatron
# HEAD wraps) given tokenizer.json files built from the same vocab.txt (tests/oracle/
# make_wordpiece.mjs: BertNormalizer + BertPreTokenizer + WordPiece + [CLS] $A [SEP]):
#  - committed fixtures on the multilingual corpus (tests/data/wordpiece/multilingual.jsonl);
#  - the live oracle, when it installs, on all of KJV and the corpus, both casings, encode and
#    decode.
# The cased vocab is a test vocab derived from the uncased one (make_wordpiece.mjs says how);
# bert-base-cased's is not on this machine.  Then bad vocab files (exit 4, file and line named)
# and mgt-preprocess --split-sentences: lists of sentences (exact lengths and document
# boundaries, read with megatron_idx_reader.py) and ICU on raw text.
. "$(dirname "$0")/lib.sh"
D=$ROOT/tests/data
F=$D/fixtures
W=$D/wordpiece/multilingual.jsonl
TK=$BIN/mgt-tokenize
PP=$BIN/mgt-preprocess
KJV=$SHARE/data/kjv.jsonl.zst
VU=$SHARE/tokenizers/bert/vocab.txt
LOWER="--tokenizer-type BertWordPieceLowerCase --vocab-file $VU"
CASE="--tokenizer-type BertWordPieceCase --vocab-file $T/wp/vocab-cased.txt"
ORACLE="node $ROOT/tests/oracle/encode.mjs"

have_node=
command -v node >/dev/null 2>&1 && node "$ROOT/tests/oracle/make_wordpiece.mjs" "$VU" "$T/wp" 2>/dev/null && have_node=1
oracle=
[ -n "$have_node" ] && sh "$ROOT/tests/oracle/setup.sh" 2>/dev/null && oracle=1

# same WANT-FILE INPUT FLAGS...: mgt-tokenize --jsonl prints WANT-FILE exactly; otherwise the
# number of differing documents and the first one
same() {
	want=$1 in=$2; shift 2
	$TK "$@" --jsonl -i "$in" >"$T/got" 2>"$T/err" || { head -3 "$T/err"; return 1; }
	docs=$(wc -l <"$want") ids=$(wc -w <"$want")
	if cmp -s "$want" "$T/got"; then echo "# $docs documents, $ids ids: identical"; return 0; fi
	$PY - "$want" "$T/got" <<'PY'
import sys
w = open(sys.argv[1]).read().split("\n"); g = open(sys.argv[2]).read().split("\n")
bad = [i for i in range(max(len(w), len(g))) if (w[i] if i < len(w) else None) != (g[i] if i < len(g) else None)]
print("# %d of %d documents differ; first, line %d:\n#  want %s\n#  got  %s" % (len(bad), len(w) - 1, bad[0] + 1,
      w[bad[0]][:200] if bad[0] < len(w) else None, g[bad[0]][:200] if bad[0] < len(g) else None))
PY
	return 1
}
# live FLAGS-FOR-ORACLE -- INPUT MGT-FLAGS...: the live oracle's ids, then same
live() {
	oflags=
	while [ "$1" != -- ]; do oflags="$oflags $1"; shift; done
	shift
	in=$1; shift
	$ORACLE $oflags "$in" >"$T/want" || return 1
	same "$T/want" "$in" "$@"
}

# --- fixtures: always ----------------------------------------------------------------------
ok "multilingual corpus, BertWordPieceLowerCase = HF fixture" same $F/wordpiece.bert-uncased.ids $W $LOWER
ok "multilingual corpus, BertWordPieceLowerCase plain ids (--tokenizer-hf-no-include-special-tokens) = HF fixture" \
	same $F/wordpiece.bert-uncased.nospecial.ids $W $LOWER --tokenizer-hf-no-include-special-tokens
if [ -n "$have_node" ]; then
	ok "multilingual corpus, BertWordPieceCase (derived cased vocab) = HF fixture" same $F/wordpiece.bert-cased.ids $W $CASE
else
	skip "BertWordPieceCase fixture: the cased test vocab needs node"
fi
info_is() { $TK "$@" --info | tr '\n' ' ' | grep -q "$want_info" || { echo "# got: $($TK "$@" --info | tr '\n' ' ')"; return 1; }; }
want_info="type BertWordPieceLowerCase vocab_size 30522 eod 102"
ok "LowerCase: vocab_size 30522, eod = [SEP] 102" info_is $LOWER
if [ -n "$have_node" ]; then
	want_info="type BertWordPieceCase vocab_size $(($(wc -l <"$T/wp/vocab-cased.txt") + 100)) eod 102"
	ok "Case: vocab_size V + 100 (<extra_id_0..99>), eod 102" info_is $CASE
fi

# --- the live oracle -------------------------------------------------------------------------
if [ -n "$oracle" ]; then
	ok "KJV, BertWordPieceLowerCase = HF tokenizers" live --hf "$T/wp/bert-uncased.json" -- "$KJV" $LOWER
	ok "KJV, BertWordPieceLowerCase plain ids = HF tokenizers (add_special_tokens false)" \
		live --no-special --hf "$T/wp/bert-uncased.json" -- "$KJV" $LOWER --tokenizer-hf-no-include-special-tokens
	ok "KJV, BertWordPieceCase = HF tokenizers" live --hf "$T/wp/bert-cased.json" -- "$KJV" $CASE
	ok "multilingual corpus, LowerCase = live HF tokenizers" live --hf "$T/wp/bert-uncased.json" -- $W $LOWER
	ok "multilingual corpus, Case = live HF tokenizers" live --hf "$T/wp/bert-cased.json" -- $W $CASE
	decode_same() { # TOKENIZER-JSON FIXTURE MGT-FLAGS...
		j=$1 fx=$2; shift 2
		$ORACLE --hf "$j" --decode <"$fx" >"$T/dwant" && $TK "$@" --decode --jsonl <"$fx" >"$T/dgot" &&
			cmp -s "$T/dwant" "$T/dgot" && echo "# $(wc -l <"$fx") id lines decoded identically" ||
			{ diff "$T/dwant" "$T/dgot" | head -4 | sed 's/^/# /'; return 1; }
	}
	ok "decode = HF WordPiece decoder (LowerCase)" decode_same "$T/wp/bert-uncased.json" $F/wordpiece.bert-uncased.ids $LOWER
	ok "decode = HF WordPiece decoder (Case)" decode_same "$T/wp/bert-cased.json" $F/wordpiece.bert-cased.ids $CASE
else
	skip "live Hugging Face tokenizers oracle not available (tests/oracle/setup.sh)"
fi

# --- bad vocab files: exit 4, the file and line named ---------------------------------------
bad_vocab() { # CONTENT MESSAGE
	printf "$1" >"$T/bad-vocab.txt"
	exits 4 $TK --tokenizer-type BertWordPieceLowerCase --vocab-file "$T/bad-vocab.txt" x && err_has "bad-vocab.txt" &&
		err_has "$2"
}
ok "vocab with a duplicate line: exit 4, both lines named" bad_vocab '[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nab\nab\n' ':7: token .ab. repeats line 6'
ok "vocab with an empty line: exit 4, line named" bad_vocab '[PAD]\n[UNK]\n\n[CLS]\n[SEP]\n[MASK]\n' ':3: empty line'
ok "vocab without [MASK]: exit 4, token named" bad_vocab '[PAD]\n[UNK]\n[CLS]\n[SEP]\n' 'no \[MASK\]'
ok "missing vocab file: exit 4" exits 4 $TK --tokenizer-type BertWordPieceCase --vocab-file "$T/nonexistent.txt" x
ok "no --vocab-file: exit 2" exits 2 $TK --tokenizer-type BertWordPieceCase x

done_testing
