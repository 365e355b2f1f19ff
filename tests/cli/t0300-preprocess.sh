#!/bin/sh
# mgt-preprocess: Megatron-compatible output, order independent of --workers, round trip,
# bad input, existing outputs, full disk and killed runs.
. "$(dirname "$0")/lib.sh"
PP=$BIN/mgt-preprocess
KJV=$SHARE/data/kjv.jsonl.zst
zstd -dcq "$KJV" > "$T/kjv.jsonl"

# --- the bundled corpus, 1 and 2 workers -----------------------------------------------------
ok "kjv, 1 worker" $PP --input "$KJV" --output-prefix "$T/w1" $GPT2 --append-eod --workers 1 --quiet
ok "kjv, 2 workers" $PP --input "$KJV" --output-prefix "$T/w2" $GPT2 --append-eod --workers 2 --quiet
ok "plain and zstd input give the same bytes, whatever --workers" sh -c "
  $PP --input '$T/kjv.jsonl' --output-prefix '$T/plain' $GPT2 --append-eod --workers 2 --quiet &&
  cmp '$T/w1_text_document.bin' '$T/w2_text_document.bin' && cmp '$T/w1_text_document.idx' '$T/w2_text_document.idx' &&
  cmp '$T/w1_text_document.bin' '$T/plain_text_document.bin' && cmp '$T/w1_text_document.idx' '$T/plain_text_document.idx'"
