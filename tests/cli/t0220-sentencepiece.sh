#!/bin/sh
# SentencePieceTokenizer and Llama2Tokenizer (libsentencepiece) against tests/cli/spm_ref.py:
# Megatron's two classes re-written on python3-sentencepiece. Two BPE models are trained here
# with spm_train from text in the tree (the Unicode corpus and KJV verses), one with Llama 2's
# settings (byte fallback, split digits, identity normalization, bos 1, eos 2, no pad), one
# without bos/eos and with a pad piece (Megatron then appends <BOS>/<EOS> and reuses <pad>).
# Compared: ids, decoded text, vocabulary size and eod, mgt-preprocess output, and the GGUF
# vocabulary view (mgt-tokenize --gguf-vocab) with sentencepiece's id_to_piece/get_score/is_*.
. "$(dirname "$0")/lib.sh"
TK=$BIN/mgt-tokenize
REF="$PY $ROOT/tests/cli/spm_ref.py"
U=$ROOT/tests/data/unicode.jsonl
if ! command -v spm_train >/dev/null 2>&1 || ! $PY -c 'import sentencepiece' 2>/dev/null; then
	echo "1..0 # skip needs spm_train and python3-sentencepiece (contrib/install-deps.sh test)"
	exit 0
fi

# training text: the Unicode corpus and the first 2,000 KJV verses (one sentence a line)
$PY - "$U" "$SHARE/data/kjv.jsonl.zst" "$T/train.txt" <<'PY'
import json, subprocess, sys
out = open(sys.argv[3], "w", encoding="utf-8")
for l in open(sys.argv[1], encoding="utf-8"):
    if l.strip():
        out.write(json.loads(l)["text"].replace("\n", " ") + "\n")
kjv = subprocess.run(["zstd", "-dcq", sys.argv[2]], capture_output=True, check=True).stdout.decode()
n = 0
for l in kjv.splitlines():
    for v in json.loads(l)["text"].split("\n"):
        if v.strip() and n < 2000:
            out.write(v + "\n"); n += 1
PY
LLAMA2="--model_type=bpe --byte_fallback=true --split_digits=true --allow_whitespace_only_pieces=true"
LLAMA2="$LLAMA2 --normalization_rule_name=identity --remove_extra_whitespaces=false --add_dummy_prefix=true"
LLAMA2="$LLAMA2 --character_coverage=0.98 --vocab_size=4000 --max_sentence_length=100000"
ok "spm_train: Llama 2 style model" sh -c "spm_train --input='$T/train.txt' --model_prefix='$T/l2' $LLAMA2 >'$T/log' 2>&1"
ok "spm_train: model without bos/eos, with a pad piece" sh -c "spm_train --input='$T/train.txt' --model_prefix='$T/nb' $LLAMA2 \
  --bos_id=-1 --eos_id=-1 --pad_id=3 >'$T/log2' 2>&1"

# special strings, characters absent from the training text (byte fallback), edge cases
$PY - "$T/special.jsonl" <<'PY'
import json, sys
lines = ["a<EOD>b", "<s>x</s> <unk>", "<extra_id_1><extra_id_10> <extra_id_2>", "<CLS><SEP><MASK><PAD><BOS><EOS><pad>",
         "text <EOD><EOD> text<EOD>", "<EOD>", " leading and  double  spaces ", "tab\there\nnewline\r\n",
         "unseen: \U0001F9EA \U0001D518 \ua66e \u0f04 \U00010348 \u2581 \u2581\u2581x", "digits 1234567890 3.14159",
         "\u00e9 vs e\u0301 (NFC vs NFD kept: identity normalization)", "<<EOD>>", "<EO<EOD>D>"]
with open(sys.argv[1], "w", encoding="utf-8") as f:
    for t in lines:
        f.write(json.dumps({"text": t}) + "\n")
PY
cat "$U" "$T/special.jsonl" > "$T/all.jsonl"
ok "the corpus exercises byte fallback" $REF bytes "$T/l2.model" "$T/all.jsonl"

