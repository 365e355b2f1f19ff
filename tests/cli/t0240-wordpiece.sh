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

# --- mgt-preprocess's [UNK] warning (issue 46) -------------------------------------------------
# KJV (cased) under BertWordPieceCase with the bundled uncased vocab: the warning's share and
# count are those of id [UNK] in the written dataset as megatron_idx_reader.py reads it; under
# BertWordPieceLowerCase (well under 1% [UNK]) there is none.
unk_share() { # unk_share TYPE: the dataset's [UNK] count and total, "N M"
	$PY "$ROOT/tests/cli/megatron_idx_reader.py" "$T/unk-$1_text_document" |
		awk -v u="$(grep -nx '\[UNK\]' "$VU" | cut -d: -f1)" '{ for (i = 1; i <= NF; i++) { n++; if ($i == u - 1) k++ } } END { print k + 0, n }'
}
unk_run() { # unk_run TYPE: preprocess KJV, log in $T/unk-TYPE.err
	$PP --input "$KJV" --output-prefix "$T/unk-$1" --tokenizer-type "$1" --vocab-file "$VU" --workers 2 2>"$T/unk-$1.err"
}
unk_warns() {
	unk_run BertWordPieceCase || return 1
	set -- $(unk_share BertWordPieceCase)
	want=$(awk -v k="$1" -v n="$2" 'BEGIN { printf "%.1f%% of the tokens", 100 * k / n }')
	echo "# [UNK] $1 of $2; $(grep warning "$T/unk-BertWordPieceCase.err" | cut -c1-90)"
	[ "$1" -gt 0 ] && grep -q "warning: $want (.*) are the unknown token \[UNK\]" "$T/unk-BertWordPieceCase.err"
}
ok "mgt-preprocess warns with the [UNK] share of cased text under an uncased vocab" unk_warns
unk_quiet() { unk_run BertWordPieceLowerCase && ! grep -q warning "$T/unk-BertWordPieceLowerCase.err"; }
ok "...and not under BertWordPieceLowerCase" unk_quiet

# --- mgt-preprocess --split-sentences --------------------------------------------------------
# Pre-split input (Megatron's two-pass route): each list item is a sentence; the expected
# dataset is built here from the ids of each sentence alone (the live oracle's when it runs,
# else mgt-tokenize's) by Megatron's rules (empty results dropped, --append-eod onto the last
# sentence, add_document: document_indices = running sentence counts) and compared sequence by
# sequence and document by document with megatron_idx_reader.py's reading of the files.
printf '%s\n' '{"text": ["Hello world.", "", "Second sentence here!", "  ", "Caf\u00e9 [MASK] \u4e2d\u6587"]}' \
	'{"text": []}' '{"text": [""]}' '{"text": ["One sentence only."]}' \
	'{"text": ["\u0000", "A fifth document, after an empty one.", "It ends here."]}' >"$T/lists.jsonl"
split_check() { # NAME EOD(0/1) PLAIN(0/1) TOKENIZER-JSON MGT-TOKENIZER-FLAGS...
	name=$1 eod=$2 plain=$3 tj=$4; shift 4
	$PY -c 'import json, sys
with open(sys.argv[2], "w") as f:
    for line in open(sys.argv[1]):
        for s in json.loads(line)["text"]:
            f.write(json.dumps({"text": s}) + "\n")' "$T/lists.jsonl" "$T/flat.jsonl" || return 1
	nos=; [ "$plain" = 1 ] && nos=--no-special
	if [ -n "$oracle" ]; then $ORACLE --hf "$tj" $nos "$T/flat.jsonl" >"$T/flat.ids"
	else $TK "$@" --jsonl -i "$T/flat.jsonl" >"$T/flat.ids"; fi || return 1
	e=; [ "$eod" = 1 ] && e=--append-eod
	$PP --input "$T/lists.jsonl" --output-prefix "$T/$name" "$@" $e --split-sentences --workers 2 --quiet || return 1
	$PY - "$T/lists.jsonl" "$T/flat.ids" "$T/${name}_text_sentence" "$eod" "$ROOT/tests/cli" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[5])
from megatron_idx_reader import Dataset
docs = [json.loads(l)["text"] for l in open(sys.argv[1])]
flat = [[int(x) for x in l.split()] for l in open(sys.argv[2]).read().split("\n")[:-1]]
eod = sys.argv[4] == "1"
want, k = [], 0
for d in docs:
    sents = [flat[k + i] for i in range(len(d)) if flat[k + i]]
    k += len(d)
    if eod and sents:
        sents[-1] = sents[-1] + [102]
    want.append(sents)
ds = Dataset(sys.argv[3])
di = [int(x) for x in ds.index.document_indices]
got = [[[int(x) for x in ds.get(s)] for s in range(di[j], di[j + 1])] for j in range(ds.num_documents())]
assert got == want, "differs:\n got  %s\n want %s" % (got, want)
print("# %d documents, %d sentences, %d ids; document_indices %s" % (len(want), sum(map(len, want)),
      sum(len(s) for d in want for s in d), di))