ok "independent reader accepts the output (strict)" sh -c "$PY $READER --strict '$T/w1_text_document' > '$T/w1.ids'"
ok "reader: 1,189 documents, uint16" sh -c "$PY $READER --info '$T/w1_text_document' > '$T/info.json' &&
  $PY -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d[\"documents\"]==1189 and d[\"dtype_code\"]==8, d' '$T/info.json'"
ok "ids = tokenizer ids + eod per document" sh -c "
  $BIN/mgt-tokenize $GPT2 --jsonl -i '$KJV' | sed 's/\$/ 50256/' | cmp - '$T/w1.ids'"
FIX=$ROOT/tests/data/fixtures/kjv.gpt2.ids.zst
if [ -f "$FIX" ]; then
	ok "ids = Hugging Face tokenizers' ids (fixture) + eod" sh -c "zstd -dcq '$FIX' | sed 's/\$/ 50256/' | cmp - '$T/w1.ids'"
else
	skip "no fixture $FIX"
fi
ok "dump reproduces the input texts" sh -c "
  $BIN/mgt-dataset dump '$T/w1_text_document' $GPT2 --strip-eod > '$T/dump.jsonl' &&
  $PY -c '
import json, sys
a = [json.loads(l)[\"text\"] for l in open(sys.argv[1], encoding=\"utf-8\")]
b = [json.loads(l)[\"text\"] for l in open(sys.argv[2], encoding=\"utf-8\")]
assert a == b, \"texts differ\"' '$T/kjv.jsonl' '$T/dump.jsonl'"

# --- inputs: stdin, globs, several keys, a large vocabulary ------------------------------------
head -300 "$T/kjv.jsonl" > "$T/part_a.jsonl"
tail -n +301 "$T/kjv.jsonl" > "$T/part_b.jsonl"
ok "glob input: files in sorted order, same as the whole" sh -c "
  $PP --input '$T/part_*.jsonl' --output-prefix '$T/glob' $GPT2 --append-eod --quiet &&
  cmp '$T/glob_text_document.bin' '$T/w1_text_document.bin' && cmp '$T/glob_text_document.idx' '$T/w1_text_document.idx'"
ok "stdin input" sh -c "zstd -dcq '$KJV' | $PP --input - --output-prefix '$T/stdin' $GPT2 --append-eod --quiet &&
  cmp '$T/stdin_text_document.bin' '$T/w1_text_document.bin'"
ok "several --json-keys: one dataset each" sh -c "
  $PP --input '$T/part_a.jsonl' --output-prefix '$T/keys' $GPT2 --json-keys text id --quiet &&
  test -s '$T/keys_text_document.bin' && test -s '$T/keys_id_document.idx' &&
  $BIN/mgt-tokenize $GPT2 --jsonl --json-key id -i '$T/part_a.jsonl' | cmp - '$T/keys_id_document.ids' 2>/dev/null ||
  { $PY $READER '$T/keys_id_document' > '$T/keys_id.ids' && $BIN/mgt-tokenize $GPT2 --jsonl --json-key id -i '$T/part_a.jsonl' | cmp - '$T/keys_id.ids'; }"
U=$ROOT/tests/data/unicode.jsonl
CL="--tokenizer-type TikTokenizer --tokenizer-model $SHARE/tokenizers/tiktoken/cl100k_base.tiktoken"
ok "cl100k_base (vocab > 65500): int32 dataset, round trip of the Unicode corpus" sh -c "
  $PP --input '$U' --output-prefix '$T/uni' $CL --append-eod --quiet &&
  $PY $READER --info '$T/uni_text_document' | grep -q '\"dtype_code\": 4' &&
  $BIN/mgt-dataset dump '$T/uni_text_document' $CL --strip-eod > '$T/uni.dump' &&
  $PY -c '
import json, sys
a = [json.loads(l)[\"text\"] for l in open(sys.argv[1], encoding=\"utf-8\") if l.strip()]
b = [json.loads(l)[\"text\"] for l in open(sys.argv[2], encoding=\"utf-8\")]
assert a == b, \"texts differ\"' '$U' '$T/uni.dump'"
printf '{"text": "1 2 3"}\n{"text": ""}\n{"text": "7"}\n' > "$T/null.jsonl"
ok "NullTokenizer, empty document gets no eod" sh -c "
  $PP --input '$T/null.jsonl' --output-prefix '$T/null' --tokenizer-type NullTokenizer --vocab-size 100 --append-eod --quiet &&
  $PY $READER '$T/null_text_document' | tr '\n' '|' | grep -qx '1 2 3 99||7 99|'"

# --- bad input: a message naming file and line, exit 3, no outputs ---------------------------
bad_case() { # NAME EXPECTED-MESSAGE LINE
	exits 3 $PP --input "$T/$1.jsonl" --output-prefix "$T/bad_$1" $GPT2 --workers 2 &&
		err_has "$1.jsonl:$3:" && err_has "$2" && no_files "$T"/bad_$1*
}
bad() { # NAME CONTENT EXPECTED-MESSAGE LINE
	printf "$2" > "$T/$1.jsonl"
	ok "bad input ($1): exit 3, names file and line, no output" bad_case "$1" "$3" "$4"
}
bad badjson '{"text": "a"}\n{"text": "b"}\n{"text": "c"\n' 'invalid JSON' 3
bad missing '{"text": "a"}\n{"body": "b"}\n' "key 'text' is missing" 2
bad number '{"text": 5}\n' 'expected a string, got a number' 1
bad list '{"text": ["a", "b"]}\n' 'expected a string, got a list' 1
bad notobj '[1, 2]\n' 'expected a JSON object' 1
bad utf8 '{"text": "ok"}\n{"text": "caf\351"}\n' 'UTF-8' 2
ok "--skip-invalid-lines skips and counts" sh -c "
  $PP --input '$T/missing.jsonl' --output-prefix '$T/skip' $GPT2 --skip-invalid-lines 2>'$T/err' &&
  grep -q 'skipped 1 invalid' '$T/err' && $PY $READER '$T/skip_text_document' | wc -l | grep -qx 1"
printf '{"text": "a"}\n\n  \n{"text": "b"}\n' > "$T/blank.jsonl"
ok "blank lines are skipped and counted" sh -c "
  $PP --input '$T/blank.jsonl' --output-prefix '$T/blank' $GPT2 2>'$T/err' && grep -q '2 blank' '$T/err' &&
  $PY $READER '$T/blank_text_document' | wc -l | grep -qx 2"
head -c 100000 "$KJV" > "$T/trunc.jsonl.zst"
trunc_case() { exits 3 $PP --input "$T/trunc.jsonl.zst" --output-prefix "$T/trunc" $GPT2 && err_has trunc.jsonl.zst && no_files "$T"/trunc_*; }
ok "truncated zstd: exit 3, no output" trunc_case
ok "missing input: exit 2" exits 2 $PP --input "$T/nonexistent*.jsonl" --output-prefix "$T/x" $GPT2
# an unquoted glob: the shell passes the other files as operands (with --json-keys they would have
# become keys); refused with the way out
ok "an unquoted --input glob: exit 2" exits 2 $PP --input "$T/null.jsonl" "$T/null.jsonl" --output-prefix "$T/g" \
	--tokenizer-type NullTokenizer --vocab-size 100 --json-keys text
ok "... saying to quote the glob" err_has "a shell expanded an unquoted glob? Quote it (--input 'data/\*.jsonl')"
ok "... nothing written" no_files "$T"/g_*
ok "unknown tokenizer type: exit 2" exits 2 $PP --input "$U" --output-prefix "$T/x" --tokenizer-type Nope
printf '{"Hello": 0}' > "$T/badvocab.json"
vocab_case() {
	exits 4 $PP --input "$U" --output-prefix "$T/x" --tokenizer-type GPT2BPETokenizer --vocab-file "$T/badvocab.json" \
		--merge-file $SHARE/tokenizers/gpt2/merges.txt && err_has badvocab.json && no_files "$T"/x_*
}
ok "inconsistent vocabulary: exit 4 naming the file" vocab_case

# --- existing outputs, full disk, interrupted and killed runs ----------------------------------
sum() { cat "$T/w1_text_document.bin" "$T/w1_text_document.idx" | cksum; }
before=$(sum)
exists_case() { exits 5 $PP --input "$U" --output-prefix "$T/w1" $GPT2 && [ "$(sum)" = "$before" ]; }
ok "existing output: exit 5, untouched" exists_case
disk_case() {
	( ulimit -f 1000; trap '' XFSZ; exec $PP --input "$KJV" --output-prefix "$T/w1" $GPT2 --append-eod --overwrite ) 2>"$T/err"
	r=$?
	[ $r = 1 ] && err_has 'write failed' && [ "$(sum)" = "$before" ] && no_files "$T"/w1_text_document.*.tmp.*
}
ok "full disk (file size limit): exit 1, earlier dataset whole, no temporaries" disk_case
signal_case() { # SIGNAL EXPECTED-STATUS: kill a run that is waiting for more input
	rm -f "$T/fifo"; mkfifo "$T/fifo"
	$PP --input "$T/fifo" --output-prefix "$T/w1" $GPT2 --overwrite --quiet --workers 1 &
	pid=$!
	exec 3>"$T/fifo"
	cat "$T/part_a.jsonl" >&3
	sleep 1
	kill -$1 $pid
	wait $pid
	r=$?
	exec 3>&-
	[ $r = $2 ] || echo "# exit $r, expected $2"
	[ $r = $2 ] && [ "$(sum)" = "$before" ] && { [ $1 = KILL ] || no_files "$T"/w1_text_document.*.tmp.*; }
}
ok "SIGTERM: exit 143, earlier dataset whole, no temporaries" signal_case TERM 143
ok "SIGINT: exit 130, earlier dataset whole, no temporaries" signal_case INT 130
ok "SIGKILL: earlier dataset whole (temporaries may stay)" signal_case KILL 137
done_testing