# ids, decoded text and sizes: each type, each model
cmp_case() { # NAME TYPE MODEL EXTRA
	name=$1 type=$2 model=$3 extra=$4
	flags="--tokenizer-type $type --tokenizer-model $model"
	[ "$extra" = 0 ] || flags="$flags --vocab-extra-ids $extra"
	ok "$name: ids = Megatron's tokenize" sh -c "
	  $TK $flags --jsonl -i '$T/all.jsonl' > '$T/$name.ids' && $REF encode $type '$model' $extra '$T/all.jsonl' > '$T/$name.want' &&
	  cmp '$T/$name.ids' '$T/$name.want'"
	ok "$name: decoded text = Megatron's detokenize" sh -c "
	  $TK $flags --decode --jsonl -i '$T/$name.want' > '$T/$name.dec' && $REF decode $type '$model' $extra '$T/$name.want' > '$T/$name.decw' &&
	  $PY -c '
import json, sys
a = [json.loads(l) for l in open(sys.argv[1], encoding=\"utf-8\")]
b = [json.loads(l) for l in open(sys.argv[2], encoding=\"utf-8\")]
bad = [i for i in range(len(b)) if i >= len(a) or a[i] != b[i]]
assert len(a) == len(b) and not bad, \"line %d: %r != %r\" % (bad[0] + 1, a[bad[0]] if bad[0] < len(a) else None, b[bad[0]])' '$T/$name.dec' '$T/$name.decw'"
	ok "$name: vocabulary size and eod = Megatron's" sh -c "
	  $TK $flags --info > '$T/$name.info' && $REF info $type '$model' $extra | cmp - '$T/$name.info'"
	ok "$name: GGUF vocabulary = sentencepiece's pieces, scores, types; ids as Megatron's" sh -c "
	  $TK $flags --gguf-vocab > '$T/$name.vocab.json' && $REF vocab $type '$model' $extra '$T/$name.vocab.json'"
}
cmp_case llama2 Llama2Tokenizer "$T/l2.model" 0
cmp_case spt SentencePieceTokenizer "$T/l2.model" 0
cmp_case spt-extra SentencePieceTokenizer "$T/l2.model" 12
cmp_case spt-nobos SentencePieceTokenizer "$T/nb.model" 0

ok "Llama2Tokenizer: round trip of the Unicode corpus (ids without BOS decode to the text)" sh -c "
  sed 's/^1 //' '$T/llama2.want' > '$T/llama2.nobos' &&
  $TK --tokenizer-type Llama2Tokenizer --tokenizer-model '$T/l2.model' --decode --jsonl -i '$T/llama2.nobos' > '$T/rt.jsonl' &&
  $PY -c '
import json, sys
a = [json.loads(l)[\"text\"] for l in open(sys.argv[1], encoding=\"utf-8\") if l.strip()]
b = [json.loads(l)[\"text\"] for l in open(sys.argv[2], encoding=\"utf-8\")]
assert a == b[:len(a)], \"texts differ\"' '$U' '$T/rt.jsonl'"

# mgt-preprocess with the new types: ids + eod per document, read back independently
pp_case() { # NAME TYPE MODEL
	ok "mgt-preprocess $2 --append-eod: Megatron's ids + eod (none for an empty document), 2 workers" sh -c "
	  $BIN/mgt-preprocess --input '$T/all.jsonl' --output-prefix '$T/pp-$1' --tokenizer-type $2 --tokenizer-model '$3' \
	    --append-eod --workers 2 --quiet &&
	  $PY $READER --strict '$T/pp-$1_text_document' > '$T/pp-$1.ids' &&
	  eod=\$($REF info $2 '$3' 0 | sed -n 's/^eod //p') &&
	  $REF encode $2 '$3' 0 '$T/all.jsonl' | sed \"/./s/\\\$/ \$eod/\" | cmp - '$T/pp-$1.ids'"
}
pp_case llama2 Llama2Tokenizer "$T/l2.model"
pp_case spt SentencePieceTokenizer "$T/l2.model"

# refusals
ok "Llama2Tokenizer refuses a model without bos/eos (exit 4)" \
	exits 4 $TK --tokenizer-type Llama2Tokenizer --tokenizer-model "$T/nb.model" x
ok "Llama2Tokenizer refuses --vocab-extra-ids (exit 2)" \
	exits 2 $TK --tokenizer-type Llama2Tokenizer --tokenizer-model "$T/l2.model" --vocab-extra-ids 3 x
ok "missing --tokenizer-model (exit 2)" exits 2 $TK --tokenizer-type SentencePieceTokenizer x
not_model() { exits 4 $TK --tokenizer-type SentencePieceTokenizer --tokenizer-model "$U" x && err_has unicode.jsonl; }
ok "not a SentencePiece model: exit 4 naming the file" not_model
ok "missing model file: exit 4" exits 4 $TK --tokenizer-type Llama2Tokenizer --tokenizer-model "$T/nope.model" x
past_end() { echo 4005 | exits 3 $TK --tokenizer-type SentencePieceTokenizer --tokenizer-model "$T/l2.model" --decode; }
ok "decode of an id past the vocabulary (4000 pieces + 5 specials): exit 3" past_end
done_testing