PY
}
ok "--split-sentences, lists of sentences, [CLS] ... [SEP] per sentence (HEAD): exact sequences and documents" \
	split_check lists 0 0 "$T/wp/bert-uncased.json" $LOWER
ok "--split-sentences, lists, plain ids: empty sentences dropped, --append-eod on the last one" \
	split_check lists_eod 1 1 "$T/wp/bert-uncased.json" $LOWER --tokenizer-hf-no-include-special-tokens
printf '{"text": "a"}\n{"text": ["a", 5]}\n' >"$T/badlist.jsonl"
badlist() {
	exits 3 $PP --input "$T/badlist.jsonl" --output-prefix "$T/badlist" $LOWER --split-sentences &&
		err_has "badlist.jsonl:2: key 'text': item 1: expected a string" && no_files "$T"/badlist_*
}
ok "--split-sentences, a list item that is not a string: exit 3, line and item named, no output" badlist
ok "a list without --split-sentences is still refused (exit 3)" \
	exits 3 $PP --input "$T/lists.jsonl" --output-prefix "$T/nolist" $LOWER

# ICU on raw text: a document and the same sentences given as a list write identical files
# (the splits pinned to what ICU 72's en@ss=standard rules give).
raw_vs_list() { # NAME RAW-JSON LIST-JSON FLAGS...
	name=$1; printf '%s\n' "$2" >"$T/$name.raw.jsonl"; printf '%s\n' "$3" >"$T/$name.list.jsonl"; shift 3
	$PP --input "$T/$name.raw.jsonl" --output-prefix "$T/${name}_raw" --split-sentences --quiet "$@" &&
	$PP --input "$T/$name.list.jsonl" --output-prefix "$T/${name}_list" --split-sentences --quiet "$@" &&
	cmp "$T/${name}_raw_text_sentence.bin" "$T/${name}_list_text_sentence.bin" &&
	cmp "$T/${name}_raw_text_sentence.idx" "$T/${name}_list_text_sentence.idx"
}
ok "ICU splits: Mr./Mrs./e.g. kept, after Dr. split, ! ? . end sentences, a line break alone does not" raw_vs_list en \
	'{"text": "Mr. Smith met Mrs. Jones, e.g. at noon. Dr. Who came! Did he? Yes.\nLine one\nline two.  "}' \
	'{"text": ["Mr. Smith met Mrs. Jones, e.g. at noon.", "Dr.", "Who came!", "Did he?", "Yes.", "Line one\nline two."]}' \
	$GPT2
ok "--keep-newlines: whitespace after a sentence stays with it (not after the last)" raw_vs_list nl \
	'{"text": "  One.\nTwo.\n\nThree.  \n"}' '{"text": ["  One.\n", "Two.\n\n", "Three."]}' $GPT2 --keep-newlines
ok "without --keep-newlines sentences are trimmed" raw_vs_list trim \
	'{"text": "  One.\nTwo.\n\nThree.  \n"}' '{"text": ["One.", "Two.", "Three."]}' $GPT2
ok "--lang german: German rules (z.B. is not a sentence end)" raw_vs_list de \
	'{"text": "Das ist z.B. gut. Ja."}' '{"text": ["Das ist z.B. gut.", "Ja."]}' $GPT2 --lang german
ok "unknown --lang: exit 2" exits 2 $PP --input "$T/en.raw.jsonl" --output-prefix "$T/x" $GPT2 --split-sentences --lang klingon
empty_docs() {
	printf '{"text": ""}\n{"text": "  "}\n{"text": "Hi."}\n' >"$T/empty.jsonl" &&
	$PP --input "$T/empty.jsonl" --output-prefix "$T/empty" $LOWER --split-sentences --append-eod --quiet &&
	$PY $READER "$T/empty_text_sentence" | tr '\n' '|' | grep -qx '||101 7632 1012 102 102|'
}
ok "--split-sentences, empty or blank text: a document of zero sentences, no eod" empty_docs

# All of KJV: with plain ids (WordPiece does not cross a sentence break), each chapter's
# sentences put back together are the chapter's ids, so no text is lost or doubled.
kjv_split() {
	$PP --input "$KJV" --output-prefix "$T/kjv" $LOWER --tokenizer-hf-no-include-special-tokens --split-sentences --quiet &&
	$PP --input "$KJV" --output-prefix "$T/kjv" $LOWER --tokenizer-hf-no-include-special-tokens --quiet &&
	$PY $READER "$T/kjv_text_sentence" >"$T/kjv.s" && $PY $READER "$T/kjv_text_document" >"$T/kjv.d" &&
	cmp "$T/kjv.s" "$T/kjv.d" &&
	echo "# $($PY $READER --info "$T/kjv_text_sentence" | $PY -c 'import json,sys; j=json.load(sys.stdin); print(j["documents"], "documents,", j["sequences"], "sentences,", j["tokens"], "ids")')"
}
ok "KJV --split-sentences: the sentences of each chapter are the chapter's ids" kjv_split

done_testing
